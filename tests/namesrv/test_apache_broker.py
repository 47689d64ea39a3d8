"""The REAL Apache RocketMQ 4.9.8 broker registers with kairosmq's name server.

An in-process ``NameServer`` (port 0); ``start_broker.sh`` runs the Java broker with
``NAMESRV`` pointing at it. Then Apache's own ``mqadmin clusterList`` / ``topicRoute`` read
the cluster and routes from our name server, the bundled kairosmq Producer and PushConsumer
find the Apache broker through it (a topic the broker auto-creates on the first send shows up
in the routes when the broker re-registers), and on SIGTERM the broker's UNREGISTER_BROKER
removes it. With ``kairosmq namesrv --acl`` (a real process) the Java broker, which cannot
sign its registrations, gets in through ``globalWhiteRemoteAddresses`` only. Skipped when the
Apache build (``shared/apache-rocketmq``) or java is absent.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from kairosmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from kairosmq.server.namesrv import NameServer

from tests.helpers import (
    APACHE_BROKER_MISSING,
    APACHE_JAVA_OPT_EXT,
    ROCKETMQ_HOME,
    START_BROKER,
    free_broker_port,
    mqadmin_argv,
    start_apache_broker,
    wait_until,
)
from tests.namesrv.acl_calls import cluster_info, wait_route
from tests.namesrv.procs import NamesrvProcess
from tests.security.acl_setup import ACL_FILE

MQADMIN = ROCKETMQ_HOME / "mqadmin.sh"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        APACHE_BROKER_MISSING is not None, reason=f"Apache broker: {APACHE_BROKER_MISSING}"
    ),
]

TOPIC, PGROUP, CGROUP = "NsApacheTopic", "NsApachePG", "NsApacheCG"


async def mqadmin(store: Path, *args: str) -> str:
    await asyncio.to_thread(store.mkdir, parents=True, exist_ok=True)
    argv = await asyncio.to_thread(mqadmin_argv, *args, user_home=store)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=store,
        env={**os.environ, "STORE_DIR": str(store)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


async def test_apache_broker_registers_and_clients_route_through_us(tmp_path: Path) -> None:
    ns = NameServer(port=0, data_dir=tmp_path / "namesrv")
    await ns.start()
    port = free_broker_port()
    addr = f"127.0.0.1:{port}"
    broker = await start_apache_broker(tmp_path / "apache", port, ns.address, "MixedCluster")
    producer: Any = None
    consumer: Any = None
    try:
        await wait_until(lambda: "apache-a" in ns.routes.broker_addr_table, 120.0)
        assert ns.routes.broker_addr_table["apache-a"].broker_addrs == {0: addr}
        assert ns.routes.cluster_addr_table == {"MixedCluster": {"apache-a"}}
        assert "TBW102" in ns.routes.topic_queue_table

        out, route_out = await asyncio.gather(
            mqadmin(tmp_path / "adm1", "clusterList", "-n", ns.address),
            mqadmin(tmp_path / "adm2", "topicRoute", "-n", ns.address, "-t", "TBW102"),
        )
        row = next(line.split() for line in out.splitlines() if "apache-a" in line)
        assert row[:4] == ["MixedCluster", "apache-a", "0", addr] and row[4] == "V4_9_8", out
        assert '"brokerName":"apache-a"' in route_out and addr in route_out, route_out

        # the bundled client: TBW102 route -> the Apache broker auto-creates the topic and
        # registers again; then the topic's own route comes from our name server
        producer = Producer(PGROUP, namesrv=ns.address, send_msg_timeout=10.0)
        await producer.start()
        sent = [await producer.send(Message(TOPIC, f"m{i}".encode())) for i in range(4)]
        assert {s.message_queue.broker_name for s in sent} == {"apache-a"}
        await wait_until(lambda: TOPIC in ns.routes.topic_queue_table, 60.0)
        got: list[bytes] = []

        def on_messages(msgs: list[Any], _ctx: Any) -> ConsumeStatus:
            got.extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            CGROUP, namesrv=ns.address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(on_messages)
        await consumer.start()
        await wait_until(lambda: len(got) >= 4, 90.0)
        assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]
        out = await mqadmin(tmp_path / "adm3", "topicRoute", "-n", ns.address, "-t", TOPIC)
        assert '"brokerName":"apache-a"' in out, out
    finally:
        if consumer is not None:
            await consumer.shutdown()
        if producer is not None:
            await producer.shutdown()
        if broker.returncode is None:
            os.killpg(broker.pid, signal.SIGTERM)  # its shutdown hook sends UNREGISTER_BROKER
        try:
            await asyncio.wait_for(broker.wait(), 60)
        finally:
            if broker.returncode is None:
                os.killpg(broker.pid, signal.SIGKILL)
                await broker.wait()
    try:
        assert "apache-a" not in ns.routes.broker_addr_table
        assert ns.routes.topic_queue_table == {}
    finally:
        await ns.stop()


async def test_apache_broker_registers_through_the_white_list_only(tmp_path: Path) -> None:
    """Apache RocketMQ 4.9.8's broker sends REGISTER_BROKER unsigned (its BrokerOuterAPI has
    no RPC hook). Registered with two ``kairosmq namesrv --acl`` processes at once: the one
    whose file white-lists 127.0.0.1 (``globalWhiteRemoteAddresses``) takes it and routes
    to it, the other refuses it (``acl.denied``, request code 103, no access key) and stays
    without it. Both keep serving."""
    closed_acl, white_acl = tmp_path / "closed.yml", tmp_path / "white.yml"
    closed_acl.write_text(ACL_FILE)
    white_acl.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + ACL_FILE)
    closed = NamesrvProcess(tmp_path / "ns-closed", "--acl", str(closed_acl))
    white = NamesrvProcess(tmp_path / "ns-white", "--acl", str(white_acl))
    await closed.start()
    await white.start()
    port = free_broker_port()
    addr = f"127.0.0.1:{port}"
    env = {
        **os.environ,
        "STORE_DIR": str(tmp_path / "apache"),
        "BROKER_PORT": str(port),
        "NAMESRV": f"{closed.address};{white.address}",
        "BROKER_NAME": "apache-w",
        "CLUSTER": "WhiteCluster",
        "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
    }
    broker = await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await wait_route(white.address, "TBW102", addr, timeout=120.0)
        info = await cluster_info(white.address)
        assert info.broker_addr_table["apache-w"].broker_addrs == {0: addr}
        await wait_until(
            lambda: any(
                e["request_code"] == 103 and e["access_key"] == ""
                for e in closed.events("acl.denied")
            ),
            30.0,
            what="the closed name server refused the Java broker",
        )
        assert (await cluster_info(closed.address)).broker_addr_table == {}
    finally:
        if broker.returncode is None:
            os.killpg(broker.pid, signal.SIGKILL)
        await broker.wait()
        for ns in (closed, white):
            if ns.running:
                assert ns.terminate() == 0
