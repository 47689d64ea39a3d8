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
when the room is there (what ``ensure_room`` made before the put), the queue's and the
file's fields read and written in their slots (both classes slotted); anything else (a
queue or file of another class, no file, a full file, an unmapped or short map, a value
the unit cannot hold, a caller's non-int, a field unset or not an ``int``) is handed to
the reference, which makes the room or raises. ``APPEND`` is a capsule of the same C
function (``_append``): the message-store twin calls it in place of the Python call;
``READY`` one of ``_ready``, ``ensure_room``'s common case tested in place (the newest
file when the next unit's room is mapped and nothing is to be asked), which it tests
before a put.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.set cimport PySet_Add
from libc.limits cimport LLONG_MAX
from libc.stdint cimport INT32_MAX, INT32_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from protocol._slots cimport OBJECT_ACCESS, _at, _plain, _put, _slot

from kairosmq.protocol.message import tags_code as _tags_code
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, INT64_DIGITS, TAGS
from kairosmq.protocol.timer import TIMER_OUT_MS

from . import consumequeue as _ref

cdef object _pure = _ref.reference
cdef Py_ssize_t _INT64_DIGITS = INT64_DIGITS
cdef object _ConsumeQueue = _ref.ConsumeQueue
cdef object _File = _ref._File
cdef object _MINUS_ONE = -1
cdef long long _SMALL = 1LL << 52

cdef enum:
    UNIT = 20


for _cls in (_ConsumeQueue, _File):
    _plain(_cls, OBJECT_ACCESS)
# the fields ``_append`` reads and writes in place
cdef Py_ssize_t CQ_FILES = _slot(_ConsumeQueue, "files")
cdef Py_ssize_t CQ_MAX = _slot(_ConsumeQueue, "max_offset")
cdef Py_ssize_t CQ_UPF = _slot(_ConsumeQueue, "units_per_file")
cdef Py_ssize_t CQ_DIRTY = _slot(_ConsumeQueue, "_dirty")
cdef Py_ssize_t CQ_TAIL = _slot(_ConsumeQueue, "_tail_end")
cdef Py_ssize_t F_MM = _slot(_File, "mm")
cdef Py_ssize_t F_BASE = _slot(_File, "base")
cdef Py_ssize_t F_READY = _slot(_File, "ready_until")


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


cdef inline bint _small(PyObject* v, long long* out) noexcept:
    """Whether the field value ``v`` is set, an ``int`` and small enough for C arithmetic
    on unit indexes (|v| < 2**52): then ``out`` holds it; else the reference reads it."""
    cdef int over = 0
    if v == NULL or type(<object>v) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(<object>v, &over)
    return not over and -_SMALL < out[0] < _SMALL


cdef object _append(object cq, object phy_offset, object size, object tags_code):
    """``ConsumeQueue.append`` for a ``ConsumeQueue`` and its newest ``_File``, their fields
    read and written straight in their slots (what each member descriptor does): the
    body of ``append``, and the C function the message-store twin calls through
    ``APPEND`` (no Python call per put)."""
    cdef Py_buffer view
    cdef long long index, base, upf, pos, phy, sz, tags
    cdef int o1 = 0, o2 = 0, o3 = 0
    cdef uint8_t* p
    cdef PyObject* files
    cdef PyObject* f
    cdef PyObject* mm
    cdef PyObject* dirty
    if (
        type(cq) is _ConsumeQueue
        and type(phy_offset) is int
        and type(size) is int
        and type(tags_code) is int
    ):
        files = _at(cq, CQ_FILES)
        f = NULL
        if files != NULL and type(<object>files) is list and PyList_GET_SIZE(<object>files):
            f = PyList_GET_ITEM(<object>files, PyList_GET_SIZE(<object>files) - 1)
        if f != NULL and type(<object>f) is _File:
            mm = _at(<object>f, F_MM)
            dirty = _at(cq, CQ_DIRTY)
            phy = PyLong_AsLongLongAndOverflow(phy_offset, &o1)
            sz = PyLong_AsLongLongAndOverflow(size, &o2)
            tags = PyLong_AsLongLongAndOverflow(tags_code, &o3)
            if (
                not (o1 or o2 or o3)
                and INT32_MIN <= sz <= INT32_MAX
                and mm != NULL and <object>mm is not None
                and dirty != NULL and type(<object>dirty) is set
                and _small(_at(cq, CQ_MAX), &index)
                and _small(_at(<object>f, F_BASE), &base)
                and _small(_at(cq, CQ_UPF), &upf)
                and base <= index < base + upf
            ):
                pos = (index - base) * UNIT
                PyObject_GetBuffer(<object>mm, &view, PyBUF_WRITABLE)
                if view.len >= pos + UNIT:
                    p = <uint8_t*>view.buf + pos
                    _put_i64(p, phy)
                    _put_u32(p + 8, <uint32_t><int32_t>sz)
                    _put_i64(p + 12, tags)
                    PyBuffer_Release(&view)
                    PySet_Add(<object>dirty, <object>f)  # self._dirty.add(f)
                    _put(cq, CQ_MAX, PyLong_FromLongLong(index + 1))
                    if phy < 0:
                        _put(cq, CQ_TAIL, _MINUS_ONE)
                    elif phy <= LLONG_MAX - sz:
                        _put(cq, CQ_TAIL, PyLong_FromLongLong(phy + sz))
                    else:
                        _put(cq, CQ_TAIL, phy_offset + size)
                    return PyLong_FromLongLong(index)
                PyBuffer_Release(&view)
    return _pure.append(cq, phy_offset, size, tags_code)


def append(cq, phy_offset, size, tags_code):
    """``ConsumeQueue.append``."""
    return _append(cq, phy_offset, size, tags_code)


cdef object _ready(object cq):
    """``ConsumeQueue.ensure_room``'s common case, tested without a change: the newest
    file when the room of the next unit is mapped and nothing is to be asked
    (``max_offset < ready_until``, a map), else None (``ensure_room`` has work, or the
    queue or file is of another class or has a field unset or not an ``int``: the
    caller hands the put to the reference). The message-store twin calls it through
    ``READY``, then touches the file's mapping as ``ensure_room`` does."""
    cdef long long index, ready
    cdef PyObject* files
    cdef PyObject* f
    cdef PyObject* mm
    if type(cq) is not _ConsumeQueue:
        return None
    files = _at(cq, CQ_FILES)
    if files == NULL or type(<object>files) is not list or not PyList_GET_SIZE(<object>files):
        return None
    f = PyList_GET_ITEM(<object>files, PyList_GET_SIZE(<object>files) - 1)
    if type(<object>f) is not _File:
        return None
    mm = _at(<object>f, F_MM)
    if (
        mm == NULL or <object>mm is None
        or not _small(_at(cq, CQ_MAX), &index)
        or not _small(_at(<object>f, F_READY), &ready)
        or not index < ready
    ):
        return None
    return <object>f


ctypedef object (*_ready_t)(object)
cdef _ready_t _ready_fn = _ready
READY = PyCapsule_New(<void*>_ready_fn, b"kairosmq.server.store._consumequeue.READY", NULL)


ctypedef object (*_append_t)(object, object, object, object)
cdef _append_t _append_fn = _append
# ``_append`` for the message-store twin, which calls it as a C function (the same
# signature, ``_cq_append_t`` there) when ``ConsumeQueue.append`` is this module's
APPEND = PyCapsule_New(<void*>_append_fn, b"kairosmq.server.store._consumequeue.APPEND", NULL)


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
