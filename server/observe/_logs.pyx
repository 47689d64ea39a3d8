# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``logs.py``'s hot-path writer (chosen by ``protocol/native.py``;
``logs.py`` is the reference and owns the line format, ``protocol/events.py`` the drops).

``LineEmitter`` is ``configure_logging``'s ``emit`` and ``emit_many`` closures as one C
object, step for step, from the same ``heads`` (``logs._line_heads``): a catalogued
event at a level it has a head for, with fields naming none of the head keys, is written
as its pre-made ``{"ts":..,"v":2,"event":..`` bytes joined to one ``orjson.dumps`` of its
fields, after ``events.drop_lean_fields``' drops for a ``LEAN_EVENTS`` event (inline:
the format-1-only fields, a ``reconsume_times`` of 0); every other call goes through
``record``, as the reference's does. A line goes to the one sink's ``write`` (or to each
sink's); ``many`` hands a batch's lines to each sink's ``write_many``. ``info`` is
``MessageLog.info``: the configured writer called with the fields, or structlog without
one.
"""

import orjson

from kairosmq.protocol.events import record as _record

from . import logs as _logs_ref

cdef object _dumps = orjson.dumps
cdef object _str = str
cdef object _HEAD_KEYS = _logs_ref._HEAD_KEYS


cdef class LineEmitter:
    """``emit(event, fields, level="info")`` and ``emit_many(event, rows)`` as
    ``configure_logging`` makes them."""

    cdef dict heads
    cdef object wall
    cdef object write
    cdef list sinks

    def __init__(self, dict heads, wall, write, list sinks):
        self.heads = heads  # (event, level) -> (its line's bytes after "ts", drops or None)
        self.wall = wall  # time.time, as read when logging was configured
        self.write = write  # the one sink's write, or None: each sink's
        self.sinks = sinks

    cdef bytes _line(self, event, dict fields, long long ts_ms, level):
        """``logs._line_maker``'s ``line``."""
        head = self.heads.get((event, level))
        if head is None or not fields or not _HEAD_KEYS.isdisjoint(fields):
            return _dumps(_record(event, fields, ts_ms, level), default=_str)
        prefix, drop = <tuple>head
        if drop is not None:
            for key in <tuple>drop:  # events.drop_lean_fields
                if key in fields:
                    del fields[key]
            if not fields.get("reconsume_times", 1):
                del fields["reconsume_times"]
        body = _dumps(fields, default=_str)
        return b'{"ts":%d' % ts_ms + (
            prefix + body[1:] if len(body) > 2 else prefix[:-1] + b"}"
        )

    def __call__(self, event, dict fields, level="info"):
        line = self._line(event, fields, <long long>(self.wall() * 1000), level)
        write = self.write
        if write is not None:
            write(line)
            return
        for s in self.sinks:
            s.write(line)

    def many(self, event, list rows):
        lines = [self._line(event, <dict>fields, ts, "info") for ts, fields in rows]
        for s in self.sinks:
            s.write_many(lines)


def info(self, event, **fields):
    """``MessageLog.info``."""
    emit = _logs_ref._fast_emit
    if emit is None:
        self._logger.info(event, **fields)
        return
    emit(event, fields)
