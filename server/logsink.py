"""JSON-lines sinks that never block the event loop on I/O.

Owns: ``BufferedSink`` — ``write(line)`` appends to an in-memory list under a lock (a
fraction of a microsecond, any thread); a background thread drains it every
``interval`` seconds with one ``write`` per batch. ``RotatingJsonSink`` writes
``<dir>/broker.jsonl`` and rotates it to ``broker-<UTC stamp>-<pid>-<n>.jsonl`` (gzipped
if asked) when it passes ``rotate_bytes`` or ``rotate_seconds``; ``StreamSink`` writes to
a binary stream such as stdout.

Invariants: lines are written whole and in order; ``flush()`` returns once everything
written before it is in the OS; ``close()`` drains everything; a rotated file is never
written again. No fsync per line: logs are not the source of truth, the commit log is.
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from pathlib import Path
from typing import BinaryIO

ACTIVE_NAME = "broker.jsonl"


class BufferedSink:
    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._pending: list[bytes] = []
        self._enqueued = 0
        self._written = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def _start(self) -> None:
        self._thread.start()

    def write(self, line: bytes) -> None:
        with self._lock:
            self._pending.append(line)
            self._enqueued += 1

    def _emit(self, data: bytes) -> None:
        raise NotImplementedError

    def _after_emit(self) -> None:
        """Hook for rotation."""

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self._emit(b"\n".join(batch) + b"\n")
            with self._lock:
                self._written += len(batch)
        self._after_emit()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self._wake.clear()
            self._drain()

    def flush(self, timeout: float = 5.0) -> None:
        with self._lock:
            target = self._enqueued
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._closed:
            with self._lock:
                if self._written >= target:
                    return
            self._wake.set()
            time.sleep(0.002)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)
        self._drain()
        self._close_output()

    def _close_output(self) -> None:
        """Hook: close the underlying file."""


class StreamSink(BufferedSink):
    def __init__(self, stream: BinaryIO, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.stream = stream
        self._start()

    def _emit(self, data: bytes) -> None:
        self.stream.write(data)
        self.stream.flush()


class RotatingJsonSink(BufferedSink):
    def __init__(
        self,
        directory: Path,
        *,
        rotate_bytes: int = 128 * 1024 * 1024,
        rotate_seconds: float = 3600.0,
        gzip_rotated: bool = False,
        interval: float = 0.2,
    ) -> None:
        super().__init__(interval)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.gzip_rotated = gzip_rotated
        self.path = directory / ACTIVE_NAME
        self._file = open(self.path, "ab")  # noqa: SIM115 - owned by the writer thread
        self._opened_at = time.time()
        self._size = self._file.tell()
        self._seq = 0
        self._start()

    def _emit(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def _after_emit(self) -> None:
        if self._size >= self.rotate_bytes or (
            self._size and time.time() - self._opened_at >= self.rotate_seconds
        ):
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        self._seq += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = self.directory / f"broker-{stamp}-{os.getpid()}-{self._seq}.jsonl"
        os.replace(self.path, target)
        if self.gzip_rotated:
            # Compress under a temporary name and rename: a report reading the directory
            # meanwhile sees either the plain file or the complete .gz, never half a gzip.
            tmp = target.with_name(target.name + ".gz.tmp")
            with open(target, "rb") as src, gzip.open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, f"{target}.gz")
            target.unlink()
        self._file = open(self.path, "ab")  # noqa: SIM115
        self._opened_at = time.time()
        self._size = 0

    def _close_output(self) -> None:
        self._file.close()
