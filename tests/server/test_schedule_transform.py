"""The delay transform (server/schedule/delay/levels.py): a delayed message moves to the
schedule topic and is restored to its real topic and queue."""

from __future__ import annotations

import pytest
from kairosmq.protocol.message import decode_record, encode_record
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.config import DEFAULT_DELAY_LEVELS
from kairosmq.server.schedule.delay.levels import parse_delay_levels, transform_delayed
from kairosmq.server.schedule.reput import restore_delayed
from kairosmq.server.store import MessageInner

LEVELS = parse_delay_levels(DEFAULT_DELAY_LEVELS)


def _inner(**props: str) -> MessageInner:
    return MessageInner(
        topic="TopicTest",
        queue_id=3,
        body=b"payload",
        properties={"TAGS": "TagA", "UNIQ_KEY": "ABC123", "DELAY": "2", **props},
        flag=9,
        sys_flag=0,
        born_timestamp=111,
        born_host=(b"\x0a\x00\x00\x09", 5555),
        reconsume_times=4,
    )


def _stored(msg: MessageInner, queue_offset: int = 0) -> bytes:
    return encode_record(
        topic=msg.topic.encode(),
        body=msg.body,
        properties=encode_properties(msg.properties).encode(),
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=queue_offset,
        physical_offset=4096,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_timestamp=msg.store_timestamp or 0,
        store_host=(b"\x7f\x00\x00\x01", 10911),
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
        9,
        0,
        111,
        (b"\x0a\x00\x00\x09", 5555),
    )
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
