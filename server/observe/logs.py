"""Logging setup for the broker: structlog to JSON lines (the Spark job's input).

Owns: ``configure_logging`` (structlog to JSON lines in a file and/or stdout, or a console
renderer on a TTY), ``get_logger`` and ``MessageLog``. The event catalogue itself
(``CATALOGUE``, ``COMMON``, ``LOG_FORMAT``, ``LEAN_EVENTS``, ``FORMAT_1_FIELDS``,
``all_fields``, ``record``) lives in sans-IO ``protocol/events.py`` so that ``spark/`` reads
it without importing ``server/``; it is re-exported here for the broker's code and tests.

Invariants:
* Event names are stable dotted names; fields are added, never renamed or retyped, and
  ``spark/schema.py`` follows the catalogue (a contract test reads
  real broker logs with the Spark schema in FAILFAST mode). The table is exact both ways:
  ``tests/server/test_log_catalogue.py`` checks every log call in ``server/`` (event
  catalogued, keywords catalogued, every catalogued field passed) and every line a live
  broker writes (event catalogued, keys within its fields and ``COMMON``).
* Line format ``LOG_FORMAT`` (2): every JSON line starts with ``ts`` (epoch ms of the log
  call), ``v`` (the format, 2) and ``event``; other events add ``level`` and ``component``.
  The per-message events of ``LEAN_EVENTS`` (the hot path, most of the volume) carry no
  ``component``, ``level`` only when it is not ``info``, no ``reconsume_times`` when it is 0,
  and none of the fields that repeat another form of the same fact (``LEAN_EVENTS`` lists
  what format 1 had and format 2 drops). Format 1 lines (``timestamp`` ISO-8601, no ``v``)
  are still typed by ``FORMAT_1_FIELDS`` so old logs stay readable. Times ``*_ts`` are epoch
  milliseconds; durations ``*_ms`` are milliseconds (float where sub-ms matters). A console
  (TTY) shows an ISO ``timestamp`` instead; the JSON files never do.
* Logging never blocks the event loop on I/O: sinks buffer lines in memory and a
  background thread writes them (file: with size/time rotation and optional gzip).
* The processor chain is two steps (``record``: the format-2 dict, then one
  ``orjson.dumps`` fanned out to the sinks): a few microseconds per event, so one event
  per message step is affordable on the hot path.
* With JSON sinks only, ``MessageLog`` events skip structlog; a catalogued event is
  written as its pre-made ``{"ts":..,"v":2,"event":..`` head bytes (with ``level`` for
  an event not in ``LEAN_EVENTS``) joined to one ``orjson.dumps`` of its fields, after
  the drops ``record`` makes for a ``LEAN_EVENTS`` event at info: byte for byte the line
  ``record`` and one ``dumps`` make (``tests/server/test_log_batch_writer.py``), the same
  keys and values as the chain's (``tests/server/test_lean_log_writer.py``; the Spark
  parser reads both the same, ``tests/spark/test_lean_lines.py``). An uncatalogued
  event, a lean one at another level, or fields naming a head key (``ts``, ``v``,
  ``event``, ``level``, ``component``, ``uncatalogued``) go through ``record``.
* ``MessageLog.info_many`` writes a batch of one event (each row with the ``ts`` read
  when it happened: the scheduler's re-puts) as the same lines, handed to each sink in
  one ``write_many`` call.
* On the native core that writer is ``_logs.pyx``'s ``LineEmitter`` (``emit`` and
  ``emit_many`` step for step, from the same head bytes; it writes orjson's bytes for
  the common values itself and hands any other value to ``orjson.dumps``) and
  ``MessageLog.info`` its ``info``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: structlog's processors and loggers; a log event's field values

import orjson
import structlog
from kairosmq.protocol import native
from kairosmq.protocol.events import (
    CATALOGUE,
    COMMON,
    FORMAT_1_FIELDS,
    LEAN_EVENTS,
    LOG_FORMAT,
    all_fields,
    drop_lean_fields,
    record,
)

from .logsink import BufferedSink, RotatingJsonSink, StreamSink

__all__ = [
    "CATALOGUE",
    "COMMON",
    "FORMAT_1_FIELDS",
    "LEAN_EVENTS",
    "LOG_FORMAT",
    "MessageLog",
    "all_fields",
    "close_sinks",
    "configure_logging",
    "get_logger",
    "record",
]

_format_exc_info = structlog.processors.format_exc_info


def _stamp(_logger: Any, name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the format-2 record (see ``record``) stamped now; a
    ``log.exception`` call's ``exc_info`` becomes the ``exception`` traceback text."""
    if "exc_info" in event_dict:
        event_dict = _format_exc_info(_logger, name, event_dict)  # type: ignore[assignment]
        # (a dict at runtime: mypyc checks it)
    return record(
        event_dict.get("event", ""),
        event_dict,
        int(time.time() * 1000),
        "warning" if name == "warn" else name,
    )


def _console_time(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Console only: an ISO ``timestamp`` for people instead of ``ts``/``v``."""
    ts = event_dict.pop("ts", None)
    event_dict.pop("v", None)
    if ts is not None:
        event_dict["timestamp"] = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 1000)) + f".{ts % 1000:03d}Z"
        )
    return event_dict


_SINKS: list[BufferedSink] = []
# Set by configure_logging when events go only to JSON sinks: the per-message path then
# skips structlog's bound-logger machinery (measured: ~14% of broker CPU under load) and
# runs the same two steps (stamp, one orjson.dumps) into the same sinks.
_fast_emit: Any = None
_fast_emit_many: Any = None  # the same writer for one batch of one event's lines
_fast_debug = False  # whether the fast path also carries debug-level message events
_info_enabled = True  # whether info-level events are written (configure_logging sets it)


def configure_logging(
    *,
    json: bool | None = None,
    level: str = "info",
    log_dir: str | Path | None = None,
    stdout: bool = True,
    rotate_bytes: int = 128 * 1024 * 1024,
    rotate_seconds: float = 3600.0,
    gzip_rotated: bool = False,
) -> RotatingJsonSink | None:
    """Configure structlog for the broker process; return the file sink if any.

    Args:
        json: JSON lines on stdout (default: JSON unless stdout is a TTY).
        level: minimum level name.
        log_dir: directory for ``broker.jsonl`` (+ rotated files); None for no file.
        stdout: also write to stdout.
        rotate_bytes / rotate_seconds / gzip_rotated: file rotation policy.
    """
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        raise ValueError(f"unknown log level {level!r}")
    close_sinks()
    sink = None
    if log_dir is not None:
        sink = RotatingJsonSink(
            Path(log_dir),
            rotate_bytes=rotate_bytes,
            rotate_seconds=rotate_seconds,
            gzip_rotated=gzip_rotated,
        )
        _SINKS.append(sink)
    use_json = (not sys.stdout.isatty()) if json is None else json
    if stdout and use_json:
        _SINKS.append(StreamSink(sys.stdout.buffer))
    sinks = list(_SINKS)
    dumps = orjson.dumps

    console = stdout and not use_json

    def fan_out(_logger: Any, _name: str, event_dict: dict[str, Any]) -> Any:
        line = dumps(event_dict, default=str)
        for s in sinks:
            s.write(line)
        return event_dict if console else ""

    stamp = _stamp
    processors: list[Any] = [stamp, fan_out]
    global _fast_emit, _fast_emit_many, _fast_debug, _info_enabled
    _fast_emit = _fast_emit_many = None
    _fast_debug = lvl <= logging.DEBUG
    _info_enabled = lvl <= logging.INFO
    if not console and lvl <= logging.INFO:
        heads = _line_heads(dumps)
        line_of = _line_maker(heads, dumps)
        wall = time.time
        write = sinks[0].write if len(sinks) == 1 else None

        def emit(event: str, fields: dict[str, Any], level: str = "info") -> None:
            line = line_of(event, fields, int(wall() * 1000), level)
            if write is not None:
                write(line)
                return
            for s in sinks:
                s.write(line)

        def emit_many(event: str, rows: list[tuple[int, dict[str, Any]]]) -> None:
            lines = [line_of(event, fields, ts, "info") for ts, fields in rows]
            for s in sinks:
                s.write_many(lines)

        if _twin is None:
            _fast_emit, _fast_emit_many = emit, emit_many
        else:
            native_emit = _twin.LineEmitter(heads, wall, write, sinks)
            _fast_emit, _fast_emit_many = native_emit, native_emit.many
    if console:
        processors += [_console_time, structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # Without a console the sinks did the writing: ReturnLogger makes the final
        # step a no-op (cheaper than raising DropEvent on every event).
        logger_factory=(
            structlog.PrintLoggerFactory(sys.stdout) if console else structlog.ReturnLoggerFactory()
        ),
        cache_logger_on_first_use=False,
    )
    return sink


# the fields that would change a line's head (``record`` puts them first or drops them):
# a call passing one of them is written through ``record``
_HEAD_KEYS = frozenset(("ts", "v", "event", "level", "component", "uncatalogued"))


LineHeads = dict[tuple[str, str], tuple[bytes, tuple[str, ...] | None]]


def _line_heads(dumps: Callable[..., bytes]) -> LineHeads:
    """``(event, level) -> (the line's bytes after "ts", its drop fields or None)`` for
    every catalogued event: a ``LEAN_EVENTS`` event at info only (no ``level`` key, its
    drops), any other at info, warning and error (with its ``level``)."""
    heads: LineHeads = {}
    for event in CATALOGUE:
        drop = LEAN_EVENTS.get(event)
        tail = b',"v":%d,"event":' % LOG_FORMAT + dumps(event) + b","
        if drop is not None:
            heads[(event, "info")] = (tail, drop)
        for level in ("info", "warning", "error") if drop is None else ():
            heads[(event, level)] = (tail + b'"level":' + dumps(level) + b",", None)
    return heads


def _line_maker(
    heads: LineHeads, dumps: Callable[..., bytes]
) -> Callable[[str, dict[str, Any], int, str], bytes]:
    """``line(event, fields, ts_ms, level)``: the JSON line ``record`` + one ``dumps``
    make for a catalogued event, written as its pre-made ``{"ts":..,"v":2,"event":..``
    head bytes (``heads``) joined to one ``dumps`` of its fields (a ``LEAN_EVENTS`` event
    after the drops ``record`` makes); any other call goes through ``record``."""

    def line(event: str, fields: dict[str, Any], ts_ms: int, level: str) -> bytes:
        head = heads.get((event, level))
        if head is None or not fields or not _HEAD_KEYS.isdisjoint(fields):
            return dumps(record(event, fields, ts_ms, level), default=str)
        prefix, drop = head
        if drop is not None:
            drop_lean_fields(fields, drop)
        body = dumps(fields, default=str)
        return b'{"ts":%d' % ts_ms + (prefix + body[1:] if len(body) > 2 else prefix[:-1] + b"}")

    return line


def close_sinks() -> None:
    """Drain and close every sink ``configure_logging`` opened."""
    global _fast_emit, _fast_emit_many
    _fast_emit = _fast_emit_many = None
    while _SINKS:
        _SINKS.pop().close()


def get_logger(component: str) -> Any:
    return structlog.get_logger().bind(component=component)


class MessageLog:
    """``info(event, **fields)`` for the one-event-per-message steps (stored, scheduled,
    due, delivered, pulled): the same JSON line as structlog writes, through the fast
    emitter when one is configured, else through structlog (console, tests)."""

    __slots__ = ("component", "_logger")

    def __init__(self, component: str) -> None:
        self.component = component
        self._logger = get_logger(component)

    def info(self, event: str, **fields: Any) -> None:
        emit = _fast_emit
        if emit is None:
            self._logger.info(event, **fields)
            return
        emit(event, fields)

    def info_many(self, event: str, rows: list[tuple[int, dict[str, Any]]]) -> None:
        """``info(event, **fields)`` for each ``(ts_ms, fields)`` of ``rows`` (a batch of
        one event, ``ts_ms`` read when each happened): the same lines, handed to each
        sink in one call. Through structlog (no fast emitter) each is one ``info``."""
        emit_many = _fast_emit_many
        if emit_many is None:
            for _ts, fields in rows:
                self._logger.info(event, **fields)
            return
        emit_many(event, rows)

    @property
    def enabled(self) -> bool:
        """False when ``info`` would write nothing (the level is above info): callers
        skip building the events' fields (a pull's record summaries, ...)."""
        return _info_enabled

    @property
    def debug_enabled(self) -> bool:
        """False when ``debug`` would write nothing (the fast emitter at info level):
        callers skip building that event's fields."""
        return _fast_emit is None or _fast_debug

    def debug(self, event: str, **fields: Any) -> None:
        emit = _fast_emit
        if emit is None:
            self._logger.debug(event, **fields)
        elif _fast_debug:
            emit(event, fields, "debug")


# ------------------------------------------------------------------ the native twin

# ``configure_logging``'s ``emit``/``emit_many`` and ``MessageLog.info`` above are the
# reference (tests/server/test_lean_log_writer.py, test_log_batch_writer.py and
# test_native_send.py hold the twin to them); the twin's ``LineEmitter`` (``_logs.pyx``)
# is configured in their place and its ``info`` replaces ``MessageLog.info`` when
# protocol/native.py chooses it.


def _load_twin() -> ModuleType:
    from . import _logs  # type: ignore[attr-defined]

    twin: ModuleType = _logs  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    MessageLog.info = _twin.info  # type: ignore[method-assign]
