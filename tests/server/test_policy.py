"""Pure broker policy: delay levels and config, retry/DLQ planning, the delay transform,
topic names, the client registry and queue locks, and the long-poll notifier."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kairosmq.protocol.bodies import ConsumerData, SubscriptionData
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.message import decode_record, encode_record
from kairosmq.protocol.properties import encode_properties
from kairosmq.server import clients as clients_mod
from kairosmq.server.clients import ClientRegistry, LockManager
from kairosmq.server.config import (
    DEFAULT_DELAY_LEVELS,
    BrokerConfig,
    FlushMode,
    parse_delay_levels,
)
from kairosmq.server.longpoll import ArrivalNotifier
from kairosmq.server.retry import plan_send_back
from kairosmq.server.schedule import restore_delayed, transform_delayed
from kairosmq.server.store import SCHEDULE_TOPIC, MessageInner
from kairosmq.server.topics import validate_topic

S, M, H = 1000, 60_000, 3_600_000

# ---------------------------------------------------------------- delay levels / config


def test_default_delay_levels() -> None:
    assert DEFAULT_DELAY_LEVELS == "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS) == (
        1 * S, 5 * S, 10 * S, 30 * S, 1 * M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M, 7 * M, 8 * M,
        9 * M, 10 * M, 20 * M, 30 * M, 1 * H, 2 * H)


@pytest.mark.parametrize(("text", "expected"), [
    ("250ms 2s 3m 1h 1d", (250, 2000, 180_000, 3_600_000, 86_400_000)),
    ("1.5s 0.5m 0.25h", (1500, 30_000, 900_000)),
    ("  50ms\t100ms\n150ms ", (50, 100, 150)),
    ("1S 2M", (1000, 120_000)),
    ("7", None),
])
def test_parse_delay_levels_units(text: str, expected: tuple[int, ...] | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="'7'"):
            parse_delay_levels(text)
    else:
        assert parse_delay_levels(text) == expected


@pytest.mark.parametrize(("text", "token", "position"), [
    ("1s 5x 10s", "5x", 2),
    ("1s -2s", "-2s", 2),
    ("s", "s", 1),
    ("1s 2 m", "2", 2),
    ("1.s", "1.s", 1),
])
def test_parse_delay_levels_bad_token_is_named(text: str, token: str, position: int) -> None:
    with pytest.raises(ValueError) as info:
        parse_delay_levels(text)
    assert repr(token) in str(info.value)
    assert f"token {position}" in str(info.value)


@pytest.mark.parametrize("text", ["0s", "0ms", "0.0001s"])
def test_parse_delay_levels_rejects_zero(text: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_delay_levels(text)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_parse_delay_levels_empty(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_delay_levels(text)


def test_broker_config_defaults_and_derivations(tmp_path: Path) -> None:
    cfg = BrokerConfig()
    assert cfg.delay_levels_ms[0] == 1000 and cfg.max_delay_level == 18
    assert (cfg.port, cfg.namesrv_port, cfg.max_reconsume_times) == (10911, 9876, 16)
    custom = BrokerConfig(data_dir=str(tmp_path), delay_levels="10ms 20ms", flush_mode="SYNC_FLUSH")
    assert custom.data_dir == tmp_path and isinstance(custom.data_dir, Path)
    assert custom.delay_levels_ms == (10, 20) and custom.max_delay_level == 2
    assert custom.flush_mode is FlushMode.SYNC_FLUSH
    with pytest.raises(dataclasses.FrozenInstanceError):
        custom.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(("kw", "match"), [
    ({"delay_levels": "1s bogus"}, "bogus"),
    ({"delay_levels": ""}, "empty"),
    ({"commitlog_segment_size": 4095, "max_message_size": 0}, "at least 4096"),
    ({"commitlog_segment_size": 1 << 20, "max_message_size": (1 << 20) - 4095}, "fit"),
    ({"flush_mode": "SOMETIMES"}, "SOMETIMES"),
])
def test_broker_config_validation(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BrokerConfig(**kw)


def test_broker_config_message_size_boundary() -> None:
    BrokerConfig(commitlog_segment_size=1 << 20, max_message_size=(1 << 20) - 4096)


# ---------------------------------------------------------------- retry plan


@pytest.mark.parametrize(("reconsume", "requested", "max_times", "expected"), [
    (0, 0, 16, ("%RETRY%G", 3, 1, False)),  # level 0: broker picks 3 + reconsumeTimes
    (5, 0, 16, ("%RETRY%G", 8, 6, False)),
    (15, 0, 16, ("%RETRY%G", 18, 16, False)),
    (2, 7, 16, ("%RETRY%G", 7, 3, False)),  # an explicit level is kept
    (16, 0, 16, ("%DLQ%G", 0, 17, True)),  # reconsume >= max -> DLQ
    (20, 4, 16, ("%DLQ%G", 0, 21, True)),
    (0, 0, 0, ("%DLQ%G", 0, 1, True)),
    (0, -1, 16, ("%DLQ%G", 0, 1, True)),  # negative level -> DLQ straight away
    (3, -5, 16, ("%DLQ%G", 0, 4, True)),
])
def test_plan_send_back(reconsume: int, requested: int, max_times: int,
                        expected: tuple[str, int, int, bool]) -> None:
    p = plan_send_back("G", reconsume, requested, max_times)
    assert (p.topic, p.delay_level, p.reconsume_times, p.dead_letter) == expected


def test_retry_schedule_with_default_max() -> None:
    # retries 1..16 land at levels 3..18, the 17th failure goes to the DLQ
    levels = [plan_send_back("G", n, 0, 16).delay_level for n in range(16)]
    assert levels == list(range(3, 19))
    assert plan_send_back("G", 16, 0, 16).dead_letter


# ---------------------------------------------------------------- delay transform

LEVELS = parse_delay_levels(DEFAULT_DELAY_LEVELS)


def _inner(**props: str) -> MessageInner:
    return MessageInner(topic="TopicTest", queue_id=3, body=b"payload",
                        properties={"TAGS": "TagA", "UNIQ_KEY": "ABC123", "DELAY": "2", **props},
                        flag=9, sys_flag=0, born_timestamp=111,
                        born_host=(b"\x0a\x00\x00\x09", 5555), reconsume_times=4)


def _stored(msg: MessageInner, queue_offset: int = 0) -> bytes:
    return encode_record(
        topic=msg.topic.encode(), body=msg.body,
        properties=encode_properties(msg.properties).encode(), queue_id=msg.queue_id,
        flag=msg.flag, queue_offset=queue_offset, physical_offset=4096, sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        store_timestamp=msg.store_timestamp or 0, store_host=(b"\x7f\x00\x00\x01", 10911),
        reconsume_times=msg.reconsume_times,
    )


def test_transform_delayed() -> None:
    msg = _inner()
    assert transform_delayed(msg, 2, LEVELS, now_ms=1_000_000) == 2
    assert (msg.topic, msg.queue_id, msg.store_timestamp) == (SCHEDULE_TOPIC, 1, 1_000_000)
    assert msg.properties["REAL_TOPIC"] == "TopicTest"
    assert msg.properties["REAL_QID"] == "3"
    assert msg.properties["DELAY"] == "2"
    assert msg.properties["KAIROS_DELIVER_MS"] == str(1_000_000 + 5000)
    assert msg.properties["UNIQ_KEY"] == "ABC123"


@pytest.mark.parametrize(("level", "clamped"), [(18, 18), (19, 18), (1000, 18), (1, 1)])
def test_transform_delayed_clamps_to_max_level(level: int, clamped: int) -> None:
    msg = _inner()
    assert transform_delayed(msg, level, LEVELS, now_ms=0) == clamped
    assert msg.queue_id == clamped - 1
    assert msg.properties["DELAY"] == str(clamped)
    assert msg.properties["KAIROS_DELIVER_MS"] == str(LEVELS[clamped - 1])


def test_restore_delayed_round_trip() -> None:
    msg = _inner()
    level = transform_delayed(msg, 3, LEVELS, now_ms=50_000)
    record = _stored(msg, queue_offset=41)
    back = restore_delayed(record, level, 41)
    assert (back.topic, back.queue_id) == ("TopicTest", 3)
    assert back.body == b"payload"
    assert (back.flag, back.sys_flag, back.born_timestamp, back.born_host) == (
        9, 0, 111, (b"\x0a\x00\x00\x09", 5555))
    assert back.reconsume_times == 4
    assert "DELAY" not in back.properties
    assert back.properties["KAIROS_SCHEDULE_ORIGIN"] == "3:41"
    assert back.properties["UNIQ_KEY"] == "ABC123"
    assert back.properties["TAGS"] == "TagA"
    assert back.properties["REAL_TOPIC"] == "TopicTest"  # kept, as RocketMQ does
    assert back.properties["KAIROS_DELIVER_MS"] == str(50_000 + 10_000)
    assert back.store_timestamp is None  # a fresh store time on re-put
    # the re-put record is an ordinary message again
    assert decode_record(_stored(back)).topic == "TopicTest"


def test_restore_delayed_without_real_topic_keeps_current() -> None:
    msg = MessageInner(topic="X", queue_id=0, body=b"", properties={"DELAY": "1"})
    back = restore_delayed(_stored(msg), 1, 0)
    assert (back.topic, back.queue_id, "DELAY" in back.properties) == ("X", 0, False)


# ---------------------------------------------------------------- topic names


@pytest.mark.parametrize(("topic", "error"), [
    ("TopicTest", None),
    ("%RETRY%G", None),
    ("%DLQ%CID_ALIONS_TEST", None),
    ("a|b-c_d09", None),
    ("x" * 127, None),
    ("", "blank"),
    ("   ", "blank"),
    ("x" * 128, "128"),
    ("bad topic", "outside"),
    ("a/b", "outside"),
    ("caf\u00e9", "outside"),
    ("T\n", "outside"),  # a trailing newline is not a valid character either
    ("a.b", "outside"),
])
def test_validate_topic(topic: str, error: str | None) -> None:
    reason = validate_topic(topic)
    if error is None:
        assert reason is None
    else:
        assert reason is not None and error in reason


# ---------------------------------------------------------------- clients


class FakeConn:
    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id
        self.peer = f"127.0.0.1:{40000 + conn_id}"
        self.notified: list[tuple[int, dict[str, str]]] = []

    def notify(self, code: int, ext_fields: dict[str, str]) -> None:
        self.notified.append((code, ext_fields))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(clients_mod, "time", SimpleNamespace(monotonic=c.monotonic))
    return c


def _consumer(group: str = "CG", version: int = 1, expr: str = "*") -> ConsumerData:
    return ConsumerData(group, [SubscriptionData.build("T", expr, version)])


NOTIFY = (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"})


def test_registry_membership_changes_notify_the_group(clock: Clock) -> None:
    reg = ClientRegistry(expire_seconds=120)
    a, b = FakeConn(1), FakeConn(2)
    assert reg.register_consumer(_consumer(), "cid-a", a) is True
    assert a.notified == [NOTIFY]
    assert reg.register_consumer(_consumer(), "cid-b", b) is True
    assert a.notified == [NOTIFY, NOTIFY] and b.notified == [NOTIFY]
    assert reg.consumer_ids("CG") == ["cid-a", "cid-b"]
    # a heartbeat from a known client on the same connection changes nothing
    assert reg.register_consumer(_consumer(), "cid-a", a) is False
    assert len(a.notified) == 2
    # the same client id on a new connection (a reconnect) is a change
    a2 = FakeConn(3)
    assert reg.register_consumer(_consumer(), "cid-a", a2) is True
    assert a2.notified == [NOTIFY] and len(b.notified) == 2
    reg.unregister("cid-b", None, "CG")
    assert reg.consumer_ids("CG") == ["cid-a"]
    assert len(a2.notified) == 2 and len(b.notified) == 2  # the leaver is not told
    reg.unregister("cid-zzz", None, "CG")  # unknown: no notification
    assert len(a2.notified) == 2
    reg.connection_closed(a2)
    assert reg.consumer_ids("CG") == []
    assert reg.consumer_ids("nope") == []


def test_registry_connection_closed_notifies_remaining(clock: Clock) -> None:
    reg = ClientRegistry()
    a, b = FakeConn(1), FakeConn(2)
    reg.register_consumer(_consumer(), "cid-a", a)
    reg.register_consumer(_consumer(), "cid-b", b)
    reg.register_producer("PG", "cid-b", b)
    reg.connection_closed(b)
    assert reg.consumer_ids("CG") == ["cid-a"]
    assert a.notified[-1] == NOTIFY and len(a.notified) == 3
    assert "PG" not in reg.producers  # an empty group is removed (bounded tables)


def test_registry_expiry(clock: Clock) -> None:
    reg = ClientRegistry(expire_seconds=120)
    a, b = FakeConn(1), FakeConn(2)
    reg.register_consumer(_consumer(), "cid-a", a)  # t = 1000
    reg.register_producer("PG", "cid-p", a)
    clock.now += 100
    reg.register_consumer(_consumer(), "cid-b", b)  # t = 1100
    clock.now += 20
    reg.expire()  # t = 1120: nobody is silent for more than 120 s yet
    assert reg.consumer_ids("CG") == ["cid-a", "cid-b"]
    assert list(reg.producers["PG"]) == ["cid-p"]
    n_a, n_b = len(a.notified), len(b.notified)
    clock.now += 10
    reg.expire()  # t = 1130: a and the producer were last seen 130 s ago
    assert reg.consumer_ids("CG") == ["cid-b"]
    assert "PG" not in reg.producers
    assert len(a.notified) == n_a  # the expired client is not told
    assert b.notified[n_b:] == [NOTIFY]
    clock.now += 70
    assert reg.register_consumer(_consumer(), "cid-b", b) is False  # t = 1200: a heartbeat
    clock.now += 100
    reg.expire()  # t = 1300: b was refreshed 100 s ago
    assert reg.consumer_ids("CG") == ["cid-b"]
    clock.now += 21
    reg.expire()
    assert reg.consumer_ids("CG") == []


def test_registry_subscriptions_latest_version_wins(clock: Clock) -> None:
    reg = ClientRegistry()
    conn = FakeConn(1)
    reg.register_consumer(_consumer(version=5, expr="A"), "cid", conn)
    reg.register_consumer(_consumer(version=3, expr="B"), "cid", conn)  # older: ignored
    assert reg.subscription("CG", "T").sub_string == "A"
    reg.register_consumer(_consumer(version=9, expr="C || D"), "cid", conn)
    sub = reg.subscription("CG", "T")
    assert (sub.sub_string, sub.tags_set) == ("C || D", ["C", "D"])
    assert reg.subscription("CG", "other") is None and reg.subscription("X", "T") is None
    info = reg.group_info("CG")
    assert info is not None and info.message_model == "CLUSTERING"


def test_registry_producers(clock: Clock) -> None:
    reg = ClientRegistry()
    conn = FakeConn(1)
    reg.register_producer("PG", "cid", conn)
    reg.register_producer("PG", "cid", conn)
    assert list(reg.producers["PG"]) == ["cid"]
    reg.unregister("cid", "PG", None)
    assert "PG" not in reg.producers and reg.registrations == 0
    assert conn.notified == []  # producers are never notified


def test_lock_manager(clock: Clock) -> None:
    locks = LockManager(lock_expire=60)
    q1, q2 = ("T", 0), ("T", 1)
    assert locks.try_lock("G", "a", [q1, q2]) == [q1, q2]
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [q1]) == []  # held by a
    assert locks.try_lock("OTHER", "b", [q1]) == [q1]  # locks are per group
    clock.now += 50
    assert locks.try_lock("G", "a", [q1]) == [q1]  # renew q1 only
    clock.now += 20  # q2 last renewed 70 s ago: lapsed; q1 20 s ago: held
    assert locks.holder("G", "T", 1) is None
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [q1, q2]) == [q2]
    assert locks.holder("G", "T", 1) == "b"
    locks.unlock("G", "b", [q1])  # not the holder: no effect
    assert locks.holder("G", "T", 0) == "a"
    locks.unlock("G", "a", [q1, q2])  # only its own lock is released
    assert locks.holder("G", "T", 0) is None
    assert locks.holder("G", "T", 1) == "b"
    assert locks.try_lock("G", "c", [q1]) == [q1]


def test_lock_expiry_boundary(clock: Clock) -> None:
    locks = LockManager(lock_expire=60)
    locks.try_lock("G", "a", [("T", 0)])
    clock.now += 60
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [("T", 0)]) == []
    clock.now += 0.001
    assert locks.holder("G", "T", 0) is None
    assert locks.try_lock("G", "b", [("T", 0)]) == [("T", 0)]


# ---------------------------------------------------------------- long polling


async def test_notifier_wakes_waiter() -> None:
    n = ArrivalNotifier()
    task = asyncio.create_task(n.wait("T", 0, 5.0))
    other = asyncio.create_task(n.wait("T", 1, 5.0))
    await asyncio.sleep(0)
    assert n.held == 2
    n.notify("T", 0)
    assert await asyncio.wait_for(task, 1.0) is True
    assert n.held == 1 and not other.done()
    n.notify("T", 1)
    assert await other is True
    assert n.held == 0
    n.notify("T", 0)  # nobody waits: nothing happens


async def test_notifier_wakes_every_waiter_on_the_key_once() -> None:
    n = ArrivalNotifier()
    tasks = [asyncio.create_task(n.wait("T", 0, None)) for _ in range(3)]
    await asyncio.sleep(0)
    n.notify("T", 0)
    assert await asyncio.gather(*tasks) == [True, True, True]
    later = asyncio.create_task(n.wait("T", 0, 0.02))
    assert await later is False  # an earlier notify does not count for a later waiter


async def test_notifier_timeout() -> None:
    n = ArrivalNotifier()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await n.wait("T", 0, 0.02) is False
    assert loop.time() - t0 >= 0.015
    assert n.held == 0


async def test_notifier_close_wakes_and_refuses() -> None:
    n = ArrivalNotifier()
    tasks = [asyncio.create_task(n.wait("T", q, None)) for q in range(2)]
    await asyncio.sleep(0)
    n.close()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 1.0) == [False, False]
    assert n.held == 0
    assert await n.wait("T", 0, None) is False  # returns at once after close


async def test_notifier_cancelled_waiter_is_removed() -> None:
    n = ArrivalNotifier()
    task = asyncio.create_task(n.wait("T", 0, None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert n.held == 0
