"""Property-based tests of every decoder that reads client (or disk) bytes.

The contract (protocol/errors.py): whatever the input, a decoder returns a value or raises
a ``ProtocolError`` subclass; nothing else escapes (no IndexError, struct.error,
UnicodeDecodeError, OverflowError...). JSON bodies keep their documented ``ValueError``.
Where an input decodes, what the broker would answer with must encode again.

Deterministic in CI: ``derandomize=True`` (examples derived from each test's source), no
example database, bounded ``max_examples`` so the file runs in seconds.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import bodies, headers
from kairosmq.protocol.codec import FrameReader, decode_frame, decode_payload, encode_command
from kairosmq.protocol.codes import ResponseCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.errors import ProtocolError
from kairosmq.protocol.message import (
    BatchItem,
    decode_batch,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    summarize_records,
)
from kairosmq.protocol.properties import decode_properties, encode_properties

from .captures import frame_bytes, request_entries

FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=90,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FAST, max_examples=60)

GOLDEN = [frame_bytes(folder, e["file"]) for folder, e in request_entries()][:40]
HEADER_CLASSES = sorted(
    (
        c
        for c in vars(headers).values()
        if isinstance(c, type) and issubclass(c, headers.Header) and c is not headers.Header
    ),
    key=lambda c: c.__name__,
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _answer_encodes(cmd: RemotingCommand) -> None:
    """What the broker sends back for a decoded request must encode."""
    encode_command(cmd.error(ResponseCode.SYSTEM_ERROR, "remark"))
    encode_command(cmd.response())


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, val in edits:
        if buf:
            buf[pos % len(buf)] = val
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    return bytes(buf)


# ---------------------------------------------------------------- frames


def _feed_in_chunks(reader: FrameReader, data: bytes, cuts: list[int]) -> None:
    """Feed ``data`` cut at ``cuts`` (then the rest); every frame out must answer-encode;
    only a ProtocolError may escape the reader."""
    pos = 0
    try:
        for n in [*cuts, len(data)]:
            reader.feed(data[pos : pos + n])
            pos += n
            for cmd in reader:
                _answer_encodes(cmd)
    except ProtocolError:
        pass


@FAST
@given(st.binary(max_size=300), st.lists(st.integers(1, 64), max_size=10))
def test_frame_reader_any_bytes_any_chunking(data: bytes, cuts: list[int]) -> None:
    _feed_in_chunks(FrameReader(max_frame=1 << 16, max_header=1 << 12), data, cuts)


@FAST
@given(
    st.sampled_from(GOLDEN),
    st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6),
    st.none() | st.integers(0, 1 << 16),
    st.lists(st.integers(1, 97), max_size=8),
)
def test_frame_reader_mutated_golden_frames(frame: bytes, edits, cut, cuts) -> None:
    data = _mutate(frame, edits, cut) + frame  # a damaged frame, then a good one
    _feed_in_chunks(FrameReader(), data, cuts)


commands = st.builds(
    lambda code, opaque, flag, ext, body, binary, remark: (
        request(
            code,
            ext,
            body,
            opaque=opaque,
            serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
        )
        if remark is None
        else dataclasses.replace(
            request(
                code,
                ext,
                body,
                opaque=opaque,
                serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
            ),
            remark=remark,
            flag=flag,
        )
    ),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 3),
    st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=16), max_size=5),
    st.binary(max_size=64),
    st.booleans(),
    st.none() | st.text(max_size=20),
)


@FAST
@given(st.lists(commands, min_size=1, max_size=4), st.lists(st.integers(1, 50), max_size=12))
def test_frame_reader_round_trips_any_chunking(cmds, cuts) -> None:
    data = b"".join(encode_command(c) for c in cmds)
    reader, out, pos = FrameReader(), [], 0
    for n in [*cuts, len(data)]:
        reader.feed(data[pos : pos + n])
        pos += n
        out.extend(reader)
    assert [(c.code, c.opaque, c.ext_fields, c.body, c.remark or None) for c in out] == [
        (c.code, c.opaque, c.ext_fields, c.body, c.remark or None) for c in cmds
    ]


@FAST
@given(st.binary(max_size=200))
def test_decode_frame_and_payload_any_bytes(data: bytes) -> None:
    for fn in (decode_frame, decode_payload):
        try:
            _answer_encodes(fn(data))
        except ProtocolError:
            pass


@FAST
@given(json_values, st.binary(max_size=16))
def test_json_header_any_json_value(value, body: bytes) -> None:
    header = orjson.dumps(value)
    payload = struct.pack(">I", len(header)) + header + body
    try:
        _answer_encodes(decode_payload(payload))
    except ProtocolError:
        pass


header_dicts = st.fixed_dictionaries(
    {},
    optional={
        "code": json_values,
        "opaque": json_values,
        "flag": json_values,
        "version": json_values,
        "language": json_values,
        "remark": json_values,
        "extFields": json_values,
        "serializeTypeCurrentRPC": json_values,
    },
)


@FAST
@given(header_dicts)
@example({"code": "\u00b2"})  # str.isdigit() but not int()
@example({"code": "9" * 5000})  # over Python's int-string limit
@example({"code": 10, "opaque": 1 << 63})  # beyond Java's int
def test_json_header_any_field_types(h) -> None:
    header = orjson.dumps(h)
    try:
        _answer_encodes(decode_payload(struct.pack(">I", len(header)) + header))
    except ProtocolError:
        pass


@FAST
@given(st.binary(max_size=120), st.binary(max_size=8))
def test_binary_header_any_bytes(header: bytes, body: bytes) -> None:
    payload = struct.pack(">I", (1 << 24) | len(header)) + header + body
    try:
        _answer_encodes(decode_payload(payload))
    except ProtocolError:
        pass


@FAST
@given(commands, st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4))
def test_binary_header_mutated(cmd, edits) -> None:
    frame = encode_command(dataclasses.replace(cmd, serialize_type=SerializeType.ROCKETMQ))
    payload = _mutate(frame[4:], [(4 + p, v) for p, v in edits], None)
    try:
        _answer_encodes(decode_payload(payload))
    except ProtocolError:
        pass


# ---------------------------------------------------------------- headers, properties

ext_text = st.text(max_size=24) | st.from_regex(r"-?[0-9]{1,25}", fullmatch=True)


@FAST
@given(st.sampled_from(HEADER_CLASSES), st.booleans(), st.data())
def test_header_from_ext_fields_any_strings(cls, v2: bool, data) -> None:
    names = []
    for f in dataclasses.fields(cls):
        names.append(f.metadata["wire"])
        if f.metadata["v2"]:
            names.append(f.metadata["v2"])
    ext = data.draw(
        st.dictionaries(
            st.sampled_from(names) | st.text(max_size=6), ext_text, max_size=len(names) + 2
        )
    )
    try:
        h = cls.from_ext_fields(ext, v2=v2)
    except ProtocolError:
        return
    again = cls.from_ext_fields(h.to_ext_fields(v2=v2), v2=v2)
    assert again == h


@FAST
@given(st.text(max_size=200))
def test_decode_properties_any_text(text: str) -> None:
    props = decode_properties(text)
    assert all(k and v for k, v in props.items())
    assert decode_properties(encode_properties(props)) == props


@FAST
@given(
    st.dictionaries(
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), min_size=1, max_size=10),
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), min_size=1, max_size=10),
        max_size=6,
    )
)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


# ---------------------------------------------------------------- records and batches


def _record(body: bytes, topic: str, props: dict[str, str], v6: int) -> bytes:
    return encode_record(
        topic=topic.encode(),
        body=body,
        properties=encode_properties(props).encode(),
        queue_id=1,
        flag=0,
        queue_offset=7,
        physical_offset=1234,
        sys_flag=v6,
        born_timestamp=1,
        born_host=(b"\x01" * (16 if v6 & 0x10 else 4), 5),
        store_timestamp=2,
        store_host=(b"\x02" * (16 if v6 & 0x20 else 4), 6),
        reconsume_times=0,
    )


records = st.builds(
    _record,
    st.binary(max_size=40),
    st.text(alphabet="abcXYZ%_-|0123", min_size=1, max_size=20),
    st.dictionaries(
        st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "x"]),
        st.text(min_size=1, max_size=10),
        max_size=3,
    ),
    st.sampled_from([0, 0x10, 0x20, 0x30]),
)


@FAST
@given(st.binary(max_size=300), st.booleans())
def test_decode_record_any_bytes(data: bytes, crc: bool) -> None:
    try:
        decode_record(data, check_crc=crc)
    except ProtocolError:
        pass
    decode_records(data)
    summarize_records(data)


@FAST
@given(
    st.lists(records, min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 1 << 12), st.integers(0, 255)), max_size=5),
    st.none() | st.integers(0, 1 << 12),
    st.booleans(),
)
def test_decode_record_mutated(recs, edits, cut, crc: bool) -> None:
    data = _mutate(b"".join(recs), edits, cut)
    try:
        decode_record(data, check_crc=crc)
    except ProtocolError:
        pass
    decode_records(data)
    for view in (data, memoryview(data)):
        try:
            decode_record(view)
        except ProtocolError:
            pass
    summarize_records(data)


@FAST
@given(st.lists(records, min_size=1, max_size=3))
def test_record_round_trip_and_summary(recs) -> None:
    data = b"".join(recs)
    msgs = decode_records(data)
    assert len(msgs) == len(recs)
    for m in msgs:
        assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
    v4 = [m for m in msgs if not m.sys_flag & 0x30]
    if len(v4) == len(msgs):
        assert [s.msg_id for s in summarize_records(data)] == [m.msg_id for m in msgs]


batches = st.lists(
    st.builds(BatchItem, st.binary(max_size=30), st.integers(-5, 5), st.text(max_size=20)),
    min_size=1,
    max_size=4,
)


@FAST
@given(st.binary(max_size=200))
def test_decode_batch_any_bytes(data: bytes) -> None:
    try:
        decode_batch(data)
    except ProtocolError:
        pass


@FAST
@given(
    batches,
    st.lists(st.tuples(st.integers(0, 1 << 10), st.integers(0, 255)), max_size=4),
    st.none() | st.integers(0, 1 << 10),
)
def test_decode_batch_mutated_and_round_trip(items, edits, cut) -> None:
    data = encode_batch(items)
    assert decode_batch(data) == items
    try:
        decode_batch(_mutate(data, edits, cut))
    except ProtocolError:
        pass


# ---------------------------------------------------------------- JSON bodies (ValueError)

BODY_DECODERS = [
    bodies.HeartbeatData.from_json,
    bodies.TopicRouteData.from_json,
    bodies.LockBatchRequest.from_json,
    bodies.decode_consumer_list,
    bodies.decode_lock_response,
]


def _shaped(top: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries({}, optional={k: v for k, v in top.items()})


sub_dicts = _shaped(
    {
        "topic": json_values,
        "subString": json_values,
        "tagsSet": json_values,
        "codeSet": json_values,
        "subVersion": json_values,
        "expressionType": json_values,
        "classFilterMode": json_values,
    }
)
heartbeats = _shaped(
    {
        "clientID": json_values,
        "producerDataSet": st.lists(_shaped({"groupName": json_values}), max_size=2) | json_values,
        "consumerDataSet": st.lists(
            _shaped(
                {
                    "groupName": json_values,
                    "consumeType": json_values,
                    "messageModel": json_values,
                    "consumeFromWhere": json_values,
                    "unitMode": json_values,
                    "subscriptionDataSet": st.lists(sub_dicts, max_size=2) | json_values,
                }
            ),
            max_size=2,
        )
        | json_values,
    }
)
routes = _shaped(
    {
        "queueDatas": st.lists(
            _shaped(
                {
                    "brokerName": json_values,
                    "readQueueNums": json_values,
                    "writeQueueNums": json_values,
                    "perm": json_values,
                    "topicSysFlag": json_values,
                }
            ),
            max_size=2,
        )
        | json_values,
        "brokerDatas": st.lists(
            _shaped(
                {"brokerName": json_values, "cluster": json_values, "brokerAddrs": json_values}
            ),
            max_size=2,
        )
        | json_values,
        "orderTopicConf": json_values,
    }
)
locks = _shaped(
    {
        "consumerGroup": json_values,
        "clientId": json_values,
        "mqSet": st.lists(
            _shaped({"topic": json_values, "brokerName": json_values, "queueId": json_values}),
            max_size=2,
        )
        | json_values,
        "consumerIdList": json_values,
        "lockOKMQSet": json_values,
    }
)


@FEW
@given(
    st.sampled_from(BODY_DECODERS),
    st.one_of(heartbeats, routes, locks, json_values).map(orjson.dumps) | st.binary(max_size=60),
)
def test_json_bodies_raise_only_value_error(decoder, raw: bytes) -> None:
    try:
        decoder(raw)
    except ValueError:
        pass


@given(st.text(max_size=24))
def test_parse_decimal_takes_only_short_ascii_decimals(raw: str) -> None:
    from kairosmq.protocol.properties import INT32_DIGITS, INT64_DIGITS, parse_decimal

    for digits in (INT32_DIGITS, INT64_DIGITS):
        got = parse_decimal(raw, digits)
        if raw and len(raw) <= digits and all("0" <= c <= "9" for c in raw):
            assert got == int(raw) and 0 <= got < 10**digits
        else:
            assert got is None
    assert parse_decimal(None, INT64_DIGITS) is None
    assert parse_decimal("٣", INT32_DIGITS) is None  # a non-ASCII digit is not a number


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.text("0123456789:", max_size=40),
        st.tuples(st.integers(0, 10**20), st.integers(0, 10**20)).map(lambda t: f"{t[0]}:{t[1]}"),
    )
)
def test_parse_decimal_pair_is_two_bounded_decimals(raw: str) -> None:
    """The pair is exactly what ``(\\d{1,a}):(\\d{1,b})`` (ASCII) matches in full."""
    import re

    from kairosmq.protocol.properties import INT64_DIGITS, parse_decimal_pair

    for a, b in ((INT64_DIGITS, INT64_DIGITS), (4, INT64_DIGITS)):
        m = re.fullmatch(rf"(\d{{1,{a}}}):(\d{{1,{b}}})", raw, re.ASCII)
        expected = (int(m.group(1)), int(m.group(2))) if m else None
        assert parse_decimal_pair(raw, a, b) == expected
    assert parse_decimal_pair(None, INT64_DIGITS, INT64_DIGITS) is None


@given(st.text(max_size=14))
@example("--5")
@example("+7")
@example("2147483647")
@example("-2147483648")
@example("2147483648")
def test_parse_java_int_is_integer_parse_int(raw: str) -> None:
    from kairosmq.protocol.properties import parse_java_int

    got = parse_java_int(raw)
    body = raw[1:] if raw[:1] in ("+", "-") else raw
    if body and all("0" <= c <= "9" for c in body) and -(1 << 31) <= int(raw) < 1 << 31:
        assert got == int(raw)
    else:
        assert got is None
