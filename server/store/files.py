"""Small durable-file helpers shared by the store and the broker's state tables.

Owns: segment file names (``segment_name``, ``is_segment_name``: RocketMQ's 20-digit start
offsets, for the commit log, the consume queues and the index), ``write_json_atomic`` and
``write_parts_atomic`` (temp file, fsync, ``os.replace``, fsync of the directory),
``OrderedJsonFile`` (snapshots numbered on the event loop, written in threads: an older
snapshot never overwrites a newer one), ``read_json``, ``preallocate`` and
``create_allocated`` (files allocated for real: no sparse fallback), and making data
durable: ``sync_mapped`` / ``sync_path`` (one file) and ``sync_filesystem`` (``syncfs``:
every dirty page of the file system at once, cheaper than an fsync per file past a few dozen
files).

Invariant: a reader sees either the previous complete file or the new complete file,
never a mix, even after a kill -9 or power loss in the middle of a write.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any  # Any: JSON values; the libc function found by ctypes

import orjson

SEGMENT_NAME_DIGITS = 20  # RocketMQ's UtilAll.offset2FileName: %020d of the first offset


def segment_name(first_offset: int) -> str:
    """A segment's file name: its first offset in 20 digits (``00000000001073741824``)."""
    return f"{first_offset:0{SEGMENT_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """Whether a directory entry is a segment (and not a temp file or a stray)."""
    return len(name) == SEGMENT_NAME_DIGITS and name.isdigit()


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically and durably."""
    write_parts_atomic(
        path, (orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS),)
    )


def write_parts_atomic(path: Path, parts: Iterable[bytes]) -> None:
    """Write the concatenation of ``parts`` to ``path`` atomically and durably: a temp
    file, fsync, ``os.replace``, fsync of the directory. Each ``os.write`` releases the
    GIL, so a thread writing a large table does not hold up the event loop."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class OrderedJsonFile:
    """A JSON table file written from threads in snapshot order: ``snapshot_id()`` on the
    event loop when the data is copied, ``write(id, data)`` in any thread; a write older
    than the one on disk is skipped (topics.json, kvConfig.json, ...)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._generation = 0
        self._written = 0
        self._lock = threading.Lock()

    def snapshot_id(self) -> int:
        self._generation += 1
        return self._generation

    @property
    def written(self) -> int:
        """The id of the snapshot on disk (0: none written by this process)."""
        return self._written

    def write(self, generation: int, data: Any) -> None:
        with self._lock:
            if generation <= self._written:
                return  # a newer snapshot is already on disk
            write_json_atomic(self.path, data)
            self._written = generation


def read_json(path: Path, default: Any = None) -> Any:
    """Read a JSON file written by ``write_json_atomic``; ``default`` if it is absent."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes for ``fd`` for real, so later writes (and mmap stores) inside
    cannot hit ENOSPC or SIGBUS.

    A failed allocation raises ``OSError`` (ENOSPC, or EOPNOTSUPP on a file system without
    fallocate): there is no fallback to a sparse file, whose holes would fail later, at a
    write that was already acknowledged or as a SIGBUS inside an mmap store.
    """
    os.posix_fallocate(fd, 0, size)


def sync_mapped(fd: int) -> None:
    """Make the pages of an mmap'd file durable (blocking: call from a thread).

    ``os.fdatasync`` on the file, never ``mmap.flush()``: CPython's msync holds the GIL
    for the whole disk write, which stalled the event loop for tens of ms at every
    checkpoint. fdatasync writes the same dirty pages and releases the GIL.
    """
    os.fdatasync(fd)


def sync_path(path: str | Path) -> bool:
    """``sync_mapped`` of the file at ``path`` through a descriptor of its own (the pages
    of any mapping of it included); False if the file is gone (blocking: a thread)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        sync_mapped(fd)
    finally:
        os.close(fd)
    return True


def sync_filesystem(path: Path) -> None:
    """Flush every dirty page and inode of the filesystem holding ``path`` (Linux
    ``syncfs(2)``; elsewhere ``sync(2)``). Raises OSError if the kernel reports a failure."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS is not None:
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}")
        else:
            os.sync()
    finally:
        os.close(fd)


def _load_syncfs() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()
_NOATIME = getattr(os, "O_NOATIME", 0)


def open_noatime(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` with ``O_NOATIME`` where the kernel allows it (the file's owner).

    A commit-log segment is written all the time, so under ``relatime`` (atime older than
    mtime) nearly every read would update its atime: an inode made dirty on the event
    loop, which waits whenever that inode's table block is being written for an fsync.
    """
    if _NOATIME:
        try:
            return os.open(path, flags | _NOATIME, mode)
        except PermissionError:
            pass  # not the owner: O_NOATIME is refused, open it plainly
    return os.open(path, flags, mode)


def create_allocated(path: Path, size: int) -> int:
    """Open ``path`` (created if absent) with ``size`` bytes allocated; return the fd.

    On failure the descriptor is closed and a file this call created is removed, so a
    full disk leaves no short file behind; the ``OSError`` propagates.
    """
    existed = path.exists()
    fd = open_noatime(path, os.O_RDWR | os.O_CREAT)
    try:
        if os.fstat(fd).st_size < size:
            preallocate(fd, size)
    except OSError:
        os.close(fd)
        if not existed:
            path.unlink(missing_ok=True)
        raise
    return fd
