"""The HA frame readers and the slave's appender, in process over real files: frames
split anywhere, limits, a master log copied byte for byte through 1-byte and 32 KiB
chunks across segment ends, and a master with another segment size refused."""

from __future__ import annotations

import struct

import pytest
from kairosmq.server.ha.wire import (
    HELLO,
    HAProtocolError,
    ReportReader,
    TransferReader,
    header,
    report,
    segment_header,
)
from kairosmq.server.store import MessageInner, MessageStore
from kairosmq.server.store.replica import ReplicaAppender, ReplicaMismatch
from kairosmq.server.store.types import DispatchRequest


def test_report_reader_yields_longs_across_any_split() -> None:
    data = report(HELLO) + report(0) + report(1 << 40)
    for cut in range(len(data) + 1):
        r = ReportReader()
        got = list(r.feed(data[:cut])) + list(r.feed(data[cut:]))
        assert got == [HELLO, 0, 1 << 40]


def test_transfer_reader_frames_heartbeats_and_the_segment_header() -> None:
    data = segment_header(4096) + header(0, 3) + b"abc" + header(3, 0)
    for cut in range(len(data) + 1):
        r = TransferReader()
        got = list(r.feed(data[:cut])) + list(r.feed(data[cut:]))
        assert got == [(HELLO, 4096, b""), (0, 3, b"abc"), (3, 0, b"")]


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (struct.pack(">qi", 0, -1), "size -1"),
        (struct.pack(">qi", 0, 5 << 20), "size 5242880"),
        (struct.pack(">qi", -2, 0), "offset -2"),
        (struct.pack(">qi", -1, 0), "segment header has size 0"),
    ],
)
def test_transfer_reader_refuses_bad_headers(frame: bytes, says: str) -> None:
    with pytest.raises(HAProtocolError, match=says):
        list(TransferReader().feed(frame))


async def _filled_master(tmp_path, seg: int = 64 * 1024) -> MessageStore:
    m = MessageStore(tmp_path / "m", store_host=(b"\x7f\x00\x00\x01", 10911), segment_size=seg)
    m.open()
    for i in range(800):
        msg = MessageInner(f"T{i % 3}", i % 2, b"b" * (100 + i % 250), {"UNIQ_KEY": f"U{i}"})
        assert m.put(msg).status.value == "PUT_OK"
    m.write_out()
    assert len(m.commitlog.segments) >= 3
    return m


def _copy(m: MessageStore, a: ReplicaAppender, chunk: int) -> None:
    log = m.commitlog
    pos = log.min_offset
    while pos < log.written_offset:
        seg_end = pos - pos % log.segment_size + log.segment_size
        size = min(chunk, log.written_offset - pos, seg_end - pos)
        a.append(pos, log.read(pos, size))
        pos += size


@pytest.mark.parametrize("chunk", [13, 777, 32 * 1024])
async def test_appender_copies_a_log_byte_for_byte_and_dispatches_each_record_once(
    tmp_path, chunk: int
) -> None:
    m = await _filled_master(tmp_path)
    s = MessageStore(tmp_path / "s", store_host=(b"\x7f\x00\x00\x01", 1), segment_size=64 * 1024)
    s.open()
    seen: list[DispatchRequest] = []
    a = ReplicaAppender(s, on_record=seen.append)
    _copy(m, a, chunk)
    assert a.max_offset == m.commitlog.max_offset == a.dispatched
    for base in range(0, m.commitlog.max_offset, 64 * 1024):
        n = min(64 * 1024, m.commitlog.max_offset - base)
        assert s.commitlog.read(base, n) == m.commitlog.read(base, n)
    assert len(seen) == 800 and len({r.phy_offset for r in seen}) == 800
    for key, cq in m.queues.items():
        assert s.queues[key].max_offset == cq.max_offset
    # the checkpoint covers whole records only; a restart keeps every byte
    snap = s.checkpoint_snapshot()
    assert snap["dispatched_offset"] == a.dispatched
    s.persist_checkpoint(snap)
    s.close()
    s2 = MessageStore(tmp_path / "s", store_host=(b"\x7f\x00\x00\x01", 1), segment_size=64 * 1024)
    assert s2.open()["commitlog_max_offset"] == m.commitlog.max_offset
    s2.close()
    m.close()


async def test_appender_finds_a_master_with_another_segment_size(tmp_path) -> None:
    m = await _filled_master(tmp_path)  # 64 KiB segments
    s = MessageStore(tmp_path / "s", store_host=(b"\x7f\x00\x00\x01", 1), segment_size=128 * 1024)
    s.open()
    a = ReplicaAppender(s)
    with pytest.raises(ReplicaMismatch, match="segment sizes differ") as err:
        _copy(m, a, 32 * 1024)
    assert err.value.kind == "segment_size"
    # nothing past the last whole record stays
    assert s.commitlog.max_offset == a.dispatched
    s.close()
    small = MessageStore(tmp_path / "x", store_host=(b"\x7f\x00\x00\x01", 1), segment_size=16384)
    small.open()
    b = ReplicaAppender(small)
    with pytest.raises(ReplicaMismatch) as err:
        _copy(m, b, 32 * 1024)
    assert err.value.kind == "segment_size"
    small.close()
    m.close()


async def test_appender_refuses_a_gap_and_a_forged_record(tmp_path) -> None:
    m = await _filled_master(tmp_path)
    s = MessageStore(tmp_path / "s", store_host=(b"\x7f\x00\x00\x01", 1), segment_size=64 * 1024)
    s.open()
    a = ReplicaAppender(s)
    first = m.commitlog.read(0, 1000)
    a.append(0, first)
    with pytest.raises(ReplicaMismatch, match="ends at 1000") as err:
        a.append(1500, b"x" * 10)
    assert err.value.kind == "offset"
    forged = bytearray(m.commitlog.read(a.dispatched, 400))
    forged[-1] ^= 0xFF  # the body's CRC no longer matches (somewhere in this record)
    before = a.dispatched
    with pytest.raises(ReplicaMismatch):
        a.append(s.commitlog.max_offset, bytes(forged[: 1000 - before]) + b"\xff" * 500)
    assert s.commitlog.max_offset == a.dispatched == before
    s.close()
    m.close()
