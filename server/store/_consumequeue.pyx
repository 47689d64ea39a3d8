# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``consumequeue.py``'s unit reads and unit append (chosen by
``protocol/native.py``; ``consumequeue.py`` is the reference and owns the queue files
and their rules).

``read_units`` reads a run of 20-byte units (int64 phy offset, int32 size, int64
tagsCode, big-endian) straight out of the queue file's map in one C loop, one tuple per
unit, instead of a ``struct`` call per unit; a run that does not fit the map is handed
to the reference, which raises its ``struct.error``.

``compute_tags_code`` reads the due time of a schedule or timer unit as C digits (the
reference's ``parse_decimal`` rule: 1..18 ASCII digits, else 0) and asks the reference's
``tags_code`` only for a message that has tags; a caller's non-str is handed to the
reference.

``append`` (``ConsumeQueue.append``) packs the unit straight into the newest file's map
when the room is there (what ``ensure_room`` made before the put); anything else (no
file, a full file, an unmapped or short map, a value the unit cannot hold, a caller's
non-int) is handed to the reference, which makes the room or raises.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport INT32_MAX, INT32_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from kairosmq.protocol.message import tags_code as _tags_code
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, INT64_DIGITS, TAGS
from kairosmq.protocol.timer import TIMER_OUT_MS

from . import consumequeue as _ref

cdef object _pure = _ref.reference
cdef Py_ssize_t _INT64_DIGITS = INT64_DIGITS

cdef enum:
    UNIT = 20


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


def read_units(buf, Py_ssize_t first, Py_ssize_t count):
    """``consumequeue.read_units``."""
    cdef Py_buffer view
    cdef list out
    cdef Py_ssize_t i
    cdef const uint8_t* p
    if first < 0 or count < 0:
        return _pure.read_units(buf, first, count)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if first > view.len // UNIT or count > view.len // UNIT - first:  # no overflow
            out = None
        else:
            out = [None] * count
            p = <const uint8_t*>view.buf + first * UNIT
            for i in range(count):
                out[i] = (_i64(p), <int32_t>_u32(p + 8), _i64(p + 12))
                p += UNIT
    finally:
        PyBuffer_Release(&view)
    if out is None:
        return _pure.read_units(buf, first, count)  # raises its error
    return out


cdef inline void _put_u32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put_i64(uint8_t* p, int64_t v) noexcept nogil:
    _put_u32(p, <uint32_t>(<uint64_t>v >> 32))
    _put_u32(p + 4, <uint32_t>(<uint64_t>v))


def append(cq, phy_offset, size, tags_code):
    """``ConsumeQueue.append``."""
    cdef Py_buffer view
    cdef Py_ssize_t index, base, pos
    cdef long long phy, sz, tags
    cdef int o1 = 0, o2 = 0, o3 = 0
    cdef uint8_t* p
    files = cq.files
    if (
        files
        and type(phy_offset) is int
        and type(size) is int
        and type(tags_code) is int
    ):
        phy = PyLong_AsLongLongAndOverflow(phy_offset, &o1)
        sz = PyLong_AsLongLongAndOverflow(size, &o2)
        tags = PyLong_AsLongLongAndOverflow(tags_code, &o3)
        f = files[len(files) - 1]
        mm = f.mm
        index = cq.max_offset
        base = f.base
        if (
            not (o1 or o2 or o3)
            and INT32_MIN <= sz <= INT32_MAX
            and mm is not None
            and base <= index < base + <Py_ssize_t>cq.units_per_file
        ):
            pos = (index - base) * UNIT
            PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
            if view.len >= pos + UNIT:
                p = <uint8_t*>view.buf + pos
                _put_i64(p, phy)
                _put_u32(p + 8, <uint32_t><int32_t>sz)
                _put_i64(p + 12, tags)
                PyBuffer_Release(&view)
                cq._dirty.add(f)
                cq.max_offset = index + 1
                cq._tail_end = phy_offset + size if phy >= 0 else -1
                return index
            PyBuffer_Release(&view)
    return _pure.append(cq, phy_offset, size, tags_code)


cdef object _due_ms(str raw):
    """``parse_decimal(raw, INT64_DIGITS) or 0``."""
    cdef Py_ssize_t n = len(raw)
    cdef Py_UCS4 c
    cdef long d
    cdef int64_t v = 0
    if n == 0 or n > _INT64_DIGITS or not raw.isascii():
        return 0
    for c in raw:
        d = <long>c - 48
        if d < 0 or d > 9:
            return 0
        v = v * 10 + d
    return v


def compute_tags_code(topic, props):
    """``consumequeue.compute_tags_code``."""
    if type(topic) is not str or type(props) is not dict:
        return _pure.compute_tags_code(topic, props)
    if topic == SCHEDULE_TOPIC:
        raw = (<dict>props).get(DELIVER_TIME)
    elif topic == TIMER_TOPIC:
        raw = (<dict>props).get(TIMER_OUT_MS)
    else:
        raw = None
    if raw is None:
        tags = (<dict>props).get(TAGS)
        return _tags_code(tags) if tags else 0
    if type(raw) is not str:
        return _pure.compute_tags_code(topic, props)
    return _due_ms(<str>raw)
