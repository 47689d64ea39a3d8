"""The bundled clients' bound signatures on the REAL Apache RocketMQ 4.9.8 broker with
``aclEnable=true``: every request of kairosmq's Producer and PushConsumer carries the extra
signed ``KairosBinding`` field (protocol/acl.py), and Apache's PlainAccessValidator
verifies it like any other field and its handlers ignore it - sends, a push consumer's
pulls and offset commits all pass; a wrong secret is refused with Apache's remark.

An in-process kairosmq ``NameServer`` routes to the Java broker (``start_broker.sh``),
whose ``rocketmq.home.dir`` points at a temporary directory holding ``conf/plain_acl.yml``.
Skipped when the Apache build (``shared/apache-rocketmq``) or java is absent.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from kairosmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from kairosmq.client.errors import ClientError
from kairosmq.server.namesrv import NameServer

from tests.helpers import (
    APACHE_BROKER_MISSING,
    APACHE_JAVA_OPT_EXT,
    ROCKETMQ_HOME,
    START_BROKER,
    free_broker_port,
    wait_until,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        APACHE_BROKER_MISSING is not None, reason=f"Apache broker: {APACHE_BROKER_MISSING}"
    ),
]

TOPIC, PGROUP, CGROUP = "AclApacheTopic", "AclApachePG", "AclApacheCG"
APACHE_ACL = f"""
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: apache_producer
    secretKey: apache_producer_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB]
  - accessKey: apache_consumer
    secretKey: apache_consumer_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=SUB]
    groupPerms: [{CGROUP}=SUB]
"""


async def test_apache_acl_broker_verifies_the_bundled_clients(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(APACHE_ACL)
    for name in ("logback_broker.xml", "logback_tools.xml"):
        if (ROCKETMQ_HOME / "conf" / name).exists():
            shutil.copy(ROCKETMQ_HOME / "conf" / name, home / "conf" / name)
    ns = NameServer(port=0, data_dir=tmp_path / "namesrv")
    await ns.start()
    port = free_broker_port()
    env = {
        **os.environ,
        "STORE_DIR": str(tmp_path / "apache"),
        "BROKER_PORT": str(port),
        "NAMESRV": ns.address,
        "BROKER_NAME": "apache-acl",
        "BROKER_EXTRA_CONF": "aclEnable=true",
        # a later -D wins: the ACL file is read from <rocketmq.home.dir>/conf
        "JAVA_OPT_EXT": f"{APACHE_JAVA_OPT_EXT} -Drocketmq.home.dir={home}",
    }
    broker = await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    producer: Any = None
    consumer: Any = None
    try:
        await wait_until(lambda: "apache-acl" in ns.routes.broker_addr_table, 120.0)
        producer = Producer(
            PGROUP,
            namesrv=ns.address,
            send_msg_timeout=10.0,
            access_key="apache_producer",
            secret_key="apache_producer_sk",
        )
        await producer.start()
        sent = [await producer.send(Message(TOPIC, f"bound{i}".encode())) for i in range(3)]
        assert {s.message_queue.broker_name for s in sent} == {"apache-acl"}
        wrong = Producer(
            PGROUP + "W",
            namesrv=ns.address,
            send_msg_timeout=5.0,
            access_key="apache_producer",
            secret_key="not-the-secret",
        )
        await wrong.start()
        try:
            with pytest.raises(ClientError, match="signature"):
                await wrong.send(Message(TOPIC, b"refused"))
        finally:
            await wrong.shutdown()
        got: list[bytes] = []

        def on_messages(msgs: list[Any], _ctx: Any) -> ConsumeStatus:
            got.extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            CGROUP,
            namesrv=ns.address,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            access_key="apache_consumer",
            secret_key="apache_consumer_sk",
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(on_messages)
        await consumer.start()
        await wait_until(lambda: len(got) >= 3, 90.0)
        assert sorted(got) == [b"bound0", b"bound1", b"bound2"]
    finally:
        if consumer is not None:
            await consumer.shutdown()
        if producer is not None:
            await producer.shutdown()
        if broker.returncode is None:
            os.killpg(broker.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(broker.wait(), 60)
        finally:
            if broker.returncode is None:
                os.killpg(broker.pid, signal.SIGKILL)
                await broker.wait()
            await ns.stop()
