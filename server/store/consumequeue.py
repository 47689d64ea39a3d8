"""ConsumeQueue: the per-(topic, queue) index of 20-byte units into the commit log.

Owns: files ``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` of
``units_per_file`` units each, memory-mapped; append, read, truncate, flush, recovery
of the valid prefix and deletion of files wholly below the commit log's minimum.

Invariants:
* The logical queue offset of a unit is its index; ``max_offset`` is the next index to
  write; ``min_offset`` is the first index still on disk.
* Units are written strictly in order, so valid units form a prefix of each file and a
  unit with ``size == 0`` marks the end (files are preallocated as zeros).
* Unit layout is ``schema.CqUnit`` (int64 phy offset, int32 size, int64 tagsCode);
  for SCHEDULE_TOPIC_XXXX the tagsCode is the deliver timestamp in ms.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from .files import preallocate

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20


class _File:
    __slots__ = ("base", "path", "fd", "mm")

    def __init__(self, base: int, path: Path, fd: int, mm: mmap.mmap) -> None:
        self.base = base  # first unit index in this file
        self.path = path
        self.fd = fd
        self.mm = mm


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int) -> None:
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
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        if os.fstat(fd).st_size < self.file_bytes:
            preallocate(fd, self.file_bytes)
        mm = mmap.mmap(fd, self.file_bytes)
        f = _File(base, path, fd, mm)
        self.files.append(f)
        return f

    def load(self) -> None:
        """Open existing files and find the end of the valid prefix."""
        if not self.directory.is_dir():
            return
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit())
        for name in names:
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
        if not self.files or index < self.files[0].base:
            return None
        i = (index - self.files[0].base) // self.units_per_file
        return self.files[i] if i < len(self.files) else None

    # ------------------------------------------------------------------ data

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
        f = self._file_for(start)
        if f is None or start >= end:
            return []
        end = min(end, f.base + self.units_per_file)
        mm, base = f.mm, f.base
        return [UNIT.unpack_from(mm, (i - base) * UNIT_SIZE) for i in range(start, end)]

    def truncate_from_phy(self, phy_end: int) -> int:
        """Drop units pointing at or past ``phy_end`` (the recovered log end)."""
        removed = 0
        while self.max_offset > self.min_offset:
            unit = self.get(self.max_offset - 1)
            if unit is None or unit[0] + unit[1] <= phy_end:
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

    def flush(self) -> None:
        """msync dirty files (blocking: call from a thread)."""
        dirty, self._dirty = self._dirty, set()
        for f in self.files:
            if f.base in dirty:
                f.mm.flush()

    def delete_below_phy(self, phy_min: int) -> int:
        """Delete whole files whose last unit points below ``phy_min``; return count."""
        deleted = 0
        while len(self.files) > 1:
            f = self.files[0]
            last = UNIT.unpack_from(f.mm, (self.units_per_file - 1) * UNIT_SIZE)
            if last[1] == 0 or last[0] >= phy_min:
                break
            f.mm.close()
            os.close(f.fd)
            f.path.unlink()
            self.files.pop(0)
            deleted += 1
        return deleted

    def offset_by_time(self, timestamp: int, store_time_of: callable) -> int:  # type: ignore[valid-type]
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
