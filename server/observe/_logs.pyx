# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``logs.py``'s hot-path writer (chosen by ``protocol/native.py``;
``logs.py`` is the reference and owns the line format, ``protocol/events.py`` the drops).

``LeanEmitter`` is ``configure_logging``'s ``emit`` closure as a C callable, step for
step: a ``LEAN_EVENTS`` event at info with fields naming neither ``component`` nor
``event`` is written as the pre-made ``{"ts":..,"v":2,"event":..`` bytes joined to one
``orjson.dumps`` of its fields after ``events.drop_lean_fields``' drops (inline: the
format-1-only fields, a ``reconsume_times`` of 0); every other call goes through
``record``, as the reference's does. The line goes to the one sink's ``write`` (or to
each sink's). ``info`` is ``MessageLog.info``: the configured writer called with the
fields, or structlog without one.
"""

import orjson

from kairosmq.protocol.events import record as _record

from . import logs as _logs_ref

cdef object _dumps = orjson.dumps
cdef object _str = str


cdef class LeanEmitter:
    """``emit(event, fields, level="info")`` as ``configure_logging`` makes it."""

    cdef dict lean
    cdef object wall
    cdef object write
    cdef list sinks

    def __init__(self, dict lean, wall, write, list sinks):
        self.lean = lean  # event -> (its line's bytes after "ts", its drop fields)
        self.wall = wall  # time.time, as read when logging was configured
        self.write = write  # the one sink's write, or None: each sink's
        self.sinks = sinks

    def __call__(self, event, dict fields, level="info"):
        head = self.lean.get(event) if level == "info" else None
        if head is None or not fields or "component" in fields or "event" in fields:
            line = _dumps(_record(event, fields, int(self.wall() * 1000), level), default=_str)
        else:
            prefix, drop = <tuple>head
            for key in <tuple>drop:  # events.drop_lean_fields
                if key in fields:
                    del fields[key]
            if not fields.get("reconsume_times", 1):
                del fields["reconsume_times"]
            body = _dumps(fields, default=_str)
            line = b'{"ts":%d' % int(self.wall() * 1000) + (
                prefix + body[1:] if len(body) > 2 else prefix[:-1] + b"}"
            )
        write = self.write
        if write is not None:
            write(line)
            return
        for s in self.sinks:
            s.write(line)


def info(self, event, **fields):
    """``MessageLog.info``."""
    emit = _logs_ref._fast_emit
    if emit is None:
        self._logger.info(event, **fields)
        return
    emit(event, fields)
