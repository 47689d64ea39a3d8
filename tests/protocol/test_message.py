"""Message records, batch bodies, properties, tag hashing and message ids.

Expected values come from construct (``schema.MessageRecord``/``schema.BatchItem``),
from ``struct``/``zlib`` in the test, or from hand-computed Java values.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from typing import Any

import pytest
from kairosmq.protocol import schema
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.ids import UniqIdGenerator, create_offset_msg_id, decode_offset_msg_id
from kairosmq.protocol.message import (
    RECORD_OVERHEAD_V4,
    BatchItem,
    decode_batch,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    java_string_hash,
    summarize_records,
    tags_code,
)
from kairosmq.protocol.properties import decode_properties, encode_properties

from .captures import entry

V4 = b"\x0a\x00\x00\x05"
V6 = bytes(range(1, 17))
STORE = (b"\x7f\x00\x00\x01", 10911)


def _fields(**over: Any) -> dict[str, Any]:
    f: dict[str, Any] = dict(
        topic=b"TopicTest",
        body=b"hello body",
        properties=b"TAGS\x01TagA\x02KEYS\x01k1 k2",
        queue_id=3,
        flag=7,
        queue_offset=42,
        physical_offset=123456,
        sys_flag=0,
        born_timestamp=1_700_000_000_123,
        born_host=(V4, 50123),
        store_timestamp=1_700_000_000_456,
        store_host=STORE,
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    f.update(over)
    return f


RECORD_CASES = [
    pytest.param(_fields(), id="ipv4"),
    pytest.param(_fields(sys_flag=0x10, born_host=(V6, 1)), id="born-ipv6"),
    pytest.param(_fields(sys_flag=0x20, store_host=(V6, 10911)), id="store-ipv6"),
    pytest.param(
        _fields(sys_flag=0x31, born_host=(V6, 2), store_host=(V6[::-1], 3)),
        id="both-ipv6-compressed-flag",
    ),
    pytest.param(_fields(body=b"", properties=b"", topic=b"T"), id="empty-body-props"),
    pytest.param(
        _fields(
            body=os.urandom(5000),
            reconsume_times=-1,
            queue_id=-1,
            prepared_transaction_offset=2**62,
            flag=-(2**31),
        ),
        id="large-negative",
    ),
    pytest.param(
        _fields(topic="T\u00e9st-\u4e2d".encode(), properties="K\x01v\u00e9".encode()),
        id="utf8-topic-props",
    ),
]


def _v6_count(f: dict[str, Any]) -> int:
    return (len(f["born_host"][0]) == 16) + (len(f["store_host"][0]) == 16)


@pytest.mark.parametrize("f", RECORD_CASES)
def test_record_round_trip(f: dict[str, Any]) -> None:
    rec = encode_record(**f)
    size = RECORD_OVERHEAD_V4 + len(f["body"]) + len(f["topic"]) + len(f["properties"])
    size += 12 * _v6_count(f)
    assert len(rec) == size
    assert struct.unpack_from(">i", rec)[0] == size
    m = decode_record(rec, check_crc=True)
    assert m.topic == f["topic"].decode()
    assert m.body == f["body"]
    assert (m.queue_id, m.flag, m.queue_offset, m.commit_log_offset, m.sys_flag) == (
        f["queue_id"],
        f["flag"],
        f["queue_offset"],
        f["physical_offset"],
        f["sys_flag"],
    )
    assert (m.born_timestamp, m.born_host, m.store_timestamp, m.store_host) == (
        f["born_timestamp"],
        f["born_host"],
        f["store_timestamp"],
        f["store_host"],
    )
    assert m.reconsume_times == f["reconsume_times"]
    assert m.prepared_transaction_offset == f["prepared_transaction_offset"]
    assert m.body_crc == zlib.crc32(f["body"]) & 0x7FFFFFFF
    assert m.store_size == size
    assert m.properties == decode_properties(f["properties"].decode())


def test_record_size_formula() -> None:
    assert RECORD_OVERHEAD_V4 == 91
    # 4 size + 4 magic + 4 crc + 4 qid + 4 flag + 8 qoff + 8 phy + 4 sysflag + 8 born ts
    # + 8 born host + 8 store ts + 8 store host + 4 reconsume + 8 prepared + 4 body len
    # + 1 topic len + 2 props len
    assert 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2 == 91
    rec = encode_record(**_fields(body=b"x" * 10, topic=b"abc", properties=b"p" * 5))
    assert len(rec) == 91 + 10 + 3 + 5


@pytest.mark.parametrize("f", RECORD_CASES)
def test_record_parity_with_construct_schema(f: dict[str, Any]) -> None:
    rec = encode_record(**f)
    c = schema.MessageRecord.parse(rec)
    assert c.total_size == len(rec)
    assert c.magic == schema.MESSAGE_MAGIC_CODE
    assert c.body_crc == zlib.crc32(f["body"]) & 0x7FFFFFFF
    assert (c.queue_id, c.flag, c.queue_offset, c.physical_offset, c.sys_flag) == (
        f["queue_id"],
        f["flag"],
        f["queue_offset"],
        f["physical_offset"],
        f["sys_flag"],
    )
    assert (c.born_host.ip, c.born_host.port) == f["born_host"]
    assert (c.store_host.ip, c.store_host.port) == f["store_host"]
    assert (c.born_timestamp, c.store_timestamp) == (f["born_timestamp"], f["store_timestamp"])
    assert c.reconsume_times == f["reconsume_times"]
    assert c.prepared_transaction_offset == f["prepared_transaction_offset"]
    assert c.body == f["body"]
    assert c.topic == f["topic"].decode()
    assert c.properties == f["properties"].decode()
    built = schema.MessageRecord.build(
        dict(
            total_size=len(rec),
            body_crc=zlib.crc32(f["body"]) & 0x7FFFFFFF,
            queue_id=f["queue_id"],
            flag=f["flag"],
            queue_offset=f["queue_offset"],
            physical_offset=f["physical_offset"],
            sys_flag=f["sys_flag"],
            born_timestamp=f["born_timestamp"],
            born_host=dict(ip=f["born_host"][0], port=f["born_host"][1]),
            store_timestamp=f["store_timestamp"],
            store_host=dict(ip=f["store_host"][0], port=f["store_host"][1]),
            reconsume_times=f["reconsume_times"],
            prepared_transaction_offset=f["prepared_transaction_offset"],
            body=f["body"],
            topic=f["topic"].decode(),
            properties=f["properties"].decode(),
        )
    )
    assert built == rec


def test_decode_record_of_construct_built_bytes() -> None:
    body = b"from construct"
    total = 91 + len(body) + 1 + 3
    raw = schema.MessageRecord.build(
        dict(
            total_size=total,
            body_crc=zlib.crc32(body) & 0x7FFFFFFF,
            queue_id=1,
            flag=0,
            queue_offset=9,
            physical_offset=77,
            sys_flag=0,
            born_timestamp=5,
            born_host=dict(ip=V4, port=1),
            store_timestamp=6,
            store_host=dict(ip=STORE[0], port=2),
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=body,
            topic="T",
            properties="a\x01b",
        )
    )
    m = decode_record(raw, check_crc=True)
    assert (m.topic, m.body, m.queue_offset, m.commit_log_offset, m.properties) == (
        "T",
        body,
        9,
        77,
        {"a": "b"},
    )


def test_decode_record_at_position_and_memoryview() -> None:
    a = encode_record(**_fields(queue_offset=0))
    b = encode_record(**_fields(queue_offset=1, body=b"second"))
    buf = memoryview(b"JUNK" + a + b)
    m = decode_record(buf, 4 + len(a))
    assert (m.queue_offset, m.body) == (1, b"second")


def test_decode_records_stops_silently_at_truncated_tail() -> None:
    recs = [
        encode_record(**_fields(queue_offset=i, body=bytes([65 + i]) * (i + 1))) for i in range(4)
    ]
    whole = b"".join(recs)
    assert [m.queue_offset for m in decode_records(whole)] == [0, 1, 2, 3]
    for cut in (1, 8, 40, 91, len(recs[3]) - 1):
        got = decode_records(whole[: len(whole) - len(recs[3]) + cut])
        assert [m.queue_offset for m in got] == [0, 1, 2]
    assert decode_records(b"") == []


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00" * 200,
        b"\xde\xad\xbe\xef" * 30,
        b"\x00\x00\x00\x10",
        os.urandom(3),
        struct.pack(">iI", 91, 0xCBD43194) + b"\x00" * 83,  # a BLANK marker is not a message
    ],
    ids=["zeros", "deadbeef", "tiny-size", "3-bytes", "blank-marker"],
)
def test_decode_records_stops_silently_at_garbage(tail: bytes) -> None:
    recs = b"".join(encode_record(**_fields(queue_offset=i)) for i in range(2))
    assert [m.queue_offset for m in decode_records(recs + tail)] == [0, 1]


def test_decode_records_stops_at_inconsistent_lengths() -> None:
    good = encode_record(**_fields(queue_offset=0))
    bad = bytearray(encode_record(**_fields(queue_offset=1, body=b"abcdef")))
    struct.pack_into(">i", bad, 84, 3)  # body length 3 instead of 6: lengths no longer add up
    assert [m.queue_offset for m in decode_records(good + bytes(bad))] == [0]
    with pytest.raises(MessageDecodeError):
        decode_record(bytes(bad))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:50],
        lambda b: b"\x00\x00\x00\x05" + b[4:],
        lambda b: b[:4] + b"\x00\x00\x00\x00" + b[8:],
        lambda b: struct.pack(">i", len(b) + 10) + b[4:],
        lambda b: b[:84] + struct.pack(">i", -1) + b[88:],
    ],
    ids=["truncated", "size-below-overhead", "bad-magic", "size-beyond-buffer", "neg-body-len"],
)
def test_decode_record_raises_on_corruption(mutate: Any) -> None:
    rec = encode_record(**_fields())
    with pytest.raises(MessageDecodeError):
        decode_record(mutate(rec))


def test_decode_record_crc_check_on_flipped_body_byte() -> None:
    rec = bytearray(encode_record(**_fields(body=b"0123456789")))
    rec[88 + 4] ^= 0x01  # body starts at byte 88 with IPv4 hosts
    m = decode_record(bytes(rec))  # without the check the record still decodes
    assert m.body == b"0123556789"
    with pytest.raises(MessageDecodeError, match="CRC"):
        decode_record(bytes(rec), check_crc=True)


def test_msg_id_is_uniq_key_else_offset_id() -> None:
    with_key = decode_record(encode_record(**_fields(properties=b"UNIQ_KEY\x01ABCDEF")))
    assert with_key.msg_id == "ABCDEF"
    without = decode_record(encode_record(**_fields(physical_offset=723, properties=b"")))
    assert without.msg_id == "7F00000100002A9F00000000000002D3"  # 127.0.0.1:10911 @ 723
    assert without.offset_msg_id == without.msg_id


SUMMARY_PROPS = [
    b"UNIQ_KEY\x010100007F0000E2C60000E0E30E720100\x02WAIT\x01true",
    b"TAGS\x01A\x02UNIQ_KEY\x017F000001473C52C080F26CB1BA4D0000",
    b"TAGS\x01A\x02UNIQ_KEY\x017F000001473C52C080F26CB1BA4D0001\x02",
    b"",
    b"TAGS\x01A",
    b"XUNIQ_KEY\x01not-the-id\x02TAGS\x01B",  # a different key that ends in UNIQ_KEY
    b"TAGS\x01B\x02XUNIQ_KEY\x01no\x02UNIQ_KEY\x01REAL",
    b"UNIQ_KEY\x01\x02TAGS\x01A",  # empty value: skipped by the properties decoder
]


def test_summarize_records_matches_decode_record() -> None:
    recs = [
        encode_record(
            **_fields(
                queue_offset=i,
                physical_offset=1000 * i,
                properties=p,
                body=b"b" * i,
                reconsume_times=i,
                born_timestamp=10 + i,
                store_timestamp=20 + i,
            )
        )
        for i, p in enumerate(SUMMARY_PROPS)
    ]
    buf = b"".join(recs)
    sums = summarize_records(buf)
    full = decode_records(buf)
    assert len(sums) == len(full) == len(SUMMARY_PROPS)
    for s, m in zip(sums, full, strict=True):
        assert (s.size, s.queue_offset, s.phy_offset) == (
            m.store_size,
            m.queue_offset,
            m.commit_log_offset,
        )
        assert (s.born_timestamp, s.store_timestamp, s.reconsume_times) == (
            m.born_timestamp,
            m.store_timestamp,
            m.reconsume_times,
        )
        assert s.msg_id == m.msg_id


# ---------------------------------------------------------------- batch bodies


def _batch_item_bytes(body: bytes, flag: int, props: bytes) -> bytes:
    total = 20 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", total, 0, 0, flag, len(body))
        + body
        + struct.pack(">H", len(props))
        + props
    )


BATCH = [
    BatchItem(b"one", 0, "UNIQ_KEY\x01A\x02TAGS\x01t1"),
    BatchItem(b"", 5, ""),
    BatchItem(os.urandom(300), -1, "KEYS\x01k \u00e9"),
]


def test_batch_round_trip_and_golden_bytes() -> None:
    raw = encode_batch(BATCH)
    golden = b"".join(_batch_item_bytes(i.body, i.flag, i.properties.encode()) for i in BATCH)
    assert raw == golden
    assert decode_batch(raw) == BATCH
    assert decode_batch(golden) == BATCH


def test_batch_parity_with_construct_schema() -> None:
    raw = encode_batch(BATCH)
    pos = 0
    for item in BATCH:
        c = schema.BatchItem.parse(raw[pos:])
        assert (c.magic, c.body_crc, c.flag, c.body, c.properties) == (
            0,
            0,
            item.flag,
            item.body,
            item.properties,
        )
        built = schema.BatchItem.build(
            dict(
                total_size=c.total_size,
                magic=0,
                body_crc=0,
                flag=item.flag,
                body=item.body,
                properties=item.properties,
            )
        )
        assert raw[pos : pos + c.total_size] == built
        pos += c.total_size
    assert pos == len(raw)


_GOOD = _batch_item_bytes(b"abc", 0, b"k\x01v")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        _GOOD[:10],
        _GOOD + _GOOD[:21],
        struct.pack(">i", len(_GOOD) + 1) + _GOOD[4:],
        struct.pack(">i", 21) + _GOOD[4:],
        _GOOD[:16] + struct.pack(">i", -1) + _GOOD[20:],
        _GOOD[:16] + struct.pack(">i", 100) + _GOOD[20:],
        _GOOD[:23] + struct.pack(">H", 2) + _GOOD[25:],
        _batch_item_bytes(b"abc", 0, b"\xff\xfe"),
    ],
    ids=[
        "empty",
        "truncated-header",
        "truncated-second-item",
        "size-beyond-buffer",
        "size-below-minimum",
        "negative-body-len",
        "body-len-beyond-item",
        "props-len-mismatch",
        "props-not-utf8",
    ],
)
def test_malformed_batch_raises(raw: bytes) -> None:
    with pytest.raises(MessageDecodeError):
        decode_batch(raw)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A\x011\x02B\x012", {"A": "1", "B": "2"}),
        ("A\x011\x02B\x012\x02", {"A": "1", "B": "2"}),  # C++/Node trailing separator
        ("A\x011\x02\x02\x02B\x012", {"A": "1", "B": "2"}),  # empty pairs
        ("NOSEP\x02A\x011", {"A": "1"}),  # a pair without the name/value separator
        ("\x01v\x02A\x011", {"A": "1"}),  # empty name
        ("k\x01\x02A\x011", {"A": "1"}),  # empty value
        ("", {}),
        ("\x02", {}),
        ("K\x01a\x01b", {"K": "a\x01b"}),  # only the first separator splits
        ("A\x011\x02A\x012", {"A": "2"}),  # last one wins, like a Java HashMap put
    ],
)
def test_decode_properties_is_tolerant(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


def test_encode_properties() -> None:
    assert encode_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012"  # no trailing \x02
    assert encode_properties({"A": "", "": "x", "C": "3"}) == "C\x013"
    assert encode_properties({}) == ""
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "\u00e9": "\u4e2d"}
    assert decode_properties(encode_properties(props)) == props


# ---------------------------------------------------------------- Java String.hashCode


def _java_hash(s: str) -> int:
    """Written independently: h = 31*h + c over UTF-16 code units, signed 32-bit."""
    units = struct.unpack(f"<{len(s.encode('utf-16-le')) // 2}H", s.encode("utf-16-le"))
    h = 0
    for u in units:
        h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),  # 65*31 + 97
        ("BB", 2112),  # 66*31 + 66: the textbook collision
        # "TagA": ((84*31 + 97)*31 + 103)*31 + 65 = (2701*31 + 103)*31 + 65 = 83834*31 + 65
        ("TagA", 2598919),
        ("hello world", 1794106052),
        ("polygenelubricants", -(2**31)),  # the well-known Integer.MIN_VALUE hash
        ("\u00e9", 233),
        ("\u4e2d\u6587", 20013 * 31 + 25991),  # U+4E2D, U+6587 -> 646394
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # surrogate pair D83D DE00 -> 1772899
    ],
)
def test_java_string_hash_known_values(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected
    assert _java_hash(s) == expected


@pytest.mark.parametrize(
    "s",
    [
        "TagA || TagB",
        "x" * 1000,
        "Stra\u00dfe \U0001f680 \u00e9t\u00e9",
        "%RETRY%CID_ALIONS_TEST",
        "negative?",
    ],
)
def test_java_string_hash_matches_independent_formula(s: str) -> None:
    h = java_string_hash(s)
    assert h == _java_hash(s)
    assert -(2**31) <= h < 2**31


def test_java_string_hash_wraps_negative() -> None:
    assert java_string_hash("Hello World") == -862545276  # Java: "Hello World".hashCode()
    assert _java_hash("Hello World") == -862545276
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919


# ---------------------------------------------------------------- message ids


def test_offset_msg_id_round_trip_v4_and_v6() -> None:
    mid = create_offset_msg_id(b"\x0a\x00\x00\x05", 10911, 2**40 + 3)
    assert mid == "0A00000500002A9F0000010000000003"
    assert decode_offset_msg_id(mid) == (b"\x0a\x00\x00\x05", 10911, 2**40 + 3)
    assert decode_offset_msg_id(mid.lower()) == (b"\x0a\x00\x00\x05", 10911, 2**40 + 3)
    v6 = create_offset_msg_id(V6, 1, 99)
    assert len(v6) == 56 and v6 == v6.upper()
    assert decode_offset_msg_id(v6) == (V6, 1, 99)


def test_offset_msg_id_from_ali_ons_capture() -> None:
    e = entry("ali-ons-3.12.0", "flow-11-broker-36-CONSUMER_SEND_MSG_BACK-first.hex")
    origin = e["header"]["extFields"]["originMsgId"]
    assert origin == "7F00000100002A9F0000000000000000"
    assert decode_offset_msg_id(origin) == (b"\x7f\x00\x00\x01", 10911, 0)
    later = entry("ali-ons-3.12.0", "flow-12-broker-36-CONSUMER_SEND_MSG_BACK-last-retry-msg.hex")
    ext = later["header"]["extFields"]
    # ali-ons sends the commit-log offset and the broker msg id of the same record
    assert decode_offset_msg_id(ext["originMsgId"])[2] == ext["offset"] == 723


@pytest.mark.parametrize("bad", ["", "ABC", "7F00000100002A9F000000000000000", "Z" * 32])
def test_decode_offset_msg_id_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_offset_msg_id(bad)


def test_uniq_id_generator() -> None:
    gen = UniqIdGenerator(ip=b"\x0a\x01\x02\x03", pid=0x12345)
    ids = [gen.next_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    pattern = re.compile(r"[0-9A-F]{32}")
    assert all(pattern.fullmatch(i) for i in ids)
    assert all(i.startswith("0A010203") for i in ids)
    assert all(i[8:12] == "2345" for i in ids)  # low 16 bits of the pid
    other = UniqIdGenerator(ip=b"\xc0\xa8\x00\x01")
    assert other.next_id().startswith("C0A80001")
