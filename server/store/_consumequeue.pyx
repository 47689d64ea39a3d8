# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``consumequeue.py``'s unit reads (chosen by ``protocol/native.py``;
``consumequeue.py`` is the reference and owns the queue files and their rules).

``read_units`` reads a run of 20-byte units (int64 phy offset, int32 size, int64
tagsCode, big-endian) straight out of the queue file's map in one C loop, one tuple per
unit, instead of a ``struct`` call per unit; a run that does not fit the map is handed
to the reference, which raises its ``struct.error``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from . import consumequeue as _ref

cdef object _pure = _ref.reference

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
