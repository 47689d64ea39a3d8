"""Logging setup and THE catalogue of broker log events (the Spark job's input contract).

Owns: ``configure_logging`` (structlog to JSON lines in a file and/or stdout, or a console
renderer on a TTY) and ``CATALOGUE``: every event name the broker emits, with its fields.

Invariants:
* Event names are stable dotted names; fields are added, never renamed or retyped, and
  ``spark/schema.py`` is changed in the same commit as this table (a contract test reads
  real broker logs with the Spark schema in FAILFAST mode).
* Every JSON line has ``timestamp`` (ISO-8601 UTC, ms), ``level``, ``event`` and
  ``component``; the remaining keys are the event's fields below. Times ``*_ts`` are epoch
  milliseconds; durations ``*_ms`` are milliseconds (float where sub-ms matters).
* Logging never blocks the event loop on I/O: sinks buffer lines in memory and a
  background thread writes them (file: with size/time rotation and optional gzip).
* The processor chain is two steps (timestamp+level, then one ``orjson.dumps`` fanned
  out to the sinks): a few microseconds per event, so one event per message step is
  affordable on the hot path.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import structlog

from .logsink import BufferedSink, RotatingJsonSink, StreamSink

# field name -> type name (Spark: string, long, int, double, boolean)
COMMON: dict[str, str] = {
    "timestamp": "timestamp",
    "level": "string",
    "event": "string",
    "component": "string",
}

CATALOGUE: dict[str, dict[str, str]] = {
    # ---- lifecycle
    "broker.started": {"host": "string", "port": "int", "namesrv_port": "int",
                       "data_dir": "string", "delay_levels": "string", "flush_mode": "string"},
    "broker.stopping": {"reason": "string"},
    "broker.stopped": {"uptime_ms": "double"},
    "store.recovered": {"commitlog_max_offset": "long", "truncated_bytes": "long",
                        "records_replayed": "long", "duration_ms": "double"},
    "store.files_deleted": {"kind": "string", "count": "int", "bytes": "long"},
    "topic.created": {"topic": "string", "queue_nums": "int", "auto": "boolean"},
    "topic.deleted": {"topic": "string"},
    # ---- connections and clients
    "conn.opened": {"peer": "string", "conn_id": "long", "listener": "string"},
    "conn.closed": {"peer": "string", "conn_id": "long", "reason": "string"},
    "frame.rejected": {"peer": "string", "conn_id": "long", "error": "string"},
    "request.failed": {"peer": "string", "request_code": "int", "error": "string"},
    "client.registered": {"client_id": "string", "group": "string", "role": "string"},
    "client.unregistered": {"client_id": "string", "group": "string", "role": "string"},
    # ---- the message lifecycle (one event per step)
    "message.stored": {"msg_id": "string", "offset_msg_id": "string", "topic": "string",
                       "queue_id": "int", "queue_offset": "long", "phy_offset": "long",
                       "size": "int", "store_ts": "long", "born_ts": "long",
                       "tags": "string", "keys": "string", "reconsume_times": "int",
                       "producer_group": "string"},
    "message.rejected": {"topic": "string", "producer_group": "string", "code": "int",
                         "remark": "string", "peer": "string"},
    "message.scheduled": {"msg_id": "string", "offset_msg_id": "string", "real_topic": "string",
                          "real_queue_id": "int", "delay_level": "int", "queue_offset": "long",
                          "phy_offset": "long", "store_ts": "long", "deliver_ts": "long",
                          "reconsume_times": "int", "tags": "string"},
    # debug level: the scheduler found it due (message.delivered carries the lateness)
    "message.due": {"msg_id": "string", "delay_level": "int", "queue_offset": "long",
                    "deliver_ts": "long", "wake_lag_ms": "double"},
    "message.delivered": {"msg_id": "string", "topic": "string", "queue_id": "int",
                          "queue_offset": "long", "phy_offset": "long", "delay_level": "int",
                          "deliver_ts": "long", "lateness_ms": "double",
                          "reconsume_times": "int"},
    "message.pulled": {"msg_id": "string", "group": "string", "topic": "string",
                       "queue_id": "int", "queue_offset": "long", "store_ts": "long",
                       "born_ts": "long", "reconsume_times": "int"},
    "message.redelivered": {"msg_id": "string", "group": "string", "topic": "string",
                            "origin_topic": "string", "origin_msg_id": "string",
                            "reconsume_times": "int", "delay_level": "int"},
    "message.dead_lettered": {"msg_id": "string", "group": "string", "topic": "string",
                              "origin_topic": "string", "origin_msg_id": "string",
                              "reconsume_times": "int"},
    # ---- pulls and offsets
    "pull.held": {"group": "string", "topic": "string", "queue_id": "int",
                  "queue_offset": "long", "timeout_ms": "long"},
    "offset.committed": {"group": "string", "topic": "string", "queue_id": "int",
                         "offset": "long"},
}


def all_fields() -> dict[str, str]:
    """Union of every event's fields with their types (the Spark schema's columns)."""
    out = dict(COMMON)
    for fields in CATALOGUE.values():
        for name, kind in fields.items():
            prev = out.setdefault(name, kind)
            if prev != kind:
                raise ValueError(f"field {name!r} has two types: {prev} and {kind}")
    return out


class _Stamp:
    """ISO-8601 UTC timestamps with milliseconds, formatting the seconds part once."""

    __slots__ = ("_sec", "_prefix")

    def __init__(self) -> None:
        self._sec = -1
        self._prefix = ""

    def __call__(self, _logger: Any, name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        sec = int(now)
        if sec != self._sec:
            self._sec = sec
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        event_dict["timestamp"] = f"{self._prefix}.{int((now - sec) * 1000):03d}Z"
        event_dict["level"] = "warning" if name == "warn" else name
        if event_dict.get("event") not in CATALOGUE:
            event_dict["uncatalogued"] = True  # would fall outside Spark's schema
        return event_dict


_SINKS: list[BufferedSink] = []
# Set by configure_logging when events go only to JSON sinks: the per-message path then
# skips structlog's bound-logger machinery (measured: ~14% of broker CPU under load) and
# runs the same two steps (stamp, one orjson.dumps) into the same sinks.
_fast_emit: Any = None
_fast_debug = False  # whether the fast path also carries debug-level message events


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
        sink = RotatingJsonSink(Path(log_dir), rotate_bytes=rotate_bytes,
                                rotate_seconds=rotate_seconds, gzip_rotated=gzip_rotated)
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

    stamp = _Stamp()
    processors: list[Any] = [stamp, fan_out]
    global _fast_emit, _fast_debug
    _fast_emit = None
    _fast_debug = lvl <= logging.DEBUG
    if not console and lvl <= logging.INFO:
        def emit(event_dict: dict[str, Any], level: str = "info") -> None:
            line = dumps(stamp(None, level, event_dict), default=str)
            for s in sinks:
                s.write(line)

        _fast_emit = emit
    if console:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # Without a console the sinks did the writing: ReturnLogger makes the final
        # step a no-op (cheaper than raising DropEvent on every event).
        logger_factory=(structlog.PrintLoggerFactory(sys.stdout) if console
                        else structlog.ReturnLoggerFactory()),
        cache_logger_on_first_use=False,
    )
    return sink


def close_sinks() -> None:
    """Drain and close every sink ``configure_logging`` opened."""
    global _fast_emit
    _fast_emit = None
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
        fields["component"] = self.component
        fields["event"] = event
        emit(fields)

    def debug(self, event: str, **fields: Any) -> None:
        emit = _fast_emit
        if emit is None:
            self._logger.debug(event, **fields)
        elif _fast_debug:
            fields["component"] = self.component
            fields["event"] = event
            emit(fields, "debug")
