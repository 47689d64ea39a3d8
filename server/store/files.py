"""Small durable-file helpers shared by the store and the broker's state tables.

Owns: ``write_json_atomic`` (temp file, fsync, ``os.replace``, fsync of the directory),
``read_json`` and ``preallocate``.

Invariant: a reader sees either the previous complete file or the new complete file,
never a mix, even after a kill -9 or power loss in the middle of a write.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: Path, default: Any = None) -> Any:
    """Read a JSON file written by ``write_json_atomic``; ``default`` if it is absent."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes for ``fd`` so later writes inside cannot hit ENOSPC."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        # Filesystems without fallocate (tmpfs on old kernels, some overlays): sparse file.
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
