"""The seed articles' demo with the bundled clients: delayed sends, retries, dead letters."""

from __future__ import annotations

import time

import pytest
from kairosmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from kairosmq.server.config import BrokerConfig

from tests.helpers import FAST_LEVELS, Collector, wait_until

LEVELS_MS = BrokerConfig(delay_levels=FAST_LEVELS).delay_levels_ms


async def test_hundred_messages_at_level_3_arrive_after_their_delay(broker) -> None:
    collector = Collector()
    consumer = PushConsumer(
        "SeedCG", namesrv=broker.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("SeedTopic", "*")
    consumer.register_listener(collector)
    sent_at: dict[str, float] = {}
    async with consumer, Producer("SeedPG", namesrv=broker.namesrv_address) as producer:
        for i in range(100):
            msg = Message(
                "SeedTopic",
                f"Hello scheduled message {i}".encode(),
                tags="TagA",
                keys=f"key-{i}",
                delay_level=3,
                properties={"seq": str(i)},
            )
            t = time.time()
            r = await producer.send(msg)
            sent_at[r.msg_id] = t
        await collector.wait_for(100, timeout=10)
    assert sorted(m.msg_id for m in collector.msgs) == sorted(sent_at)
    delay_s = LEVELS_MS[2] / 1000
    for m in collector.msgs:
        # stored into the real topic no earlier than send time + the level's delay
        assert m.store_timestamp / 1000 >= sent_at[m.msg_id] + delay_s - 0.002
        assert m.topic == "SeedTopic" and m.tags == "TagA"
        assert m.properties["seq"] == m.body.decode().rsplit(" ", 1)[1]
        assert m.properties["REAL_TOPIC"] == "SeedTopic"
        assert int(m.properties["REAL_QID"]) == m.queue_id


@pytest.mark.slow  # a retry ladder in real time
async def test_retry_ladder_and_dead_letter_with_the_bundled_consumer(broker) -> None:
    attempts: list[tuple[int, float, str]] = []

    def fail_twice(m):  # RECONSUME_LATER twice, then success
        attempts.append((m.reconsume_times, time.monotonic(), m.msg_id))
        return (
            ConsumeStatus.RECONSUME_LATER
            if m.reconsume_times < 2
            else ConsumeStatus.CONSUME_SUCCESS
        )

    collector = Collector(fail_twice)
    consumer = PushConsumer(
        "LadderCG", namesrv=broker.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("Ladder", "*")
    consumer.register_listener(collector)
    async with consumer, Producer("LadderPG", namesrv=broker.namesrv_address) as producer:
        r = await producer.send(Message("Ladder", b"try me"))
        await wait_until(lambda: len(attempts) >= 3, timeout=10)
    assert [a[0] for a in attempts] == [0, 1, 2]
    assert {a[2] for a in attempts} == {r.msg_id}
    assert all(m.topic == "Ladder" for m in collector.msgs)
    assert attempts[1][1] - attempts[0][1] >= LEVELS_MS[2] / 1000 - 0.01  # level 3
    assert attempts[2][1] - attempts[1][1] >= LEVELS_MS[3] / 1000 - 0.01  # level 4

    # with maxReconsumeTimes = 2 the message ends in the DLQ after the third failure
    seen: list[int] = []

    def always_fail(m):
        seen.append(m.reconsume_times)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer(
        "DlqCG",
        namesrv=broker.namesrv_address,
        max_reconsume_times=2,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Doomed", "*")
    consumer.register_listener(Collector(always_fail))
    dead = Collector()
    dlq_reader = PushConsumer(
        "DlqReader",
        namesrv=broker.namesrv_address,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    dlq_reader.subscribe("%DLQ%DlqCG", "*")
    dlq_reader.register_listener(dead)
    async with consumer, dlq_reader, Producer("DlqPG", namesrv=broker.namesrv_address) as p:
        r = await p.send(Message("Doomed", b"never works"))
        await dead.wait_for(1, timeout=10)
    assert seen == [0, 1, 2]
    assert dead.msgs[0].msg_id == r.msg_id and dead.msgs[0].body == b"never works"
    assert dead.msgs[0].reconsume_times == 3


@pytest.mark.slow
async def test_real_time_one_second_level(broker_factory) -> None:
    b = await broker_factory(delay_levels="1s 5s 10s")
    collector = Collector()
    consumer = PushConsumer(
        "RtCG", namesrv=b.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("RealTime", "*")
    consumer.register_listener(collector)
    async with consumer, Producer("RtPG", namesrv=b.namesrv_address) as producer:
        t0 = time.time()
        await producer.send(Message("RealTime", b"one second", delay_level=1))
        await collector.wait_for(1, timeout=5)
        received = time.time()
    m = collector.msgs[0]
    assert m.store_timestamp / 1000 >= t0 + 1.0 - 0.002
    # on time: the broker moved it within 0.5 s of its due instant (its own timestamps, so
    # consumer scheduling on a loaded box does not count), and the consumer got it well
    # before a second delay would have passed (generous: long-poll hand-off included)
    due = int(m.properties["KAIROS_DELIVER_MS"])
    assert 0 <= m.store_timestamp - due < 500
    assert received - t0 < 1.0 + 1.5
