# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``index.py``'s store dispatcher (chosen by ``protocol/native.py``;
``index.py`` is the reference and owns the index files and their rules).

``dispatch`` (``KeyIndex.dispatch``) hashes a live record's ``UNIQ_KEY`` and ``KEYS``
tokens and writes their entries, chain heads, entry count and indexed end straight into
the mapped file being written, in one C function. A dispatch that would fill the file,
reach its half (the next file is asked for there), meet an unmapped file or a value an
entry cannot hold is handed to the reference, which does the same and those steps too.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from zlib import crc32 as _crc32

from kairosmq.protocol.properties import KEYS, UNIQ_KEY

from . import index as _ref

cdef object _pure = _ref.reference
cdef object _SEED_UNIQ = _ref._SEED_UNIQ
cdef object _SEED_KEY = _ref._SEED_KEY
cdef Py_ssize_t _HEADER_SIZE = _ref.HEADER_SIZE
cdef Py_ssize_t _COUNT_POS = _ref._COUNT_POS
cdef Py_ssize_t _END_POS = _ref._END_POS


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline void _put_u32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put_i64(uint8_t* p, int64_t v) noexcept nogil:
    _put_u32(p, <uint32_t>(<uint64_t>v >> 32))
    _put_u32(p + 4, <uint32_t>(<uint64_t>v))


cdef list _hashes(object uniq, object keys):
    """``KeyIndex._index``'s hashes, in its order; None for a value it would raise on."""
    cdef list out = []
    try:
        if uniq:
            out.append(_crc32(uniq.encode(), _SEED_UNIQ))
        if keys:
            for k in keys.split(" "):
                if k:
                    out.append(_crc32(k.encode(), _SEED_KEY))
    except Exception:  # the reference raises it (its dispatch failure is logged)
        return None
    return out


def dispatch(index, req):
    """``KeyIndex.dispatch``."""
    cdef Py_buffer view
    cdef Py_ssize_t n, cap, slots, need, i, slot_pos, entries_pos
    cdef long long phy, end
    cdef int o1 = 0, o2 = 0
    cdef uint32_t h
    cdef uint8_t* buf
    f = index._cur
    if req.replay or f is None:
        return
    mm = f.mm
    props = req.properties
    phy_o = req.phy_offset
    size_o = req.size
    if mm is None or type(props) is not dict or type(phy_o) is not int or type(size_o) is not int:
        return _pure.dispatch(index, req)
    hashes = _hashes((<dict>props).get(UNIQ_KEY), (<dict>props).get(KEYS))
    if hashes is None:
        return _pure.dispatch(index, req)
    end_o = phy_o + size_o
    phy = PyLong_AsLongLongAndOverflow(phy_o, &o1)
    end = PyLong_AsLongLongAndOverflow(end_o, &o2)
    n = f.count
    cap = f.capacity
    slots = f.slots
    need = len(hashes)
    if (
        o1 or o2
        or n + need > cap  # the file fills: the reference opens the next
        or (n < (cap >> 1) <= n + need)  # its half: the reference asks for the next file
        or slots <= 0
    ):
        return _pure.dispatch(index, req)
    entries_pos = f.entries_pos
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        if view.len < entries_pos + (n + need) * 16 or view.len < _HEADER_SIZE + slots * 4:
            return _pure.dispatch(index, req)
        buf = <uint8_t*>view.buf
        for i in range(need):  # KeyIndex._add
            h = <uint32_t>(<object>hashes[i])
            slot_pos = _HEADER_SIZE + (h % <uint64_t>slots) * 4
            _put_u32(buf + entries_pos + n * 16, h)
            _put_i64(buf + entries_pos + n * 16 + 4, phy)
            _put_u32(buf + entries_pos + n * 16 + 12, _u32(buf + slot_pos))
            n += 1
            _put_u32(buf + slot_pos, <uint32_t>n)
        _put_u32(buf + _COUNT_POS, <uint32_t>n)
        _put_i64(buf + _END_POS, end)  # KeyIndex._set_end
    finally:
        PyBuffer_Release(&view)
    f.count = n
    index.indexed += need
    f.end_phy = end_o
