# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``record_check.py``'s ``stored_physical_offset`` (chosen by
``protocol/native.py``; ``record_check.py`` is the reference and owns the record check).

``stored_physical_offset`` reads the big-endian PHYSICALOFFSET field at the reference's
position in C (no struct call, no Python frame): the timer service's fire turn asks it
once per due timer. Anything but ``bytes`` or ``bytearray`` goes to the reference.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint64_t

from . import record_check as _ref

cdef object _pure = _ref.reference
cdef Py_ssize_t _POS = _ref._PHY_OFFSET_POS


def stored_physical_offset(buf):
    """``record_check.stored_physical_offset``."""
    cdef const unsigned char *p
    cdef Py_ssize_t n
    cdef uint64_t v = 0
    cdef int i
    if type(buf) is bytes:
        p = <const unsigned char *>PyBytes_AS_STRING(buf)
        n = PyBytes_GET_SIZE(buf)
    elif type(buf) is bytearray:
        p = <const unsigned char *>PyByteArray_AS_STRING(buf)
        n = PyByteArray_GET_SIZE(buf)
    else:
        return _pure.stored_physical_offset(buf)
    if n < _POS + 8:
        return None
    for i in range(8):
        v = (v << 8) | p[_POS + i]
    return <int64_t>v
