"""CommitLog: segments and rollover, pending reads, recovery of torn/corrupt tails, retention.

Records are built with ``encode_record``; expected offsets and layouts are computed in the
test from the documented format (8-byte BLANK marker, 20-digit segment names).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.message import decode_record, encode_record
from kairosmq.protocol.schema import BLANK_MAGIC_CODE
from kairosmq.server.store.commitlog import CommitLog

SEG = 64 * 1024
HOST = (b"\x7f\x00\x00\x01", 10911)


def _record(phy: int, i: int, body_len: int = 1000) -> bytes:
    body = bytes([(i * 7 + k) % 251 + 1 for k in range(body_len)])  # no zero runs
    return encode_record(
        topic=b"TopicTest",
        body=body,
        properties=f"UNIQ_KEY\x01ID{i:05d}".encode(),
        queue_id=0,
        flag=0,
        queue_offset=i,
        physical_offset=phy,
        sys_flag=0,
        born_timestamp=1_700_000_000_000 + i,
        born_host=HOST,
        store_timestamp=1_700_000_000_500,
        store_host=HOST,
        reconsume_times=0,
    )


def _size(i: int, body_len: int = 1000) -> int:
    return len(_record(0, i, body_len))


class Log:
    """A CommitLog plus the records written to it: [(phy, bytes)]."""

    def __init__(self, directory: Path, seg: int = SEG) -> None:
        self.dir = directory
        self.seg = seg
        self.cl = CommitLog(directory, seg)
        self.records: list[tuple[int, bytes]] = []

    def open(self, trusted: int = 0, last: int | None = None) -> tuple[int, int, list[Any]]:
        self.cl.load()
        seen: list[tuple[int, bytes]] = []
        end, cut = self.cl.recover(trusted, last, lambda off, rec: seen.append((off, rec)))
        return end, cut, seen

    def append(self, n: int = 1, body_len: int = 1000, write: bool = True) -> None:
        for _ in range(n):
            i = len(self.records)
            phy = self.cl.reserve(_size(i, body_len))
            rec = _record(phy, i, body_len)
            self.cl.append(rec)
            self.records.append((phy, rec))
        if write:
            self.cl.write_out()

    def reopen(self, trusted: int = 0, last: int | None = None) -> tuple[int, int, list[Any]]:
        self.cl.close()
        self.cl = CommitLog(self.dir, self.seg)
        return self.open(trusted, last)

    def segment_files(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir())


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    lg = Log(tmp_path / "commitlog")
    assert lg.open() == (0, 0, [])
    yield lg
    lg.cl.close()


def _fill_past_rollover(log: Log, extra: int = 3) -> int:
    """Append until the second segment holds ``extra`` records; return first index there."""
    while not log.records or log.records[-1][0] < SEG:
        log.append()
    first = len(log.records) - 1
    log.append(extra - 1)
    return first


def test_append_and_read_across_rollover(log: Log) -> None:
    first_in_second = _fill_past_rollover(log)
    assert log.segment_files() == [f"{0:020d}", f"{SEG:020d}"]
    for p in log.dir.iterdir():
        assert p.stat().st_size == SEG  # preallocated
    for phy, rec in log.records:
        assert phy // SEG == (phy + len(rec) - 1) // SEG  # never spans segments
        assert log.cl.read(phy, len(rec)) == rec
        assert decode_record(log.cl.read(phy, len(rec)), check_crc=True).commit_log_offset == phy
    last_phy, last_rec = log.records[first_in_second - 1]
    end0 = last_phy + len(last_rec)
    assert log.records[first_in_second][0] == SEG
    with open(log.dir / f"{0:020d}", "rb") as f:
        f.seek(end0)
        size, magic = struct.unpack(">iI", f.read(8))
    assert (size, magic) == (SEG - end0, BLANK_MAGIC_CODE)
    assert SEG - end0 < len(last_rec) + 8 + 10  # rolled only because the next did not fit
    assert log.cl.max_offset == log.records[-1][0] + len(log.records[-1][1])


def test_record_ending_exactly_eight_bytes_before_segment_end(log: Log) -> None:
    overhead = _size(0, 0)  # 91 + topic + properties of these records
    while SEG - 8 - log.cl.max_offset > 3000:
        log.append()
    log.append(1, body_len=SEG - 8 - log.cl.max_offset - overhead)
    assert log.cl.max_offset == SEG - 8  # fits with exactly the 8-byte BLANK to spare
    assert log.segment_files() == [f"{0:020d}"]
    log.append(1, body_len=0)
    assert log.records[-1][0] == SEG
    with open(log.dir / f"{0:020d}", "rb") as f:
        f.seek(SEG - 8)
        assert struct.unpack(">iI", f.read(8)) == (8, BLANK_MAGIC_CODE)
    assert log.reopen()[2] == log.records


def test_read_pending_bytes_before_write_out(log: Log) -> None:
    log.append(2)
    log.append(2, write=False)
    written_end = log.records[2][0]
    for phy, rec in log.records:
        assert log.cl.read(phy, len(rec)) == rec
    assert log.cl.max_offset == log.records[-1][0] + len(log.records[-1][1])
    # a read spanning the written bytes and the pending ones (a coalesced pull run)
    start = log.records[1][0]
    span = log.cl.max_offset - start
    assert start < written_end < start + span
    assert log.cl.read(start, span) == log.records[1][1] + log.records[2][1] + log.records[3][1]
    log.cl.write_out()
    assert log.cl.read(start, span) == log.records[1][1] + log.records[2][1] + log.records[3][1]


def test_read_outside_the_log(log: Log) -> None:
    log.append(2)
    end = log.cl.max_offset
    assert log.cl.read(end, 1) is None
    assert log.cl.read(end - 10, 11) is None
    assert log.cl.read(0, 0) is None
    assert log.cl.read(-1, 10) is None


def test_recover_after_reopen_replays_everything(log: Log) -> None:
    _fill_past_rollover(log)
    end_before = log.cl.max_offset
    end, cut, seen = log.reopen()
    assert (end, cut) == (end_before, 0)
    assert seen == log.records
    assert log.cl.max_offset == end_before
    log.append()  # appending continues at the recovered end
    assert log.records[-1][0] == end_before
    _, _, seen = log.reopen()
    assert seen == log.records


def test_recover_from_trusted_offset_replays_only_later_records(log: Log) -> None:
    log.append(5)
    trusted, last = log.cl.max_offset, log.records[-1][0]
    log.append(3)
    end, cut, seen = log.reopen(trusted, last)
    assert (end, cut) == (log.cl.max_offset, 0)
    assert seen == log.records[5:]


def _truncate_file(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_torn_tail_is_cut_and_reported(log: Log) -> None:
    log.append(10)
    phy, rec = log.records[-1]
    _truncate_file(log.dir / f"{0:020d}", phy + 50)  # kill -9 in the middle of a write
    end, cut, seen = log.reopen()
    assert end == phy
    assert 0 < cut <= 50
    assert seen == log.records[:-1]
    assert (log.dir / f"{0:020d}").stat().st_size == SEG  # re-preallocated
    with open(log.dir / f"{0:020d}", "rb") as f:
        f.seek(phy)
        assert f.read(200) == b"\x00" * 200  # nothing of the torn record is left
    log.records.pop()
    log.append(2)
    assert log.records[-2][0] == phy
    assert log.reopen()[2] == log.records


def test_torn_first_record_of_a_new_segment(log: Log) -> None:
    first = _fill_past_rollover(log, extra=1)
    assert log.records[first][0] == SEG
    _truncate_file(log.dir / f"{SEG:020d}", 40)
    end, cut, seen = log.reopen()
    assert end == SEG  # the data ends with segment 0's BLANK marker
    assert cut > 0
    assert seen == log.records[:first]
    log.records.pop()
    log.append(3)  # appends after the cut go to the segment at SEG, readable
    for phy, rec in log.records:
        assert log.cl.read(phy, len(rec)) == rec
    assert log.records[first][0] == SEG
    end, cut, seen = log.reopen()
    assert (end, cut) == (log.cl.max_offset, 0)
    assert seen == log.records


def test_blank_marker_ending_the_last_segment_keeps_its_records(log: Log) -> None:
    first = _fill_past_rollover(log, extra=1)
    # crash after the BLANK was written but before the next segment existed
    (log.dir / f"{SEG:020d}").unlink()
    end, cut, seen = log.reopen()
    assert seen == log.records[:first]
    last_phy, last_rec = log.records[first - 1]
    assert end in (last_phy + len(last_rec), SEG)
    log.records = log.records[:first]
    log.append(2)
    for phy, rec in log.records:
        assert log.cl.read(phy, len(rec)) == rec
    assert log.reopen()[2] == log.records


def test_flipped_crc_byte_in_last_record_cuts_it(log: Log) -> None:
    log.append(6)
    phy, rec = log.records[-1]
    with open(log.dir / f"{0:020d}", "r+b") as f:
        f.seek(phy + 88 + 10)  # a body byte (IPv4 hosts: body at byte 88)
        b = f.read(1)
        f.seek(phy + 88 + 10)
        f.write(bytes([b[0] ^ 0xFF]))
    end, cut, seen = log.reopen()
    assert end == phy
    assert 0 < cut <= len(rec)  # counted up to the first run of 8 zero bytes
    assert seen == log.records[:-1]


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xab" * 100,
        struct.pack(">iI", 200, 0x12345678) + b"\x11" * 192,  # plausible size, wrong magic
        struct.pack(">iI", 10_000_000, 0xDAA320A7) + b"\x22" * 50,  # size beyond the segment
    ],
    ids=["bytes", "wrong-magic", "huge-size"],
)
def test_garbage_after_valid_data_is_cut(log: Log, garbage: bytes) -> None:
    log.append(4)
    end0 = log.cl.max_offset
    with open(log.dir / f"{0:020d}", "r+b") as f:
        f.seek(end0)
        f.write(garbage)
    end, cut, seen = log.reopen()
    assert (end, cut) == (end0, len(garbage))
    assert seen == log.records
    with open(log.dir / f"{0:020d}", "rb") as f:
        f.seek(end0)
        assert f.read(len(garbage)) == b"\x00" * len(garbage)


def test_trusted_offset_beyond_the_data_rescans_its_segment(log: Log) -> None:
    _fill_past_rollover(log, extra=5)
    trusted, last = log.cl.max_offset, log.records[-1][0]
    cut_phy = log.records[-3][0]
    _truncate_file(log.dir / f"{SEG:020d}", cut_phy - SEG + 30)
    end, cut, seen = log.reopen(trusted, last)
    assert end == cut_phy
    assert cut > 0
    in_second = [r for r in log.records[:-3] if r[0] >= SEG]
    assert seen == in_second  # scanning restarted at the start of the last record's segment
    for phy, rec in log.records[:-3]:
        assert log.cl.read(phy, len(rec)) == rec


def test_trusted_offset_with_a_whole_segment_lost(log: Log) -> None:
    first = _fill_past_rollover(log, extra=2)
    trusted, last = log.cl.max_offset, log.records[-1][0]
    log.cl.close()
    (log.dir / f"{SEG:020d}").unlink()
    log.cl = CommitLog(log.dir, SEG)
    end, cut, seen = log.open(trusted, last)
    assert seen == log.records[:first]
    assert end <= SEG
    for phy, rec in log.records[:first]:
        assert log.cl.read(phy, len(rec)) == rec


def test_fsync_advances_flushed_offset(log: Log) -> None:
    log.append(3)
    assert log.cl.flushed_offset == 0
    assert log.cl.fsync() == log.cl.max_offset
    assert log.cl.flushed_offset == log.cl.max_offset
    log.append(1, write=False)
    assert log.cl.fsync() < log.cl.max_offset  # pending bytes are not in the OS yet


def test_delete_expired_removes_old_segments_only(log: Log) -> None:
    while log.cl.max_offset <= 2 * SEG:
        log.append()
    assert len(log.segment_files()) == 3
    old = time.time() - 10 * 3600
    for name in log.segment_files():
        os.utime(log.dir / name, (old, old))
    assert log.cl.delete_expired(3600) == [0, SEG]  # the newest segment is always kept
    assert log.segment_files() == [f"{2 * SEG:020d}"]
    assert log.cl.min_offset == 2 * SEG
    phy, rec = log.records[0]
    assert log.cl.read(phy, len(rec)) is None
    phy, rec = log.records[-1]
    assert log.cl.read(phy, len(rec)) == rec
    assert log.cl.delete_expired(3600) == []


def test_delete_expired_keeps_recent_segments(log: Log) -> None:
    _fill_past_rollover(log)
    old = time.time() - 7200
    os.utime(log.dir / f"{SEG:020d}", (old, old))  # only the newer one is old: stop at first
    assert log.cl.delete_expired(3600) == []
    assert len(log.segment_files()) == 2
    now = time.time()
    assert log.cl.delete_expired(3600, now=now + 2 * 3600) == [0]
