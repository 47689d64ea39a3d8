"""The bundled clients against two real kairosmq brokers behind one real kairosmq name server
(all in-process): queues of both brokers, admin ``--brokers``, rebalance over both,
offsets on the owning broker, heartbeats/unregister on each, send-back to the storing
broker and its fallback through the internal producer."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from kairosmq.client.consumer.consume_service import retry_message
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.properties import (
    DELAY,
    MAX_RECONSUME_TIMES,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    RETRY_TOPIC,
    UNIQ_KEY,
)
from kairosmq.protocol.registration import DataVersion, TopicConfigData, build_register_broker

from tests.client.multibroker import Cluster
from tests.helpers import Collector, wait_until
from tests.integration.procs import free_port
from tests.transaction.txpeer import FAST as TX_FAST

FAST = dict(
    poll_name_server_interval=0.5,
    rebalance_interval=1.0,
    persist_consumer_offset_interval=0.5,
    heartbeat_broker_interval=1.0,
)


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    await c.start("broker-a", "broker-b")
    try:
        yield c
    finally:
        await c.close()


def consumer(c: Cluster, group: str, topic: str, listener: object, **kw: object) -> PushConsumer:
    pc = PushConsumer(
        group, c.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **{**FAST, **kw}
    )  # type: ignore[arg-type]
    pc.subscribe(topic, "*")
    pc.register_listener(listener)  # type: ignore[arg-type]
    return pc


async def test_admin_creates_topics_on_named_brokers_and_sends_spread_over_both(
    cluster: Cluster,
) -> None:
    rc, _out, err = await cluster.admin("topic", "create", "OnlyB", "--brokers", "broker-b")
    assert rc == 0, err
    rc, _out, err = await cluster.admin("topic", "create", "Nope", "--brokers", "broker-x")
    assert rc == 1 and "broker-x" in err
    await cluster.create_topic("Spread", queues=4)  # --brokers all
    assert await cluster.route_brokers("Spread") == {"broker-a", "broker-b"}
    await wait_until(lambda: "OnlyB" in cluster.brokers["broker-b"].topics.topics)
    assert "OnlyB" not in cluster.brokers["broker-a"].topics.topics

    ports = {n: b.port for n, b in cluster.brokers.items()}
    async with Producer("PG", cluster.namesrv) as p:
        results = [await p.send(Message("Spread", b"m%d" % i)) for i in range(32)]
        only_b = [await p.send(Message("OnlyB", b"b")) for _ in range(4)]
    per_queue = Counter(r.message_queue for r in results)
    assert set(per_queue) == {MessageQueue("Spread", b, q) for b in ports for q in range(4)}
    assert set(per_queue.values()) == {4}  # round robin over the 8 queues of both brokers
    for r in results + only_b:  # stored where the result says: the store host's port
        assert decode_offset_msg_id(r.offset_msg_id)[1] == ports[r.message_queue.broker_name]
    assert {r.message_queue.broker_name for r in only_b} == {"broker-b"}
    rc, out, err = await cluster.admin("--json", "topic", "delete", "Spread", "--brokers", "all")
    assert rc == 0 and '"broker-a"' in out and '"broker-b"' in out, err
    assert all("Spread" not in b.topics.topics for b in cluster.brokers.values())
    # deleted on every broker: the name server's route goes too (mqadmin deleteTopic)
    assert json.loads(out)["nameServerRoute"] == "deleted"
    assert await cluster.route_brokers("Spread") == set()


async def test_group_of_two_splits_eight_queues_of_two_brokers_and_commits_to_owners(
    cluster: Cluster,
) -> None:
    topic, group = "Split", "CG-split"
    await cluster.create_topic(topic, queues=4)
    async with Producer("PG", cluster.namesrv) as p:
        sent = [await p.send(Message(topic, b"m%d" % i)) for i in range(64)]
        # extra messages on broker-a queue 0 only: the two brokers' queue 0 offsets differ
        extra = MessageQueue(topic, "broker-a", 0)
        sent += [await p.send(Message(topic, b"x%d" % i), queue=extra) for i in range(5)]
    got1, got2 = Collector(), Collector()
    c1, c2 = consumer(cluster, group, topic, got1), consumer(cluster, group, topic, got2)
    await c1.start()
    await c2.start()
    try:
        await wait_until(
            lambda: len(got1.msgs) + len(got2.msgs) >= len(sent),
            20.0,
            what="every message consumed",
        )

        def mine(c: PushConsumer) -> set[MessageQueue]:
            return {q for q in c.assigned_queues if q.topic == topic}

        await wait_until(
            lambda: len(mine(c1) | mine(c2)) == 8 and not mine(c1) & mine(c2),
            10.0,
            what="8 queues split",
        )
        mine1, mine2 = mine(c1), mine(c2)
        assert len(mine1) == len(mine2) == 4 and not mine1 & mine2
        assert {q.broker_name for q in mine1 | mine2} == {"broker-a", "broker-b"}
        for name in ("broker-a", "broker-b"):  # both members heartbeated both brokers
            assert set(await cluster.consumers(name, group)) == {c1.client_id, c2.client_id}
    finally:
        await c1.shutdown()
        await c2.shutdown()
    ids = [m.msg_id for m in got1.msgs + got2.msgs]
    assert sorted(ids) == sorted(r.msg_id for r in sent)  # everything, once
    for name in ("broker-a", "broker-b"):
        for q in range(4):  # each queue's offset is on its own broker, at its end
            assert await cluster.committed(name, group, topic, q) == await cluster.max_offset(
                name, topic, q
            )
        assert await cluster.consumers(name, group) == []  # unregistered from each
    assert (
        await cluster.committed("broker-a", group, topic, 0)
        == await cluster.committed("broker-b", group, topic, 0) + 5
    )


async def test_send_back_goes_to_the_broker_that_stored_the_message(cluster: Cluster) -> None:
    topic, group = "Back", "CG-back"
    await cluster.create_topic(topic, queues=2)
    first: dict[str, str] = {}  # msgId -> broker that stored it
    again: dict[str, tuple[str, int, str]] = {}  # msgId -> (retry broker, times, topic)

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        m = msgs[0]
        if m.reconsume_times == 0:
            first[m.msg_id] = ctx.message_queue.broker_name
            return ConsumeStatus.RECONSUME_LATER
        again[m.msg_id] = (ctx.message_queue.broker_name, m.reconsume_times, m.topic)
        return ConsumeStatus.CONSUME_SUCCESS

    c = consumer(cluster, group, topic, listener)
    await c.start()
    try:
        async with Producer("PG", cluster.namesrv) as p:
            sent = [await p.send(Message(topic, b"r%d" % i)) for i in range(8)]
        await wait_until(lambda: len(again) == 8, 20.0, what="8 retries")
    finally:
        await c.shutdown()
    assert {r.msg_id: r.message_queue.broker_name for r in sent} == first
    assert set(first.values()) == {"broker-a", "broker-b"}
    # each retry came back from %RETRY%<group> of the broker that stored the original
    assert {k: v[0] for k, v in again.items()} == first
    assert {(v[1], v[2]) for v in again.values()} == {(1, topic)}


async def test_send_back_falls_back_to_the_retry_topic_when_the_storing_broker_is_gone(
    cluster: Cluster,
) -> None:
    topic, group = "Fallback", "CG-fallback"
    await cluster.create_topic(topic, queues=1)
    release = asyncio.Event()
    seen: list[tuple[str, int, str, str]] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        m = msgs[0]
        seen.append((m.msg_id, m.reconsume_times, ctx.message_queue.broker_name, m.topic))
        if m.reconsume_times == 0 and ctx.message_queue.broker_name == "broker-b":
            await release.wait()  # the test stops broker-b meanwhile
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    c = consumer(cluster, group, topic, listener)
    await c.start()
    try:
        async with Producer("PG", cluster.namesrv) as p:
            r = await p.send(
                Message(topic, b"on b", tags="T1"), queue=MessageQueue(topic, "broker-b", 0)
            )
        await wait_until(lambda: len(seen) == 1, 10.0)
        await cluster.stop_broker("broker-b")  # CONSUMER_SEND_MSG_BACK to it must fail
        release.set()
        await wait_until(lambda: len(seen) == 2, 15.0, what="the re-sent retry")
    finally:
        await c.shutdown()
    msg_id, times, broker, real_topic = seen[1]
    # re-sent by the internal producer to %RETRY%<group> on the surviving broker
    assert (msg_id, times, broker, real_topic) == (r.msg_id, 1, "broker-a", topic)


def test_retry_message_is_what_java_sends_back_through_its_producer() -> None:
    m = MessageExt(
        topic="Orders",
        body=b"payload",
        flag=7,
        reconsume_times=2,
        properties={"TAGS": "A", DELAY: "3", "TRAN_MSG": "true", "color": "red", UNIQ_KEY: "ABC"},
    )
    r = retry_message(m, "CG", 16)
    assert (r.topic, r.body, r.flag, r.delay_level) == ("%RETRY%CG", b"payload", 7, 5)
    p = r.properties
    assert (p[RETRY_TOPIC], p[RECONSUME_TIME], p[MAX_RECONSUME_TIMES]) == ("Orders", "3", "16")
    assert (p[ORIGIN_MESSAGE_ID], p[UNIQ_KEY], p["TAGS"], p["color"]) == ("ABC", "ABC", "A", "red")
    assert DELAY not in p and "TRAN_MSG" not in p
    m.properties[ORIGIN_MESSAGE_ID] = "FIRST"
    assert retry_message(m, "CG", 16).properties[ORIGIN_MESSAGE_ID] == "FIRST"


@pytest.mark.parametrize("fault", [False, True], ids=["default", "latency-fault"])
async def test_a_listed_broker_refusing_connections_costs_sends_no_time(
    cluster: Cluster, fault: bool
) -> None:
    """The name server still lists broker-z (its registration connection is alive, as
    after a machine crash until the expiry) but its address refuses connections: every
    send succeeds on broker-a fast, and broker-z is tried rarely, not once per send."""
    topic = "Refused"
    await cluster.create_topic(topic, queues=4, brokers="broker-a")
    dead = f"127.0.0.1:{free_port()}"
    reg = build_register_broker(
        cluster_name="DefaultCluster",
        broker_name="broker-z",
        broker_addr=dead,
        ha_server_addr=dead,
        topic_configs=[TopicConfigData(topic, 4, 4)],
        data_version=DataVersion(1, 1),
    )
    resp = await cluster.ask(cluster.namesrv, reg.code, dict(reg.ext_fields), reg.body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert await cluster.route_brokers(topic) == {"broker-a", "broker-z"}
    latencies: list[float] = []
    async with Producer("PG", cluster.namesrv, send_latency_fault_enable=fault) as p:
        await p.send(Message(topic, b"warm"))
        for i in range(60):
            t0 = time.monotonic()
            r = await p.send(Message(topic, b"m%d" % i))
            latencies.append(time.monotonic() - t0)
            assert r.message_queue.broker_name == "broker-a"
        attempts = p._pool.get(dead)._failures  # refused connects so far
    assert max(latencies) < 0.5, max(latencies)  # refused fails fast, never waits backoff
    # the first heartbeat's connect, then: latency fault -> one failed send isolates it
    # for 600 s; default -> tried again only when its reconnect backoff ran out
    assert attempts <= (2 if fault else 12), attempts


async def test_transactions_on_both_brokers_end_and_check_back_on_the_storing_one(
    tmp_path: Path,
) -> None:
    """Half messages spread over both brokers; half are committed at once, the others are
    UNKNOW and committed by the check-back each storing broker sends: END_TRANSACTION must
    reach the broker that holds each half message, or it is never delivered."""
    c = Cluster(tmp_path, **TX_FAST)
    await c.start("broker-a", "broker-b")
    try:
        topic = "TxSpread"
        await c.create_topic(topic, queues=2)
        checked: list[str] = []

        def check(msg: MessageExt) -> LocalTransactionState:
            checked.append(msg.msg_id)
            return LocalTransactionState.COMMIT_MESSAGE

        def execute(msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE if arg else LocalTransactionState.UNKNOW

        got = Collector()
        pc = consumer(c, "CG-tx", topic, got)
        await pc.start()
        try:
            async with TransactionProducer(
                "TxPG-multi",
                c.namesrv,
                execute_local_transaction=execute,
                check_local_transaction=check,
            ) as p:
                sent = [
                    await p.send_message_in_transaction(Message(topic, b"t%d" % i), arg=i % 2 == 0)
                    for i in range(8)
                ]
                await wait_until(lambda: len(got.msgs) >= 8, 20.0, what="8 committed")
        finally:
            await pc.shutdown()
        by_broker = Counter(r.send_result.message_queue.broker_name for r in sent)
        assert by_broker == {"broker-a": 4, "broker-b": 4}
        assert sorted(m.msg_id for m in got.msgs) == sorted(r.send_result.msg_id for r in sent)
        assert {r.send_result.msg_id for r in sent[1::2]} <= set(checked)
    finally:
        await c.close()


async def test_route_refresh_drops_a_stopped_broker_and_takes_it_back(cluster: Cluster) -> None:
    topic = "Refresh"
    await cluster.create_topic(topic, queues=2)
    async with Producer("PG", cluster.namesrv, poll_name_server_interval=0.3) as p:
        first = {(await p.send(Message(topic, b"x"))).message_queue.broker_name for _ in range(8)}
        assert first == {"broker-a", "broker-b"}
        b_addr = cluster.addr("broker-b")
        port = await cluster.stop_broker("broker-b")  # unregisters from the name server
        await wait_until(
            lambda: b_addr not in p._routes.broker_addrs(),
            5.0,
            what="broker-b gone from the producer's routes",
        )
        assert b_addr not in p._pool._clients  # its connection closed and forgotten
        during = {(await p.send(Message(topic, b"y"))).message_queue.broker_name for _ in range(8)}
        assert during == {"broker-a"}
        await cluster.start_broker("broker-b", port=port)  # same address, same data
        await wait_until(
            lambda: b_addr in p._routes.broker_addrs(),
            10.0,
            what="broker-b back in the producer's routes",
        )
        after = {(await p.send(Message(topic, b"z"))).message_queue.broker_name for _ in range(8)}
        assert after == {"broker-a", "broker-b"}
        # heartbeated again as a new broker: it knows the producer group
        assert b_addr in p._heartbeated
