# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``reads.py``'s unit walk (chosen by ``protocol/native.py``;
``reads.py`` is the reference and owns the read path and its rules).

``walk_units`` walks a run of 20-byte consume-queue units (int64 phy offset, int32 size,
int64 tagsCode, big-endian) in place in the queue file's map, in one C loop: the
confirm limit, holes and retention, the tag-hash filter (a set of tagsCodes tested in
C), the byte and count bounds; a tuple is built only for a unit it takes. A ``match``
that is a Python test (not a set), a run past the map or offsets near the int64 limits
are handed to the reference, which gives the same answer or raises its error. ``get``
(``StoreReads.get``) makes the common pull read around that walk (see its docstring).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.set cimport PySet_Contains
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from os import pread as _pread

from . import reads as _ref
from .commitlog import CommitLog
from .consumequeue import ConsumeQueue

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


cdef object _read(log, start, size):
    """``CommitLog.read``: bytes still pending or one ``pread`` of a segment read in
    place; a span across both (or another log class) asks it."""
    if type(log) is not CommitLog:
        return log.read(start, size)
    segments = log.segments
    written = log._written
    pending = log._pending
    if (
        start < (segments[0].base if segments else 0)
        or start + size > written + len(pending)
        or size <= 0
    ):
        return None
    if start >= written:
        return bytes(pending[start - written : start - written + size])
    if start + size > written:
        return log.read(start, size)
    seg_size = log.segment_size
    idx = (start // seg_size) - (segments[0].base // seg_size)
    if not 0 <= idx < len(segments):
        return None
    seg = segments[idx]
    data = _pread(seg.fd, size, start - seg.base)
    return data if len(data) == size else None


cdef object _new = object.__new__
cdef object _FOUND = _ref.GetStatus.FOUND
cdef object _NO_MESSAGE = _ref.GetStatus.NO_MESSAGE_IN_QUEUE
cdef object _TOO_SMALL = _ref.GetStatus.OFFSET_TOO_SMALL
cdef object _OVERFLOW_ONE = _ref.GetStatus.OFFSET_OVERFLOW_ONE
cdef object _OVERFLOW_BADLY = _ref.GetStatus.OFFSET_OVERFLOW_BADLY
cdef object _GetResult = _ref.GetResult


def get(self, topic, queue_id, offset, max_count, *, max_bytes=4 << 20, match=None,
        max_scan=16_000):
    """``StoreReads.get``: a queue without messages, an offset outside its units, or the
    common case: the queue's units from ``offset`` in one run of
    the file mapped now, a walk that ends in that run (its bounds met or the queue's
    end reached), the records taken read as one contiguous span of one segment. Every
    other read (a run to read again, holes, records apart, nothing taken) goes to the
    reference; up to there the only change is the queue file's place in
    the map cache (``MappedFiles.map``), which the reference makes again the same."""
    cdef Py_ssize_t upf, i, n, k, count, chunk, mc, total_size
    cdef int flags
    cq = self.queues.get((topic, queue_id))
    if cq is not None and type(cq) is not ConsumeQueue:
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    if cq is None or cq.max_offset == 0:
        return _GetResult(_NO_MESSAGE, 0, 0, 0)
    files = cq.files
    hi = cq.max_offset
    lo = files[0].base if files else hi  # ConsumeQueue.min_offset
    if offset < lo:
        return _GetResult(_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return _GetResult(_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:
        return _GetResult(_OVERFLOW_BADLY, hi, lo, hi)
    if (
        not files
        or type(offset) is not int
        or type(max_count) is not int
        or type(max_scan) is not int
        or not (0 < max_count < 1 << 30)
        or not (0 < max_scan < 1 << 30)
        or (match is not None and not isinstance(match, (set, frozenset)))
        or hi - offset > 1 << 40
    ):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    mc = max_count
    chunk = mc if match is None else max(64, 2 * mc)
    count = min(<Py_ssize_t>max_scan, <Py_ssize_t>(hi - offset), chunk)
    # ConsumeQueue.unit_run(offset, count): the file of ``offset`` found by its index
    upf = cq.units_per_file
    i = (offset - lo) // upf
    if i >= len(files):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    f = files[i]
    base = f.base
    mm = f.mm
    if mm is None or not (base <= offset < base + upf):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    cq.maps._lru.move_to_end(f)  # MappedFiles.map of a mapped file
    end = min(offset + count, base + upf, base + len(mm) // UNIT)
    n = end - offset if end > offset else 0
    if n == 0:
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    log = self.commitlog
    segments = log.segments
    units = []
    queue_offsets = []
    walked, total, flags = walk_units(
        mm, offset - base, n, offset, segments[0].base if segments else 0,
        self.confirm_offset, match, mc, max_bytes, 0, units, queue_offsets,
    )
    if (
        not units
        or flags & MISSING
        or not (flags & STOP or offset + n >= hi or walked >= max_scan)
    ):
        return _pure.get(self, topic, queue_id, offset, max_count, max_bytes=max_bytes,
                         match=match, max_scan=max_scan)
    # CommitLog.read_concat of one contiguous span inside one segment
    k = len(units)
    first = units[0]
    start = first[0]
    stop = start
    total_size = 0
    for u in units:
        if u[0] != stop:
            stop = None
            break
        stop = u[0] + u[1]
    if stop is None or start // log.segment_size != units[k - 1][0] // log.segment_size:
        chunks, read = log.read_concat([(u[0], u[1]) for u in units])
    else:
        span = _read(log, start, stop - start)
        if span is None:
            chunks, read = log.read_concat([(u[0], u[1]) for u in units])
        else:
            chunks, read = [span], k
    scanned = walked
    if read < k:  # a range fell outside the log (retention raced us)
        del units[read:]
        del queue_offsets[read:]
        if queue_offsets:
            scanned = queue_offsets[len(queue_offsets) - 1] - offset + 1
    res = _new(_GetResult)  # GetResult(..) without its __init__ frame
    res.status = _FOUND if units else _ref.GetStatus.NO_MATCHED_MESSAGE
    res.next_begin_offset = offset + scanned
    res.min_offset = lo
    res.max_offset = hi
    res.chunks = chunks
    res.units = units
    res.queue_offsets = queue_offsets
    if not units and flags & UNCONFIRMED and scanned == 0:
        res.status = _OVERFLOW_ONE
    return res
