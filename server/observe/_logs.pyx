# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native twin of ``logs.py``'s hot-path writer (chosen by ``protocol/native.py``;
``logs.py`` is the reference and owns the line format, ``protocol/events.py`` the drops).

``LineEmitter`` is ``configure_logging``'s ``emit`` and ``emit_many`` closures as one C
object, step for step, from the same ``heads`` (``logs._line_heads``): a catalogued
event at a level it has a head for, with fields naming none of the head keys, is written
as its pre-made ``{"ts":..,"v":2,"event":..`` bytes joined to its fields as one
``orjson.dumps`` writes them, after ``events.drop_lean_fields``' drops for a
``LEAN_EVENTS`` event (inline: the format-1-only fields, a ``reconsume_times`` of 0);
every other call goes through ``record``, as the reference's does. A line goes to the
one sink's ``write`` (or to each sink's; the sink twin's ``write`` bound to its sink is
called as its C function, ``_logsink.WRITE``); ``many`` hands a batch's lines to each
sink's ``write_many``. ``ROW`` (a C function, and ``LineEmitter.row`` from Python) is
``emitter(event, dict(zip(keys, values)))`` for distinct keys with the values in a C
array: the twins that log per message (``put/_path.pyx``, ``handlers/_pull.pyx``)
hand their fields so, without the dict (``ROWS``: a batch of one event's lines, each
with its ``ts``, handed to each sink's ``write_many`` as ``many`` does:
``schedule/_delivered.pyx``); its common case is written from the arrays,
any other builds the dict and goes the same way as a call. What a (keys, event) pair
needs (each key's quoted bytes, whether it is one of the event's drops) is worked out
once per pair (``_plan``, found again by identity: the callers' keys are constants). ``info`` is ``MessageLog.info``: the configured writer called with the
fields, or structlog without one. The clock, when it is ``time.time`` itself, is read
in C (``clock_gettime``: the same float ``time.time`` returns); any other is called.

The fields are written in C, orjson's bytes for its common values: a key or ``str`` of
printable ASCII without ``"`` or ``\\`` (as is), an ``int`` within 64 bits, a finite
``float`` whose ``repr`` has no exponent (orjson writes the same shortest digits: the
parity test sweeps them), ``True``/``False``/``None``. Any other key makes the whole
body one ``orjson.dumps`` (it raises what the reference raises); any other value is
that value's own ``orjson.dumps(value, default=str)``, the bytes orjson writes for it
inside the dict.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from cpython.object cimport PyObject
from protocol._capsules cimport _c_function
from cpython.pycapsule cimport PyCapsule_New
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport fabs, isfinite, llround, signbit
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, strpbrk
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

import time as _time_mod

import orjson

from kairosmq.protocol.events import record as _record

from . import logs as _logs_ref
from . import logsink as _logsink_ref

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    char* PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int* ptype) except NULL

cdef object _dumps = orjson.dumps
cdef object _str = str
cdef object _HEAD_KEYS = _logs_ref._HEAD_KEYS

# the sink twin's ``write`` as a C function (``_logsink.WRITE``): called in place of a
# sink's ``write`` that is that twin's bound to the sink
ctypedef int (*_sink_write_t)(object, object) except -1
cdef _sink_write_t _sink_write = NULL
cdef object _sink_twin_write = None
_sink_write = <_sink_write_t>_c_function(_logsink_ref._twin, "WRITE")
if _sink_write != NULL:
    _sink_twin_write = _logsink_ref._twin.write
cdef object _TIME = _time_mod.time


cdef inline long long _wall_ms(object wall) except? -1:
    """``int(wall() * 1000)``: for ``wall`` exactly ``time.time``, its clock read in C
    (CLOCK_REALTIME, the float ``time.time`` makes of its nanoseconds); any other clock
    (a pinned one) called in Python."""
    cdef timespec now
    cdef long long ns
    if wall is _TIME and clock_gettime(CLOCK_REALTIME, &now) == 0:
        ns = <long long>now.tv_sec * 1000000000 + now.tv_nsec
        if ns % 1000000000 == 0:  # _PyTime_AsSecondsDouble's two roundings
            return <long long>(<double>(ns // 1000000000) * 1000)
        return <long long>(<double>ns / 1e9 * 1000)
    return <long long>(wall() * 1000)

DEF _STACK = 512
DEF _PLANS = 16  # the (keys, event) pairs a LineEmitter keeps a ``_plan`` of


cdef struct _Buf:
    char* p  # the line so far: ``stack`` until it outgrows it, then malloc'd
    Py_ssize_t n
    Py_ssize_t cap
    char stack[_STACK]


cdef inline void _init(_Buf* b) noexcept:
    b.p = b.stack
    b.n = 0
    b.cap = _STACK


cdef inline void _release(_Buf* b) noexcept:
    if b.p != b.stack:
        free(b.p)


cdef int _grow(_Buf* b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = b.cap
    cdef char* p
    while cap < b.n + more:
        cap *= 2
    if b.p == b.stack:
        p = <char*>malloc(cap)
        if p == NULL:
            raise MemoryError()
        memcpy(p, b.stack, b.n)
    else:
        p = <char*>realloc(b.p, cap)
        if p == NULL:
            raise MemoryError()
    b.p = p
    b.cap = cap
    return 0


cdef inline int _put(_Buf* b, const char* s, Py_ssize_t n) except -1:
    if b.n + n > b.cap:
        _grow(b, n)
    memcpy(b.p + b.n, s, n)
    b.n += n
    return 0


cdef inline int _put_bytes(_Buf* b, bytes s) except -1:
    return _put(b, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef inline int _put_c(_Buf* b, char c) except -1:
    if b.n + 1 > b.cap:
        _grow(b, 1)
    b.p[b.n] = c
    b.n += 1
    return 0


cdef char _PAIRS[200]  # "00".."99": two digits per division
for _c in range(100):
    _PAIRS[2 * _c] = 48 + _c // 10
    _PAIRS[2 * _c + 1] = 48 + _c % 10


cdef int _put_i64(_Buf* b, long long v) except -1:
    cdef char tmp[24]
    cdef int i = 24
    cdef unsigned long long u = <unsigned long long>v
    cdef unsigned int r
    if v < 0:
        u = 0 - u
    while u >= 100:
        r = <unsigned int>(u % 100)
        u //= 100
        i -= 2
        tmp[i] = _PAIRS[2 * r]
        tmp[i + 1] = _PAIRS[2 * r + 1]
    if u >= 10:
        i -= 2
        tmp[i] = _PAIRS[2 * u]
        tmp[i + 1] = _PAIRS[2 * u + 1]
    else:
        i -= 1
        tmp[i] = <char>(48 + u)
    if v < 0:
        i -= 1
        tmp[i] = 45  # "-"
    return _put(b, tmp + i, 24 - i)


cdef unsigned char _ESCAPED[256]  # 1: a byte orjson does not write as is in a string
for _c in range(256):
    _ESCAPED[_c] = _c < 0x20 or _c == 0x22 or _c == 0x5C or _c >= 0x7F


cdef extern from *:
    """
    #define KAIROSMQ_ONES 0x0101010101010101ULL
    #define KAIROSMQ_HIGH 0x8080808080808080ULL
    """
    unsigned long long _ONES "KAIROSMQ_ONES"  # a 1 in each byte (C constants: no Python int)
    unsigned long long _HIGH "KAIROSMQ_HIGH"  # each byte's high bit


cdef inline bint _has_zero(unsigned long long x) noexcept:
    """Whether one of the 8 bytes of ``x`` (each < 0x80) is 0."""
    return ((x - _ONES) & ~x & _HIGH) != 0


cdef inline bint _plain_bytes(const unsigned char* d, Py_ssize_t n) noexcept:
    """No byte of ``d`` (ASCII: each < 0x80) is one ``_ESCAPED`` marks: 8 bytes at a
    time (a byte < 0x20, or ``"``, ``\\`` or DEL), then one at a time."""
    cdef Py_ssize_t i = 0
    cdef unsigned long long x
    while i + 8 <= n:
        memcpy(&x, d + i, 8)
        if (
            ((x - _ONES * 0x20) & ~x & _HIGH) != 0  # a byte < 0x20 (every byte < 0x80)
            or _has_zero(x ^ (_ONES * 0x22))
            or _has_zero(x ^ (_ONES * 0x5C))
            or _has_zero(x ^ (_ONES * 0x7F))
        ):
            return False
        i += 8
    while i < n:
        if _ESCAPED[d[i]]:
            return False
        i += 1
    return True


cdef inline int _put_plain_str(_Buf* b, object s) except -1:
    """Write ``s`` quoted when orjson writes it as is (printable ASCII without ``"``
    or ``\\``): 1, else 0 (nothing written)."""
    cdef Py_ssize_t n, i
    cdef const unsigned char* d
    if not PyUnicode_IS_ASCII(s):
        return 0
    n = PyUnicode_GET_LENGTH(s)
    d = <const unsigned char*>PyUnicode_DATA(s)
    if not _plain_bytes(d, n):
        return 0
    if b.n + n + 2 > b.cap:
        _grow(b, n + 2)
    b.p[b.n] = 34
    memcpy(b.p + b.n + 1, d, n)
    b.p[b.n + n + 1] = 34
    b.n += n + 2
    return 1


cdef int _put_float(_Buf* b, double d) except -1:
    """Write ``d`` as orjson does when that is its ``repr`` too (finite, no exponent; the
    parity test sweeps them): 1, else 0 (nothing written). A multiple of 1e-6 from
    0.001 to 1e9 (a ``round(x, 3)`` lateness) is written from its integer millionths:
    there the doubles are far closer together than 1e-6, so those digits (trailing zeros
    cut) are the one shortest string that reads back as ``d``, which is what both
    write; any other is ``repr``'s."""
    cdef char* r
    cdef Py_ssize_t n = 0
    cdef long long m, frac
    cdef char tmp[32]
    cdef int i = 32, j
    cdef double a = fabs(d)
    if a == 0.0:
        if signbit(d):
            _put(b, b"-0.0", 4)
        else:
            _put(b, b"0.0", 3)
        return 1
    if not isfinite(d):
        return 0
    if 0.001 <= a < 1e9:
        m = llround(a * 1e6)
        if <double>m / 1e6 == a:
            frac = m % 1000000
            m //= 1000000
            j = 6
            while j > 1 and frac % 10 == 0:  # trailing zeros cut, one digit kept
                frac //= 10
                j -= 1
            while j > 0:
                i -= 1
                tmp[i] = <char>(48 + frac % 10)
                frac //= 10
                j -= 1
            i -= 1
            tmp[i] = 46  # "."
            while True:
                i -= 1
                tmp[i] = <char>(48 + m % 10)
                m //= 10
                if m == 0:
                    break
            if d < 0:
                i -= 1
                tmp[i] = 45  # "-"
            _put(b, tmp + i, 32 - i)
            return 1
    r = PyOS_double_to_string(d, b"r", 0, 2, NULL)  # Py_DTSF_ADD_DOT_0: repr
    try:
        if strpbrk(r, b"eE") != NULL:
            return 0
        while r[n]:
            n += 1
        _put(b, r, n)
    finally:
        PyMem_Free(r)
    return 1


cdef int _put_plain_value(_Buf* b, object v) except -1:
    """Write ``v`` when it is one of the values written here (no Python code runs): 1,
    else 0 (nothing written)."""
    cdef type t = type(v)
    cdef int overflow = 0
    cdef long long i
    if t is str:
        return _put_plain_str(b, v)
    if t is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            return 0
        _put_i64(b, i)
    elif v is None:
        _put(b, b"null", 4)
    elif v is True:
        _put(b, b"true", 4)
    elif v is False:
        _put(b, b"false", 5)
    elif t is float:
        return _put_float(b, <double>v)
    else:
        return 0
    return 1


cdef int _put_value(_Buf* b, object v) except -1:
    """Write ``v`` as ``orjson.dumps(..., default=str)`` writes it inside a dict."""
    if not _put_plain_value(b, v):
        _put_bytes(b, _dumps(v, default=_str))
    return 0


cdef inline bint _is_head_key(object key):
    """``key in logs._HEAD_KEYS`` for an exact ``str``."""
    cdef Py_ssize_t n
    cdef const char* d
    if not PyUnicode_IS_ASCII(key):
        return False
    n = PyUnicode_GET_LENGTH(key)
    d = <const char*>PyUnicode_DATA(key)
    if n == 1:
        return d[0] == 118  # "v"
    if n == 2:
        return memcmp(d, b"ts", 2) == 0
    if n == 5:
        return memcmp(d, b"event", 5) == 0 or memcmp(d, b"level", 5) == 0
    if n == 9:
        return memcmp(d, b"component", 9) == 0
    if n == 12:
        return memcmp(d, b"uncatalogued", 12) == 0
    return False


assert _HEAD_KEYS == {"ts", "v", "event", "level", "component", "uncatalogued"}


cdef inline bint _same_str(object a, object b):
    """``a == b`` for two exact ``str``, ``a`` ASCII (no Python call)."""
    cdef Py_ssize_t n
    if a is b:
        return True
    if type(b) is not str or not PyUnicode_IS_ASCII(b):
        return False
    n = PyUnicode_GET_LENGTH(a)
    return n == PyUnicode_GET_LENGTH(b) and memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), n) == 0


cdef object _RECONSUME_TIMES = "reconsume_times"

DEF _DROP_SEEN = 1  # the fields hold a key of the event's drops
DEF _ZERO_RT = 2  # the fields hold a reconsume_times of 0 (a lean event's)


cdef inline int _put_plain_field(_Buf* b, object key, object value, object drop) except -2:
    """One field of ``_line``'s common case: -1 (not the common case: a key not a plain
    ``str`` or naming a head key, a value not written here), else written (0) or left
    out (``_DROP_SEEN``: a key of ``drop``; ``_ZERO_RT``: a ``reconsume_times`` of 0,
    with drops)."""
    cdef Py_ssize_t i
    if type(key) is not str or _is_head_key(key):
        return -1
    if drop is not None:
        for i in range(PyTuple_GET_SIZE(drop)):
            if _same_str(key, <object>PyTuple_GET_ITEM(drop, i)):
                return _DROP_SEEN
        if _same_str(key, _RECONSUME_TIMES):
            if type(value) is not int:
                return -1
            if value == 0:
                return _ZERO_RT
    if not _put_plain_str(b, key):
        return -1
    _put_c(b, 58)  # ":"
    if not _put_plain_value(b, value):
        return -1
    _put_c(b, 44)  # ","
    return 0


cdef int _put_plain_fields(_Buf* b, dict fields, object drop) except -2:
    """``_line``'s common case in one pass over ``fields``: every key a plain ``str``
    naming no head key, every value one written here; the ``drop`` keys (and a
    ``reconsume_times`` of 0, with drops) left out. The flags of what ``_line`` then
    drops from the fields as the reference does (``_DROP_SEEN``, ``_ZERO_RT``), or -1:
    not the common case (nothing decided, ``b`` to be discarded)."""
    cdef int flags = 0, one
    for key, value in fields.items():
        one = _put_plain_field(b, key, value, drop)
        if one < 0:
            return -1
        flags |= one
    return flags


cdef int _drop(dict fields, tuple drop) except -1:
    """``events.drop_lean_fields``."""
    for key in drop:
        if key in fields:
            del fields[key]
    if not fields.get("reconsume_times", 1):
        del fields["reconsume_times"]
    return 0


cdef class LineEmitter:
    """``emit(event, fields, level="info")`` and ``emit_many(event, rows)`` as
    ``configure_logging`` makes them."""

    cdef dict heads
    cdef dict info_heads  # event -> heads[(event, "info")]
    cdef object wall
    cdef object write
    cdef object sink  # the sink of ``write`` when it is the sink twin's (called in C)
    cdef list sinks
    cdef list plans  # ``_plan``'s: (keys, event, plan or None), at most _PLANS

    def __init__(self, dict heads, wall, write, list sinks):
        self.heads = heads  # (event, level) -> (its line's bytes after "ts", drops or None)
        self.info_heads = {e: h for (e, lvl), h in heads.items() if lvl == "info"}
        self.wall = wall  # time.time, as read when logging was configured
        self.write = write  # the one sink's write, or None: each sink's
        self.sink = None
        if (
            _sink_write != NULL
            and PyMethod_Check(write)
            and PyMethod_GET_FUNCTION(write) == <PyObject*>_sink_twin_write
        ):
            self.sink = <object>PyMethod_GET_SELF(write)
        self.sinks = sinks
        self.plans = []

    cdef object _plan(self, object event, tuple keys):
        """How ``_row`` writes the fields of ``keys`` for ``event`` (the callers' keys
        and events are constants: made once per pair, found again by identity): None
        when no line of them is the common case (an event without an info head, a key
        not a plain ``str`` or naming a head key), else ``(prefix, names, kinds)``: the
        head's bytes, each key's ``"key":`` bytes, and per key 0 (written), 1 (one of
        the event's drops: left out) or 2 (``reconsume_times`` with drops: left out
        when 0)."""
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(keys)
        cdef tuple entry
        cdef _Buf b
        for entry in self.plans:
            if <PyObject*>PyTuple_GET_ITEM(entry, 0) == <PyObject*>keys and (
                <PyObject*>PyTuple_GET_ITEM(entry, 1) == <PyObject*>event
            ):
                return <object>PyTuple_GET_ITEM(entry, 2)
        plan = None
        head = self.info_heads.get(event)
        if head is not None:
            drop = (<tuple>head)[1]
            names = []
            kinds = bytearray(n)
            for i in range(n):
                key = <object>PyTuple_GET_ITEM(keys, i)
                if type(key) is not str or _is_head_key(key):
                    break
                if drop is not None and any(_same_str(key, d) for d in <tuple>drop):
                    kinds[i] = 1
                elif drop is not None and _same_str(key, _RECONSUME_TIMES):
                    kinds[i] = 2
                _init(&b)
                try:
                    if not _put_plain_str(&b, key):
                        break
                    _put_c(&b, 58)  # ":"
                    names.append(PyBytes_FromStringAndSize(b.p, b.n))
                finally:
                    _release(&b)
            else:
                plan = ((<tuple>head)[0], tuple(names), bytes(kinds))
        if len(self.plans) < _PLANS:
            self.plans.append((keys, event, plan))
        return plan

    cdef int _out(self, bytes line) except -1:
        """``emit``'s hand-over: the one sink's ``write`` (the sink twin's in C) or each
        sink's."""
        if self.sink is not None:
            return _sink_write(self.sink, line)
        write = self.write
        if write is not None:
            write(line)
            return 0
        for s in self.sinks:
            s.write(line)
        return 0

    cdef int _row(self, event, tuple keys, PyObject** values) except -1:
        """``self(event, dict(zip(keys, values)))`` (``keys`` distinct) without the dict:
        the common case written from the two arrays; any other builds the dict and goes
        ``_line``'s way. Nobody sees the dict, so what ``_line`` would drop from it is
        only left out of the line."""
        return self._out(self._row_line(event, keys, values, _wall_ms(self.wall)))

    cdef int _rows(self, event, tuple keys, list flat) except -1:
        """``self.many(event, [(ts, dict(zip(keys, values))), ...])`` without the dicts:
        ``flat`` holds each row's ``ts`` then its values (``len(keys) + 1`` items a row),
        each line written as ``_row`` writes it with that ``ts``; the lines handed to each
        sink's ``write_many`` once."""
        cdef Py_ssize_t n = PyTuple_GET_SIZE(keys), i = 0
        cdef list lines = []
        if PyList_GET_SIZE(flat) % (n + 1):
            raise ValueError("rows: a ts and one value per key, a row")
        while i < PyList_GET_SIZE(flat):
            lines.append(
                self._row_line(
                    event,
                    keys,
                    PySequence_Fast_ITEMS(flat) + i + 1,
                    <long long>(<object>PyList_GET_ITEM(flat, i)),
                )
            )
            i += n + 1
        for s in self.sinks:
            s.write_many(lines)
        return 0

    cdef bytes _row_line(self, event, tuple keys, PyObject** values, long long ts_ms):
        """``_row``'s line, its ``ts`` given."""
        cdef _Buf b
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(keys)
        cdef bytes line = None
        cdef dict fields
        cdef const char* kinds
        cdef int overflow
        plan = self._plan(event, keys)
        if plan is not None and n:
            names = <tuple>PyTuple_GET_ITEM(plan, 1)
            kinds = PyBytes_AS_STRING(<bytes>PyTuple_GET_ITEM(plan, 2))
            _init(&b)
            try:
                _put(&b, b'{"ts":', 6)
                _put_i64(&b, ts_ms)
                _put_bytes(&b, <bytes>PyTuple_GET_ITEM(plan, 0))  # ends with ","
                for i in range(n):
                    value = <object>values[i]
                    if kinds[i] == 1:  # a drop
                        continue
                    if kinds[i] == 2:  # reconsume_times: an int, left out when 0
                        if type(value) is not int:
                            break
                        overflow = 0
                        if PyLong_AsLongLongAndOverflow(value, &overflow) == 0 and not overflow:
                            continue
                    _put_bytes(&b, <bytes>PyTuple_GET_ITEM(names, i))
                    if not _put_plain_value(&b, value):
                        break
                    _put_c(&b, 44)  # ","
                else:
                    b.p[b.n - 1] = 125  # the last "," (the head's without fields) becomes "}"
                    line = PyBytes_FromStringAndSize(b.p, b.n)
            finally:
                _release(&b)
        if line is None:
            fields = {}
            for i in range(n):
                fields[<object>PyTuple_GET_ITEM(keys, i)] = <object>values[i]
            line = self._line(event, fields, ts_ms, "info")
        return line

    def row(self, event, tuple keys, tuple values):
        """``_row`` from Python (the parity tests): ``self(event, dict(zip(keys,
        values)))`` for distinct keys."""
        cdef PyObject* vals[64]
        cdef Py_ssize_t i
        if len(keys) != len(values) or len(set(keys)) != len(keys) or len(keys) > 64:
            raise ValueError("row: distinct keys, one value each, at most 64")
        for i in range(len(keys)):
            vals[i] = PyTuple_GET_ITEM(values, i)
        self._row(event, keys, vals)

    def rows(self, event, tuple keys, list flat):
        """``_rows`` from Python (the parity tests): ``self.many(event, [(ts,
        dict(zip(keys, values))), ...])`` for distinct keys, ``flat`` each row's ``ts``
        then its values."""
        if len(set(keys)) != len(keys):
            raise ValueError("rows: distinct keys")
        self._rows(event, keys, flat)

    cdef bytes _line(self, event, dict fields, long long ts_ms, level):
        """``logs._line_maker``'s ``line``."""
        cdef _Buf b
        cdef bytes prefix
        cdef int done
        if type(level) is str and <str>level == "info":
            head = self.info_heads.get(event)
        else:
            head = self.heads.get((event, level))
        if head is None or not fields:
            return _dumps(_record(event, fields, ts_ms, level), default=_str)
        prefix = <bytes>(<tuple>head)[0]
        drop = (<tuple>head)[1]
        _init(&b)
        try:
            _put(&b, b'{"ts":', 6)
            _put_i64(&b, ts_ms)
            _put_bytes(&b, prefix)  # ends with ","
            done = _put_plain_fields(&b, fields, drop)
            if done >= 0:
                if done & _DROP_SEEN:
                    _drop(fields, drop)
                elif done & _ZERO_RT:  # _drop's last step
                    del fields[_RECONSUME_TIMES]
                b.p[b.n - 1] = 125  # the last "," (the head's without fields) becomes "}"
                return PyBytes_FromStringAndSize(b.p, b.n)
        finally:
            _release(&b)
        return self._any_line(event, fields, ts_ms, level, prefix, drop)

    cdef bytes _any_line(self, event, dict fields, long long ts_ms, level, bytes prefix, drop):
        """``_line`` for fields ``_put_plain_fields`` does not write: the reference's
        steps, each value written here or by its own ``orjson.dumps``."""
        cdef _Buf b
        cdef bint plain = True  # every key an exact str
        for key in fields:  # _HEAD_KEYS.isdisjoint(fields), in C for str keys
            if type(key) is not str:
                plain = False
                break
            if _is_head_key(key):
                return _dumps(_record(event, fields, ts_ms, level), default=_str)
        if not plain and not _HEAD_KEYS.isdisjoint(fields):
            return _dumps(_record(event, fields, ts_ms, level), default=_str)
        if drop is not None:
            _drop(fields, drop)
        if not plain:  # orjson's refusal, as the reference's
            return self._joined(fields, ts_ms, prefix)
        _init(&b)
        try:
            _put(&b, b'{"ts":', 6)
            _put_i64(&b, ts_ms)
            _put_bytes(&b, prefix)  # ends with ","
            for key, value in fields.items():
                if not _put_plain_str(&b, key):
                    _put_bytes(&b, _dumps(key))
                _put_c(&b, 58)  # ":"
                _put_value(&b, value)
                _put_c(&b, 44)  # ","
            b.p[b.n - 1] = 125  # the last "," (the head's without fields) becomes "}"
            return PyBytes_FromStringAndSize(b.p, b.n)
        finally:
            _release(&b)

    cdef bytes _joined(self, dict fields, long long ts_ms, bytes prefix):
        """The reference's join of the head and one ``dumps`` of the fields."""
        body = _dumps(fields, default=_str)
        return b'{"ts":%d' % ts_ms + (
            prefix + body[1:] if len(body) > 2 else prefix[:len(prefix) - 1] + b"}"
        )

    def __call__(self, event, dict fields, level="info"):
        self._out(self._line(event, fields, _wall_ms(self.wall), level))

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


cdef int _emit_row(object emitter, object event, tuple keys, PyObject** values) except -1:
    """``LineEmitter._row`` for the twins that log per message (``ROW``)."""
    return (<LineEmitter>emitter)._row(event, keys, values)


cdef int _emit_rows(object emitter, object event, tuple keys, list flat) except -1:
    """``LineEmitter._rows`` for the twins that log a batch of one event (``ROWS``)."""
    return (<LineEmitter>emitter)._rows(event, keys, flat)


ctypedef int (*row_fn)(object, object, tuple, PyObject**) except -1
cdef row_fn _row_ptr = _emit_row
# ``emitter(event, dict(zip(keys, values)))`` as a C function of an exact ``LineEmitter``,
# the values a C array (``put/_path.pyx``, ``handlers/_pull.pyx``: no fields dict)
ROW = PyCapsule_New(<void*>_row_ptr, b"kairosmq.server.observe._logs.ROW", NULL)


ctypedef int (*rows_fn)(object, object, tuple, list) except -1
cdef rows_fn _rows_ptr = _emit_rows
# ``emitter.many(event, [(ts, dict(zip(keys, values))), ...])`` as a C function of an exact
# ``LineEmitter``, the rows one flat list (``schedule/_delivered.pyx``: no fields dicts)
ROWS = PyCapsule_New(<void*>_rows_ptr, b"kairosmq.server.observe._logs.ROWS", NULL)
