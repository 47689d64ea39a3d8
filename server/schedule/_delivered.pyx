# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``delivered.py``'s ``DeliveryLog.timers_fired`` and
``DeliveryLog.delivered`` (chosen by ``protocol/native.py``; ``delivered.py`` is the
reference and owns what a delivery tells).

Each is the reference's loop step for step in one C frame: the stats counters, the
lateness (the same double arithmetic and the builtin ``round``), the histogram's
``observe`` (``stats.LatenessHistogram``: the bucket by ``bisect_left`` over
``LATENESS_BUCKETS_MS``, the total and the running sum added row by row, written back
once per batch, also when a row raises), the msgId (``UNIQ_KEY`` or the offset msgId)
and the lines, in the same order and with the same fields (each line's dict a copy of
the fields laid out once, its values set in the reference's order), handed to
``MessageLog.info_many`` once. When that is a plain ``MessageLog``'s and its batch writer
the native ``LineEmitter``'s ``many``, the rows go to the writer's row entry instead
(``_logs.ROWS``: each row's ``ts`` and values in one flat list, the keys in the
reference's order, no fields dict): the same lines to the same ``write_many``.

The rows' ``Target`` and ``PutResult`` fields are read in their slots (``_slots.pxd``);
an object of another class through its attributes. It defers the whole batch to the reference, before changing anything, when the
histogram is not a plain ``LatenessHistogram`` (a subclass decides its own ``observe``)
and, for ``delivered``, when ``message.due`` is written (debug level: rare).
"""

from cpython.dict cimport PyDict_Copy
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.long cimport PyLong_FromDouble
from libc.math cimport copysign, fabs, fma, isfinite, nearbyint

import builtins

from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.properties import UNIQ_KEY

from protocol._capsules cimport _c_function
from protocol._slots cimport _field, _slot

from ..observe import logs as _logs
from ..observe.stats import LATENESS_BUCKETS_MS, LatenessHistogram
from ..store.types import PutResult
from . import delivered as _ref
from .reput import Target

cdef object _pure = _ref.reference
cdef object _round = builtins.round
cdef object _Histogram = LatenessHistogram
cdef object _offset_id = create_offset_msg_id
cdef str _UNIQ = UNIQ_KEY
# a row's ``Target`` and ``PutResult`` fields, read in their slots (both classes slotted;
# an object of another class is read through its attributes)
cdef object _Target = Target
cdef object _PutResult = PutResult
cdef Py_ssize_t T_TOPIC = _slot(Target, "topic", False)
cdef Py_ssize_t T_QID = _slot(Target, "queue_id", False)
cdef Py_ssize_t T_PROPS = _slot(Target, "properties", False)
cdef Py_ssize_t T_RECONSUME = _slot(Target, "reconsume_times", False)
cdef Py_ssize_t R_PHY = _slot(PutResult, "phy_offset", False)
cdef Py_ssize_t R_QOFF = _slot(PutResult, "queue_offset", False)


cdef inline object _tget(object target, Py_ssize_t at, str name):
    """``target.<name>``: in its slot for a ``Target``."""
    if type(target) is _Target:
        return _field(target, at, name)
    return getattr(target, name)


cdef inline object _rget(object result, Py_ssize_t at, str name):
    """``result.<name>``: in its slot for a ``PutResult``."""
    if type(result) is _PutResult:
        return _field(result, at, name)
    return getattr(result, name)
# a line's fields, in the reference's order: each line's dict is a copy of one of these
# (the keys laid out once) with every value then set in that order
cdef dict _FIRED_FIELDS = dict.fromkeys(
    ("msg_id", "topic", "queue_id", "queue_offset", "phy_offset", "deliver_ts", "lateness_ms")
)
cdef dict _DELIVERED_FIELDS = dict.fromkeys(
    (
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "phy_offset",
        "delay_level",
        "lateness_ms",
        "reconsume_times",
    )
)
# the lines' keys, in the reference's order, for the log writer's batch row entry
# (``_logs.ROWS``: each line written from its values, no fields dict) when the message
# log is a plain ``MessageLog`` whose batch writer is the native ``LineEmitter``'s
FIRED_KEYS = tuple(_FIRED_FIELDS)
DELIVERED_KEYS = tuple(_DELIVERED_FIELDS)
cdef tuple _FIRED_KEYS = FIRED_KEYS
cdef tuple _DELIVERED_KEYS = DELIVERED_KEYS
ctypedef int (*_rows_t)(object, object, tuple, list) except -1
cdef _rows_t _rows = <_rows_t>_c_function(_logs._twin, "ROWS")
cdef object _LineEmitter = _logs._twin.LineEmitter if _rows != NULL else None
cdef object _MessageLog = _logs.MessageLog
cdef object _INFO_MANY = _logs.MessageLog.info_many


cdef object _row_writer(object msglog):
    """The ``LineEmitter`` that ``msglog.info_many`` hands its rows to (its ``many``),
    when ``_rows`` can write them in its place, else None."""
    if _rows == NULL or type(msglog) is not _MessageLog or _MessageLog.info_many is not _INFO_MANY:
        return None
    emitter = _logs._fast_emit
    many = _logs._fast_emit_many
    if type(emitter) is not _LineEmitter or many is None or many != emitter.many:
        return None
    return emitter



def row_writer(msglog):
    """``_row_writer`` from Python (the parity tests)."""
    return _row_writer(msglog)


cdef Py_ssize_t _NB = len(LATENESS_BUCKETS_MS)
cdef double _BOUNDS[64]
cdef Py_ssize_t _i
if _NB > 63:
    raise ImportError("LATENESS_BUCKETS_MS: more bounds than the twin holds")
for _i in range(_NB):
    # the bounds are exact doubles (small ints and floats): a float compares with
    # each the same way as with the double it converts to
    _BOUNDS[_i] = <double>LATENESS_BUCKETS_MS[_i]
    if <object>_BOUNDS[_i] != LATENESS_BUCKETS_MS[_i]:
        raise ImportError("LATENESS_BUCKETS_MS: a bound is not an exact double")


cdef object _round3(double x):
    """``round(x, 3)`` for a float ``x``: the double nearest ``k / 1000`` where ``k`` is
    ``x * 1000`` rounded half to even on its exact value. ``k`` comes from one product,
    checked exactly (``fma``: the exact ``x * 1000 - k``); a tie or anything not plainly
    in range goes to the builtin (the reference's dtoa)."""
    cdef double k, r
    if not isfinite(x) or fabs(x) >= 1e12:
        return _round(PyFloat_FromDouble(x), 3)
    k = nearbyint(x * 1000.0)
    r = fma(x, 1000.0, -k)  # exact here: x * 1000 - k, correctly rounded once
    if not (fabs(r) < 0.5):
        return _round(PyFloat_FromDouble(x), 3)
    if k == 0:
        return PyFloat_FromDouble(copysign(0.0, x))
    return PyFloat_FromDouble(k / 1000.0)


cdef inline Py_ssize_t _bucket(double ms) noexcept:
    """``bisect_left(LATENESS_BUCKETS_MS, ms)``."""
    cdef Py_ssize_t lo = 0, hi = _NB, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _BOUNDS[mid] < ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef class _Observed:
    """One batch's ``observe`` calls on one histogram, written back by ``flush``."""

    cdef object hist
    cdef long long counts[64]
    cdef long long n
    cdef double sum_ms

    def __cinit__(self, hist):
        cdef Py_ssize_t i
        self.hist = hist
        for i in range(_NB + 1):
            self.counts[i] = 0
        self.n = 0
        self.sum_ms = hist.sum_ms

    cdef inline void add(self, double ms) noexcept:
        self.counts[_bucket(ms)] += 1
        self.n += 1
        self.sum_ms += ms

    cdef flush(self):
        cdef Py_ssize_t i
        cdef list counts
        if self.n == 0:
            return
        hist = self.hist
        counts = hist.counts
        for i in range(_NB + 1):
            if self.counts[i]:
                counts[i] += self.counts[i]
        hist.total += self.n
        hist.sum_ms = self.sum_ms
        self.n = 0


cdef inline object _msg_id(object store, object target, object result):
    """``DeliveryLog._msg_id``."""
    props = _tget(target, T_PROPS, "properties")
    msg_id = (<dict>props).get(_UNIQ) if type(props) is dict else props.get(_UNIQ)
    if msg_id:
        return msg_id
    ip, port = store.store_host
    return _offset_id(ip, port, _rget(result, R_PHY, "phy_offset"))


def timers_fired(self, rows):
    """``DeliveryLog.timers_fired``."""
    cdef _Observed seen
    cdef double wall_ms_d = 0
    cdef list lines
    cdef dict fields
    cdef bint logging
    stats = self.stats
    hist = stats.timer_lateness
    if type(hist) is not _Histogram:
        return _pure.timers_fired(self, rows)
    stats.timers_fired += len(rows)
    logging = self._logging()
    lines = []
    writer = _row_writer(self.msglog) if logging else None
    store = self.store
    seen = _Observed(hist)
    try:
        for target, result, due, wall in rows:
            # wall_ms = wall * 1000; round(wall_ms - due, 3): in C for a float wall and an
            # int due (the same double operations), else as Python numbers
            if type(wall) is float and type(due) is int:
                wall_ms_d = <double>wall * 1000
                lateness = _round3(wall_ms_d - <double>due)
                ts = None
            else:
                wall_ms = wall * 1000
                lateness = _round(wall_ms - due, 3)
                ts = int(wall_ms)
            seen.add(PyFloat_AS_DOUBLE(lateness) if type(lateness) is float else <double>lateness)
            if logging:
                if ts is None:
                    ts = PyLong_FromDouble(wall_ms_d)
                if writer is not None:  # ts, then the values in the keys' order
                    lines.append(ts)
                    lines.append(_msg_id(store, target, result))
                    lines.append(_tget(target, T_TOPIC, "topic"))
                    lines.append(_tget(target, T_QID, "queue_id"))
                    lines.append(_rget(result, R_QOFF, "queue_offset"))
                    lines.append(_rget(result, R_PHY, "phy_offset"))
                    lines.append(due)
                    lines.append(lateness)
                    continue
                fields = PyDict_Copy(_FIRED_FIELDS)
                fields["msg_id"] = _msg_id(store, target, result)
                fields["topic"] = _tget(target, T_TOPIC, "topic")
                fields["queue_id"] = _tget(target, T_QID, "queue_id")
                fields["queue_offset"] = _rget(result, R_QOFF, "queue_offset")
                fields["phy_offset"] = _rget(result, R_PHY, "phy_offset")
                fields["deliver_ts"] = due
                fields["lateness_ms"] = lateness
                lines.append((ts, fields))
    finally:
        seen.flush()
    if lines:
        if writer is not None:
            _rows(writer, "timer.fired", _FIRED_KEYS, lines)
        else:
            self.msglog.info_many("timer.fired", lines)


def delivered(self, rows):
    """``DeliveryLog.delivered``."""
    cdef _Observed seen
    cdef double wall_ms_d = 0
    cdef list lines
    cdef dict fields
    cdef dict by_level
    cdef bint logging
    stats = self.stats
    logging = self._logging()
    if logging and self.msglog.debug_enabled:
        return _pure.delivered(self, rows)
    lateness_of = stats.lateness
    # the histograms the rows observe, checked before anything changes (a level's is
    # made on first use by the defaultdict, as the reference's ``lateness_of[level]``)
    by_level = {}
    for row in rows:
        level = row[2]
        if level not in by_level:
            hist = lateness_of[level]
            if type(hist) is not _Histogram:
                return _pure.delivered(self, rows)
            by_level[level] = _Observed(hist)
    delivered = stats.delivered
    lines = []
    writer = _row_writer(self.msglog) if logging else None
    store = self.store
    try:
        for target, result, level, schedule_offset, deliver_ts, woke_ms, wall in rows:
            if type(wall) is float and type(deliver_ts) is int:
                wall_ms_d = <double>wall * 1000
                lateness = _round3(wall_ms_d - <double>deliver_ts)
                ts = None
            else:
                wall_ms = wall * 1000
                lateness = _round(wall_ms - deliver_ts, 3)
                ts = int(wall_ms)
            delivered[_tget(target, T_TOPIC, "topic")] += 1
            (<_Observed>by_level[level]).add(
                PyFloat_AS_DOUBLE(lateness) if type(lateness) is float else <double>lateness
            )
            if not logging:
                continue
            if ts is None:
                ts = PyLong_FromDouble(wall_ms_d)
            if writer is not None:  # ts, then the values in the keys' order
                lines.append(ts)
                lines.append(_msg_id(store, target, result))
                lines.append(_tget(target, T_TOPIC, "topic"))
                lines.append(_tget(target, T_QID, "queue_id"))
                lines.append(_rget(result, R_QOFF, "queue_offset"))
                lines.append(_rget(result, R_PHY, "phy_offset"))
                lines.append(level)
                lines.append(lateness)
                lines.append(_tget(target, T_RECONSUME, "reconsume_times"))
                continue
            fields = PyDict_Copy(_DELIVERED_FIELDS)
            fields["msg_id"] = _msg_id(store, target, result)
            fields["topic"] = _tget(target, T_TOPIC, "topic")
            fields["queue_id"] = _tget(target, T_QID, "queue_id")
            fields["queue_offset"] = _rget(result, R_QOFF, "queue_offset")
            fields["phy_offset"] = _rget(result, R_PHY, "phy_offset")
            fields["delay_level"] = level
            fields["lateness_ms"] = lateness
            fields["reconsume_times"] = _tget(target, T_RECONSUME, "reconsume_times")
            lines.append((ts, fields))
    finally:
        for seen in by_level.values():
            seen.flush()
    if lines:
        if writer is not None:
            _rows(writer, "message.delivered", _DELIVERED_KEYS, lines)
        else:
            self.msglog.info_many("message.delivered", lines)
