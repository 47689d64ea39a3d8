"""server/transaction/messages.py: which send is a half message, the half transform, the
committed copy (pure)."""

from __future__ import annotations

from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.server.store import MessageInner
from kairosmq.server.transaction.messages import (
    HALF_TOPIC,
    check_body,
    committed_message,
    is_half,
    parse_key,
    transform_half,
)


def test_is_half_follows_rocketmq_send_processor() -> None:
    assert is_half({"TRAN_MSG": "true"}, 0)
    assert is_half({"TRAN_MSG": "TRUE"}, 0)  # Boolean.parseBoolean ignores case
    assert not is_half({"TRAN_MSG": "yes"}, 0)
    assert not is_half({}, 0)
    assert is_half({"TRAN_MSG": "true", "DELAY": "3"}, 0)  # parked until the commit
    # a message sent back for reconsumption with a delay level ("client under 4.6.1")
    assert not is_half({"TRAN_MSG": "true", "DELAY": "3"}, 2)
    assert is_half({"TRAN_MSG": "true"}, 2)


def test_half_transform_and_committed_copy_round_trip() -> None:
    msg = MessageInner(
        topic="Orders",
        queue_id=3,
        body=b"b",
        properties={"TRAN_MSG": "true", "UNIQ_KEY": "U", "DELAY": "2", "KEYS": "k"},
        sys_flag=0x4 | 0x2,
    )
    transform_half(msg, "PG")
    assert (msg.topic, msg.queue_id, msg.sys_flag) == (HALF_TOPIC, 0, 0x2)
    assert msg.properties["REAL_TOPIC"] == "Orders" and msg.properties["REAL_QID"] == "3"
    assert msg.properties["PGROUP"] == "PG" and msg.properties["DELAY"] == "2"
    stored = MessageExt(
        topic=msg.topic,
        body=msg.body,
        queue_id=0,
        queue_offset=7,
        commit_log_offset=1234,
        sys_flag=msg.sys_flag,
        properties=dict(msg.properties),
    )
    final = committed_message(stored, "Orders", 3)
    assert (final.topic, final.queue_id, final.sys_flag) == ("Orders", 3, 0x8 | 0x2)
    assert final.properties == {
        "UNIQ_KEY": "U",
        "DELAY": "2",
        "KEYS": "k",
        "PGROUP": "PG",
        "KAIROS_TX_HALF": "7:1234",
    }
    back = decode_record(check_body(stored))
    assert (back.topic, back.queue_id, back.commit_log_offset) == ("Orders", 3, 1234)


def test_parse_key_accepts_only_small_decimals() -> None:
    assert parse_key("7:1234") == (7, 1234)
    for bad in ("", "7", ":1", "a:1", "1:-2", "1:" + "9" * 19, "١:2"):
        assert parse_key(bad) is None, bad
