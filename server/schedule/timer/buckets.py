"""TimerBuckets: pending timers on disk, one append-only file per due minute.

Owns: the bucket files under ``<store>/timer/`` (``<day>/<bucket>.tb``; a bucket is
``due_ms // bucket_ms``), their 24-byte entries ``(due_ms, phy_offset, size, kind)``,
buffered appends, flushing them (the checkpoint's thread), loading one bucket as a
sorted list of live timers, listing and deleting buckets, and each bucket's content
``version`` (for the browse cache of ``schedule/pending/``).

Invariants:
* The files are derived data: every entry comes from a record in the commit log (a
  timer record, or a recall / roll record naming its target), so replay after the last
  checkpoint may append an entry twice. ``load`` is therefore idempotent: entries are
  deduplicated by ``(phy_offset, kind)`` and a ``CANCEL`` entry removes every timer entry
  with its phy offset, whichever order they were appended in.
* Appends never touch the disk on the event loop: ``add`` buffers, ``take_dirty``
  (on the loop, with the store's checkpoint snapshot) returns every entry not yet known
  to be on disk, and ``flush`` (in the checkpoint's thread, before the checkpoint file
  is written) appends each dirty file once, fsyncs it, and only then forgets what it
  wrote. A failed flush forgets nothing, so the next checkpoint writes it again. A
  bucket's entries are its file plus what is buffered or in flight, so a ``load``
  never misses an acked timer.
* Memory stays flat in the number of pending timers: only buffered entries and the
  buckets the timer service has loaded are in memory.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

from ...store.files import sync_filesystem

ENTRY = struct.Struct("<qqii")  # due_ms, phy_offset, size, kind
KIND_TIMER = 0
KIND_CANCEL = 1  # the timer at phy_offset was recalled (or rolled to a new record)
DEFAULT_BUCKET_MS = 60_000
_DAY_MS = 86_400_000
SUFFIX = ".tb"


class TimerBuckets:
    """Bucket files keyed by due minute (``bucket_ms``), with buffered appends."""

    def __init__(self, directory: Path, bucket_ms: int = DEFAULT_BUCKET_MS) -> None:
        self.directory = Path(directory)
        self.bucket_ms = bucket_ms
        self._buffer: dict[int, bytearray] = {}
        self._in_flight: dict[int, bytes] = {}  # taken, not yet confirmed on disk
        self._lock = threading.Lock()  # guards _in_flight (the loop and the flush thread)
        self._flush_lock = threading.Lock()
        self._flushes: dict[int, int] = {}  # bucket -> appends to its file since the start

    # ------------------------------------------------------------------ naming

    def bucket_of(self, due_ms: int) -> int:
        return due_ms // self.bucket_ms

    def path(self, bucket: int) -> Path:
        day = bucket * self.bucket_ms // _DAY_MS
        return self.directory / str(day) / f"{bucket}{SUFFIX}"

    # ------------------------------------------------------------------ appends

    def add(self, due_ms: int, phy_offset: int, size: int, kind: int = KIND_TIMER) -> int:
        """Buffer one entry; return its bucket. On the loop; no I/O."""
        bucket = due_ms // self.bucket_ms
        buf = self._buffer.get(bucket)
        if buf is None:
            buf = self._buffer[bucket] = bytearray()
        buf += ENTRY.pack(due_ms, phy_offset, size, kind)
        return bucket

    def take_dirty(self) -> dict[int, bytes]:
        """On the loop: every entry not yet confirmed on disk, per bucket, for ``flush``."""
        with self._lock:
            for b, buf in self._buffer.items():
                self._in_flight[b] = self._in_flight.get(b, b"") + bytes(buf)
            self._buffer.clear()
            return dict(self._in_flight)

    def flush(self, taken: dict[int, bytes]) -> None:
        """In a thread: append each bucket's entries to its file, make them durable with one
        ``syncfs`` (not an fsync per file: far timers spread over thousands of buckets),
        then forget them (an error leaves them in flight for the next flush)."""
        if not taken:
            return
        with self._flush_lock:
            for bucket, data in taken.items():
                p = self.path(bucket)
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                except FileNotFoundError:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
            sync_filesystem(self.directory)  # file data, new files and directory entries
            with self._lock:
                for bucket, data in taken.items():
                    self._flushes[bucket] = self._flushes.get(bucket, 0) + 1
                    cur = self._in_flight.get(bucket)
                    if cur is None or not cur.startswith(data):
                        continue
                    if len(cur) > len(data):
                        self._in_flight[bucket] = cur[len(data) :]
                    else:
                        del self._in_flight[bucket]

    # ------------------------------------------------------------------ reads

    def pending_bytes(self, bucket: int) -> bytes:
        """On the loop: the entries of ``bucket`` not yet known to be in its file."""
        with self._lock:
            flying = self._in_flight.get(bucket, b"")
        return flying + bytes(self._buffer.get(bucket, b""))

    def version(self, bucket: int) -> tuple[int, int]:
        """On the loop: what names a bucket's content (file plus buffered entries) for a
        reader's cache: the appends to its file since the start and the length of what is
        not in it yet. Every change of the content changes it (entries are only appended);
        taken before a read, a stale version only makes the reader read again."""
        with self._lock:
            flying = len(self._in_flight.get(bucket, b""))
            done = self._flushes.get(bucket, 0)
        return done, flying + len(self._buffer.get(bucket, b""))

    def read_file(self, bucket: int) -> bytes:
        try:
            data = self.path(bucket).read_bytes()
        except FileNotFoundError:
            return b""
        return data[: len(data) - len(data) % ENTRY.size]  # a torn tail entry is dropped

    def load(
        self, bucket: int, pending: bytes = b"", after: tuple[int, int] = (0, -1)
    ) -> list[tuple[int, int, int]]:
        """Live timers of ``bucket`` later than ``after`` (a fired cursor) as
        ``(due_ms, phy_offset, size)``, unordered; blocking (file read) — call in a thread
        with ``pending`` taken on the loop first."""
        live = live_entries((self.read_file(bucket), pending))
        if after[1] < 0:
            return live
        return [e for e in live if (e[0], e[1]) > after]

    def buckets(self) -> list[int]:
        """Every bucket with a file or buffered entries, ascending."""
        with self._lock:
            found = set(self._buffer) | set(self._in_flight)
        if self.directory.is_dir():
            for day in self.directory.iterdir():
                if not day.is_dir():
                    continue
                for f in day.iterdir():
                    stem = f.name[: -len(SUFFIX)]
                    if f.name.endswith(SUFFIX) and stem.isdigit():
                        found.add(int(stem))
        return sorted(found)

    def entry_counts(self) -> dict[int, int]:
        """Entries per bucket (timers plus cancel markers, duplicates included): cheap,
        from file sizes, for ``kairosmq admin timers``."""
        out: dict[int, int] = {}
        for b in self.buckets():
            try:
                n = self.path(b).stat().st_size // ENTRY.size
            except FileNotFoundError:
                n = 0
            out[b] = n + len(self.pending_bytes(b)) // ENTRY.size
        return out

    def delete_below(self, bucket: int) -> int:
        """Remove every bucket file before ``bucket`` (blocking; in a thread)."""
        with self._lock:
            flying = set(self._in_flight)
        return self.delete([b for b in self.buckets() if b < bucket and b not in flying])

    def delete(self, buckets: Iterable[int]) -> int:
        """Remove the files of fired buckets; return how many were removed."""
        n = 0
        with self._flush_lock:
            for b in buckets:
                with contextlib.suppress(FileNotFoundError):
                    self.path(b).unlink()
                    n += 1
                with self._lock:
                    self._flushes.pop(b, None)
                with contextlib.suppress(OSError):
                    self.path(b).parent.rmdir()  # only when empty
        return n


def live_entries(parts: Iterable[bytes]) -> list[tuple[int, int, int]]:
    """Decode entry bytes: drop duplicates and cancelled timers. In no particular order:
    the timer service heapifies them (O(n)) instead of a sort holding the GIL longer."""
    timers: dict[int, tuple[int, int, int]] = {}
    cancelled: set[int] = set()
    for data in parts:
        for due, phy, size, kind in ENTRY.iter_unpack(data):
            if kind == KIND_CANCEL:
                cancelled.add(phy)
            elif kind == KIND_TIMER:
                timers[phy] = (due, phy, size)
    if not cancelled:
        return list(timers.values())
    return [t for phy, t in timers.items() if phy not in cancelled]


def cancels(data: bytes, phy: int) -> bool:
    """Whether the entry bytes ``data`` hold a cancel marker for the timer at ``phy``."""
    return any(k == KIND_CANCEL and p == phy for _d, p, _s, k in ENTRY.iter_unpack(data))
