"""Coalesced, off-loop persistence of the broker's JSON tables (``topics.json``,
``subscriptionGroup.json``, ``consumerOffset.json``).

Owns: ``TableFile`` (one background writer per table file), ``encode_parts`` and
``join_parts`` (a table as JSON in bounded parts, encoded now or from rows its owner keeps
encoded) and ``collect`` (those parts as one body, between requests).

Why: a table of 100k topics is ~11 MB of JSON. Encoding it in one call takes a few hundred
ms, and a thread does not help (orjson holds the GIL for the whole call), so writing it on
every creation stalled the event loop for every client (374 ms per request at 41k topics,
1-3 s at 100k, measured 2026-11-28). Here a change only marks the table; one task takes a
snapshot as parts (the topic and group tables keep each entry encoded, so a snapshot is a
join of bytes; others encode ``PART_ENTRIES`` entries a part), yielding to the loop between
parts, and hands the parts to a thread that writes, fsyncs and renames them
(``store.files.write_parts_atomic``).

Invariants:
* Coalesced: ``changed()`` starts the writer unless it runs; changes made while it encodes
  or writes go into its next round, so N changes cost at most two writes after the first.
* Ordered: every write carries the change count its snapshot reflects; a write older than
  the file on disk is skipped (a final synchronous ``write_now`` at stop and a background
  round that finishes after it never go backwards).
* ``flushed()`` returns once a write that reflects every change made before the call is
  on disk (fsync'd file and directory): what an acknowledgement that promises durability
  awaits. A failed write raises ``OSError`` to those waiters, is logged (``on_failed``) and
  retried after ``retry`` seconds while the table is dirty; it never stops persistence.
* The snapshot is taken in one loop step (``snapshot()`` copies the entry list; entries
  are replaced, never changed in place, by their owners), so a file never mixes two states
  of one entry list.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any  # Any: rows of any table's JSON file

import orjson

from ..store.files import write_parts_atomic

PART_ENTRIES = 500  # entries encoded per loop step (~1 ms on a busy 2-core machine)
JOIN_ROWS = 2000  # pre-encoded rows joined per loop step (~0.3 ms)

Snapshot = Callable[[], Iterator[bytes]]


def encode_parts(
    open_: bytes,
    rows: list[Any],
    close: bytes,
    *,
    mapping: bool,
    value: Callable[[Any], Any] | None = None,
) -> Iterator[bytes]:
    """``open_`` + the JSON of ``rows`` joined by commas + ``close``, in parts of
    ``PART_ENTRIES`` rows. ``mapping``: rows are ``(key, value)`` pairs of a JSON object
    (non-string keys allowed), else items of a JSON array. ``value``: what each pair's
    value becomes in the JSON (converted part by part, not all at once)."""
    yield open_
    opt = orjson.OPT_NON_STR_KEYS
    first = True
    for i in range(0, len(rows), PART_ENTRIES):
        chunk = rows[i : i + PART_ENTRIES]
        if value is not None:
            chunk = [(k, value(v)) for k, v in chunk]
        raw = orjson.dumps(dict(chunk) if mapping else chunk, option=opt)
        inner = raw[1:-1]  # drop the chunk's own brackets
        if inner:
            yield inner if first else b"," + inner
            first = False
    yield close


def join_parts(open_: bytes, rows: list[bytes], close: bytes) -> Iterator[bytes]:
    """``open_`` + ``rows`` (each an encoded JSON value or ``"key":value``) joined by
    commas + ``close``, in parts of ``JOIN_ROWS`` rows: a table whose owner keeps each
    entry encoded (``topics.json``, ``subscriptionGroup.json``) costs a join per write,
    not an encoding of every entry."""
    yield open_
    for i in range(0, len(rows), JOIN_ROWS):
        part = b",".join(rows[i : i + JOIN_ROWS])
        yield part if i == 0 else b"," + part
    yield close


async def collect(parts: Iterable[bytes]) -> bytes:
    """The parts joined, yielding to the loop between them (a large table as the body
    of an admin answer, without stalling other requests)."""
    out: list[bytes] = []
    for part in parts:
        out.append(part)
        await asyncio.sleep(0)
    return b"".join(out)


class TableFile:
    """The background writer of one table file (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        snapshot: Snapshot,
        *,
        on_failed: Callable[[OSError], None] | None = None,
        retry: float = 1.0,
    ) -> None:
        """``snapshot()``: called on the loop, copies what it needs at once and returns
        an iterator of the file's JSON in parts (``encode_parts``). ``on_failed``: told of
        each failed write (the owner logs its event)."""
        self.path = path
        self._snapshot = snapshot
        self.on_failed = on_failed
        self.retry = retry
        self._changes = 0  # changes made (on the loop)
        self._durable = 0  # the change count the file on disk reflects
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.writes = 0
        self.failures = 0

    @property
    def dirty(self) -> bool:
        return self._durable < self._changes

    @property
    def changes(self) -> int:
        """How many changes were made (a request compares it before and after itself)."""
        return self._changes

    def changed(self) -> None:
        """The table changed: write it soon (in the background, coalesced). Without a
        running loop (start-up, tests) the table stays dirty for ``write_now``."""
        self._changes += 1
        self._start()

    def _start(self) -> None:
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._task = loop.create_task(self._run())

    async def flushed(self) -> None:
        """Return once the file holds every change made before this call."""
        target = self._changes
        if self._durable >= target:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, fut))
        self._start()
        await fut

    def write_now(self) -> None:
        """Write the table on the calling thread (start-up, stop, tests)."""
        target = self._changes
        self._write(target, list(self._snapshot()))

    def _write(self, target: int, parts: Iterable[bytes]) -> None:
        with self._lock:
            if target < self._durable or (target == self._durable and self.writes):
                return  # the file already holds this state or a newer one
            write_parts_atomic(self.path, parts)
            self._durable = target
            self.writes += 1

    async def _run(self) -> None:
        try:
            while self._durable < self._changes or self._waiters:
                target = self._changes
                parts: list[bytes] = []
                for part in self._snapshot():
                    parts.append(part)
                    await asyncio.sleep(0)  # other requests run between parts
                try:
                    await asyncio.to_thread(self._write, target, parts)
                except OSError as err:
                    self.failures += 1
                    if self.on_failed is not None:
                        self.on_failed(err)
                    self._settle(target, err)
                    await asyncio.sleep(self.retry)
                    continue
                self._settle(self._durable, None)
        finally:
            self._task = None

    def _settle(self, upto: int, err: OSError | None) -> None:
        """Answer the waiters whose change count is ``upto`` or less."""
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, fut in self._waiters:
            if target > upto:
                keep.append((target, fut))
            elif not fut.done():
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)
        self._waiters = keep
