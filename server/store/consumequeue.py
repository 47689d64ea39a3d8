"""ConsumeQueue: the per-(topic, queue) index of 20-byte units into the commit log.

Owns: files ``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` of
``units_per_file`` units each (RocketMQ's layout and names; a file grows to its full
size in steps while it fills, so only the newest file of a queue may be shorter),
memory-mapped through the store's ``MappedFiles`` (mapped.py: opened on use, the least
recently used closed, so descriptors stay bounded whatever the number of queues);
append, read, truncate, flush, recovery of the valid prefix and deletion of files
wholly below the commit log's minimum; ``compute_tags_code`` (a unit's tagsCode) and
``load_queues`` (every queue on disk, read without keeping a file open).

Invariants:
* The logical queue offset of a unit is its index; ``max_offset`` is the next index to
  write; ``min_offset`` is the first index still on disk.
* Units are written strictly in order, so valid units form a prefix of each file and a
  unit with ``size == 0`` (or the end of the file) marks the end.
* Every byte a unit is stored into was written as zeros before it was mapped (no sparse
  file, no unwritten extent: an mmap store cannot SIGBUS on a full disk, allocate.py
  says why zeros). ``ensure_room`` makes the bytes of the next unit allocated and mapped
  *before* the store appends the record it will index (``OSError`` if the disk is full:
  the put is refused before anything is appended), and once half of what a file has is
  used asks the ``FileAllocator`` to grow it by the next step off the loop; once half
  of a file's units are used, to make the next file's first step.
* A unit whose record was rolled back (a failed commit-log write) becomes a *hole*
  ``(-1, 1, 0)``: its queue offset is never reused, so a consumer that saw it cannot
  skip the next message; readers treat a hole like a unit below the log's minimum.
* Unit layout is ``schema.CqUnit`` (int64 phy offset, int32 size, int64 tagsCode);
  for SCHEDULE_TOPIC_XXXX and the timer topic the tagsCode is the due timestamp in ms.
* ``read_units`` (a run of units), ``ConsumeQueue.append`` (one unit) and
  ``compute_tags_code`` are the reference; their native twins (``_consumequeue.pyx``: the
  run read from the map in one pass, the unit packed into the map, the due time read as
  C digits) replace them when ``native.py`` chooses it; the native put calls the unit
  append as a C function while ``ConsumeQueue.append`` is the twin's.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from concurrent import futures
from pathlib import Path
from types import ModuleType, SimpleNamespace

from kairosmq.protocol import native
from kairosmq.protocol.message import tags_code
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, INT64_DIGITS, TAGS, parse_decimal
from kairosmq.protocol.timer import TIMER_OUT_MS

from .allocate import SUFFIX, FileAllocator, create_zeroed, extend_zeroed, first_size, next_size
from .files import segment_name, sync_filesystem, sync_path
from .mapped import MappedFile, MappedFiles

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
HOLE = (-1, 1, 0)  # a rolled-back unit (phy < 0: below any log minimum)


def read_units(buf: mmap.mmap | bytes, first: int, count: int) -> list[tuple[int, int, int]]:
    """``count`` units of ``buf`` (a queue file's map) from its unit ``first``, in order;
    ``struct.error`` if they run past its end (the native twin reads them in one pass)."""
    return [UNIT.unpack_from(buf, (first + i) * UNIT_SIZE) for i in range(count)]


_SCAN_IN_MEMORY = 64 << 10  # a newest file up to this size is read whole at load
_OWN_MAPS = 8  # mappings of a queue built without a store's MappedFiles (tests, tools)


class _File(MappedFile):
    __slots__ = ("base", "target", "growing", "ready_until")

    def __init__(self, base: int, path: str, size: int) -> None:
        super().__init__(path, size)
        self.base = base  # first unit index in this file
        self.target = size  # the size asked of the allocator (>= size once it is done)
        self.growing: futures.Future[None] | None = None  # the growth step in the making
        # ensure_room has nothing to do for a unit index below this while the file stays
        # mapped (room in the mapping, no growth step or next file to ask for yet); an
        # upper bound only ever lowered by recomputing it, so a stale value stays safe
        self.ready_until = -1


class ConsumeQueue:
    __slots__ = (
        "allocator",
        "maps",
        "_prepared_after",
        "_first_asked",
        "topic",
        "queue_id",
        "key",
        "_dir",
        "units_per_file",
        "file_bytes",
        "files",
        "max_offset",
        "_dirty",
        "_tail_end",
    )

    def __init__(
        self,
        directory: str | Path,
        topic: str,
        queue_id: int,
        units_per_file: int,
        allocator: FileAllocator | None = None,
        maps: MappedFiles | None = None,
    ) -> None:
        self.allocator = allocator
        self.maps = maps if maps is not None else MappedFiles(_OWN_MAPS)
        self._dirty = self.maps.dirty  # files written since their last sync (shared)
        self._prepared_after = -1  # base of the file whose successor was asked for
        self._first_asked = False  # prepare_first asked for the first file
        self.topic = topic
        self.queue_id = queue_id
        self.key = f"{topic}/{queue_id}"  # its name in the checkpoint's table
        # paths as str: a broker may load 100k queues at start (pathlib: ~25 µs a join)
        self._dir = os.path.join(directory, topic, str(queue_id))
        self.units_per_file = units_per_file
        self.file_bytes = units_per_file * UNIT_SIZE
        self.files: list[_File] = []
        self.max_offset = 0
        # where the last unit ends in the log (phy + size; -1 for a hole; None: not known
        # without reading it): lets a rollback or a recovery pass over this queue unread
        self._tail_end: int | None = None

    # ------------------------------------------------------------------ files

    @property
    def directory(self) -> Path:
        return Path(self._dir)

    def _path(self, base: int) -> str:
        return f"{self._dir}/{segment_name(base * UNIT_SIZE)}"

    def _create(self, base: int) -> _File:
        """The file starting at unit ``base``, its first step allocated (``OSError`` if
        the disk is full: nothing is left behind)."""
        os.makedirs(self._dir, exist_ok=True)
        path = self._path(base)
        size = first_size(self.file_bytes)
        fd = (
            self.allocator.take(Path(path), size)
            if self.allocator is not None
            else create_zeroed(Path(path), size)
        )
        os.close(fd)
        f = _File(base, path, size)
        self.files.append(f)
        return f

    def _drop(self, f: _File) -> None:
        """Close and delete ``f`` (its growth job, if any, finds the file gone)."""
        if f.growing is not None:
            f.growing.cancel()
            f.growing = None
        self.maps.release(f)
        self._dirty.discard(f)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.path)

    def load(self) -> None:
        """Find the files and the end of the valid prefix; no file stays open."""
        try:
            names = os.listdir(self._dir)
        except (FileNotFoundError, NotADirectoryError):
            return
        bases: list[int] = []
        for name in names:
            if name.endswith(SUFFIX):  # a file in the making when the broker stopped
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._dir, name))
            elif name.isdigit():
                bases.append(int(name) // UNIT_SIZE)
        bases.sort()
        for i, base in enumerate(bases):
            path = self._path(base)
            if i + 1 < len(bases):
                size = os.stat(path).st_size
                if size == 0:  # a crash between creation and allocation
                    os.unlink(path)
                    continue
                self.files.append(_File(base, path, size))
                continue
            self._load_tail(base, path)

    def _load_tail(self, base: int, path: str) -> None:
        """Read the newest file's valid prefix (``max_offset``) and its last unit."""
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            n = min(size // UNIT_SIZE, self.units_per_file)
            if size and n * UNIT_SIZE <= _SCAN_IN_MEMORY:
                buf = os.pread(fd, n * UNIT_SIZE, 0)

                def unit(i: int) -> tuple[int, int, int]:
                    return UNIT.unpack_from(buf, i * UNIT_SIZE)
            else:

                def unit(i: int) -> tuple[int, int, int]:
                    return UNIT.unpack(os.pread(fd, UNIT_SIZE, i * UNIT_SIZE))

            lo, hi = 0, n
            while lo < hi:  # first unit whose size is 0
                mid = (lo + hi) // 2
                if unit(mid)[1] > 0:
                    lo = mid + 1
                else:
                    hi = mid
            last = unit(lo - 1) if lo > 0 else None
        finally:
            os.close(fd)
        if size == 0:  # a crash between creation and allocation
            os.unlink(path)
            if self.files:  # the file before it holds the end
                self._load_tail(self.files[-1].base, self.files.pop().path)
            return
        self.files.append(_File(base, path, size))
        self.max_offset = base + lo
        if last is not None:
            self._tail_end = last[0] + last[1] if last[0] >= 0 else -1

    def close(self) -> None:
        for f in self.files:
            if f.growing is not None:
                f.growing.cancel()
                f.growing = None
            self.maps.release(f)
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

    def _room(self, f: _File, end: int) -> mmap.mmap:
        """``f``'s mapping, covering its first ``end`` bytes: grown now (on the caller's
        thread) if the allocator has not made them yet (``OSError`` if the disk is full)."""
        mm = self.maps.map(f)
        if len(mm) >= end:
            return mm
        job, f.growing = f.growing, None
        if job is not None and not job.cancel():
            futures.wait([job])  # one step of zeros being written: never two writers
        if os.stat(f.path).st_size < end:
            want = min(self.file_bytes, max(end, next_size(f.size, self.file_bytes)))
            try:
                extend_zeroed(f.path, want)
            finally:
                f.target = f.size  # asked again from what the file has, when half used
        mm = self.maps.remap(f)
        f.target = max(f.target, f.size)
        return mm

    # ------------------------------------------------------------------ data

    def ensure_room(self) -> None:
        """Allocate and map the bytes the next unit goes into (``OSError`` if the disk is
        full); ask for the next growth step and the next file ahead of need."""
        files = self.files
        if files:
            f = files[-1]
            if self.max_offset < f.ready_until and f.mm is not None:
                self.maps.touch(f)  # the common case: room mapped, nothing to ask yet
                return
        self._make_room(self.max_offset)

    def _make_room(self, index: int) -> None:
        upf = self.units_per_file
        f = self.files[-1] if self.files else None
        if f is None or index >= f.base + upf:
            f = self._create(index - index % upf)
        base = f.base
        end = (index - base + 1) * UNIT_SIZE
        mm = f.mm
        if mm is None or len(mm) < end:
            mm = self._room(f, end)
        else:
            self.maps.touch(f)
        ready = base + min(upf, len(mm) // UNIT_SIZE)  # units that fit in the mapping
        alloc = self.allocator
        if alloc is not None:
            job = f.growing
            if job is not None and job.done():
                f.growing = None
                if job.cancelled() or job.exception() is not None:
                    f.target = f.size  # failed (a full disk): asked again, else grown on need
            if f.growing is None and f.target < self.file_bytes:
                if end * 2 > f.target:  # half of what the file will have is used
                    f.target = next_size(f.target, self.file_bytes)
                    f.growing = alloc.grow(f.path, f.target)
                else:
                    ready = min(ready, base + f.target // (2 * UNIT_SIZE))
            if base != self._prepared_after:
                if index - base >= upf // 2:
                    self._prepared_after = base
                    alloc.prepare(Path(self._path(base + upf)), first_size(self.file_bytes))
                else:
                    ready = min(ready, base + upf // 2)
        f.ready_until = ready

    def prepare_first(self) -> None:
        """No file yet, but units will come (a delayed or timer message will land here):
        have the allocator make the first file off the loop meanwhile."""
        if self.files or self.allocator is None or self._first_asked:
            return
        self._first_asked = True
        base = self.max_offset - self.max_offset % self.units_per_file
        self.allocator.prepare(Path(self._path(base)), first_size(self.file_bytes))

    def append(self, phy_offset: int, size: int, tags_code: int) -> int:
        """Append a unit; return its queue offset. After ``ensure_room`` nothing here can
        fail; without it (replay) the room is made here (``OSError`` if it cannot be)."""
        index = self.max_offset
        f = self.files[-1] if self.files else None
        if f is None or index >= f.base + self.units_per_file:
            f = self._create(index - index % self.units_per_file)
        pos = (index - f.base) * UNIT_SIZE
        mm = f.mm
        if mm is None or len(mm) < pos + UNIT_SIZE:
            mm = self._room(f, pos + UNIT_SIZE)
        UNIT.pack_into(mm, pos, phy_offset, size, tags_code)
        self._dirty.add(f)
        self.max_offset = index + 1
        self._tail_end = phy_offset + size if phy_offset >= 0 else -1
        return index

    def skip_to(self, index: int) -> None:
        """Continue at ``index`` > ``max_offset`` (units were lost below it): the lost
        units of ``index``'s file read as holes, so ``load`` still finds the end (a
        zero unit would end the queue there) and the work is bounded by one file."""
        start = max(self.max_offset, index - index % self.units_per_file)
        self.max_offset = start
        while self.max_offset < index:
            self.append(*HOLE)

    def _unit_at(self, f: _File, index: int) -> tuple[int, int, int] | None:
        mm = self.maps.map(f)
        pos = (index - f.base) * UNIT_SIZE
        if pos + UNIT_SIZE > len(mm):
            return None
        return UNIT.unpack_from(mm, pos)

    def get(self, index: int) -> tuple[int, int, int] | None:
        """(phy offset, size, tagsCode) at ``index``, or None outside the queue."""
        if index >= self.max_offset:
            return None
        f = self._file_for(index)
        if f is None:
            return None
        return self._unit_at(f, index)

    def units(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` units from ``start`` (stops at a file end; call again)."""
        buf, first, n = self.unit_run(start, count)
        return [HOLE] * n if buf is None else read_units(buf, first, n)

    def unit_run(self, start: int, count: int) -> tuple[mmap.mmap | None, int, int]:
        """Where up to ``count`` units from ``start`` are, without reading them: (the
        queue file's map, the index of ``start`` in it, how many), stopping at a file
        end; ``(None, 0, k)``: ``k`` holes (inside a lost file: readers skip them);
        ``(None, 0, 0)``: none."""
        end = min(self.max_offset, start + count)
        if start >= end or not self.files or start < self.files[0].base:
            return None, 0, 0
        f = self._file_for(start)
        if f is None:  # inside a lost file: holes up to the next file (readers skip them)
            nxt = next((g.base for g in self.files if g.base > start), end)
            return None, 0, min(end, nxt) - start
        mm = self.maps.map(f)
        base = f.base
        end = min(end, base + self.units_per_file, base + len(mm) // UNIT_SIZE)
        return mm, start - base, max(0, end - start)

    def _write_unit(self, index: int, unit: tuple[int, int, int]) -> None:
        f = self._file_for(index)
        assert f is not None
        UNIT.pack_into(self.maps.map(f), (index - f.base) * UNIT_SIZE, *unit)
        self._dirty.add(f)

    def truncate_from_phy(self, phy_end: int) -> int:
        """Drop units pointing at or past ``phy_end`` (the recovered log end)."""
        tail = self._tail_end
        if tail is not None and 0 <= tail <= phy_end:
            return 0  # the last unit is a record below the end: nothing to drop
        removed = 0
        while self.max_offset > self.min_offset:
            unit = self.get(self.max_offset - 1)
            if unit is None or 0 <= unit[0] and unit[0] + unit[1] <= phy_end:
                break
            self._write_unit(self.max_offset - 1, (0, 0, 0))
            self.max_offset -= 1
            removed += 1
        while len(self.files) > 1 and self.files[-1].base >= self.max_offset:
            self._drop(self.files.pop())
        self._tail_end = None
        return removed

    def void_from_phy(self, phy_end: int) -> int:
        """Turn the units at the tail pointing at or past ``phy_end`` into holes (their
        records were rolled back); return how many."""
        tail = self._tail_end
        if tail is not None and tail <= phy_end:
            return 0  # the last unit is a hole or a record below the rollback point
        voided = 0
        index = self.max_offset - 1
        while index >= self.min_offset:
            unit = self.get(index)
            if unit is None or unit[0] < 0 or unit[0] + unit[1] <= phy_end:
                break
            self._write_unit(index, HOLE)
            voided += 1
            index -= 1
        self._tail_end = None if voided == 0 else -1
        return voided

    def flush(self) -> None:
        """Sync this queue's dirty files (blocking: call from a thread; ``sync_path``);
        the store syncs all queues at once with ``sync_dirty``."""
        sync_dirty(self._dirty, [f for f in self.files if f in self._dirty])

    def delete_below_phy(self, phy_min: int) -> int:
        """Delete whole files whose last unit points below ``phy_min``; return count."""
        deleted = 0
        while len(self.files) > 1:
            f = self.files[0]
            mm = self.maps.map(f)
            i = min(self.units_per_file, len(mm) // UNIT_SIZE) - 1
            last = UNIT.unpack_from(mm, i * UNIT_SIZE)
            while last[0] < 0 and i > 0:  # a hole: the last real unit decides
                i -= 1
                last = UNIT.unpack_from(mm, i * UNIT_SIZE)
            if last[1] == 0 or last[0] >= phy_min:
                break
            self._drop(f)
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


def sync_dirty(
    dirty: set[MappedFile], files: Iterable[MappedFile], syncfs_dir: Path | None = None
) -> int:
    """Make ``files`` (members of the shared ``dirty`` set) durable and take them out of
    it; return how many. Blocking: the checkpoint's thread. With ``syncfs_dir``, one
    ``syncfs`` of its file system stands for the per-file syncs. A file is taken out
    *before* it is synced, so a store into it meanwhile marks it again (the next
    checkpoint syncs it); on failure every file taken goes back (synced again later)."""
    taken = list(files)
    dirty.difference_update(taken)
    try:
        if syncfs_dir is not None:
            sync_filesystem(syncfs_dir)
        else:
            for f in taken:
                sync_path(f.path)  # a file deleted since (retention): nothing to keep
    except (OSError, ValueError):
        dirty.update(taken)
        raise
    return len(taken)


def compute_tags_code(topic: str, props: dict[str, str]) -> int:
    """tagsCode of a consume-queue unit: the due ms for the schedule and timer topics
    (``KAIROS_DELIVER_MS`` / ``TIMER_OUT_MS``), else the tag hash.

    Total: a deliver time that is not a plain decimal int64 counts as 0 (due at once),
    so no property value can make the unit unencodable after the append.
    """
    due = (
        DELIVER_TIME if topic == SCHEDULE_TOPIC else TIMER_OUT_MS if topic == TIMER_TOPIC else None
    )
    if due is not None and due in props:
        return parse_decimal(props[due], INT64_DIGITS) or 0
    return tags_code(props.get(TAGS))


def load_queues(
    cq_dir: Path,
    units_per_file: int,
    allocator: FileAllocator | None = None,
    maps: MappedFiles | None = None,
) -> dict[tuple[str, int], ConsumeQueue]:
    """Every consume queue found under ``cq_dir``, loaded (no file left open). Existing
    directories load as they are (no name check: an older broker's names must not stop
    a start)."""
    queues: dict[tuple[str, int], ConsumeQueue] = {}
    if not cq_dir.is_dir():
        return queues
    root = str(cq_dir)
    with os.scandir(root) as topics:
        tdirs = [(t.name, t.path) for t in topics if t.is_dir()]
    for topic, tdir in tdirs:
        with os.scandir(tdir) as qs:
            qids = [int(q.name) for q in qs if q.name.isdigit() and q.is_dir()]
        for qid in qids:
            cq = ConsumeQueue(root, topic, qid, units_per_file, allocator, maps)
            queues[(topic, qid)] = cq
            cq.load()
    return queues


# ------------------------------------------------------------------ the native twin

# ``read_units``, ``ConsumeQueue.append`` and ``compute_tags_code`` above are the reference
# (tests/server/test_native_consumequeue.py holds the twins to them); the twin's
# (``_consumequeue.pyx``) replace them when protocol/native.py chooses it.
reference = SimpleNamespace(
    read_units=read_units, append=ConsumeQueue.append, compute_tags_code=compute_tags_code
)


def _load_twin() -> ModuleType:
    from . import _consumequeue  # type: ignore[attr-defined]

    twin: ModuleType = _consumequeue  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    read_units = _twin.read_units
    compute_tags_code = _twin.compute_tags_code
    ConsumeQueue.append = _twin.append  # type: ignore[method-assign]
