"""CommitLog: the append-only log of message records, the single source of truth.

Owns: segment files ``commitlog/<20-digit base offset>`` of ``segment_size`` bytes
(allocated for real with ``posix_fallocate``; a failed allocation is an ``OSError``, never
a sparse file), the in-memory write buffer, reads by physical offset, the one record
check (``check_record``: magic, size, lengths, body CRC) used by recovery and by checked
reads at client-given offsets (``read_record``), fsync, recovery of a torn tail and
deletion of expired segments; on a slave, appends of its master's bytes at their own
offsets (``append_at``) and cutting a tail it cannot dispatch (``cut_to``).

Invariants:
* Physical offsets are global: segment ``k`` holds ``[k*segment_size, (k+1)*segment_size)``.
  A record never spans segments; when one does not fit (with 8 bytes to spare) an 8-byte
  BLANK marker ends the segment and the record starts the next one.
* ``append`` only copies into ``_pending`` (no syscall); ``write_out`` issues one
  ``pwrite`` per batch. Callers ack a send only after ``write_out`` (the broker's outbox
  tick does it before writing responses), so an acked message survives a process crash.
* ``max_offset`` = end of written data + pending bytes; ``read`` serves both regions.
* A failed ``pwrite`` (EIO, ENOSPC) keeps the records it wrote whole, drops the rest of
  the pending bytes and raises ``WriteFailed`` saying which range was dropped; the store
  rolls back what it derived from them and answers their senders with an error. Later
  writes continue at the end of the kept data.
* A record is appended only inside a segment that exists: when a new segment cannot be
  allocated, ``reserve`` raises before anything of the record is appended.
* ``recover`` scans from a trusted offset, validating magic, size and body CRC, and cuts
  the log at the first bad record (zero-filling the tail); nothing past it is served.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kairosmq.protocol.schema import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

from .files import create_allocated, is_segment_name, open_noatime, preallocate, segment_name
from .record_check import (
    MIN_RECORD,
    PROBLEMS,
    RecordProblem,
    WriteFailed,
    check_record,
    stored_physical_offset,
)

__all__ = ["CommitLog", "RecordProblem", "WriteFailed", "check_record"]

_SIZE_MAGIC = struct.Struct(">iI")
MIN_BLANK = 8
SCAN_WINDOW = 8 << 20  # larger than any record (4 MiB body + 32 KiB properties)
KeepFrom = int | Callable[[], int | None] | None  # retention's floor, or how to find it


@dataclass(slots=True)
class Segment:
    base: int
    path: Path
    fd: int


class CommitLog:
    # slotted: the native put and write-out read and write its fields in place
    # (_message_store.pyx)
    __slots__ = (
        "directory",
        "segment_size",
        "segments",
        "_pending",
        "_written",
        "_flushed",
        "fsyncs",
        "allocation_error",
    )

    def __init__(self, directory: Path, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        self._pending = bytearray()
        self._written = 0  # physical offset up to which bytes are in the OS
        self._flushed = 0  # physical offset up to which bytes are fsynced
        self.fsyncs = 0  # group commits performed (one may cover many acks)
        self.allocation_error: OSError | None = None  # recovery could not re-allocate

    # ----------------------------------------------------------------- files

    def _segment_path(self, base: int) -> Path:
        return self.directory / segment_name(base)

    def _open_segment(self, base: int, create: bool) -> Segment:
        path = self._segment_path(base)
        fd = create_allocated(path, self.segment_size) if create else open_noatime(path, os.O_RDWR)
        seg = Segment(base, path, fd)
        self.segments.append(seg)
        return seg

    def load(self) -> None:
        """Open existing segments (sorted); call ``recover`` next."""
        for p in sorted(self.directory.iterdir()):
            if is_segment_name(p.name):
                self._open_segment(int(p.name), create=False)

    def close(self) -> None:
        for seg in self.segments:
            os.close(seg.fd)
        self.segments.clear()

    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else 0

    @property
    def max_offset(self) -> int:
        return self._written + len(self._pending)

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def written_offset(self) -> int:
        """End of the bytes handed to the OS (an ack needs its record below this)."""
        return self._written

    # ----------------------------------------------------------------- append

    def reserve(self, size: int) -> int:
        """Return the physical offset where a record of ``size`` bytes will start.

        May end the current segment with a BLANK marker (written at once) and allocate
        the next one; raises ``WriteFailed`` or ``OSError`` (no space for a segment)
        before anything of the record is appended, so the caller can refuse the put.
        """
        pos = self.max_offset
        seg = self.segments[-1] if self.segments else None
        if seg is not None and seg.base <= pos < seg.base + self.segment_size:
            seg_end = seg.base + self.segment_size
            if pos + size + MIN_BLANK <= seg_end:
                return pos
            self._pending += _SIZE_MAGIC.pack(seg_end - pos, BLANK_MAGIC_CODE)
            self.write_out()
            pos = self._written = seg_end  # the 8-byte marker stands for the rest
        # A segment holding ``pos`` does not exist yet (or its creation failed before).
        self._open_segment(pos - pos % self.segment_size, create=True)
        return pos

    def append(self, record: bytes) -> None:
        """Append a record at the offset ``reserve`` returned (no syscall)."""
        self._pending += record

    def write_out(self) -> None:
        """Write the pending bytes to the OS in one call; ``WriteFailed`` if it fails."""
        if not self._pending:
            return
        seg = self.segments[-1]
        data = self._pending
        pos = self._written - seg.base
        done = 0
        view = memoryview(data)
        try:
            while done < len(data):
                n = os.pwrite(seg.fd, view[done:], pos + done)
                if n <= 0:
                    raise OSError(errno.EIO, "pwrite wrote nothing")
                done += n
        except OSError as err:
            view.release()
            raise self._write_failed(err, data, done) from err
        view.release()
        self._written += len(data)
        self._pending = bytearray()

    def append_at(self, offset: int, data: bytes) -> None:
        """Append bytes another log holds at ``offset`` (a slave's copy of its master's),
        written to the OS at once. ``offset`` is ``max_offset`` (or, in an empty log, any
        segment start) and the bytes stay inside the segment holding ``offset``: else
        ``ValueError`` saying which, and nothing is appended."""
        seg_size = self.segment_size
        if not self.segments and not self._pending:
            if offset % seg_size:
                raise ValueError(
                    f"an empty log starts at a segment start: {offset} is not a multiple "
                    f"of the segment size {seg_size}"
                )
            self._written = self._flushed = offset
        elif offset != self.max_offset:
            raise ValueError(f"offset {offset} is not the end of the log ({self.max_offset})")
        base = offset - offset % seg_size
        if offset + len(data) > base + seg_size:
            raise ValueError(
                f"{len(data)} bytes at {offset} cross the end of the segment at "
                f"{base + seg_size} (segment size {seg_size})"
            )
        if not self.segments or self.segments[-1].base != base:
            self.write_out()
            self._open_segment(base, create=True)
        self._pending += data
        self.write_out()

    def cut_to(self, end: int) -> int:
        """Cut the log at ``end`` (a record boundary): later bytes zeroed, later segments
        deleted; return the bytes cut. A slave drops a tail it cannot dispatch this way."""
        self.write_out()
        cut = self._truncate(end)
        self._written = self._flushed = end
        return cut

    def _write_failed(self, err: OSError, data: bytearray, done: int) -> WriteFailed:
        """Keep the records written whole, drop the rest of the pending bytes."""
        off = 0
        last: int | None = None
        while off + 8 <= done:
            size, magic = _SIZE_MAGIC.unpack_from(data, off)
            if magic == BLANK_MAGIC_CODE:  # always last; its 8 bytes stand for ``size``
                off += size
                break
            if size <= 0 or off + size > done:
                break
            if magic == MESSAGE_MAGIC_CODE:
                last = self._written + off
            off += size
        failed = WriteFailed(err, self._written + off, self._written + len(data), last)
        self._written += off
        self._pending = bytearray()
        return failed

    def fsync(self) -> int:
        """fdatasync the written region (blocking: call from a thread); return the offset."""
        target = self._written
        self.fsyncs += 1
        for seg in list(self.segments):
            if seg.base + self.segment_size > self._flushed and seg.base < target:
                os.fdatasync(seg.fd)
        self._flushed = max(self._flushed, target)
        return target

    # ----------------------------------------------------------------- read

    def read(self, offset: int, size: int) -> bytes | None:
        """Bytes ``[offset, offset+size)``, or None if outside the log."""
        if offset < self.min_offset or offset + size > self.max_offset or size <= 0:
            return None
        if offset >= self._written:
            start = offset - self._written
            return bytes(self._pending[start : start + size])
        if offset + size > self._written:  # spans the written bytes and the pending ones
            head = self.read(offset, self._written - offset)
            tail = self._pending[: offset + size - self._written]
            return None if head is None else head + tail
        idx = (offset // self.segment_size) - (self.segments[0].base // self.segment_size)
        if not 0 <= idx < len(self.segments):
            return None
        seg = self.segments[idx]
        data = os.pread(seg.fd, size, offset - seg.base)
        return data if len(data) == size else None

    def _spans(
        self, ranges: list[tuple[int, int]], max_gap: int
    ) -> Iterator[tuple[bytes, int, int, int]]:
        """Group ``(offset, size)`` ranges into spans read with one call each.

        Yields (span bytes, span start offset, first range index, end range index).
        Ranges closer than ``max_gap`` (and in one segment) share a read: a queue's
        records are interleaved with other queues', and a few wasted kilobytes cost less
        than a syscall each. Stops at the first range outside the log.
        """
        i, n = 0, len(ranges)
        seg_size = self.segment_size
        while i < n:
            start, size = ranges[i]
            end, j = start + size, i + 1
            while j < n:
                s2, z2 = ranges[j]
                if s2 < end or s2 - end > max_gap or s2 // seg_size != start // seg_size:
                    break
                end, j = s2 + z2, j + 1
            span = self.read(start, end - start)
            if span is None and j - i > 1:  # the span crossed the log's end: go singly
                j, span = i + 1, self.read(start, size)
            if span is None:
                return
            yield span, start, i, j
            i = j

    def read_many(self, ranges: list[tuple[int, int]], max_gap: int = 64 * 1024) -> list[bytes]:
        """One bytes per range, in order (short if a range is outside the log)."""
        out: list[bytes] = []
        for span, start, i, j in self._spans(ranges, max_gap):
            if j - i == 1:
                out.append(span)
                continue
            view = memoryview(span)
            out.extend(bytes(view[off - start : off - start + sz]) for off, sz in ranges[i:j])
            view.release()
        return out

    def read_concat(
        self, ranges: list[tuple[int, int]], max_gap: int = 64 * 1024
    ) -> tuple[list[bytes], int]:
        """Chunks whose concatenation is the ranges in order (adjacent ranges share a
        chunk, no copy for a fully contiguous span); also how many ranges were read."""
        out: list[bytes] = []
        done = 0
        for span, start, i, j in self._spans(ranges, max_gap):
            done = j
            if ranges[j - 1][0] + ranges[j - 1][1] - start == sum(z for _, z in ranges[i:j]):
                out.append(span)  # no gaps: the span is exactly the records
                continue
            view = memoryview(span)
            k = i
            while k < j:
                off, sz = ranges[k]
                stop = off + sz
                k += 1
                while k < j and ranges[k][0] == stop:
                    stop += ranges[k][1]
                    k += 1
                out.append(bytes(view[off - start : stop - start]))
            view.release()
        return out, done

    def read_record(self, offset: int, max_size: int) -> bytes | RecordProblem:
        """The record at a client-given ``offset``, checked: inside the log, magic, size
        within ``[91, max_size]`` and inside one segment, lengths, body CRC, and its own
        PHYSICALOFFSET field equal to ``offset`` (a record hidden inside a body fails)."""
        if not self.min_offset <= offset <= self.max_offset - MIN_BLANK:
            return RecordProblem.OUT_OF_RANGE
        head = self.read(offset, 8)
        if head is None:
            return RecordProblem.OUT_OF_RANGE
        size, magic = _SIZE_MAGIC.unpack(head)
        if magic == BLANK_MAGIC_CODE:
            return RecordProblem.BLANK
        if magic != MESSAGE_MAGIC_CODE:
            return RecordProblem.BAD_MAGIC
        if (
            not MIN_RECORD <= size <= max_size
            or offset + size > self.max_offset
            or offset // self.segment_size != (offset + size - 1) // self.segment_size
        ):
            return RecordProblem.BAD_SIZE
        buf = self.read(offset, size)
        if buf is None:
            return RecordProblem.OUT_OF_RANGE
        code = check_record(buf, 0)
        if code <= 0:
            return PROBLEMS.get(code, RecordProblem.BAD_MAGIC)
        if stored_physical_offset(buf) != offset:
            return RecordProblem.NOT_RECORD_START
        return buf

    # ----------------------------------------------------------------- recovery

    def _scan(self, seg_i: int, pos: int, on_record: Callable[[int, bytes], None]) -> int:
        """Scan valid records from ``pos`` on; return the end of valid data.

        Reads in windows (memory stays bounded by the window, not the segment); follows
        BLANK markers into the next segment; calls ``on_record(offset, record)``.
        """
        window = SCAN_WINDOW
        while seg_i < len(self.segments):
            seg = self.segments[seg_i]
            file_size = os.fstat(seg.fd).st_size
            local = pos - seg.base
            blank = False
            while local < file_size:
                buf = os.pread(seg.fd, min(window, file_size - local), local)
                off = 0
                while True:
                    size = check_record(buf, off)
                    if size <= 0:
                        break
                    on_record(seg.base + local + off, buf[off : off + size])
                    off += size
                if size == 0:
                    blank = True
                    local += off  # the BLANK's position: the end if no segment follows
                    break
                local += off
                # A record never exceeds the window (max message 4 MiB + overhead < 8 MiB),
                # so no progress, or a stop inside the final read, means the end of data.
                if off == 0 or (len(buf) < window and off < len(buf)):
                    break
            if blank and seg_i + 1 < len(self.segments):
                seg_i += 1
                pos = self.segments[seg_i].base
                continue
            return seg.base + local
        return pos

    def _record_ends_at(self, offset: int, end: int) -> bool:
        size = self._read_size(offset)
        return size > 0 and offset + size == end

    def _read_size(self, offset: int) -> int:
        idx = offset // self.segment_size - self.min_offset // self.segment_size
        if not 0 <= idx < len(self.segments):
            return -1
        seg = self.segments[idx]
        head = os.pread(seg.fd, 8, offset - seg.base)
        if len(head) < 8:
            return -1
        size, _magic = _SIZE_MAGIC.unpack(head)
        if size < MIN_RECORD:
            return -1
        return check_record(os.pread(seg.fd, size, offset - seg.base), 0)

    def recover(
        self, trusted: int, last_record: int | None, on_record: Callable[[int, bytes], None]
    ) -> tuple[int, int]:
        """Find the end of valid data; cut the log there.

        ``trusted`` is the checkpointed end of the log and ``last_record`` the offset of
        the record that ended there. If that record no longer checks out (the tail was
        lost or damaged), scanning starts over at the start of its segment.

        Every valid record from the scan start on is passed to ``on_record(offset, bytes)``
        (the store replays them through ``dispatch``). Returns (end offset, bytes cut).
        """
        if not self.segments:
            self._written = self._flushed = 0
            return 0, 0
        start = max(trusted, self.min_offset)
        if trusted > self.min_offset and (
            last_record is None or not self._record_ends_at(last_record, trusted)
        ):
            anchor = last_record if last_record is not None else trusted
            anchor = max(self.min_offset, min(anchor, self.segments[-1].base))
            start = anchor - anchor % self.segment_size
        seg_i = start // self.segment_size - self.min_offset // self.segment_size
        seg_i = max(0, min(seg_i, len(self.segments) - 1))
        start = max(start, self.segments[seg_i].base)
        end = self._scan(seg_i, start, on_record)
        cut = self._truncate(end)
        self._written = self._flushed = end
        return end, cut

    def _truncate(self, end: int) -> int:
        """Zero everything after ``end`` and drop later segments; return bytes cut."""
        cut = 0
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.base > end:  # a segment starting at ``end`` stays: it is the one to write
                cut += _nonzero_prefix(seg.fd, 0)
                os.close(seg.fd)
                seg.path.unlink()
            else:
                keep.append(seg)
        self.segments = keep
        if keep:
            seg = keep[-1]
            local = end - seg.base
            cut += _nonzero_prefix(seg.fd, local)
            os.ftruncate(seg.fd, local)
            try:
                preallocate(seg.fd, self.segment_size)
            except OSError as err:
                # A full disk must not stop a restart: the segment stays short and
                # later writes into it may fail, which the write path handles.
                self.allocation_error = err
            os.fsync(seg.fd)
        return cut

    # ----------------------------------------------------------------- retention

    def delete_expired(
        self, reserved_seconds: float, now: float | None = None, *, keep_from: KeepFrom = None
    ) -> list[int]:
        """Delete whole segments last written before ``now - reserved_seconds``, oldest
        first, stopping at the first segment that ends after ``keep_from`` (a callable is
        asked only once a segment has expired)."""
        now = time.time() if now is None else now
        deleted: list[int] = []
        while len(self.segments) > 1:
            seg = self.segments[0]
            if now - os.fstat(seg.fd).st_mtime < reserved_seconds:
                break
            if callable(keep_from):
                keep_from = keep_from()
            if keep_from is not None and seg.base + self.segment_size > keep_from:
                break
            os.close(seg.fd)
            seg.path.unlink()
            self.segments.pop(0)
            deleted.append(seg.base)
        return deleted


def _nonzero_prefix(fd: int, pos: int, limit: int = 16 << 20) -> int:
    """Bytes from ``pos`` up to the first run of 8 zero bytes (the torn data's extent)."""
    chunk = os.pread(fd, limit, pos)
    idx = chunk.find(b"\x00" * 8)
    return len(chunk) if idx < 0 else idx
