"""KeyIndex: an on-disk hash index from message ids and keys to commit-log offsets.

Owns: the files under ``<store>/index/`` (RocketMQ's IndexFile, simplified), the store
dispatcher that indexes each live record's ``UNIQ_KEY`` (the client msgId) and every
space-separated token of ``KEYS``, ``open`` (load, then index the commit log from where
the index ends: continues after a crash, rebuilds a lost index), ``lookup`` and retention.

One file per ``capacity`` entries, named by the first commit-log offset it indexes::

    header (64 B): magic "KIDX", version, slot count, capacity, entry count,
                   first phy offset, end phy offset (records below it are indexed)
    slots:   slot count x int32   newest entry number + 1 in the slot's chain, 0 = empty
    entries: capacity x (uint32 key hash, int64 phy offset, int32 previous entry + 1)

Invariants:
* Memory does not grow with the log: only the file being written is mapped; older
  files are read with ``pread`` by lookups and deleted once the commit log drops
  every record they point to.
* Entries are hints, never answers: a hash collision, a torn write or a record cut by
  recovery yields a candidate the caller checks by reading the record. So the index
  never returns a wrong message; after a power loss it may miss one.
* Only live dispatches are indexed; ``open`` indexes ``[end, log end)`` itself (records
  replayed by the store's recovery included), clamping ``end`` into the log first.
* A chain only points backwards (``prev < entry``), so a corrupt chain ends, never loops.
* Files are allocated for real (written as zeros, the next one off the loop once the
  current one is half full: allocate.py), never sparse: a store into the mmap cannot
  SIGBUS on a full disk. A file that cannot be allocated leaves the index behind
  (entries skipped, ``store.allocation_failed`` logged, retried after ``RETRY_ALLOC``
  seconds); lookups still verify every hit, so a missing entry costs a miss, nothing else.
* ``KeyIndex.dispatch`` here is the reference; its native twin (``_index.pyx``, chosen by
  ``protocol/native.py``) writes the same entries into the mapped file in one C function
  and hands the dispatches that fill a file or reach its half to it
  (tests/server/test_native_index.py); the native put calls it as a C function with
  the values it put into the request (tests/server/test_native_message_store.py).
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

from kairosmq.protocol import native
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.properties import KEYS, UNIQ_KEY
from kairosmq.protocol.schema import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

from ..observe.logs import get_logger
from .allocate import FileAllocator, remove_leftovers
from .files import is_segment_name, segment_name, sync_mapped

if TYPE_CHECKING:
    from .message_store import DispatchRequest, MessageStore

MAGIC = b"KIDX"
HEADER_SIZE = 64
_HEADER = struct.Struct(">4sIIIIqq")
_COUNT_POS = 16
_END_POS = 28
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ENTRY = struct.Struct(">Iqi")
_SIZE_MAGIC = struct.Struct(">iI")
SCAN_WINDOW = 8 << 20
KIND_UNIQ = "U"
KIND_KEY = "K"
_SEED_UNIQ = zlib.crc32(b"U\x00")
_SEED_KEY = zlib.crc32(b"K\x00")
RETRY_ALLOC = 5.0
_NEXT = "next"  # the name the next file is prepared under (allocate.py adds ".alloc")


def _mm_read(mm: mmap.mmap, pos: int, n: int) -> bytes:
    return mm[pos : pos + n]


def _fd_read(fd: int, pos: int, n: int) -> bytes:
    return os.pread(fd, n, pos)


def key_hash(kind: str, key: str) -> int:
    """Stable 32-bit hash of a key of a kind (``U`` msgId, ``K`` key): CRC-32 of
    ``kind NUL key`` in UTF-8."""
    return zlib.crc32(key.encode(), _SEED_UNIQ if kind == KIND_UNIQ else _SEED_KEY)


@dataclass(slots=True)
class _File:
    path: Path
    first_phy: int
    slots: int
    capacity: int
    count: int
    end_phy: int
    fd: int = -1
    mm: mmap.mmap | None = None
    entries_pos: int = 0

    def __post_init__(self) -> None:
        self.entries_pos = HEADER_SIZE + self.slots * 4


class KeyIndex:
    # slotted: the native put's index dispatch reads and writes its fields in place
    # (_index.pyx)
    __slots__ = (
        "directory",
        "store",
        "slots",
        "capacity",
        "files",
        "_cur",
        "_lock",
        "indexed",
        "log",
        "_alloc_retry_at",
        "allocator",
    )

    def __init__(
        self, directory: Path, store: MessageStore, *, slots: int = 1 << 17, capacity: int = 1 << 19
    ) -> None:
        self.directory = directory
        self.store = store
        self.slots = slots
        self.capacity = capacity
        self.files: list[_File] = []
        self._cur: _File | None = None
        self._lock = threading.Lock()  # mmap flush (checkpoint thread) vs. roll/close
        self.indexed = 0
        self.log = get_logger("index")
        self._alloc_retry_at = 0.0  # after a failed allocation: skip entries until then
        self.allocator = FileAllocator()  # the next file, made while this one fills

    # ------------------------------------------------------------------ files

    def _size(self, slots: int, capacity: int) -> int:
        return HEADER_SIZE + slots * 4 + capacity * _ENTRY.size

    def _create(self, first_phy: int, end_phy: int) -> _File:
        if self.files and self.files[-1].first_phy >= first_phy:
            first_phy = self.files[-1].first_phy + 1  # names stay unique and sorted
        path = self.directory / segment_name(first_phy)
        path.unlink(missing_ok=True)  # a leftover of a crash: start it over
        fd = self.allocator.take(
            self.directory / _NEXT, self._size(self.slots, self.capacity), name_as=path
        )  # OSError if the disk is full
        f = _File(path, first_phy, self.slots, self.capacity, 0, end_phy, fd)
        f.mm = mmap.mmap(fd, 0)
        _HEADER.pack_into(f.mm, 0, MAGIC, 1, f.slots, f.capacity, 0, first_phy, end_phy)
        self.files.append(f)
        return f

    def _load(self, path: Path) -> _File | None:
        with open(path, "rb") as fh:
            head = fh.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return None
        magic, _v, slots, cap, count, first, end = _HEADER.unpack(head)
        if magic != MAGIC or path.stat().st_size < self._size(slots, cap):
            return None
        return _File(path, first, slots, cap, min(count, cap), end)

    def _map(self, f: _File) -> None:
        f.fd = os.open(f.path, os.O_RDWR)
        f.mm = mmap.mmap(f.fd, 0)

    def _unmap(self, f: _File) -> None:
        with self._lock:
            if f.mm is not None:
                sync_mapped(f.fd)
                f.mm.close()
                f.mm = None
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1

    def open(self) -> dict[str, int]:
        """Load the files and index the commit log from their end (blocking; a thread)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self.directory)
        for p in sorted(self.directory.iterdir()):
            if is_segment_name(p.name):
                f = self._load(p)
                if f is None:  # unreadable: drop it and everything indexed after it
                    p.unlink()
                    break
                self.files.append(f)
        log = self.store.commitlog
        lo, hi = log.min_offset, log.max_offset
        end = self.files[-1].end_phy if self.files else lo
        end = max(lo, min(end, hi))
        if self.files and self.files[-1].count < self.files[-1].capacity:
            self._cur = self.files[-1]
            self._map(self._cur)
        else:
            try:
                self._cur = self._create(end, end)
            except OSError as err:  # a full disk must not stop the start: no index yet
                self._alloc_failed(err)
                return {"index_files": len(self.files), "index_caught_up": 0}
        self._set_end(end)
        before = self.indexed
        self._scan(end, hi)
        self._expire()
        return {"index_files": len(self.files), "index_caught_up": self.indexed - before}

    def flush(self) -> None:
        """Sync the file being written (blocking; the checkpoint thread calls it)."""
        with self._lock:
            if self._cur is not None and self._cur.mm is not None:
                sync_mapped(self._cur.fd)

    def close(self) -> None:
        self.allocator.close()
        if self._cur is not None:
            self._unmap(self._cur)
        self._cur = None
        self.files.clear()

    def _expire(self) -> None:
        """Delete files whose every entry points below the commit log's start."""
        floor = self.store.commitlog.min_offset
        while len(self.files) > 1 and self.files[1].first_phy <= floor:
            self.files.pop(0).path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing

    def dispatch(self, req: DispatchRequest) -> None:
        """Store dispatcher: index a live record (replays are covered by ``open``)."""
        if req.replay or self._cur is None:
            return
        props = req.properties
        self._index(props.get(UNIQ_KEY), props.get(KEYS), req.phy_offset)
        self._set_end(req.phy_offset + req.size)

    def _index(self, uniq: str | None, keys: str | None, phy: int) -> None:
        if uniq:
            self._add(zlib.crc32(uniq.encode(), _SEED_UNIQ), phy)
        if keys:
            for k in keys.split(" "):
                if k:
                    self._add(zlib.crc32(k.encode(), _SEED_KEY), phy)

    def _add(self, h: int, phy: int) -> None:
        """Append an entry and make it its slot's chain head (the hot path: keep it lean)."""
        f = self._cur
        if f is None or f.mm is None:
            return
        if f.count >= f.capacity:
            if time.monotonic() < self._alloc_retry_at:
                return
            try:
                new = self._create(phy, f.end_phy)
            except OSError as err:
                self._alloc_failed(err)
                return
            self._unmap(f)
            f = self._cur = new
            self._expire()
        mm = f.mm
        if mm is None:
            return
        slot_pos = HEADER_SIZE + (h % f.slots) * 4
        n = f.count
        _ENTRY.pack_into(mm, f.entries_pos + n * 16, h, phy, _I32.unpack_from(mm, slot_pos)[0])
        f.count = n = n + 1
        _I32.pack_into(mm, slot_pos, n)
        _I32.pack_into(mm, _COUNT_POS, n)
        self.indexed += 1
        if n == f.capacity >> 1:
            self.allocator.prepare(self.directory / _NEXT, self._size(self.slots, self.capacity))

    def _alloc_failed(self, err: OSError) -> None:
        self._alloc_retry_at = time.monotonic() + RETRY_ALLOC
        self.log.warning(
            "store.allocation_failed", kind="index", path=str(self.directory), error=str(err)
        )

    def _set_end(self, end: int) -> None:
        f = self._cur
        if f is not None and f.mm is not None:
            f.end_phy = end
            _I64.pack_into(f.mm, _END_POS, end)

    def _scan(self, pos: int, hi: int) -> None:
        """Index the records in ``[pos, hi)`` read from the commit log, in windows."""
        log = self.store.commitlog
        seg = log.segment_size
        while pos < hi:
            seg_end = min(hi, (pos // seg + 1) * seg)
            buf = log.read(pos, min(SCAN_WINDOW, seg_end - pos))
            if buf is None:
                return
            off = 0
            while off + 8 <= len(buf):
                size, magic = _SIZE_MAGIC.unpack_from(buf, off)
                if magic == BLANK_MAGIC_CODE:
                    off = seg_end - pos  # the rest of the segment is blank
                    break
                if magic != MESSAGE_MAGIC_CODE or size < 91 or off + size > len(buf):
                    break
                try:
                    m = decode_record(buf, off)
                except MessageDecodeError:  # replay skipped it too: nothing to index
                    off += size
                    continue
                self._index(m.properties.get(UNIQ_KEY), m.properties.get(KEYS), pos + off)
                off += size
                self._set_end(pos + off)
            if off == 0:
                return  # not a record boundary (should not happen): stop, lookups verify
            pos += off

    # ------------------------------------------------------------------ reading

    @property
    def end_phy(self) -> int:
        return self._cur.end_phy if self._cur is not None else 0

    def lookup(self, kind: str, key: str, limit: int = 64) -> list[int]:
        """Candidate commit-log offsets for ``key``, newest first (verify each one)."""
        h = key_hash(kind, key)
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= limit:
                break
            mm = f.mm
            if mm is not None:
                self._walk(f, functools.partial(_mm_read, mm), h, out, limit)
                continue
            try:
                fd = os.open(f.path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                self._walk(f, functools.partial(_fd_read, fd), h, out, limit)
            finally:
                os.close(fd)
        return out

    @staticmethod
    def _walk(
        f: _File, read: Callable[[int, int], bytes], h: int, out: list[int], limit: int
    ) -> None:
        (entry,) = _I32.unpack(read(HEADER_SIZE + (h % f.slots) * 4, 4))
        base = HEADER_SIZE + f.slots * 4
        bound = f.count + 1
        while 0 < entry < bound and len(out) < limit:
            eh, phy, prev = _ENTRY.unpack(read(base + (entry - 1) * _ENTRY.size, _ENTRY.size))
            if eh == h:
                out.append(phy)
            bound, entry = entry, prev


# ------------------------------------------------------------------ the native twin

# ``KeyIndex.dispatch`` above is the reference (tests/server/test_native_index.py holds
# the twin to it); the twin's (``_index.pyx``) replaces it when protocol/native.py chooses it.
reference = SimpleNamespace(dispatch=KeyIndex.dispatch)


def _load_twin() -> ModuleType:
    from . import _index  # type: ignore[attr-defined]

    twin: ModuleType = _index  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    KeyIndex.dispatch = _twin.dispatch  # type: ignore[method-assign]
