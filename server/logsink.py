"""A JSON-lines file sink that never blocks the event loop on disk I/O.

Owns: ``RotatingJsonSink`` — ``write(line)`` appends to an in-memory list under a lock
(cheap, any thread); a background thread drains it to ``<dir>/broker.jsonl`` every
``interval`` seconds, rotates to ``broker-<UTC stamp>-<n>.jsonl`` when the file passes
``rotate_bytes`` or is older than ``rotate_seconds``, and gzips rotated files if asked.

Invariants: lines are written whole and in order; ``close()`` drains everything; a
rotated file is never written again. No fsync per line (logs are not the source of
truth; the commit log is).
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from pathlib import Path

ACTIVE_NAME = "broker.jsonl"


class RotatingJsonSink:
    def __init__(
        self,
        directory: Path,
        *,
        rotate_bytes: int = 128 * 1024 * 1024,
        rotate_seconds: float = 3600.0,
        gzip_rotated: bool = False,
        interval: float = 0.2,
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.gzip_rotated = gzip_rotated
        self.interval = interval
        self._pending: list[bytes] = []
        self._enqueued = 0
        self._written = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._path = directory / ACTIVE_NAME
        self._file = open(self._path, "ab")  # noqa: SIM115 - owned by the thread
        self._opened_at = time.time()
        self._size = self._file.tell()
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name="log-sink", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path:
        return self._path

    def write(self, line: bytes) -> None:
        with self._lock:
            self._pending.append(line)
            self._enqueued += 1

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            data = b"\n".join(batch) + b"\n"
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
            with self._lock:
                self._written += len(batch)
        if self._size >= self.rotate_bytes or (
            self._size and time.time() - self._opened_at >= self.rotate_seconds
        ):
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        self._seq += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = self.directory / f"broker-{stamp}-{os.getpid()}-{self._seq}.jsonl"
        os.replace(self._path, target)
        if self.gzip_rotated:
            with open(target, "rb") as src, gzip.open(f"{target}.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            target.unlink()
        self._file = open(self._path, "ab")  # noqa: SIM115
        self._opened_at = time.time()
        self._size = 0

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self._wake.clear()
            self._drain()

    def flush(self) -> None:
        """Drain now from the calling thread's point of view (waits for the writer)."""
        with self._lock:
            target = self._enqueued
        self._wake.set()
        deadline = time.time() + 5
        while time.time() < deadline and not self._closed:
            with self._lock:
                if self._written >= target:
                    break
            self._wake.set()
            time.sleep(0.002)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)
        self._drain()
        self._file.close()
