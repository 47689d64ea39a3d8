"""ConsumeQueue: the per-(topic, queue) index of 20-byte units into the commit log.

Owns: files ``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` of
``units_per_file`` units each, memory-mapped; append, read, truncate, flush, recovery
of the valid prefix and deletion of files wholly below the commit log's minimum;
``compute_tags_code`` (a unit's tagsCode) and ``load_queues`` (every queue on disk).

Invariants:
* The logical queue offset of a unit is its index; ``max_offset`` is the next index to
  write; ``min_offset`` is the first index still on disk.
* Units are written strictly in order, so valid units form a prefix of each file and a
  unit with ``size == 0`` marks the end (files are written as zeros: no sparse file, so
  an mmap store cannot SIGBUS on a full disk; ``ensure_room`` allocates the next file
  before the store appends the record it will index, and once a file is half full has
  the ``FileAllocator`` make the next one off the loop: allocate.py says why zeros).
* A unit whose record was rolled back (a failed commit-log write) becomes a *hole*
  ``(-1, 1, 0)``: its queue offset is never reused, so a consumer that saw it cannot
  skip the next message; readers treat a hole like a unit below the log's minimum.
* Unit layout is ``schema.CqUnit`` (int64 phy offset, int32 size, int64 tagsCode);
  for SCHEDULE_TOPIC_XXXX and the timer topic the tagsCode is the due timestamp in ms.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path

from kairosmq.protocol.message import tags_code
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, TAGS
from kairosmq.protocol.timer import TIMER_OUT_MS, TIMER_TOPIC

from .allocate import FileAllocator, create_zeroed, remove_leftovers
from .files import preallocate, sync_mapped

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
HOLE = (-1, 1, 0)  # a rolled-back unit (phy < 0: below any log minimum)


class _File:
    __slots__ = ("base", "path", "fd", "mm")

    def __init__(self, base: int, path: Path, fd: int, mm: mmap.mmap) -> None:
        self.base = base  # first unit index in this file
        self.path = path
        self.fd = fd
        self.mm = mm


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int,
                 allocator: FileAllocator | None = None) -> None:
        self.allocator = allocator
        self._prepared_after = -1  # base of the file whose successor was asked for
        self._first_asked = False  # prepare_first asked for the first file
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory / topic / str(queue_id)
        self.units_per_file = units_per_file
        self.file_bytes = units_per_file * UNIT_SIZE
        self.files: list[_File] = []
        self.max_offset = 0
        self._dirty: set[int] = set()

    # ------------------------------------------------------------------ files

    def _open(self, base: int, create: bool) -> _File:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{base * UNIT_SIZE:020d}"
        if create:
            fd = (self.allocator.take(path, self.file_bytes) if self.allocator is not None
                  else create_zeroed(path, self.file_bytes))
        else:
            fd = os.open(path, os.O_RDWR)
            if os.fstat(fd).st_size < self.file_bytes:
                try:
                    preallocate(fd, self.file_bytes)
                except OSError:
                    os.close(fd)
                    raise
        mm = mmap.mmap(fd, self.file_bytes)
        f = _File(base, path, fd, mm)
        self.files.append(f)
        return f

    def load(self) -> None:
        """Open existing files and find the end of the valid prefix."""
        if not self.directory.is_dir():
            return
        remove_leftovers(self.directory)
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit())
        for name in names:
            path = self.directory / name
            if path.stat().st_size == 0:  # a crash between creation and allocation
                path.unlink()
                continue
            self._open(int(name) // UNIT_SIZE, create=False)
        if self.files:
            last = self.files[-1]
            lo, hi = 0, self.units_per_file
            while lo < hi:  # first unit whose size is 0
                mid = (lo + hi) // 2
                if UNIT.unpack_from(last.mm, mid * UNIT_SIZE)[1] > 0:
                    lo = mid + 1
                else:
                    hi = mid
            self.max_offset = last.base + lo

    def close(self) -> None:
        for f in self.files:
            f.mm.close()
            os.close(f.fd)
        self.files.clear()

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else self.max_offset

    def _file_for(self, index: int) -> _File | None:
        files = self.files
        if not files or index < files[0].base:
            return None
        i = (index - files[0].base) // self.units_per_file
        if i < len(files) and files[i].base <= index < files[i].base + self.units_per_file:
            return files[i]
        # Files are not contiguous (replay continued past lost ones): search.
        j = bisect.bisect_right(files, index, key=lambda f: f.base) - 1
        if j >= 0 and index < files[j].base + self.units_per_file:
            return files[j]
        return None

    # ------------------------------------------------------------------ data

    def ensure_room(self) -> None:
        """Allocate the file the next unit goes into (``OSError`` if the disk is full)."""
        index = self.max_offset
        if not self.files or index >= self.files[-1].base + self.units_per_file:
            self._open(index - index % self.units_per_file, create=True)
        base = self.files[-1].base
        if (self.allocator is not None and base != self._prepared_after
                and index - base >= self.units_per_file // 2):
            self._prepared_after = base
            nxt = base + self.units_per_file
            self.allocator.prepare(self.directory / f"{nxt * UNIT_SIZE:020d}", self.file_bytes)

    def prepare_first(self) -> None:
        """No file yet, but units will come (a delayed or timer message will land here):
        have the allocator make the first file off the loop meanwhile."""
        if self.files or self.allocator is None or self._first_asked:
            return
        self._first_asked = True
        base = self.max_offset - self.max_offset % self.units_per_file
        self.allocator.prepare(self.directory / f"{base * UNIT_SIZE:020d}", self.file_bytes)

    def append(self, phy_offset: int, size: int, tags_code: int) -> int:
        """Append a unit; return its queue offset."""
        index = self.max_offset
        f = self.files[-1] if self.files else None
        if f is None or index >= f.base + self.units_per_file:
            f = self._open(index - index % self.units_per_file, create=True)
        UNIT.pack_into(f.mm, (index - f.base) * UNIT_SIZE, phy_offset, size, tags_code)
        self._dirty.add(f.base)
        self.max_offset = index + 1
        return index

    def skip_to(self, index: int) -> None:
        """Continue at ``index`` > ``max_offset`` (units were lost below it): the lost
        units of ``index``'s file read as holes, so ``load`` still finds the end (a
        zero unit would end the queue there) and the work is bounded by one file."""
        start = max(self.max_offset, index - index % self.units_per_file)
        self.max_offset = start
        while self.max_offset < index:
            self.append(*HOLE)

    def get(self, index: int) -> tuple[int, int, int] | None:
        """(phy offset, size, tagsCode) at ``index``, or None outside the queue."""
        if index >= self.max_offset:
            return None
        f = self._file_for(index)
        if f is None:
            return None
        return UNIT.unpack_from(f.mm, (index - f.base) * UNIT_SIZE)

    def units(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` units from ``start`` (stops at a file end; call again)."""
        end = min(self.max_offset, start + count)
        if start >= end or not self.files or start < self.files[0].base:
            return []
        f = self._file_for(start)
        if f is None:  # inside a lost file: holes up to the next file (readers skip them)
            nxt = next((g.base for g in self.files if g.base > start), end)
            return [HOLE] * (min(end, nxt) - start)
        end = min(end, f.base + self.units_per_file)
        mm, base = f.mm, f.base
        return [UNIT.unpack_from(mm, (i - base) * UNIT_SIZE) for i in range(start, end)]

    def truncate_from_phy(self, phy_end: int) -> int:
        """Drop units pointing at or past ``phy_end`` (the recovered log end)."""
        removed = 0
        while self.max_offset > self.min_offset:
            unit = self.get(self.max_offset - 1)
            if unit is None or 0 <= unit[0] and unit[0] + unit[1] <= phy_end:
                break
            f = self._file_for(self.max_offset - 1)
            assert f is not None
            UNIT.pack_into(f.mm, (self.max_offset - 1 - f.base) * UNIT_SIZE, 0, 0, 0)
            self._dirty.add(f.base)
            self.max_offset -= 1
            removed += 1
        while len(self.files) > 1 and self.files[-1].base >= self.max_offset:
            f = self.files.pop()
            f.mm.close()
            os.close(f.fd)
            f.path.unlink()
        return removed

    def void_from_phy(self, phy_end: int) -> int:
        """Turn the units at the tail pointing at or past ``phy_end`` into holes (their
        records were rolled back); return how many."""
        voided = 0
        index = self.max_offset - 1
        while index >= self.min_offset:
            unit = self.get(index)
            if unit is None or unit[0] < 0 or unit[0] + unit[1] <= phy_end:
                break
            f = self._file_for(index)
            assert f is not None
            UNIT.pack_into(f.mm, (index - f.base) * UNIT_SIZE, *HOLE)
            self._dirty.add(f.base)
            voided += 1
            index -= 1
        return voided

    def flush(self) -> None:
        """Sync dirty files (blocking: call from a thread; ``sync_mapped``)."""
        dirty, self._dirty = self._dirty, set()
        try:
            for f in list(self.files):
                if f.base in dirty:
                    sync_mapped(f.fd)
        except (OSError, ValueError):
            self._dirty |= dirty  # not synced: the next checkpoint tries again
            raise

    def delete_below_phy(self, phy_min: int) -> int:
        """Delete whole files whose last unit points below ``phy_min``; return count."""
        deleted = 0
        while len(self.files) > 1:
            f = self.files[0]
            i = self.units_per_file - 1
            last = UNIT.unpack_from(f.mm, i * UNIT_SIZE)
            while last[0] < 0 and i > 0:  # a hole: the last real unit decides
                i -= 1
                last = UNIT.unpack_from(f.mm, i * UNIT_SIZE)
            if last[1] == 0 or last[0] >= phy_min:
                break
            f.mm.close()
            os.close(f.fd)
            f.path.unlink()
            self.files.pop(0)
            deleted += 1
        return deleted

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int], int | None]) -> int:
        """Binary search the queue offset whose message store time is nearest ``timestamp``."""
        lo, hi = self.min_offset, self.max_offset - 1
        if hi < lo:
            return self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            t = store_time_of(mid)
            if t is None or t < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo


def compute_tags_code(topic: str, props: dict[str, str]) -> int:
    """tagsCode of a consume-queue unit: the due ms for the schedule and timer topics
    (``KAIROS_DELIVER_MS`` / ``TIMER_OUT_MS``), else the tag hash.

    Total: a deliver time that is not a plain decimal int64 counts as 0 (due at once),
    so no property value can make the unit unencodable after the append.
    """
    due = (DELIVER_TIME if topic == SCHEDULE_TOPIC
           else TIMER_OUT_MS if topic == TIMER_TOPIC else None)
    if due is not None and due in props:
        raw = props[due]
        if raw.isascii() and raw.isdigit() and len(raw) <= 18:
            return int(raw)
        return 0
    return tags_code(props.get(TAGS))


def load_queues(cq_dir: Path, units_per_file: int, allocator: FileAllocator | None = None
                ) -> dict[tuple[str, int], ConsumeQueue]:
    """Every consume queue found under ``cq_dir``, loaded. Existing directories load as
    they are (no name check: an older broker's names must not stop a start)."""
    queues: dict[tuple[str, int], ConsumeQueue] = {}
    if not cq_dir.is_dir():
        return queues
    for tdir in cq_dir.iterdir():
        if not tdir.is_dir():
            continue
        for qdir in tdir.iterdir():
            if qdir.name.isdigit() and qdir.is_dir():
                cq = ConsumeQueue(cq_dir, tdir.name, int(qdir.name), units_per_file, allocator)
                queues[(tdir.name, int(qdir.name))] = cq
                cq.load()
    return queues
