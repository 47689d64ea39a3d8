"""A kairosmq broker registered with Apache RocketMQ 4.9.8's real name server (``--namesrv``).

The name server is the Java one (a JVM per module, ``conftest.apache_namesrv``); the broker
runs in-process. Checked at the name server itself (its wire answers and Apache's own
``mqadmin``): registration at start, a new topic and a heartbeat-created retry topic
registered at once, re-registration after the name server dropped the broker (its channel
closed), UNREGISTER on stop, a name server that is down at start or hangs. Bundled clients
route through the Apache name server only (plain and delayed messages).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.naming import retry_topic
from kairosmq.server.broker import Broker

from tests.helpers import Collector, pull, send, wait_until
from tests.integration.procs import BrokerProcess, free_port
from tests.registration.conftest import (
    ApacheNamesrv,
    cluster_info,
    mqadmin,
    needs_apache,
    route_is,
    route_queues,
    topic_route,
)
from tests.wire import RawPeer

pytestmark = [needs_apache, pytest.mark.slow]  # Apache RocketMQ name server JVMs, broker processes
BrokerFactory = Callable[..., Awaitable[Broker]]


async def _registered(
    broker: Broker, namesrv: str, name: str, cluster: str = "DefaultCluster", timeout: float = 15.0
) -> None:
    key = f"{cluster}/{name}"

    async def check() -> bool:
        return (await cluster_info(namesrv)).get(key) == {0: broker.address}

    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, (
            f"{key} not registered at {namesrv}: {broker.status()['registration']}"
        )
        await asyncio.sleep(0.1)


async def test_bundled_clients_route_through_apache_namesrv(
    apache_namesrv: ApacheNamesrv, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    ns = apache_namesrv.address
    broker = await broker_factory(
        namesrv_addr=ns, broker_name="kairos-a", cluster_name="KairosCluster", register_period=1.0
    )
    assert broker.namesrv_address == ns and broker.namesrv_port == 0  # no embedded one
    assert broker.status()["namesrvAddress"] == ns
    await _registered(broker, ns, "kairos-a", "KairosCluster")
    broker.topics.create("RegTopic", 3)  # the change hook registers at once
    await route_is(ns, "RegTopic", {"kairos-a": 3}, timeout=3.0)

    # Apache's own admin tool sees the broker through the name server
    cluster_out, route_out = await asyncio.gather(
        asyncio.to_thread(mqadmin, tmp_path / "m1", "clusterList", "-n", ns),
        asyncio.to_thread(mqadmin, tmp_path / "m2", "topicRoute", "-n", ns, "-t", "RegTopic"),
    )
    rows = [
        line.split() for line in cluster_out.splitlines() if line.split()[:1] == ["KairosCluster"]
    ]
    assert [r[1:4] for r in rows] == [["kairos-a", "0", broker.address]], cluster_out
    route = TopicRouteData.from_json(route_out[route_out.index("{") :])  # fastjson's keys
    assert [b.broker_addrs for b in route.broker_datas] == [{0: broker.address}], route_out
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("kairos-a", 3)], (
        route_out
    )

    # bundled clients that know only the Apache name server
    producer = Producer("RegPG", namesrv=ns)
    consumer = PushConsumer(
        "RegCG",
        namesrv=ns,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        rebalance_interval=0.5,
    )
    got = Collector()
    consumer.subscribe("RegTopic", "*")
    consumer.register_listener(got)
    await producer.start()
    await consumer.start()
    try:
        for i in range(6):
            r = await producer.send(Message("RegTopic", f"plain-{i}".encode()))
            assert r.message_queue.broker_name == "kairos-a"
        sent_delayed = await producer.send(Message("RegTopic", b"delayed", delay_level=2))
        assert sent_delayed.message_queue.broker_name == "kairos-a"
        await got.wait_for(7, timeout=30)
        assert sorted(got.bodies) == sorted(
            [f"plain-{i}".encode() for i in range(6)] + [b"delayed"]
        )
        (delayed,) = [m for m in got.msgs if m.body == b"delayed"]
        # re-put by the scheduler at level 2 (100 ms here), not delivered before that
        assert delayed.store_timestamp - delayed.born_timestamp >= 100
        # the consumer's heartbeat created %RETRY%RegCG on the broker: registered at once
        await route_is(ns, retry_topic("RegCG"), {"kairos-a": 1})
    finally:
        await consumer.shutdown()
        await producer.shutdown()


async def test_reregisters_after_drop_and_unregisters_on_stop(
    apache_namesrv: ApacheNamesrv, broker_factory: BrokerFactory
) -> None:
    ns = apache_namesrv.address
    broker = await broker_factory(namesrv_addr=ns, broker_name="kairos-drop", register_period=1.0)
    broker.topics.create("DropTopic", 2)
    await route_is(ns, "DropTopic", {"kairos-drop": 2})
    reg = broker.registration
    assert reg is not None
    # The Apache name server drops a broker whose channel closes (BrokerHousekeepingService)
    # and only the next periodic registration brings it back: nothing else changes here.
    (link,) = reg.links
    before = link.registrations
    link.client.close()
    link.client = RemotingClient(ns)
    await wait_until(lambda: link.registrations > before, timeout=5, interval=0.05)
    await _registered(broker, ns, "kairos-drop", timeout=5)
    await route_is(ns, "DropTopic", {"kairos-drop": 2}, timeout=5)
    await wait_until(
        lambda: link.registrations >= before + 3,
        timeout=6,
        interval=0.05,
        what="two more periodic registrations (1 s period)",
    )
    assert link.failures == 0 and link.last_error is None

    await broker.stop("test")  # UNREGISTER_BROKER: broker and its queues gone at once
    info = await cluster_info(ns)
    assert "DefaultCluster/kairos-drop" not in info, info
    assert await topic_route(ns, "DropTopic") is None


async def test_namesrv_down_at_start_then_up(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    port = free_port()
    addr = f"127.0.0.1:{port}"
    broker = await broker_factory(namesrv_addr=addr, broker_name="kairos-late", register_period=2.0)
    reg = broker.registration
    assert reg is not None
    await wait_until(lambda: reg.links[0].failures >= 2, timeout=5)
    assert not reg.registered_everywhere and "ConnectionClosed" in str(
        broker.status()["registration"]["nameServers"][0]["lastError"]
    )
    peer = await RawPeer.connect(broker.address)  # the broker serves meanwhile
    try:
        assert (await send(peer, "LateTopic", b"while-alone")).code == ResponseCode.SUCCESS
        r = await pull(peer, "LateTopic", 0)
        assert r.code == ResponseCode.SUCCESS
    finally:
        await peer.close()
    late = ApacheNamesrv(tmp_path / "late-namesrv", port)
    await asyncio.to_thread(late.start)
    try:
        await _registered(broker, addr, "kairos-late", timeout=20)
        await wait_until(lambda: reg.registered_everywhere, timeout=5)
        assert route_queues(await topic_route(addr, "LateTopic")) == {"kairos-late": 4}
    finally:
        await broker.stop("test")
        await asyncio.to_thread(late.stop)


async def test_hung_namesrv_does_not_delay_the_other(
    apache_namesrv: ApacheNamesrv, broker_factory: BrokerFactory
) -> None:
    """One name server accepts connections and never answers: the other still gets every
    registration on time, and stop is bounded by the timeout."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)  # accepts (the kernel does), never reads or answers
        hung_addr = f"127.0.0.1:{hung.getsockname()[1]}"
        ns = apache_namesrv.address
        broker = await broker_factory(
            namesrv_addr=f"{hung_addr};{ns}",
            broker_name="kairos-hung",
            register_period=1.0,
            register_timeout=4.0,
        )
        reg = broker.registration
        assert reg is not None
        hung_link, ok_link = reg.links
        await _registered(broker, ns, "kairos-hung", timeout=5)
        broker.topics.create("HungTopic", 1)
        await route_is(ns, "HungTopic", {"kairos-hung": 1}, timeout=2)
        await wait_until(lambda: ok_link.registrations >= 3, timeout=4)
        assert not hung_link.registered and hung_link.registrations == 0
        t0 = time.monotonic()
        await broker.stop("test")
        assert time.monotonic() - t0 < 4.0 + 3.0 + 2.0  # timeouts, not forever
        assert "DefaultCluster/kairos-hung" not in await cluster_info(ns)


async def test_broker_process_with_cli_flags(apache_namesrv: ApacheNamesrv, tmp_path: Path) -> None:
    """``kairosmq broker --namesrv ... --broker-name ... --cluster ... --broker-ip ...`` as a
    real process: registered as told; SIGTERM unregisters, SIGKILL leaves the Apache name
    server to drop it when the channel closes."""
    ns = apache_namesrv.address
    proc = BrokerProcess(
        tmp_path / "b",
        "--namesrv",
        ns,
        "--broker-name",
        "kairos-proc",
        "--cluster",
        "ProcCluster",
        "--broker-ip",
        "127.0.0.1",
        "--register-period",
        "1",
    )
    await proc.start()
    try:
        key = "ProcCluster/kairos-proc"
        await wait_until_async(lambda: _has(ns, key, proc.address), 15)
        assert proc.terminate() == 0
        assert key not in await cluster_info(ns)  # unregistered before the exit
        await proc.start()  # same data dir, same port
        await wait_until_async(lambda: _has(ns, key, proc.address), 15)
        proc.kill()
        await wait_until_async(lambda: _gone(ns, key), 10)
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


async def _has(ns: str, key: str, addr: str) -> bool:
    return (await cluster_info(ns)).get(key) == {0: addr}


async def _gone(ns: str, key: str) -> bool:
    return key not in await cluster_info(ns)


async def wait_until_async(pred: Callable[[], Awaitable[bool]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "not within the timeout"
        await asyncio.sleep(0.1)


async def test_kairosmq_admin_through_apache_namesrv(
    apache_namesrv: ApacheNamesrv, broker_factory: BrokerFactory
) -> None:
    """``kairosmq admin`` finds the broker through the Apache name server (whose cluster
    info has fastjson's unquoted map keys) and shows the registration in ``status``."""
    ns = apache_namesrv.address
    broker = await broker_factory(namesrv_addr=ns, broker_name="kairos-adm", register_period=1.0)
    await _registered(broker, ns, "kairos-adm")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kairosmq.server",
        "admin",
        "status",
        "--namesrv",
        ns,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    st = json.loads(out)
    assert st["address"] == broker.address and st["namesrvAddress"] == ns
    (server,) = st["registration"]["nameServers"]
    assert server["address"] == ns and server["registered"] and server["registrations"] >= 1
