"""MappedFiles: the bounded set of open consume-queue mappings (least recently used closed).

Owns: ``MappedFile`` (a store file that may or may not be mapped right now: its path,
its allocated size, its mapping) and ``MappedFiles`` (opens a file's mapping on first
use, closes the least recently used one when ``capacity`` are open), so the descriptors
and mappings of the consume queues stay bounded whatever the number of queues
(when each queue held two descriptors for ever, a broker with a few hundred queues ran
out of them).

Invariants:
* At most ``capacity`` mappings are open. A mapping costs one descriptor (CPython's
  ``mmap`` keeps a duplicate of the file's; the one used to map is closed at once;
  Python 3.13's ``trackfd=False`` drops the duplicate too) and one kernel map area.
* A mapping covers exactly the file's size when it was made (``mmap`` refuses more):
  the bytes of a store file are written (zeros, allocate.py) before they become part of
  the file, so a mapping never covers a hole or an unwritten extent and a store into it
  cannot SIGBUS on a full disk. A file grown since is mapped again (``remap``).
* Closing a mapping loses nothing: its dirty pages stay in the page cache and are
  written by the next ``fdatasync`` of the file through any descriptor (the checkpoint
  opens the file by path for that: files.sync_path).
* Only one thread maps and closes at a time (the event loop; the store's recovery runs
  in a thread before the broker serves). ``dirty`` is the exception: the loop adds to
  it, the checkpoint's thread takes from it (single set operations, atomic under the
  GIL).
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
from collections import OrderedDict
from typing import Any  # Any: mmap's keyword arguments (differ by Python version)

MIN_CAPACITY = 4  # a caller may use two files at once (a unit read while another maps)
DEFAULT_CAPACITY = 1024

# Python 3.13: a mapping without its own duplicate of the descriptor
_MMAP_KW: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class MappedFile:
    """A store file: its path, the bytes allocated on disk as far as the loop knows them
    (``size``, refreshed whenever it is mapped) and its mapping while it is open."""

    __slots__ = ("path", "size", "mm")

    def __init__(self, path: str, size: int) -> None:
        self.path = path  # a str: cheaper than a Path for 100k files
        self.size = size
        self.mm: mmap.mmap | None = None


class MappedFiles:
    """At most ``capacity`` open mappings; ``map`` opens on demand, LRU closes."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lru: OrderedDict[MappedFile, None] = OrderedDict()
        # files stored into since their last sync, mapped or not (the checkpoint's
        # thread takes them out before it syncs them: consumequeue.sync_dirty)
        self.dirty: set[MappedFile] = set()
        # mark an open mapping most recently used (the hot path's one call)
        self.touch = self._lru.move_to_end
        self.capacity = capacity
        self.maps = 0  # mappings made (first uses and re-opens after a close)
        self.evictions = 0  # mappings closed to stay within capacity

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._capacity = max(MIN_CAPACITY, int(value))
        self._shrink(self._capacity)

    @property
    def open_count(self) -> int:
        return len(self._lru)

    def map(self, f: MappedFile) -> mmap.mmap:
        """The mapping of ``f`` (made now if closed); ``OSError`` if it cannot be opened."""
        mm = f.mm
        if mm is not None:
            self._lru.move_to_end(f)
            return mm
        self._shrink(self._capacity - 1)
        fd = os.open(f.path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size <= 0:
                raise OSError(errno.EINVAL, "an empty store file cannot be mapped", str(f.path))
            mm = mmap.mmap(fd, size, **_MMAP_KW)
        finally:
            os.close(fd)
        f.mm, f.size = mm, size
        self._lru[f] = None
        self.maps += 1
        return mm

    def remap(self, f: MappedFile) -> mmap.mmap:
        """Map ``f`` again (it grew): the new mapping covers its current size."""
        self.release(f)
        return self.map(f)

    def release(self, f: MappedFile) -> None:
        """Close ``f``'s mapping if open (before the file is deleted or truncated)."""
        if f.mm is not None:
            self._lru.pop(f, None)
            f.mm.close()
            f.mm = None

    def close(self) -> None:
        """Close every mapping (the store is closing)."""
        self._shrink(0, evicting=False)

    def _shrink(self, keep: int, evicting: bool = True) -> None:
        while len(self._lru) > max(0, keep):
            old, _ = self._lru.popitem(last=False)
            if old.mm is not None:
                old.mm.close()
                old.mm = None
            self.evictions += evicting
