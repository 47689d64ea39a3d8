"""Logging setup and THE catalogue of broker log events (the Spark job's input contract).

Owns: ``configure_logging`` (structlog to JSON lines in a file and/or stdout, or a console
renderer on a TTY) and ``CATALOGUE``: every event name the broker emits, with its fields.

Invariants:
* Event names are stable dotted names; fields are added, never renamed or retyped, and
  ``spark/schema.py`` is changed in the same commit as this table (a contract test reads
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

_format_exc_info = structlog.processors.format_exc_info

LOG_FORMAT = 2  # the ``v`` of every JSON line; format 1 lines have no ``v``

# field name -> type name (Spark: string, long, int, double, boolean)
COMMON: dict[str, str] = {
    "ts": "long",
    "v": "int",
    "event": "string",
    "level": "string",
    "component": "string",
}

CATALOGUE: dict[str, dict[str, str]] = {
    # ---- lifecycle
    "broker.started": {"host": "string", "port": "int", "namesrv_port": "int",
                       "data_dir": "string", "delay_levels": "string", "flush_mode": "string"},
    # warning: the VIP channel (port - 2) could not be bound; the broker serves without it
    "broker.vip_unavailable": {"port": "int", "error": "string"},
    "broker.stopping": {"reason": "string"},
    "broker.stopped": {"uptime_ms": "double"},
    # error level: a stop step failed or timed out; stop goes on and closes the files
    "broker.stop_failed": {"step": "string", "error": "string"},
    # error level: a supervised background service raised; restarted after retry_in_ms
    "service.failed": {"service": "string", "error": "string", "failures": "int",
                       "retry_in_ms": "double"},
    "service.recovered": {"service": "string", "failures": "int", "down_ms": "double"},
    "store.recovered": {"commitlog_max_offset": "long", "truncated_bytes": "long",
                        "records_replayed": "long", "records_skipped": "long",
                        "duration_ms": "double"},
    "store.files_deleted": {"kind": "string", "count": "int", "bytes": "long"},
    # ---- store faults (error level unless noted; docs/reliability.md)
    # replay passed over a record it could not decode or dispatch (counted in the summary)
    "store.replay_skipped": {"phy_offset": "long", "reason": "string"},
    # a dispatch listener raised after an append (the message is stored)
    "store.dispatch_failed": {"phy_offset": "long", "dispatcher": "string", "error": "string"},
    # a commit-log write failed: the records after phy_offset were rolled back
    "store.write_failed": {"phy_offset": "long", "rolled_back_bytes": "long", "records": "int",
                           "errno": "int", "error": "string", "retry_in_ms": "double"},
    "store.write_recovered": {"failures": "int"},  # info: a write succeeded again
    # sends refused above the free-space watermark / accepted again (info)
    "store.disk_full": {"used_ratio": "double", "max_used_ratio": "double", "path": "string"},
    "store.disk_ok": {"used_ratio": "double", "max_used_ratio": "double", "path": "string"},
    # warning: a file could not be allocated where a failure is survivable
    "store.allocation_failed": {"kind": "string", "path": "string", "error": "string"},
    "store.checkpoint_unreadable": {"path": "string", "error": "string"},  # full replay
    # the scheduler passed over a schedule record it cannot deliver
    "schedule.record_skipped": {"delay_level": "int", "queue_offset": "long",
                                "phy_offset": "long", "reason": "string"},
    # a KAIROS_SCHEDULE_ORIGIN value that is not a known level:offset was ignored (warning)
    "schedule.origin_ignored": {"phy_offset": "long", "origin": "string", "reason": "string"},
    # warning: the wall clock stepped back; a head's due time was capped (RocketMQ
    # correctDeliverTimestamp)
    "schedule.due_capped": {"delay_level": "int", "queue_offset": "long", "deliver_ts": "long",
                            "capped_ts": "long"},
    # warning: a commit outside 0..2^63-1 was refused
    "offset.commit_refused": {"group": "string", "topic": "string", "queue_id": "int",
                              "value": "string"},
    "offset.persist_failed": {"path": "string", "error": "string"},  # retried next checkpoint
    "offset.file_unreadable": {"path": "string", "error": "string"},
    # warning: DLQ resend passed over a dead letter it must not resend
    "message.resend_skipped": {"group": "string", "msg_id": "string", "reason": "string"},
    "topic.created": {"topic": "string", "queue_nums": "int", "auto": "boolean"},
    "topic.deleted": {"topic": "string"},
    # name-server KV config (PUT_KV_CONFIG / DELETE_KV_CONFIG, handlers/rocketmq_kv.py)
    "kvconfig.updated": {"namespace": "string", "key": "string"},
    "kvconfig.deleted": {"namespace": "string", "key": "string"},
    # ---- connections and clients
    "conn.opened": {"peer": "string", "conn_id": "long", "listener": "string"},
    "conn.closed": {"peer": "string", "conn_id": "long", "reason": "string"},
    # warning level: max_connections reached, the new connection is closed at once
    "conn.refused": {"peer": "string", "listener": "string", "connections": "int",
                     "reason": "string"},
    "frame.rejected": {"peer": "string", "conn_id": "long", "error": "string"},
    # error level, from ``log.exception``: ``exception`` is the formatted traceback (an
    # event logged that way must list it)
    "request.failed": {"peer": "string", "request_code": "int", "error": "string",
                       "exception": "string"},
    # a request refused by server/ingress.py (bad name, integer, size, property)
    "request.rejected": {"peer": "string", "request_code": "int", "code": "int",
                         "remark": "string"},
    "client.registered": {"client_id": "string", "group": "string", "role": "string"},
    "client.unregistered": {"client_id": "string", "group": "string", "role": "string"},
    # warn: a heartbeat registered an SQL92 subscription that does not compile
    "filter.compile_failed": {"group": "string", "topic": "string", "expression": "string",
                              "remark": "string"},
    # ---- the message lifecycle (one event per step)
    # (the time of the line is the store time; offset_msg_id = store host + phy_offset)
    "message.stored": {"msg_id": "string", "topic": "string", "queue_id": "int",
                       "queue_offset": "long", "phy_offset": "long", "size": "int",
                       "born_ts": "long", "reconsume_times": "int"},
    "message.rejected": {"topic": "string", "producer_group": "string", "code": "int",
                         "remark": "string", "peer": "string"},
    "message.scheduled": {"msg_id": "string", "real_topic": "string", "real_queue_id": "int",
                          "delay_level": "int", "queue_offset": "long", "phy_offset": "long",
                          "deliver_ts": "long", "reconsume_times": "int"},
    # debug level: the scheduler found it due (message.delivered carries the lateness)
    "message.due": {"msg_id": "string", "delay_level": "int", "queue_offset": "long",
                    "deliver_ts": "long", "wake_lag_ms": "double"},
    # (deliver_ts = ts - lateness_ms; the planned time is on message.scheduled)
    "message.delivered": {"msg_id": "string", "topic": "string", "queue_id": "int",
                          "queue_offset": "long", "phy_offset": "long", "delay_level": "int",
                          "lateness_ms": "double", "reconsume_times": "int"},
    "message.pulled": {"msg_id": "string", "group": "string", "topic": "string",
                       "queue_id": "int", "queue_offset": "long", "born_ts": "long",
                       "reconsume_times": "int"},
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


# The per-message events written through ``MessageLog`` -> the fields format 1 had that
# format 2 drops (callers may still pass them; the line leaves them out).
LEAN_EVENTS: dict[str, tuple[str, ...]] = {
    "message.stored": ("offset_msg_id", "store_ts", "tags", "keys", "producer_group"),
    "message.scheduled": ("offset_msg_id", "store_ts", "tags"),
    "message.due": (),
    "message.delivered": ("deliver_ts",),
    "message.pulled": ("store_ts",),
}
# Format 1 fields that format 2 no longer writes (old logs still read with these types).
FORMAT_1_FIELDS: dict[str, str] = {
    "timestamp": "timestamp", "offset_msg_id": "string", "store_ts": "long",
    "tags": "string", "keys": "string", "deliver_ts": "long", "producer_group": "string",
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


def record(event: str, fields: dict[str, Any], ts_ms: int, level: str = "info") -> dict[str, Any]:
    """The format-2 JSON record of one log call (``fields`` may be consumed).

    ``ts, v, event`` first; a ``LEAN_EVENTS`` event drops ``component``, its format-1-only
    fields, ``reconsume_times`` 0 and ``level`` info; other events keep ``level`` and get
    ``uncatalogued`` when the catalogue does not know them (they would fall outside the
    Spark schema). The bench generator writes its lines with this function too.
    """
    drop = LEAN_EVENTS.get(event)
    if drop is None:
        rec: dict[str, Any] = {"ts": ts_ms, "v": LOG_FORMAT, "event": event, "level": level}
        if event not in CATALOGUE:
            rec["uncatalogued"] = True
    else:
        rec = {"ts": ts_ms, "v": LOG_FORMAT, "event": event}
        if level != "info":
            rec["level"] = level
        fields.pop("component", None)
        for key in drop:
            fields.pop(key, None)
        if not fields.get("reconsume_times"):
            fields.pop("reconsume_times", None)
    fields.pop("event", None)
    rec.update(fields)
    return rec


def _stamp(_logger: Any, name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the format-2 record (see ``record``) stamped now; a
    ``log.exception`` call's ``exc_info`` becomes the ``exception`` traceback text."""
    if "exc_info" in event_dict:
        event_dict = _format_exc_info(_logger, name, event_dict)
    return record(event_dict.get("event", ""), event_dict, int(time.time() * 1000),
                  "warning" if name == "warn" else name)


def _console_time(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Console only: an ISO ``timestamp`` for people instead of ``ts``/``v``."""
    ts = event_dict.pop("ts", None)
    event_dict.pop("v", None)
    if ts is not None:
        event_dict["timestamp"] = time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 1000)) + f".{ts % 1000:03d}Z"
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

    stamp = _stamp
    processors: list[Any] = [stamp, fan_out]
    global _fast_emit, _fast_debug
    _fast_emit = None
    _fast_debug = lvl <= logging.DEBUG
    if not console and lvl <= logging.INFO:
        def emit(event: str, fields: dict[str, Any], level: str = "info") -> None:
            line = dumps(record(event, fields, int(time.time() * 1000), level), default=str)
            for s in sinks:
                s.write(line)

        _fast_emit = emit
    if console:
        processors += [_console_time, structlog.dev.ConsoleRenderer(colors=False)]
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
        emit(event, fields)

    def debug(self, event: str, **fields: Any) -> None:
        emit = _fast_emit
        if emit is None:
            self._logger.debug(event, **fields)
        elif _fast_debug:
            emit(event, fields, "debug")
