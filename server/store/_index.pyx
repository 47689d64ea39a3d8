# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``index.py``'s store dispatcher (chosen by ``protocol/native.py``;
``index.py`` is the reference and owns the index files and their rules).

``dispatch`` (``KeyIndex.dispatch``) hashes a live record's ``UNIQ_KEY`` and ``KEYS``
tokens and writes their entries, chain heads, entry count and indexed end straight into
the mapped file being written, in one C function. A dispatch that would fill the file,
reach its half (the next file is asked for there), meet an unmapped file or a value an
entry cannot hold is handed to the reference, which does the same and those steps too.
The hashes of ASCII values (up to 32 a record) are zlib's CRC-32 computed in C from the
text's bytes (its UTF-8); any other value is hashed as the reference does (``_hashes``).
The index's and the file's fields are read and written in their slots (``KeyIndex``
is slotted, ``_File`` a slotted dataclass; an index of another class is read through
its attributes). ``DISPATCH_LIVE`` is a capsule of the C function (``_live``) that does a
live request's dispatch given the request's properties, offset and size as values: the
message-store twin calls it for a listener that is this ``dispatch`` bound to an index,
with the values it just put into the request.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from protocol._slots cimport BASE_OBJECT, OBJECT_ACCESS, _at, _plain, _put, _slot
from zlib import crc32 as _crc32

from kairosmq.protocol.properties import KEYS, UNIQ_KEY

from . import index as _ref

cdef object _pure = _ref.reference
cdef object _SEED_UNIQ = _ref._SEED_UNIQ
cdef object _SEED_KEY = _ref._SEED_KEY
cdef Py_ssize_t _HEADER_SIZE = _ref.HEADER_SIZE
cdef Py_ssize_t _COUNT_POS = _ref._COUNT_POS
cdef Py_ssize_t _END_POS = _ref._END_POS
cdef object _File = _ref._File
cdef object _KeyIndex = _ref.KeyIndex


for _cls in (_File, _KeyIndex):
    _plain(_cls, BASE_OBJECT | OBJECT_ACCESS)
# the index's fields ``_live`` reads and writes in place
cdef Py_ssize_t K_CUR = _slot(_KeyIndex, "_cur")
cdef Py_ssize_t K_INDEXED = _slot(_KeyIndex, "indexed")
# the fields of the file being written that ``_live`` reads and writes in place
cdef Py_ssize_t F_MM = _slot(_File, "mm")
cdef Py_ssize_t F_COUNT = _slot(_File, "count")
cdef Py_ssize_t F_CAPACITY = _slot(_File, "capacity")
cdef Py_ssize_t F_SLOTS = _slot(_File, "slots")
cdef Py_ssize_t F_ENTRIES_POS = _slot(_File, "entries_pos")
cdef Py_ssize_t F_END_PHY = _slot(_File, "end_phy")


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)

DEF _MAX_HASHES = 32  # more tokens than this: the hashes come as a list (``_hashes``)

cdef uint32_t _CRC_TABLE[256]  # zlib's CRC-32 (polynomial 0xEDB88320), byte at a time
cdef uint32_t _crc_c, _crc_k
for _crc_i in range(256):
    _crc_c = _crc_i
    for _crc_k in range(8):
        _crc_c = (_crc_c >> 1) ^ 0xEDB88320 if _crc_c & 1 else _crc_c >> 1
    _CRC_TABLE[_crc_i] = _crc_c
cdef uint32_t _C_SEED_UNIQ = _SEED_UNIQ
cdef uint32_t _C_SEED_KEY = _SEED_KEY


cdef inline uint32_t _crc(const uint8_t* p, Py_ssize_t n, uint32_t seed) noexcept nogil:
    """``zlib.crc32(p[:n], seed)``."""
    cdef uint32_t c = ~seed
    cdef Py_ssize_t i
    for i in range(n):
        c = _CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8)
    return ~c


cdef Py_ssize_t _ascii_hashes(object uniq, object keys, uint32_t* out) except -2:
    """``_hashes`` in C for ``str`` values of ASCII (their UTF-8 is their data) and at most
    ``_MAX_HASHES`` of them: their count, or -1 (``_hashes`` decides)."""
    cdef Py_ssize_t n = 0, i, start, length
    cdef const uint8_t* d
    if uniq is not None:
        if type(uniq) is not str or not PyUnicode_IS_ASCII(uniq):
            return -1
        length = PyUnicode_GET_LENGTH(uniq)
        if length:
            out[0] = _crc(<const uint8_t*>PyUnicode_DATA(uniq), length, _C_SEED_UNIQ)
            n = 1
    if keys is not None:
        if type(keys) is not str or not PyUnicode_IS_ASCII(keys):
            return -1
        length = PyUnicode_GET_LENGTH(keys)
        d = <const uint8_t*>PyUnicode_DATA(keys)
        start = 0
        for i in range(length + 1):  # keys.split(" "), the empty tokens skipped
            if i == length or d[i] == 32:
                if i > start:
                    if n == _MAX_HASHES:
                        return -1
                    out[n] = _crc(d + start, i - start, _C_SEED_KEY)
                    n += 1
                start = i + 1
    return n


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


cdef inline bint _int(PyObject* v, long long* out) noexcept:
    """Whether the field value ``v`` is set and an ``int`` C holds: then ``out`` holds it."""
    cdef int over = 0
    if v == NULL or type(<object>v) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(<object>v, &over)
    return not over


cdef object _live(object index, object req, object props, object phy_o, object size_o):
    """``KeyIndex.dispatch`` of a live request (``req.replay`` false) whose properties,
    physical offset and size are given as values: the body of ``dispatch``, and the C
    function the message-store twin calls through ``DISPATCH_LIVE`` with the values it
    put into ``req`` (no Python call, no field read back). The file's fields are read
    and written straight in their slots (what each member descriptor does)."""
    cdef Py_buffer view
    cdef Py_ssize_t need, i
    cdef long long phy, end, n, cap, slots, entries_pos, slot_pos
    cdef int o1 = 0, o2 = 0
    cdef uint32_t h
    cdef uint8_t* buf
    cdef uint32_t hs[_MAX_HASHES]
    cdef PyObject* mm
    cdef PyObject* cur
    cdef PyObject* indexed
    if type(index) is _KeyIndex:  # its fields in their slots
        cur = _at(index, K_CUR)
        indexed = _at(index, K_INDEXED)
        if cur == NULL or indexed == NULL:
            return _pure.dispatch(index, req)  # its AttributeError
        f = <object>cur
    else:
        indexed = NULL
        f = index._cur
    if f is None:
        return
    if type(f) is not _File:
        return _pure.dispatch(index, req)
    mm = _at(f, F_MM)
    if (
        mm == NULL or <object>mm is None or type(props) is not dict
        or type(phy_o) is not int or type(size_o) is not int
    ):
        return _pure.dispatch(index, req)
    uniq = (<dict>props).get(UNIQ_KEY)
    keys = (<dict>props).get(KEYS)
    need = _ascii_hashes(uniq, keys, hs)
    if need < 0:
        hashes = _hashes(uniq, keys)
        if hashes is None or len(hashes) > _MAX_HASHES:
            return _pure.dispatch(index, req)
        need = len(hashes)
        for i in range(need):
            hs[i] = <uint32_t>(<object>hashes[i])
    phy = PyLong_AsLongLongAndOverflow(phy_o, &o1)
    end = PyLong_AsLongLongAndOverflow(size_o, &o2)
    if o1 or o2 or (end > 0 and phy > LLONG_MAX - end) or (end < 0 and phy < LLONG_MIN - end):
        return _pure.dispatch(index, req)  # phy + size out of int64: the reference raises
    end += phy
    if (
        not _int(_at(f, F_COUNT), &n)
        or not _int(_at(f, F_CAPACITY), &cap)
        or not _int(_at(f, F_SLOTS), &slots)
        or not _int(_at(f, F_ENTRIES_POS), &entries_pos)
        or n < 0 or cap > (1LL << 40) or entries_pos < 0 or entries_pos > (1LL << 40)
        or n + need > cap  # the file fills: the reference opens the next
        or (n < (cap >> 1) <= n + need)  # its half: the reference asks for the next file
        or slots <= 0 or slots > (1LL << 40)
    ):
        return _pure.dispatch(index, req)
    PyObject_GetBuffer(<object>mm, &view, PyBUF_WRITABLE)
    try:
        if view.len < entries_pos + (n + need) * 16 or view.len < _HEADER_SIZE + slots * 4:
            return _pure.dispatch(index, req)
        buf = <uint8_t*>view.buf
        for i in range(need):  # KeyIndex._add
            h = hs[i]
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
    if need:
        _put(f, F_COUNT, PyLong_FromLongLong(n))
        if indexed != NULL:  # read again: nothing ran since but C
            _put(index, K_INDEXED, <object>_at(index, K_INDEXED) + need)
        else:
            index.indexed += need
    _put(f, F_END_PHY, PyLong_FromLongLong(end))


def dispatch(index, req):
    """``KeyIndex.dispatch``."""
    if req.replay or index._cur is None:
        return
    return _live(index, req, req.properties, req.phy_offset, req.size)


ctypedef object (*_live_t)(object, object, object, object, object)
cdef _live_t _live_fn = _live
# ``_live`` for the message-store twin, which calls it as a C function (the same
# signature, ``_index_live_t`` there) for a listener that is ``KeyIndex.dispatch`` of
# this module bound to an index
DISPATCH_LIVE = PyCapsule_New(<void*>_live_fn, b"kairosmq.server.store._index.DISPATCH_LIVE", NULL)
