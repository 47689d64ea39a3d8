"""JSON-lines sinks that never block the event loop on I/O.

Owns: ``BufferedSink`` — ``write(line)`` appends to an in-memory list under a lock (a
fraction of a microsecond, any thread); a background thread drains it every
``interval`` seconds with one ``write`` per batch. ``RotatingJsonSink`` writes
``<dir>/broker.jsonl`` and rotates it to ``broker-<UTC stamp>-<pid>-<n>.jsonl`` (gzipped
if asked) when it passes ``rotate_bytes`` or ``rotate_seconds``; ``StreamSink`` writes to
a binary stream such as stdout.

Invariants: lines are written whole and in order (``write`` is the hot path: its fields
``_lock``, ``_pending`` and ``_enqueued`` are slots, which the native twin
``_logsink.pyx`` reads in place); ``flush()`` returns once everything
written before it is in the OS; ``close()`` drains everything; a rotated file is never
written again. No fsync per line: logs are not the source of truth, the commit log is.

Supervision: the drain thread never dies on an I/O error. A failed batch is put back
in front of the pending lines (at most ``MAX_PENDING`` kept: the oldest beyond are
dropped and counted in ``dropped``), the sink is marked ``degraded`` with ``last_error``,
listeners registered with ``add_health_listener`` hear ``(sink name, error or None)``
(None: recovered), and the drain retries with exponential backoff capped at
``MAX_RETRY_DELAY``.
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import BinaryIO

from kairosmq.protocol import native

ACTIVE_NAME = "broker.jsonl"
MAX_PENDING = 1_000_000
MAX_RETRY_DELAY = 5.0

HealthListener = Callable[[str, "str | None", float], None]
_listeners: list[HealthListener] = []


def add_health_listener(fn: HealthListener) -> None:
    """Call ``fn(sink_name, error, retry_in_seconds)`` from the sink thread on failure
    (error text) and on recovery (error None). The callee must be thread-safe (e.g.
    ``call_soon_threadsafe``)."""
    _listeners.append(fn)


def remove_health_listener(fn: HealthListener) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


def _tell(name: str, error: str | None, retry_in: float = 0.0) -> None:
    for fn in list(_listeners):
        try:
            fn(name, error, retry_in)
        except Exception:  # noqa: BLE001, S110 - a listener (closed loop) must not kill us
            pass


class BufferedSink:
    # the fields ``write`` touches per line in slots (the native twin reads them in
    # place); any other attribute lives in the instance's ``__dict__``
    __slots__ = ("_lock", "_pending", "_enqueued", "__dict__", "__weakref__")

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._pending: list[bytes] = []
        self._enqueued = 0
        self._written = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self.name = f"log-sink-{type(self).__name__}"
        self.failures = 0
        self.dropped = 0
        self.last_error: str | None = None
        self.degraded = False
        self._retry_delay = 0.0
        # not ``_thread``: mypyc names the C struct field ``__thread``, a GCC keyword
        self._writer_thread = threading.Thread(
            target=self._run, name=type(self).__name__, daemon=True
        )

    def _start(self) -> None:
        self._writer_thread.start()

    def write(self, line: bytes) -> None:
        with self._lock:
            self._pending.append(line)
            self._enqueued += 1

    def write_many(self, lines: list[bytes]) -> None:
        """``write`` of each line, in order, under one taking of the lock."""
        with self._lock:
            self._pending.extend(lines)
            self._enqueued += len(lines)

    def _emit(self, data: bytes) -> None:
        raise NotImplementedError

    def _after_emit(self) -> None:
        """Hook for rotation."""

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            try:
                self._emit(b"\n".join(batch) + b"\n")
            except BaseException:
                with self._lock:  # keep order: the failed batch goes back in front
                    self._pending[:0] = batch
                    over = len(self._pending) - MAX_PENDING
                    if over > 0:
                        del self._pending[:over]
                        self.dropped += over
                        self._written += over  # flush() must not wait for them
                raise
            with self._lock:
                self._written += len(batch)
        self._after_emit()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._retry_delay or self.interval)
            self._wake.clear()
            self._drain_supervised()

    def _drain_supervised(self) -> None:
        try:
            self._drain()
        except Exception as err:  # noqa: BLE001 - the thread must survive I/O errors
            self.failures += 1
            self.degraded = True
            self.last_error = f"{type(err).__name__}: {err}"
            self._retry_delay = min(max(self.interval, self._retry_delay * 2), MAX_RETRY_DELAY)
            _tell(self.name, self.last_error, self._retry_delay)
            return
        if self.degraded:
            self.degraded = False
            self._retry_delay = 0.0
            _tell(self.name, None)

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
        self._writer_thread.join(timeout=5)
        self._drain_supervised()
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
        if self._file.closed:  # a rotation failed half-way: reopen the active file
            self._file = open(self.path, "ab")  # noqa: SIM115
            self._opened_at = time.time()
            self._size = self._file.tell()
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


# ------------------------------------------------------------------ the native twin

# ``BufferedSink.write`` above is the reference (tests/server/test_log_batch_writer.py
# holds the twin to it); the twin's (``_logsink.pyx``: the same steps without a Python
# frame) replaces it when protocol/native.py chooses it.
reference = SimpleNamespace(write=BufferedSink.write)


def _load_twin() -> ModuleType:
    from . import _logsink  # type: ignore[attr-defined]

    twin: ModuleType = _logsink  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    BufferedSink.write = _twin.write  # type: ignore[method-assign]
