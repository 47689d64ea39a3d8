"""StoreReads: the read path of the message store (pulls and lookups by offset).

Owns: ``get`` (pull reads of a consume queue with tag filtering, bounded by count,
bytes and units scanned), ``read_record``/``read_at`` (checked reads at a client-given
physical offset), ``read`` (raw commit-log bytes) and ``store_time_at``. ``MessageStore``
(message_store.py) inherits these; it owns ``queues``, ``commitlog`` and
``max_record_size``, which the read path only reads.

Invariants:
* Reads never write: no consume queue, commit-log byte or store state changes, so
  reads and pulls go on while puts are refused (write failure, disk watermark).
* Reads at client-given offsets go through ``read_record``: the one record check plus
  "a consume-queue unit points here", so a record hidden in a body is never served.
* ``get`` never returns a record ending above ``confirm_offset`` (a SYNC_MASTER's slave
  ack, ha/master.py): what a failover could take back is never served; a pull that
  meets one first is answered OFFSET_OVERFLOW_ONE (held, woken when the ack covers it).
* ``get`` never returns a unit below the commit log's minimum offset or a hole (they
  make ``OFFSET_FOUND_NULL`` when nothing else matched); if retention removes a range
  while it reads, the answer is cut before that unit and ``next_begin_offset`` follows
  the last unit returned.
* ``walk_units`` (the unit walk of ``get``: limits, holes, the tag filter, the count and
  byte bounds, over units read in place from the queue file's map) is the reference;
  its native twin (``_reads.pyx``, chosen by ``protocol/native.py``) walks the same
  bytes in one C loop and builds a tuple only for a unit it takes. ``get`` is the
  reference of the twin's ``get``: a pull whose walk ends in one run of a mapped queue
  file and whose records are one contiguous span is read there without Python frames
  of its own; every other read is this one.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from types import ModuleType, SimpleNamespace

from kairosmq.protocol import native
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import STORE_TIMESTAMP_POS, decode_record

from . import consumequeue
from .commitlog import CommitLog, RecordProblem
from .consumequeue import ConsumeQueue
from .types import GetResult, GetStatus

__all__ = ["StoreReads", "walk_units"]

_I64 = struct.Struct(">q")

Unit = tuple[int, int, int]  # (phy offset, size, tagsCode)
# what a pull takes: every unit (None), the units whose tagsCode is in a set, or a test
Match = frozenset[int] | set[int] | Callable[[int], bool] | None

# ``walk_units`` flags
MISSING = 1  # a unit below the log's minimum or a hole was walked over
UNCONFIRMED = 2  # stopped at a unit the slave has not acked (``confirm_offset``)
STOP = 4  # the walk ended before the run's end (count, bytes or unconfirmed)


def walk_units(
    buf: mmap.mmap | bytes,
    first: int,
    count: int,
    index: int,
    log_min: int,
    limit: int | None,
    match: Match,
    max_count: int,
    max_bytes: int,
    total: int,
    units: list[Unit],
    queue_offsets: list[int],
) -> tuple[int, int, int]:
    """Walk ``count`` units of ``buf`` (a queue file's map) from its unit ``first``
    (queue index ``index``), appending each unit taken to ``units`` and its queue index
    to ``queue_offsets``: a unit is taken if it is a record at or above ``log_min``
    that ``match`` accepts; the walk stops before a unit ending above ``limit``, before
    a unit that would bring the bytes taken (``total`` so far) above ``max_bytes``
    (unless nothing is taken yet) and after the ``max_count``-th unit taken. Returns
    (units walked, bytes taken in all, ``MISSING | UNCONFIRMED | STOP`` flags);
    ``struct.error`` if the run passes the end of ``buf``."""
    accept = match.__contains__ if isinstance(match, frozenset | set) else match
    walked = flags = 0
    for phy, size, code in consumequeue.read_units(buf, first, count):
        if limit is not None and phy + size > limit:
            return walked, total, flags | UNCONFIRMED | STOP
        if phy < log_min or size <= 0:  # removed by retention, a hole, lost
            flags |= MISSING
        elif accept is None or accept(code):
            if units and total + size > max_bytes:
                return walked, total, flags | STOP
            total += size
            units.append((phy, size, code))
            queue_offsets.append(index + walked)
            if len(units) >= max_count:
                return walked + 1, total, flags | STOP
        walked += 1
    return walked, total, flags


class StoreReads:
    """Read methods of ``MessageStore`` (a mixin over the attributes below)."""

    queues: dict[tuple[str, int], ConsumeQueue]
    commitlog: CommitLog
    max_record_size: int
    confirm_offset: int | None  # SYNC_MASTER: serve records ending at or below it

    def read(self, phy_offset: int, size: int) -> bytes | None:
        return self.commitlog.read(phy_offset, size)

    def phy_range(self) -> tuple[int, int]:
        """The commit log's (min, max) physical offsets (status and runtime answers)."""
        return self.commitlog.min_offset, self.commitlog.max_offset

    def read_at(self, phy_offset: int) -> bytes | None:
        """The checked record at ``phy_offset`` (``read_record``), or None."""
        rec = self.read_record(phy_offset)
        return None if isinstance(rec, RecordProblem) else rec

    def read_record(self, phy_offset: int) -> bytes | RecordProblem:
        """The stored message record at a client-given ``phy_offset``, or why there is none.

        Checks (one rule, ``commitlog.check_record``): inside the log, magic, size within
        ``max_record_size``, lengths, body CRC, the record's own PHYSICALOFFSET field;
        then that it decodes and that its consume-queue unit points back at it, so a
        record crafted inside a message body is never taken for a stored one.
        """
        rec = self.commitlog.read_record(phy_offset, self.max_record_size)
        if isinstance(rec, RecordProblem):
            return rec
        try:
            m = decode_record(rec)
        except MessageDecodeError:
            return RecordProblem.UNREADABLE
        cq = self.queues.get((m.topic, m.queue_id))
        unit = cq.get(m.queue_offset) if cq is not None else None
        if unit is None or unit[0] != phy_offset or unit[1] != len(rec):
            return RecordProblem.NOT_RECORD_START
        return rec

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = 4 << 20,
        match: Match = None,
        max_scan: int = 16_000,
    ) -> GetResult:
        cq = self.queues.get((topic, queue_id))
        if cq is None or cq.max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        res = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        log_min = self.commitlog.min_offset
        total = scanned = flags = 0
        pos = offset
        limit = self.confirm_offset
        # a chunk at a time: unfiltered, the units a pull can take (holes make it read
        # again); with a filter, more, since it may skip many
        chunk = max_count if match is None else max(64, 2 * max_count)
        while pos < hi and len(res.units) < max_count and scanned < max_scan:
            buf, first, n = cq.unit_run(pos, min(max_scan - scanned, hi - pos, chunk))
            if n == 0:
                break
            if buf is None:  # inside a lost file: holes
                walked, got = n, MISSING
            else:
                walked, total, got = walk_units(
                    buf,
                    first,
                    n,
                    pos,
                    log_min,
                    limit,
                    match,
                    max_count,
                    max_bytes,
                    total,
                    res.units,
                    res.queue_offsets,
                )
            scanned += walked
            flags |= got
            if got & STOP:
                break
            pos += n
        missing, unconfirmed = flags & MISSING, flags & UNCONFIRMED
        if res.units:
            res.chunks, read = self.commitlog.read_concat([(u[0], u[1]) for u in res.units])
            if read < len(res.units):  # a range fell outside the log (retention raced us)
                del res.units[read:]
                del res.queue_offsets[read:]
                if res.queue_offsets:
                    scanned = res.queue_offsets[-1] - offset + 1
        res.next_begin_offset = offset + scanned
        if res.units:
            res.status = GetStatus.FOUND
        elif missing:
            res.status = GetStatus.OFFSET_FOUND_NULL
        elif unconfirmed and scanned == 0:
            res.status = GetStatus.OFFSET_OVERFLOW_ONE  # held like a pull at the end
        return res

    def store_time_at(self, topic: str, queue_id: int, index: int) -> int | None:
        cq = self.queues.get((topic, queue_id))
        unit = cq.get(index) if cq else None
        if unit is None or unit[0] < self.commitlog.min_offset:
            return None
        data = self.commitlog.read(unit[0] + STORE_TIMESTAMP_POS, 8)
        return _I64.unpack(data)[0] if data else None


# ------------------------------------------------------------------ the native twin

# ``walk_units`` and ``StoreReads.get`` above are the reference
# (tests/server/test_native_reads.py holds the twin to them); the twin's (``_reads.pyx``)
# replace them when protocol/native.py chooses it.
reference = SimpleNamespace(walk_units=walk_units, get=StoreReads.get)


def _load_twin() -> ModuleType:
    from . import _reads  # type: ignore[attr-defined]

    twin: ModuleType = _reads  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    walk_units = _twin.walk_units
    StoreReads.get = _twin.get  # type: ignore[method-assign]
