# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``reads.py``'s unit walk (chosen by ``protocol/native.py``;
``reads.py`` is the reference and owns the read path and its rules).

``walk_units`` walks a run of 20-byte consume-queue units (int64 phy offset, int32 size,
int64 tagsCode, big-endian) in place in the queue file's map, in one C loop: the
confirm limit, holes and retention, the tag-hash filter (a set of tagsCodes tested in
C), the byte and count bounds; a tuple is built only for a unit it takes. A ``match``
that is a Python test (not a set), a run past the map or offsets near the int64 limits
are handed to the reference, which gives the same answer or raises its error. ``get``
(``StoreReads.get``) makes the common pull read around that walk (see its docstring):
offsets as C integers, the queue's, its files', the log's segments' and the result's
fields read and written in their slots, the walk called as a C function and the span
read with one ``pread(2)`` (as ``os.pread``: the GIL released, EINTR retried, an error
raised as ``OSError``). ``GET_CAPI`` hands that ``get`` to ``_pull.pyx`` as a C function
(the pull calls it without a Python call when ``reads.get`` is this twin's).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItemWithError
from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.set cimport PySet_Contains
from libc.errno cimport EINTR, errno
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from posix.unistd cimport pread
from protocol._slots cimport OBJECT_NEW, _at, _field, _fresh, _plain, _put, _slot

from . import reads as _ref
from .commitlog import CommitLog, Segment
from .consumequeue import ConsumeQueue, _File

cdef object _pure = _ref.reference

cdef enum:
    UNIT = 20
    MISSING = 1
    UNCONFIRMED = 2
    STOP = 4

cdef int64_t _EDGE = (<int64_t>1) << 62  # |offsets| below it: phy + size cannot overflow
MAX_SCAN = 16_000  # ``StoreReads.get``'s default ``max_scan`` (the pull's)


cdef inline bint _i64(object v, int64_t* out) noexcept:
    """``v`` is an ``int`` (exactly) within ``(-_EDGE, _EDGE)``: its value in ``out``."""
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or not (-_EDGE < x < _EDGE):
        return False
    out[0] = x
    return True


cdef Py_ssize_t CQ_FILES = _slot(ConsumeQueue, "files")
cdef Py_ssize_t CQ_MAX = _slot(ConsumeQueue, "max_offset")
cdef Py_ssize_t CQ_UPF = _slot(ConsumeQueue, "units_per_file")
cdef Py_ssize_t CQ_MAPS = _slot(ConsumeQueue, "maps")
cdef Py_ssize_t F_BASE = _slot(_File, "base")
cdef Py_ssize_t F_MM = _slot(_File, "mm")
cdef Py_ssize_t SEG_BASE = _slot(Segment, "base")
cdef Py_ssize_t SEG_FD = _slot(Segment, "fd")
cdef object _GetResult = _ref.GetResult
cdef Py_ssize_t R_STATUS = _slot(_GetResult, "status")
cdef Py_ssize_t R_NEXT = _slot(_GetResult, "next_begin_offset")
cdef Py_ssize_t R_MIN = _slot(_GetResult, "min_offset")
cdef Py_ssize_t R_MAX = _slot(_GetResult, "max_offset")
cdef Py_ssize_t R_CHUNKS = _slot(_GetResult, "chunks")
cdef Py_ssize_t R_UNITS = _slot(_GetResult, "units")
cdef Py_ssize_t R_QOFFS = _slot(_GetResult, "queue_offsets")
_plain(_GetResult, OBJECT_NEW)


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int64_t _u64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


cdef struct Walk:
    Py_ssize_t walked  # units walked
    int64_t total  # bytes taken in all
    int flags  # MISSING | UNCONFIRMED | STOP
    Py_ssize_t taken  # units in ``units`` now
    int64_t first  # phy offset of the first unit taken here
    int64_t last  # phy offset of the last unit taken here
    int64_t stop  # where the units taken here end, -1 if they are not one span


cdef int _walk(const uint8_t* p, Py_ssize_t count, int64_t idx, int64_t lmin, bint has_limit,
               int64_t lim, object match, Py_ssize_t max_count, int64_t mbytes,
               list units, list queue_offsets, Walk* w) except -1:
    """The loop of ``walk_units`` over ``count`` units at ``p`` (its arguments checked by
    the caller: every offset within ``(-_EDGE, _EDGE)``, ``match`` None or a set); ``w``
    holds the running total and ``units``' length on entry, the walk's outcome on exit."""
    cdef Py_ssize_t i
    cdef int64_t phy, code
    cdef int32_t size
    cdef Py_ssize_t mine = 0  # units taken by this walk
    for i in range(count):
        phy = _u64(p)
        size = <int32_t>_u32(p + 8)
        code = _u64(p + 12)
        p += UNIT
        if not (-_EDGE < phy < _EDGE):  # phy + size in Python's integers
            if has_limit and <object>phy + size > lim:
                w.flags |= UNCONFIRMED | STOP
                return 0
        elif has_limit and phy + size > lim:
            w.flags |= UNCONFIRMED | STOP
            return 0
        if phy < lmin or size <= 0:  # removed by retention, a hole, lost
            w.flags |= MISSING
        elif match is None or PySet_Contains(match, code):
            if w.taken and w.total + size > mbytes:
                w.flags |= STOP
                return 0
            w.total += size
            units.append((phy, size, code))
            queue_offsets.append(idx + w.walked)
            w.taken += 1
            if mine == 0:
                w.first = phy
                w.stop = phy + size
            elif w.stop == phy and -_EDGE < phy < _EDGE:
                w.stop = phy + size
            else:
                w.stop = -1
            w.last = phy
            mine += 1
            if w.taken >= max_count:
                w.walked += 1
                w.flags |= STOP
                return 0
        w.walked += 1
    return 0


def walk_units(buf, Py_ssize_t first, Py_ssize_t count, index, log_min, limit, match,
               Py_ssize_t max_count, max_bytes, total, list units, list queue_offsets):
    """``reads.walk_units``."""
    cdef Py_buffer view
    cdef int64_t lim = 0
    cdef bint has_limit = limit is not None
    cdef bint is_set = isinstance(match, (set, frozenset))
    cdef bint bad = False
    cdef Walk w
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
    if has_limit:
        lim = limit
    w.walked = 0
    w.total = total
    w.flags = 0
    w.taken = len(units)
    w.stop = -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if first > view.len // UNIT or count > view.len // UNIT - first:  # no overflow
            bad = True
        else:
            _walk(<const uint8_t*>view.buf + first * UNIT, count, index, log_min, has_limit,
                  lim, match, max_count, max_bytes, units, queue_offsets, &w)
    finally:
        PyBuffer_Release(&view)
    if bad:
        return _pure.walk_units(buf, first, count, index, log_min, limit, match, max_count,
                                max_bytes, total, units, queue_offsets)  # raises its error
    return w.walked, w.total, w.flags


cdef object _pread(int fd, int64_t size, int64_t at):
    """``os.pread(fd, size, at)``: one ``pread(2)`` without the GIL (EINTR: the signal
    handlers run, then it is tried again; an error raised as ``OSError``), the bytes
    read (fewer at the file's end)."""
    cdef ssize_t got
    cdef int err = 0
    cdef char* buf
    data = PyBytes_FromStringAndSize(NULL, size)
    buf = PyBytes_AS_STRING(data)
    while True:
        with nogil:
            got = pread(fd, buf, size, at)
            if got < 0:
                err = errno
        if got >= 0:
            break
        if err != EINTR:
            errno = err
            PyErr_SetFromErrno(OSError)
        PyErr_CheckSignals()
    if got == size:
        return data
    return data[:got]


cdef object _read(log, int64_t start, int64_t size):
    """``CommitLog.read``: bytes still pending or one ``pread`` of a segment read in
    place; a span across both (or another log class) asks it."""
    cdef int64_t written, npending, seg_size, first_base, idx, base
    cdef list segments
    if type(log) is not CommitLog:
        return log.read(start, size)
    segs = log.segments
    written_o = log._written
    pending = log._pending
    if type(segs) is not list or type(pending) is not bytearray or not _i64(written_o, &written):
        return log.read(start, size)
    segments = <list>segs
    npending = PyByteArray_GET_SIZE(pending)
    first_base = 0
    if PyList_GET_SIZE(segments):
        seg0 = <object>PyList_GET_ITEM(segments, 0)
        if type(seg0) is not Segment or not _i64(_field(seg0, SEG_BASE, "base"), &first_base):
            return log.read(start, size)
    if start < first_base or start + size > written + npending or size <= 0:
        return None
    if start >= written:
        return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(pending) + (start - written), size)
    if start + size > written:
        return log.read(start, size)
    seg_size_o = log.segment_size
    if not PyList_GET_SIZE(segments) or not _i64(seg_size_o, &seg_size) or seg_size <= 0:
        return log.read(start, size)
    idx = (start // seg_size) - (first_base // seg_size)
    if not 0 <= idx < PyList_GET_SIZE(segments):
        return None
    seg = <object>PyList_GET_ITEM(segments, idx)
    fd = _field(seg, SEG_FD, "fd") if type(seg) is Segment else None
    if type(fd) is not int or not _i64(_field(seg, SEG_BASE, "base"), &base):
        return log.read(start, size)
    data = _pread(fd, size, start - base)
    return data if len(data) == size else None


cdef object _result(status, next_begin, lo, hi, chunks, units, queue_offsets):
    """``GetResult(status, next_begin, lo, hi, chunks, units, queue_offsets)`` filled in
    its slots (no ``__init__`` frame)."""
    res = _fresh(_GetResult)
    _put(res, R_STATUS, status)
    _put(res, R_NEXT, next_begin)
    _put(res, R_MIN, lo)
    _put(res, R_MAX, hi)
    _put(res, R_CHUNKS, chunks)
    _put(res, R_UNITS, units)
    _put(res, R_QOFFS, queue_offsets)
    return res


cdef object _FOUND = _ref.GetStatus.FOUND
cdef object _NO_MATCHED = _ref.GetStatus.NO_MATCHED_MESSAGE
cdef object _NO_MESSAGE = _ref.GetStatus.NO_MESSAGE_IN_QUEUE
cdef object _TOO_SMALL = _ref.GetStatus.OFFSET_TOO_SMALL
cdef object _OVERFLOW_ONE = _ref.GetStatus.OFFSET_OVERFLOW_ONE
cdef object _OVERFLOW_BADLY = _ref.GetStatus.OFFSET_OVERFLOW_BADLY


cdef object _get(self, topic, queue_id, offset, max_count, max_bytes, match, max_scan):
    """``get``'s body (``GET_CAPI``: called by ``_pull.pyx`` directly)."""
    cdef Py_ssize_t upf, i, n, k, count, chunk, mc, scan, read, nfiles
    cdef int64_t off, lo, hi, base, seg_size, log_min = 0, lim = 0, mbytes, scanned
    cdef Py_buffer view
    cdef Walk w
    cdef PyObject* p
    cdef list files, units, queue_offsets
    queues = self.queues
    key = (topic, queue_id)
    if type(queues) is dict:
        p = PyDict_GetItemWithError(queues, key)
        cq = <object>p if p != NULL else None
    else:
        cq = queues.get(key)
    if cq is None:
        return _result(_NO_MESSAGE, 0, 0, 0, [], [], [])
    if (
        type(cq) is not ConsumeQueue
        or not _i64(offset, &off)
        or type(max_count) is not int
        or type(max_scan) is not int
        or not (0 < max_count < 1 << 30)
        or not (0 < max_scan < 1 << 30)
        or (match is not None and not isinstance(match, (set, frozenset)))
        or not _i64(max_bytes, &mbytes)
        or mbytes < 0
    ):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    hi_o = _field(cq, CQ_MAX, "max_offset")
    files_o = _field(cq, CQ_FILES, "files")
    if not _i64(hi_o, &hi) or type(files_o) is not list:
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    if hi == 0:
        return _result(_NO_MESSAGE, 0, 0, 0, [], [], [])
    files = <list>files_o
    nfiles = PyList_GET_SIZE(files)
    if nfiles == 0:  # ConsumeQueue.min_offset: max_offset
        lo = hi
        lo_o = hi_o
    else:
        f = <object>PyList_GET_ITEM(files, 0)
        lo_o = _field(f, F_BASE, "base") if type(f) is _File else None
        if not _i64(lo_o, &lo):
            return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                             match=match, max_scan=max_scan)
    if off < lo:
        return _result(_TOO_SMALL, lo_o, lo_o, hi_o, [], [], [])
    if off == hi:
        return _result(_OVERFLOW_ONE, offset, lo_o, hi_o, [], [], [])
    if off > hi:
        return _result(_OVERFLOW_BADLY, hi_o, lo_o, hi_o, [], [], [])
    upf_o = _field(cq, CQ_UPF, "units_per_file")
    if nfiles == 0 or hi - off > (<int64_t>1) << 40 or type(upf_o) is not int or upf_o <= 0:
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    mc = max_count
    scan = max_scan
    upf = upf_o
    chunk = mc if match is None else max(64, 2 * mc)
    count = min(scan, <Py_ssize_t>(hi - off), chunk)
    # ConsumeQueue.unit_run(offset, count): the file of ``offset`` found by its index
    i = (off - lo) // upf
    if i >= nfiles:
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    f = <object>PyList_GET_ITEM(files, i)
    if type(f) is not _File or not _i64(_field(f, F_BASE, "base"), &base):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    mm = _field(f, F_MM, "mm")
    if mm is None or not (base <= off < base + upf):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    _field(cq, CQ_MAPS, "maps")._lru.move_to_end(f)  # MappedFiles.map of a mapped file
    log = self.commitlog
    segments = log.segments
    if segments:
        seg0 = segments[0]
        if type(seg0) is not Segment or not _i64(_field(seg0, SEG_BASE, "base"), &log_min):
            return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                             match=match, max_scan=max_scan)
    limit = self.confirm_offset
    if limit is not None and not _i64(limit, &lim):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    units = []
    queue_offsets = []
    w.walked = 0
    w.total = 0
    w.flags = 0
    w.taken = 0
    w.stop = -1
    n = 0
    PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE)
    try:
        n = min(off + count, base + upf, base + view.len // UNIT) - off
        if n > 0:
            _walk(<const uint8_t*>view.buf + (off - base) * UNIT, n, off, log_min,
                  limit is not None, lim, match, mc, mbytes, units, queue_offsets, &w)
    finally:
        PyBuffer_Release(&view)
    if (
        n <= 0
        or w.taken == 0
        or w.flags & MISSING
        or not (w.flags & STOP or off + n >= hi or w.walked >= scan)
    ):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    # CommitLog.read_concat of one contiguous span inside one segment
    k = w.taken
    seg_size_o = log.segment_size
    span = None
    if w.stop >= 0 and _i64(seg_size_o, &seg_size) and seg_size > 0:
        if w.first // seg_size == w.last // seg_size:
            span = _read(log, w.first, w.stop - w.first)
    if span is None:
        chunks, read_o = log.read_concat([(u[0], u[1]) for u in units])
        read = read_o
    else:
        chunks = [span]
        read = k
    scanned = w.walked
    if read < k:  # a range fell outside the log (retention raced us)
        del units[read:]
        del queue_offsets[read:]
        if queue_offsets:
            scanned = queue_offsets[len(queue_offsets) - 1] - offset + 1
    if units:
        status = _FOUND
    elif w.flags & UNCONFIRMED and scanned == 0:
        status = _OVERFLOW_ONE
    else:
        status = _NO_MATCHED
    return _result(status, off + scanned, lo_o, hi_o, chunks, units, queue_offsets)


def get(self, topic, queue_id, offset, max_count, *, max_bytes=4 << 20, match=None,
        max_scan=MAX_SCAN):
    """``StoreReads.get``: a queue without messages, an offset outside its units, or the
    common case: the queue's units from ``offset`` in one run of
    the file mapped now, a walk that ends in that run (its bounds met or the queue's
    end reached), the records taken read as one contiguous span of one segment. Every
    other read (a run to read again, holes, records apart, nothing taken, a value
    outside the C integers) goes to the reference; up to there the only change is the
    queue file's place in the map cache (``MappedFiles.map``), which the reference
    makes again the same."""
    return _get(self, topic, queue_id, offset, max_count, max_bytes, match, max_scan)


ctypedef object (*GetFn)(object, object, object, object, object, object, object, object)
GET_CAPI = PyCapsule_New(<void*>_get, "kairosmq.server.store._reads.get", NULL)
