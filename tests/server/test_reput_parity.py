"""The scheduler's byte-patching re-put stores exactly what the object path stored.

``restore_delayed_view`` + ``patch_record`` (the re-put without decoding the record) against
``restore_delayed`` + ``encode_record`` (decode -> MessageInner -> encode), byte for byte,
for randomized stored records: IPv4/IPv6 hosts, client and internal properties in any
order, empty and large bodies; and the same ``RequeueError`` for records neither may re-put.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.message import (
    decode_record,
    encode_record,
    patch_record,
    patched_size,
    view_record,
)
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_ORIGIN,
    UNIQ_KEY,
    encode_properties,
)
from kairosmq.protocol.timer import TIMER_OUT_MS
from kairosmq.server.schedule.reput import (
    RequeueError,
    restore_delayed,
    restore_delayed_view,
    restore_timer,
    restore_timer_view,
)
from kairosmq.server.store import MessageInner, MessageStore, PutStatus

_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
    min_size=1,
    max_size=12,
)
_host = st.tuples(
    st.sampled_from([4, 16]).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    st.integers(0, 65535),
)
_i32 = st.integers(-(1 << 31), (1 << 31) - 1)
_i64 = st.integers(0, (1 << 62))


@st.composite
def _props(draw: st.DrawFn) -> dict[str, str]:
    props: dict[str, str] = {}
    keys = draw(
        st.lists(
            st.one_of(
                _text,
                st.sampled_from(
                    [
                        DELAY,
                        DELIVER_TIME,
                        REAL_QID,
                        REAL_TOPIC,
                        SCHEDULE_ORIGIN,
                        TAGS,
                        UNIQ_KEY,
                        TIMER_OUT_MS,
                        TIMER_DELIVER_MS,
                        TIMER_ORIGIN,
                    ]
                ),
            ),
            max_size=8,
        )
    )
    for k in keys:
        if k == REAL_QID:
            props[k] = draw(st.one_of(st.integers(0, 10**9).map(str), _text))
        elif k == REAL_TOPIC:
            props[k] = draw(st.text("abcXYZ_%-0123456789", min_size=1, max_size=40))
        else:
            props[k] = draw(_text)
    return props


@st.composite
def _record(draw: st.DrawFn) -> bytes:
    props = encode_properties(draw(_props())).encode()
    return encode_record(
        topic=b"SCHEDULE_TOPIC_XXXX",
        body=draw(st.binary(max_size=300)),
        properties=props,
        queue_id=draw(st.integers(0, 17)),
        flag=draw(_i32),
        queue_offset=draw(_i64),
        physical_offset=draw(_i64),
        sys_flag=draw(st.integers(0, 0xFF)),
        born_timestamp=draw(_i64),
        born_host=draw(_host),
        store_timestamp=draw(_i64),
        store_host=draw(_host),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(_i64),
    )


def _object_path(
    record: bytes,
    level: int,
    off: int,
    qoff: int,
    phy: int,
    ts: int,
    host: tuple[bytes, int],
    restore: Any = restore_delayed,
) -> bytes:
    msg = restore(record, level, off)
    return encode_record(
        topic=msg.topic.encode(),
        body=msg.body,
        properties=encode_properties(msg.properties).encode(),
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=qoff,
        physical_offset=phy,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_timestamp=ts,
        store_host=host,
        reconsume_times=msg.reconsume_times,
    )


def _patch_path(
    record: bytes,
    level: int,
    off: int,
    qoff: int,
    phy: int,
    ts: int,
    host: tuple[bytes, int],
    restore: Any = restore_delayed_view,
) -> bytes:
    view, topic, qid, props = restore(record, level, off)
    t, p = topic.encode(), encode_properties(props).encode()
    out = patch_record(
        record,
        view,
        topic=t,
        properties=p,
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=phy,
        store_timestamp=ts,
        store_host=host,
    )
    assert len(out) == patched_size(view, t, p, host)
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    record=_record(), level=st.integers(1, 18), off=_i64, qoff=_i64, phy=_i64, ts=_i64, host=_host
)
def test_patched_reput_is_byte_identical_to_the_object_path(
    record: bytes, level: int, off: int, qoff: int, phy: int, ts: int, host: tuple[bytes, int]
) -> None:
    try:
        expected = _object_path(record, level, off, qoff, phy, ts, host)
    except RequeueError:
        with pytest.raises(RequeueError):
            _patch_path(record, level, off, qoff, phy, ts, host)
        return
    got = _patch_path(record, level, off, qoff, phy, ts, host)
    assert got == expected
    assert decode_record(got, check_crc=True) == decode_record(expected)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=_record(), due=_i64, origin=_i64, qoff=_i64, phy=_i64, ts=_i64, host=_host)
def test_patched_timer_reput_is_byte_identical_to_the_object_path(
    record: bytes, due: int, origin: int, qoff: int, phy: int, ts: int, host: tuple[bytes, int]
) -> None:
    """The timer service's re-put (``restore_timer_view``) against ``restore_timer``."""
    try:
        expected = _object_path(record, due, origin, qoff, phy, ts, host, restore_timer)
    except RequeueError:
        with pytest.raises(RequeueError):
            _patch_path(record, due, origin, qoff, phy, ts, host, restore_timer_view)
        return
    got = _patch_path(record, due, origin, qoff, phy, ts, host, restore_timer_view)
    assert got == expected
    props = decode_record(got, check_crc=True).properties
    assert props[TIMER_ORIGIN] == f"{due}:{origin}" and props[TIMER_OUT_MS] == str(due)
    assert REAL_TOPIC not in props and TIMER_DELIVER_MS not in props


@settings(max_examples=400, deadline=None)
@given(
    record=_record(),
    cut=st.integers(0, 400),
    junk=st.binary(min_size=1, max_size=4),
    at=st.integers(0, 400),
)
def test_damaged_records_are_refused_alike(record: bytes, cut: int, junk: bytes, at: int) -> None:
    """Truncated or overwritten records: both paths refuse (RequeueError) or both agree."""
    for bad in (
        record[: cut % (len(record) + 1)],
        record[: at % len(record)] + junk + record[at % len(record) + len(junk) :],
    ):
        try:
            expected = _object_path(bad, 1, 0, 5, 6, 7, (b"\x7f\0\0\1", 10911))
        except RequeueError:
            with pytest.raises(RequeueError):
                _patch_path(bad, 1, 0, 5, 6, 7, (b"\x7f\0\0\1", 10911))
            continue
        assert _patch_path(bad, 1, 0, 5, 6, 7, (b"\x7f\0\0\1", 10911)) == expected


def test_view_record_reads_what_decode_record_reads() -> None:
    rec = encode_record(
        topic=b"T",
        body=b"hello",
        properties=b"A\x01b",
        queue_id=3,
        flag=9,
        queue_offset=1,
        physical_offset=2,
        sys_flag=0x10,
        born_timestamp=5,
        born_host=(bytes(16), 7),
        store_timestamp=6,
        store_host=(b"\1\2\3\4", 8),
        reconsume_times=4,
    )
    v = view_record(rec)
    m = decode_record(rec)
    assert (v.total, v.flag, v.sys_flag, v.born_timestamp, v.reconsume_times, v.topic) == (
        m.store_size,
        m.flag,
        m.sys_flag,
        m.born_timestamp,
        m.reconsume_times,
        m.topic,
    )
    assert rec[v.body_start : v.body_end] == b"hello"
    assert rec[v.props_start : v.props_end] == b"A\x01b"


async def test_store_put_patched_writes_what_put_writes(tmp_path: Path) -> None:
    """Through the real store: the object put and the patched put of the same due record
    leave the same bytes in their commit logs (store time pinned)."""
    host = (b"\x0a\x00\x00\x05", 10911)
    stores = [
        MessageStore(
            tmp_path / n,
            store_host=host,
            segment_size=1 << 20,
            units_per_file=64,
            clock_ms=lambda: 1_700_000_000_123,
        )
        for n in ("a", "b")
    ]
    for s in stores:
        s.open()
    try:
        sched = MessageInner(
            topic="SCHEDULE_TOPIC_XXXX",
            queue_id=2,
            body=b"x" * 1024,
            properties={
                UNIQ_KEY: "U1",
                TAGS: "t",
                DELAY: "3",
                REAL_TOPIC: "orders",
                REAL_QID: "1",
                DELIVER_TIME: "1700000001000",
                "k": "v",
            },
            born_host=(b"\x7f\0\0\1", 5000),
            born_timestamp=42,
            reconsume_times=2,
            flag=7,
        )
        r0 = stores[0].put(sched)
        assert r0.status is PutStatus.PUT_OK
        record = stores[0].read(r0.phy_offset, r0.size)
        assert record is not None
        a = stores[0].put(restore_delayed(record, 3, 0))
        view, topic, qid, props = restore_delayed_view(record, 3, 0)
        stores[1].put(sched)
        b = stores[1].put_patched(record, view, topic, qid, props)
        assert a.status is b.status is PutStatus.PUT_OK
        assert (a.phy_offset, a.size, a.queue_offset, a.tags_code) == (
            b.phy_offset,
            b.size,
            b.queue_offset,
            b.tags_code,
        )
        assert stores[0].read(a.phy_offset, a.size) == stores[1].read(b.phy_offset, b.size)
        assert stores[1].find_queue("orders", 1) is not None
    finally:
        for s in stores:
            s.close()
