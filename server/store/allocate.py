"""FileAllocator: memory-mapped store files made ahead of need, zero-filled, off the loop.

Owns: the background creation of the *next* file of a consume queue or of the key
index (RocketMQ's AllocateMappedFileService), the background growth of a consume-queue
file in small steps (``grow``; ``first_size``/``next_size`` say how big: one page at
first, then doubling, at most ``GROWTH_MAX`` a step, never past the file's full size),
``create_zeroed`` / ``extend_zeroed`` (bytes allocated by writing zeros) and the
``.alloc`` names of files in the making.

Why zeros and not ``posix_fallocate`` for mapped files: ext4 gives fallocate'd blocks as
*unwritten* extents, and the first store into each page of such a mapping converts its
extent (a journal update) inside the page fault, on the event loop. Measured here: a
file's first page 3-4 ms, then 7-10 µs a page on average with a few pages in a thousand
over 1 ms; pages of a zero-filled file take ~1 µs. Zeros allocate for real as well (a
later store cannot hit ENOSPC or SIGBUS), so the guarantee of ``files.create_allocated``
holds.

Why steps and not the full size up front: a consume queue's full file is
6 MB (300,000 units); a broker with many queues holding one message each had 6 MB of
zeros per queue. A queue's file now starts as one page (4 KiB) and grows while it
fills; the step is written as zeros *before* the file is mapped over it, so the
guarantee above holds for every mapped byte.

Invariants:
* A file in the making is named ``<final name>.alloc``: loaders only take all-digit names,
  so a crash mid-way never leaves a short or foreign file under a store name (and
  ``remove_leftovers`` deletes it at the next start).
* ``take`` renames a prepared file into place only once its job finished without error;
  otherwise it creates the file itself (the job's file is removed when the job ends).
  Only the loop calls ``prepare``/``take``/``grow``; the worker thread touches ``.alloc``
  paths and the files it was told to grow only.
* Growth only appends zeros past the file's current end (``extend_zeroed``), never over
  bytes already in the file, and a caller that needs the bytes now waits for (or
  cancels) the file's growth job before writing zeros itself: two writers never
  race on one range. A file that is gone is not re-created by a growth job.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

SUFFIX = ".alloc"
_CHUNK = 1 << 20
GROWTH_MIN = 4096  # a file's first size: one page (a block: what a file costs anyway)
GROWTH_MAX = 1 << 20  # the largest step a file grows by (a half-used step triggers it)


def first_size(full: int) -> int:
    """The size a mapped file of ``full`` bytes is created with."""
    return min(full, GROWTH_MIN)


def next_size(size: int, full: int) -> int:
    """The size after the next growth step of a file now ``size`` bytes (doubling, at
    most ``GROWTH_MAX`` more, at most ``full``)."""
    return min(full, size + min(GROWTH_MAX, max(GROWTH_MIN, size)))


def create_zeroed(path: Path, size: int) -> int:
    """Open ``path`` (created if absent) with ``size`` bytes written as zeros where the
    file is shorter; return the fd. On failure (ENOSPC, ...) the descriptor is closed, a
    file this call created is removed and the ``OSError`` propagates."""
    existed = path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pos = os.fstat(fd).st_size
        zeros = bytes(min(_CHUNK, max(0, size - pos)))
        while pos < size:
            pos += os.pwrite(fd, zeros[: size - pos], pos)
    except OSError:
        os.close(fd)
        if not existed:
            path.unlink(missing_ok=True)
        raise
    return fd


def extend_zeroed(path: str | Path, size: int) -> None:
    """Append zeros to the existing ``path`` until it is ``size`` bytes (nothing if it is
    already); ``FileNotFoundError`` if it is gone, ``OSError`` if the disk is full (the
    zeros written so far stay: they are allocated, the file is just shorter)."""
    fd = os.open(path, os.O_RDWR)
    try:
        pos = os.fstat(fd).st_size
        zeros = bytes(min(_CHUNK, max(0, size - pos)))
        while pos < size:
            pos += os.pwrite(fd, zeros[: size - pos], pos)
    finally:
        os.close(fd)


def _make(tmp: Path, size: int) -> None:
    tmp.parent.mkdir(parents=True, exist_ok=True)  # a queue's first file: its directory
    tmp.unlink(missing_ok=True)
    os.close(create_zeroed(tmp, size))


def remove_leftovers(directory: Path) -> None:
    """Delete ``.alloc`` files a crash left in ``directory``."""
    for p in directory.glob("*" + SUFFIX):
        p.unlink(missing_ok=True)


class FileAllocator:
    """One worker thread making the next files; ``prepare`` early, ``take`` when due."""

    def __init__(self) -> None:
        self._jobs: dict[Path, Future[None]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.prepared = 0  # files taken ready-made (the metric of this module)
        self.grown = 0  # growth steps asked for

    def prepare(self, path: Path, size: int) -> None:
        """Start making ``path`` (``size`` zero bytes) in the background."""
        if path in self._jobs:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="kairosmq-alloc")
        self._jobs[path] = self._pool.submit(_make, path.with_name(path.name + SUFFIX), size)

    def take(self, path: Path, size: int, name_as: Path | None = None) -> int:
        """An open fd of ``path`` (or, named ``name_as``, of the file prepared as ``path``:
        the key-index names a file only when it starts it) with ``size`` bytes allocated:
        the prepared file if its job has finished, else made now (``OSError`` if the disk
        is full)."""
        final = name_as or path
        job = self._jobs.pop(path, None)
        tmp = path.with_name(path.name + SUFFIX)
        if job is not None:
            if job.done() and job.exception() is None and not final.exists():
                os.rename(tmp, final)
                self.prepared += 1
                return os.open(final, os.O_RDWR)
            job.add_done_callback(lambda _f: tmp.unlink(missing_ok=True))
        return create_zeroed(final, size)

    def grow(self, path: str | Path, size: int) -> Future[None]:
        """Start appending zeros to the existing ``path`` up to ``size`` bytes in the
        background (``extend_zeroed``); the caller keeps the future."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="kairosmq-alloc")
        self.grown += 1
        return self._pool.submit(extend_zeroed, path, size)

    def close(self) -> None:
        """Wait for running jobs and remove what they made (not taken: not needed)."""
        jobs, self._jobs = self._jobs, {}
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for path in jobs:
            path.with_name(path.name + SUFFIX).unlink(missing_ok=True)
