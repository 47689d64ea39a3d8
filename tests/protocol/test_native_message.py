"""The native record functions (protocol/_message.pyx) against the reference (message.py,
held to ``schema.MessageRecord`` by tests/protocol/test_message.py).

Same input, same outcome: the same bytes written, the same ``MessageExt`` /
``RecordView`` / summaries / properties read, or the same exception class and message.
Inputs: generated records (IPv4 and IPv6 hosts, any body, topic and properties), the
same records mutated and cut, arbitrary bytes, and out-of-range fields.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import message
from kairosmq.protocol.properties import encode_properties

from tests.twins import outcome, twin

ref = message.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("protocol.message")


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    assert a == b
    if a[0] == "ok" and dataclasses.is_dataclass(a[1]):
        for f in dataclasses.fields(a[1]):
            assert type(getattr(a[1], f.name)) is type(getattr(b[1], f.name)), f.name


props = st.dictionaries(
    st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "XUNIQ_KEY", "x"]),
    st.text(max_size=10),
    max_size=4,
).map(lambda d: encode_properties(d).encode())
fields = st.fixed_dictionaries(
    {
        "topic": st.text(min_size=1, max_size=30).map(str.encode),
        "body": st.binary(max_size=80),
        "properties": props,
        "queue_id": st.integers(-(2**31), 2**31 - 1),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "queue_offset": st.integers(-(2**63), 2**63 - 1),
        "physical_offset": st.integers(0, 2**63 - 1),
        "sys_flag": st.integers(-(2**31), 2**31 - 1),
        "born_timestamp": st.integers(-(2**63), 2**63 - 1),
        "born_host": st.tuples(
            st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
            st.integers(-(2**31), 2**31 - 1),
        ),
        "store_timestamp": st.integers(0, 2**63 - 1),
        "store_host": st.tuples(
            st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
            st.integers(0, 65535),
        ),
        "reconsume_times": st.integers(-(2**31), 2**31 - 1),
    },
    optional={
        "prepared_transaction_offset": st.integers(-(2**63), 2**63 - 1),
        "crc": st.integers(-(2**31), 2**31 - 1),
    },
)
wild = st.integers(-(2**65), 2**65)
INT_FIELDS = [
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "prepared_transaction_offset",
    "crc",
]


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, val in edits:
        if buf:
            buf[pos % len(buf)] = val
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    return bytes(buf)


@PARITY
@given(fields)
def test_encode_and_read_generated_records(nat, kw) -> None:  # type: ignore[no-untyped-def]
    rec = ref.encode_record(**kw)
    assert nat.encode_record(**kw) == rec
    for buf in (rec, bytearray(rec), memoryview(rec)):
        _same(outcome(nat.decode_record, buf), outcome(ref.decode_record, buf))
    _same(
        outcome(nat.decode_record, rec, check_crc=True),
        outcome(ref.decode_record, rec, check_crc=True),
    )
    _same(outcome(nat.view_record, rec), outcome(ref.view_record, rec))
    assert nat.record_properties(rec) == ref.record_properties(rec)
    assert nat.summarize_records(rec) == ref.summarize_records(rec)
    two = b"xyz" + rec + rec
    assert nat.decode_records(two[3:]) == ref.decode_records(two[3:])
    _same(outcome(nat.decode_record, two, 3), outcome(ref.decode_record, two, 3))
    assert nat.record_properties(two, 3 + len(rec)) == ref.record_properties(two, 3 + len(rec))


@PARITY
@given(fields, st.sampled_from(INT_FIELDS), wild)
@example(
    {
        "topic": b"t" * 300,
        "body": b"",
        "properties": b"",
        "queue_id": 0,
        "flag": 0,
        "queue_offset": 0,
        "physical_offset": 0,
        "sys_flag": 0,
        "born_timestamp": 0,
        "born_host": (b"\0" * 4, 0),
        "store_timestamp": 0,
        "store_host": (b"\0" * 5, 0),
        "reconsume_times": 0,
    },
    "flag",
    0,
)
def test_encode_refuses_what_the_reference_refuses(nat, kw, name, value) -> None:  # type: ignore[no-untyped-def]
    kw = {**kw, name: value}
    assert outcome(nat.encode_record, **kw)[:2] == outcome(ref.encode_record, **kw)[:2]


@PARITY
@given(
    st.lists(fields, min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 1 << 10), st.integers(0, 255)), max_size=5),
    st.none() | st.integers(0, 1 << 10),
)
def test_read_mutated_records(nat, kws, edits, cut) -> None:  # type: ignore[no-untyped-def]
    data = _mutate(b"".join(ref.encode_record(**kw) for kw in kws), edits, cut)
    for crc in (False, True):
        _same(
            outcome(nat.decode_record, data, check_crc=crc),
            outcome(ref.decode_record, data, check_crc=crc),
        )
    _same(outcome(nat.view_record, data), outcome(ref.view_record, data))
    assert nat.decode_records(data) == ref.decode_records(data)
    assert nat.summarize_records(data) == ref.summarize_records(data)
    assert nat.record_properties(data) == ref.record_properties(data)


@PARITY
@given(st.binary(max_size=300), st.integers(0, 40))
def test_read_any_bytes(nat, data: bytes, pos: int) -> None:  # type: ignore[no-untyped-def]
    _same(outcome(nat.decode_record, data, pos), outcome(ref.decode_record, data, pos))
    _same(outcome(nat.view_record, data), outcome(ref.view_record, data))
    assert nat.decode_records(data) == ref.decode_records(data)
    assert nat.summarize_records(data) == ref.summarize_records(data)
    assert nat.record_properties(data, pos) == ref.record_properties(data, pos)


@PARITY
@given(
    fields,
    st.text(min_size=1, max_size=30).map(str.encode),
    props,
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.tuples(
        st.binary(min_size=4, max_size=4)
        | st.binary(min_size=16, max_size=16)
        | st.binary(max_size=3),
        st.integers(0, 65535),
    ),
)
def test_patch_generated_records(nat, kw, topic, properties, qid, qoff, phy, ts, host) -> None:  # type: ignore[no-untyped-def]
    rec = ref.encode_record(**kw)
    view = ref.view_record(rec)
    assert nat.view_record(rec) == view
    args = dict(
        topic=topic,
        properties=properties,
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=phy,
        store_timestamp=ts,
        store_host=host,
    )
    a, b = (
        outcome(nat.patch_record, rec, view, **args),
        outcome(ref.patch_record, rec, view, **args),
    )
    assert a[:2] == b[:2]
    if len(host[0]) in (4, 16):
        assert nat.patched_size(view, topic, properties, host) == ref.patched_size(
            view, topic, properties, host
        )
        assert len(a[1]) == ref.patched_size(view, topic, properties, host)


@PARITY
@given(
    fields,
    st.sampled_from(["queue_id", "queue_offset", "physical_offset", "store_timestamp"]),
    wild,
)
def test_patch_refuses_what_the_reference_refuses(nat, kw, name, value) -> None:  # type: ignore[no-untyped-def]
    rec = ref.encode_record(**kw)
    view = ref.view_record(rec)
    args = dict(
        topic=b"T",
        properties=b"",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
        store_host=(b"\0" * 4, 1),
    )
    args[name] = value
    assert (
        outcome(nat.patch_record, rec, view, **args)[:2]
        == outcome(ref.patch_record, rec, view, **args)[:2]
    )


@PARITY
@given(fields, st.integers(-(2**31), 2**31 - 1))
def test_patch_computes_the_body_crc_again(nat, kw, stored_crc) -> None:  # type: ignore[no-untyped-def]
    """The copy's body CRC is computed from its body on both cores, whatever the source's
    CRC field holds: a copy never carries a mismatch for recovery's scan to cut at."""
    sound = ref.encode_record(**{**kw, "crc": None})  # its CRC computed from the body
    view = ref.view_record(sound)
    args = dict(
        topic=b"T",
        properties=b"",
        queue_id=1,
        queue_offset=2,
        physical_offset=3,
        store_timestamp=4,
        store_host=(b"\x7f\0\0\1", 10911),
    )
    damaged = sound[:8] + stored_crc.to_bytes(4, "big", signed=True) + sound[12:]
    for src in (sound, damaged):
        out = nat.patch_record(src, view, **args)
        assert out == ref.patch_record(src, view, **args)
        assert out[8:12] == sound[8:12]
        assert ref.decode_record(out, check_crc=True).body == kw["body"]


@PARITY
@given(fields, st.lists(wild, min_size=12, max_size=12))
def test_patched_size_of_any_view_fields(nat, kw, values) -> None:  # type: ignore[no-untyped-def]
    """``patched_size`` of a RecordView holding any values: the reference's outcome."""
    rec = ref.encode_record(**kw)
    view = ref.view_record(rec)._replace(
        born_end=values[4], body_start=values[7], body_end=values[8]
    )
    host = (b"\0" * 4, 1)
    assert (
        outcome(nat.patched_size, view, b"T", b"", host)[:2]
        == outcome(ref.patched_size, view, b"T", b"", host)[:2]
    )


# bodies around the twin's CRC steps (64-byte folds, 16-byte folds, the byte table for
# the rest) and long ones, of any bytes
_crc_body = st.one_of(
    st.binary(max_size=300),
    st.integers(0, 5000).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    st.sampled_from([63, 64, 65, 79, 80, 127, 128, 129, 1024, 4096]).map(lambda n: b"\xff" * n),
)


@PARITY
@given(_crc_body)
def test_the_body_crc_of_any_body(nat, body: bytes) -> None:  # type: ignore[no-untyped-def]
    """The twin computes BODYCRC itself (carry-less multiplies where the CPU has them):
    the value ``zlib.crc32`` gives, in what it writes, patches and checks."""
    import zlib

    kw = dict(
        topic=b"T",
        body=body,
        properties=b"",
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=0,
        born_host=(b"\x7f\0\0\1", 1),
        store_timestamp=0,
        store_host=(b"\x7f\0\0\1", 2),
        reconsume_times=0,
    )
    rec = nat.encode_record(**kw)
    assert rec == ref.encode_record(**kw)
    assert int.from_bytes(rec[8:12], "big") == zlib.crc32(body) & 0x7FFFFFFF
    args = dict(
        topic=b"U",
        properties=b"",
        queue_id=1,
        queue_offset=2,
        physical_offset=3,
        store_timestamp=4,
        store_host=(b"\x7f\0\0\1", 10911),
    )
    view = ref.view_record(rec)
    assert nat.patch_record(rec, view, **args) == ref.patch_record(rec, view, **args)
    assert nat.decode_record(rec, check_crc=True) == ref.decode_record(rec, check_crc=True)
    if body:  # one bit flipped: both cores refuse it alike
        bad = bytearray(rec)
        bad[view.body_start + len(body) // 2] ^= 0x10
        assert outcome(nat.decode_record, bytes(bad), check_crc=True) == outcome(
            ref.decode_record, bytes(bad), check_crc=True
        )
