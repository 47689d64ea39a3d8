# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``reads.py``'s unit walk (chosen by ``protocol/native.py``;
``reads.py`` is the reference and owns the read path and its rules).

``walk_units`` walks a run of 20-byte consume-queue units (int64 phy offset, int32 size,
int64 tagsCode, big-endian) in place in the queue file's map, in one C loop: the
confirm limit, holes and retention, the tag-hash filter (a set of tagsCodes tested in
C), the byte and count bounds; a tuple is built only for a unit it takes. A ``match``
that is a Python test (not a set), a run past the map or offsets near the int64 limits
are handed to the reference, which gives the same answer or raises its error.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.set cimport PySet_Contains
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from . import reads as _ref

cdef object _pure = _ref.reference

cdef enum:
    UNIT = 20
    MISSING = 1
    UNCONFIRMED = 2
    STOP = 4

cdef int64_t _EDGE = (<int64_t>1) << 62  # |offsets| below it: phy + size cannot overflow


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


def walk_units(buf, Py_ssize_t first, Py_ssize_t count, index, log_min, limit, match,
               Py_ssize_t max_count, max_bytes, total, list units, list queue_offsets):
    """``reads.walk_units``."""
    cdef Py_buffer view
    cdef Py_ssize_t i, walked = 0, taken
    cdef int flags = 0
    cdef const uint8_t* p
    cdef int64_t phy, code, lim = 0, lmin, tot, mbytes, idx
    cdef int32_t size
    cdef bint has_limit = limit is not None
    cdef bint is_set = isinstance(match, (set, frozenset))
    cdef bint bad = False
    if (
        first < 0
        or count < 0
        or (match is not None and not is_set)
        or not (-_EDGE < log_min < _EDGE)
        or not (0 <= total < _EDGE)
        or not (0 <= max_bytes < _EDGE)
        or not (-_EDGE < index < _EDGE)
        or (has_limit and not (-_EDGE < limit < _EDGE))
    ):
        return _pure.walk_units(buf, first, count, index, log_min, limit, match, max_count,
                                max_bytes, total, units, queue_offsets)
    lmin, tot, mbytes, idx = log_min, total, max_bytes, index
    if has_limit:
        lim = limit
    taken = len(units)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if first > view.len // UNIT or count > view.len // UNIT - first:  # no overflow
            bad = True
        else:
            p = <const uint8_t*>view.buf + first * UNIT
            for i in range(count):
                phy = _i64(p)
                size = <int32_t>_u32(p + 8)
                code = _i64(p + 12)
                p += UNIT
                if not (-_EDGE < phy < _EDGE):  # phy + size in Python's integers
                    if has_limit and <object>phy + size > limit:
                        flags |= UNCONFIRMED | STOP
                        break
                elif has_limit and phy + size > lim:
                    flags |= UNCONFIRMED | STOP
                    break
                if phy < lmin or size <= 0:  # removed by retention, a hole, lost
                    flags |= MISSING
                elif match is None or PySet_Contains(match, code):
                    if taken and tot + size > mbytes:
                        flags |= STOP
                        break
                    tot += size
                    units.append((phy, size, code))
                    queue_offsets.append(idx + walked)
                    taken += 1
                    if taken >= max_count:
                        walked += 1
                        flags |= STOP
                        break
                walked += 1
    finally:
        PyBuffer_Release(&view)
    if bad:
        return _pure.walk_units(buf, first, count, index, log_min, limit, match, max_count,
                                max_bytes, total, units, queue_offsets)  # raises its error
    return walked, tot, flags
