# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``message_store.py``'s puts (chosen by ``protocol/native.py``;
``message_store.py`` is the reference and owns every rule of a put).

``put`` and ``put_patched`` (``MessageStore.put`` / ``put_patched``) make the common put
in one C function: the record built by the record twin, appended to the commit-log
buffer at the offset ``CommitLog.reserve`` would give, its unit packed into its
consume queue's map (``ConsumeQueue.append``), the dispatch listeners that want the
record (``message_store.wants``, mirrored) fed from a C loop over the dispatchers' plan
(one that raises goes to ``MessageStore._dispatch_failed``, the reference's rule), the one
write scheduled and the ``PutResult`` returned, with no Python frame of the store's own.
It mirrors the reference's common case step for step: ``_put``'s checks passed (the
write guard's quiet state read in place of ``refusal()``), ``ensure_room``'s "room
mapped, nothing to ask" case, ``reserve``'s "fits the current segment" case (its answer,
the record's offset, computed once and used for the record, the request and the
result, as the reference uses ``reserve``'s), ``append``, ``WriteGuard.appended``,
``clock.wall_ms`` and ``dispatch`` (not a replay), the ``DispatchRequest`` and
``PutResult`` made as ``object.__new__`` makes them and filled field by field, each
value stored into its slot as the field's member descriptor does (the offsets read from
the descriptors at import; a class not laid out as a plain slotted class fails the
import, and the pure core runs). The write guard's and the commit log's fields (both
classes slotted) are read and written in their slots the same way; a guard or log of
another class is read through its attributes (or its put handed to the reference).

Two steps of ``dispatch`` are other twins' C functions, called without a Python call:
``ConsumeQueue.append`` (``_consumequeue.APPEND``) while the class's ``append`` is the
consume-queue twin's (one replaced on the class is called as before), and
``KeyIndex.dispatch`` (``_index.DISPATCH_LIVE``) for a listener that is the index
twin's ``dispatch`` bound to an index, handed the properties, offset and size the twin
just put into the request (what the listener would read back from it). The listeners
of the long-poll, HA, delay-service and timer-service twins (``ArrivalNotifier.on_dispatch``,
``HAService.on_dispatch``, ``ScheduleService.on_dispatch``, ``TimerService.on_dispatch``)
are called the same way,
each through its twin's ``DISPATCH`` capsule (the same signature), while the listener in
the plan is that twin's function bound to an instance. Every other listener (one
replaced on its class, a twin missing) is called with the request; one that raises goes
to ``_dispatch_failed`` whichever way it was called. ``ensure_room``'s common case is tested by the
consume-queue twin's ``READY`` (its fields in their slots). ``C_CALLS`` names the C
functions found at import.

``put`` reads a ``MessageInner``'s fields straight from their slots. Anything else is
handed to the reference before anything is changed, which decides and says why: a
message of another class or with a field never set, a refusal by the write guard, a check that fails (properties, topic, size), a
queue not made yet, a queue whose next unit needs room made or asked for, a record that
needs a new segment (BLANK marker, allocation), a record that cannot be encoded.
``PUT`` holds ``put`` as a C function (``object (object store, object msg)``) for the
put-path twin to call without the Python call; ``PUT_PATCHED`` holds ``put_patched`` so for
the re-put twin (``schedule/_reput.pyx``).

``write_out`` (``MessageStore.write_out``, run before every ack and once a loop turn)
makes the common write-out with no Python frame of the store's own: the pending bytes
handed to the current segment with ``os.pwrite`` (looked up on the ``os`` module at each
call, as ``CommitLog.write_out`` does), the written end advanced and the buffer renewed
(emptied in place, its capacity kept, when nothing but the log holds it: no one can tell
it from the reference's fresh ``bytearray()``; the appends grow that capacity
geometrically, where ``+=`` reallocated and copied the whole buffer per record),
the last written record noted and the write guard told (``WriteGuard.written``: only a
held failure has anything to clear, then the guard itself is asked). The order of these
steps is the reference's, so what an ack check sees after it is the same. A failed
``pwrite`` goes through the commit log's and the store's own rollback methods
(``CommitLog._write_failed``, ``MessageStore._write_failed``); a commit log or guard of
another class goes to the reference whole.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.dict cimport PyDict_GetItemWithError, PyDict_Next
from cpython.set cimport PySet_Add
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_GET_LENGTH
from libc.string cimport memcpy
from protocol._slots cimport BASE_OBJECT, OBJECT_ACCESS, OBJECT_NEW, _at, _fresh, _plain, _put, _slot

import errno as _errno
import os as _os
from asyncio import get_running_loop
from importlib import import_module
from sys import modules as _sys_modules
from time import monotonic as _monotonic, time as _time

from kairosmq.protocol.message import RECORD_OVERHEAD_V4, encode_record, patch_record, patched_size
from kairosmq.protocol.properties import MAX_PROPERTIES_BYTES, encode_properties

from ..clock import wall_ms as _wall_ms
from . import message_store as _ref
from .commitlog import MIN_BLANK, CommitLog, Segment
from .guard import WriteGuard
from .consumequeue import compute_tags_code
from .types import DispatchRequest, MessageInner, PutResult, PutStatus

cdef object _pure = _ref.reference
cdef long long _SMALL = 1LL << 62
# the commit log's pending buffer: the least capacity an append gives it, and the most a
# write-out keeps for the next appends (a larger one is dropped, as the reference drops all)
cdef Py_ssize_t _MIN_PENDING = 1 << 16
cdef Py_ssize_t _KEEP_PENDING = 1 << 23
cdef object _DispatchRequest = DispatchRequest
cdef object _PutResult = PutResult
_plain(DispatchRequest, BASE_OBJECT | OBJECT_NEW, 9)  # _append fills every field of both
_plain(PutResult, BASE_OBJECT | OBJECT_NEW, 8)
# the fields' offsets, in the order _append fills them
cdef Py_ssize_t REQ_TOPIC = _slot(DispatchRequest, "topic")
cdef Py_ssize_t REQ_QID = _slot(DispatchRequest, "queue_id")
cdef Py_ssize_t REQ_PHY = _slot(DispatchRequest, "phy_offset")
cdef Py_ssize_t REQ_SIZE = _slot(DispatchRequest, "size")
cdef Py_ssize_t REQ_CODE = _slot(DispatchRequest, "tags_code")
cdef Py_ssize_t REQ_QOFF = _slot(DispatchRequest, "queue_offset")
cdef Py_ssize_t REQ_TS = _slot(DispatchRequest, "store_timestamp")
cdef Py_ssize_t REQ_PROPS = _slot(DispatchRequest, "properties")
cdef Py_ssize_t REQ_REPLAY = _slot(DispatchRequest, "replay")
cdef Py_ssize_t RES_STATUS = _slot(PutResult, "status")
cdef Py_ssize_t RES_PHY = _slot(PutResult, "phy_offset")
cdef Py_ssize_t RES_SIZE = _slot(PutResult, "size")
cdef Py_ssize_t RES_QOFF = _slot(PutResult, "queue_offset")
cdef Py_ssize_t RES_TS = _slot(PutResult, "store_timestamp")
cdef Py_ssize_t RES_CODE = _slot(PutResult, "tags_code")
cdef Py_ssize_t RES_REMARK = _slot(PutResult, "remark")
cdef Py_ssize_t RES_MSG_ID = _slot(PutResult, "offset_msg_id")
# MessageInner's fields, in the order put reads them
cdef object _MessageInner = MessageInner
cdef Py_ssize_t MSG_SLOTS[10]
for _i, _name in enumerate((
    "properties", "topic", "born_host", "body", "queue_id", "store_timestamp", "flag",
    "sys_flag", "born_timestamp", "reconsume_times",
)):
    MSG_SLOTS[_i] = _slot(MessageInner, _name)
_plain(MessageInner, BASE_OBJECT, 10)  # put reads every field
cdef object _PUT_OK = PutStatus.PUT_OK
cdef tuple _ENCODE_ERRORS = _ref.ENCODE_ERRORS
cdef object _CommitLog = CommitLog
cdef object _WriteGuard = WriteGuard
cdef object _Segment = Segment
for _cls in (CommitLog, WriteGuard, Segment):
    _plain(_cls, BASE_OBJECT | OBJECT_ACCESS)
# the write guard's, commit log's and segment's fields the put reads and writes in place
# (each class slotted; an instance of another class goes through attribute access, or
# to the reference)
cdef Py_ssize_t G_ROLE = _slot(WriteGuard, "role_refusal")
cdef Py_ssize_t G_WRITABLE = _slot(WriteGuard, "writable")
cdef Py_ssize_t G_DISK_FULL = _slot(WriteGuard, "disk_full")
cdef Py_ssize_t G_FAILURE = _slot(WriteGuard, "write_failure")
cdef Py_ssize_t G_CHECK_AT = _slot(WriteGuard, "_check_at")
cdef Py_ssize_t G_APPENDS = _slot(WriteGuard, "appends")
cdef Py_ssize_t G_END = _slot(WriteGuard, "_end")
cdef Py_ssize_t G_EPOCH = _slot(WriteGuard, "_epoch")
cdef Py_ssize_t G_ROLLBACKS = _slot(WriteGuard, "_rollbacks")
cdef Py_ssize_t L_SEGMENTS = _slot(CommitLog, "segments")
cdef Py_ssize_t L_WRITTEN = _slot(CommitLog, "_written")
cdef Py_ssize_t L_PENDING = _slot(CommitLog, "_pending")
cdef Py_ssize_t L_SEGMENT_SIZE = _slot(CommitLog, "segment_size")
cdef Py_ssize_t S_BASE = _slot(Segment, "base")
cdef Py_ssize_t S_FD = _slot(Segment, "fd")

# The C functions of the consume-queue and index twins this twin calls in place of a
# Python call (each takes exactly the arguments its Python form is called with):
# ``ConsumeQueue.append`` when that is the consume-queue twin's, and ``KeyIndex.dispatch``
# of a live request when a listener is the index twin's bound to an index. Either twin
# missing: the Python call, as before.
ctypedef object (*_cq_append_t)(object, object, object, object)
ctypedef object (*_index_live_t)(object, object, object, object, object)
ctypedef object (*_cq_ready_t)(object)
cdef _cq_append_t _cq_append = NULL
cdef _cq_ready_t _cq_ready = NULL
cdef object _cq_twin_append = None
cdef _index_live_t _index_live = NULL
cdef object _index_twin_dispatch = None
cdef str _APPEND = "append"
try:
    from . import _consumequeue

    _cq_append = <_cq_append_t>PyCapsule_GetPointer(
        _consumequeue.APPEND, b"kairosmq.server.store._consumequeue.APPEND"
    )
    _cq_twin_append = _consumequeue.append
    _cq_ready = <_cq_ready_t>PyCapsule_GetPointer(
        _consumequeue.READY, b"kairosmq.server.store._consumequeue.READY"
    )
except (ImportError, AttributeError):
    pass
from . import index as _index_ref  # index.py first: it chooses its twin (importing the
# twin first would make index.py's choice run on a half-made twin and fail)
try:
    from . import _index

    _index_live = <_index_live_t>PyCapsule_GetPointer(
        _index.DISPATCH_LIVE, b"kairosmq.server.store._index.DISPATCH_LIVE"
    )
    _index_twin_dispatch = _index.dispatch
except (ImportError, AttributeError):
    pass
# Other dispatch listeners exported the same way (the same signature as
# ``DISPATCH_LIVE``: the listener's self, the request, its properties, offset and size):
# ``ArrivalNotifier.on_dispatch`` and ``HAService.on_dispatch`` of their twins. Each is
# called as a C function for a listener that is that twin's function bound to an
# instance (its reference, ``longpoll.py`` / ``master.py``, imported first: it chooses
# its twin). A twin missing, or a listener of anything else: the Python call.
cdef PyObject* _listener_funcs[4]
cdef _index_live_t _listener_fns[4]
cdef int _n_listeners = 0
_listener_keep = []  # the twins' functions, held alive for the pointers above
_listener_names = []
from ..remoting import longpoll as _longpoll_ref
from ..ha import master as _master_ref

for _name, _mod, _capsule in (
    ("ArrivalNotifier.on_dispatch", "kairosmq.server.remoting._longpoll", b"kairosmq.server.remoting._longpoll.DISPATCH"),
    ("HAService.on_dispatch", "kairosmq.server.ha._master", b"kairosmq.server.ha._master.DISPATCH"),
):
    try:
        _twin_mod = import_module(_mod)
        _listener_fns[_n_listeners] = <_index_live_t>PyCapsule_GetPointer(
            _twin_mod.DISPATCH, _capsule
        )
    except (ImportError, AttributeError):
        continue
    _listener_keep.append(_twin_mod.on_dispatch)
    _listener_funcs[_n_listeners] = <PyObject*>_twin_mod.on_dispatch
    _listener_names.append(_name)
    _n_listeners += 1
# ``ScheduleService.on_dispatch`` and ``TimerService.on_dispatch`` of the delay and timer
# services' twins too, each found the first time a listener is called as Python after its
# twin is loaded (the services' modules import this store: they cannot be imported here;
# a service's module is loaded before its listener can be in a plan)
cdef tuple _LATE = (
    ("ScheduleService.on_dispatch", "kairosmq.server.schedule.delay._service",
     b"kairosmq.server.schedule.delay._service.DISPATCH"),
    ("TimerService.on_dispatch", "kairosmq.server.schedule.timer._service",
     b"kairosmq.server.schedule.timer._service.DISPATCH"),
)
cdef bint _late_found[2]
_late_found[0] = False
_late_found[1] = False


cdef _index_live_t _find_late(PyObject* func):
    """The C function of ``func`` if it is the delay or timer twin's ``on_dispatch`` (that
    twin then registered, once), else NULL; never raises."""
    global _n_listeners, C_CALLS
    cdef int k
    cdef _index_live_t fn
    cdef bytes capsule
    for k in range(2):
        if _late_found[k]:
            continue
        name, mod, capsule = _LATE[k]
        try:
            twin = _sys_modules.get(mod)
            if twin is None:
                continue
            fn = <_index_live_t>PyCapsule_GetPointer(twin.DISPATCH, capsule)
            _listener_keep.append(twin.on_dispatch)
        except Exception:
            continue
        _listener_fns[_n_listeners] = fn
        _listener_funcs[_n_listeners] = <PyObject*>twin.on_dispatch
        _n_listeners += 1
        _late_found[k] = True
        C_CALLS = C_CALLS | {name}
        if func == _listener_funcs[_n_listeners - 1]:
            return fn
    return NULL


# which of them this twin found (the parity tests check the native core has them all;
# the delay service's is added when found)
C_CALLS = frozenset(
    [
        name
        for name, found in (
            ("ConsumeQueue.append", _cq_append != NULL),
            ("ConsumeQueue.ensure_room", _cq_ready != NULL),
            ("KeyIndex.dispatch", _index_live != NULL),
        )
        if found
    ]
    + _listener_names
)


cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_alloc
        char* ob_bytes
        char* ob_start
        Py_ssize_t ob_exports
    void Py_SET_SIZE(object o, Py_ssize_t size)
    Py_ssize_t Py_REFCNT(object o)
    # NULL with the error set (a surrogate): no ``except`` clause, the caller clears it
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size)
    bint PyUnicode_IS_COMPACT_ASCII(object s)
    void* PyUnicode_DATA(object s)
    void PyErr_Clear()
    PyObject* _PyType_Lookup(PyTypeObject* t, object name)  # borrowed, no error set


cdef inline const char* _utf8(object s, Py_ssize_t* n) noexcept:
    """The UTF-8 bytes of the ``str`` ``s`` and their count: an ASCII string's own
    characters, else ``PyUnicode_AsUTF8AndSize`` (NULL with the error set if UTF-8
    cannot hold it)."""
    if PyUnicode_IS_COMPACT_ASCII(s):
        n[0] = PyUnicode_GET_LENGTH(s)
        return <const char*>PyUnicode_DATA(s)
    return PyUnicode_AsUTF8AndSize(s, n)


cdef bytes _encoded(object properties):
    """``encode_properties(properties).encode()``: for a dict of ``str`` names and values,
    each pair with a name and a value written as ``name \\x01 value``, ``\\x02`` between
    pairs, in the dict's order, UTF-8, straight into one ``bytes`` (two passes: the size,
    then the copy; nothing runs between them that could change the dict). Anything else
    (not a dict, a name or value of another type, text UTF-8 cannot hold) by the
    reference's own calls, which give (or raise) what the reference does."""
    cdef Py_ssize_t i = 0, total = 0, kn, vn, q = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    cdef char* p
    if type(properties) is not dict:
        return encode_properties(properties).encode()
    while PyDict_Next(<dict>properties, &i, &k, &v):
        if type(<object>k) is not str or type(<object>v) is not str:
            return encode_properties(properties).encode()
        if PyUnicode_GET_LENGTH(<object>k) == 0 or PyUnicode_GET_LENGTH(<object>v) == 0:
            continue  # the reference leaves the pair out
        kp = _utf8(<object>k, &kn)
        vp = _utf8(<object>v, &vn) if kp != NULL else NULL
        if vp == NULL:
            PyErr_Clear()
            return encode_properties(properties).encode()  # raises its error
        total += kn + vn + 2
    if total == 0:
        return b""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total - 1)
    p = PyBytes_AS_STRING(out)
    i = 0
    while PyDict_Next(<dict>properties, &i, &k, &v):
        if PyUnicode_GET_LENGTH(<object>k) == 0 or PyUnicode_GET_LENGTH(<object>v) == 0:
            continue
        kp = _utf8(<object>k, &kn)  # in place, or cached by the first pass
        vp = _utf8(<object>v, &vn)
        if q:
            p[q] = 2
            q += 1
        memcpy(p + q, kp, kn)
        p[q + kn] = 1
        memcpy(p + q + kn + 1, vp, vn)
        q += kn + 1 + vn
    return out


cdef bint _refused(guard) except -1:
    """``WriteGuard.refusal() is not None``, its quiet case read without a call: no role
    refusal, writable, the disk check not due, the disk not full, no failure held (the
    guard's fields read in their slots); in any other state, or for a guard of another
    class, the guard is asked."""
    cdef PyObject* check_at
    if (
        type(guard) is _WriteGuard
        and _is(guard, G_ROLE, None)
        and _is(guard, G_WRITABLE, True)
        and _is(guard, G_DISK_FULL, None)
        and _is(guard, G_FAILURE, None)
    ):
        check_at = _at(guard, G_CHECK_AT)
        if check_at != NULL and _monotonic() < <object>check_at:
            return False
    return guard.refusal() is not None


cdef inline bint _is(object obj, Py_ssize_t at, object value) noexcept:
    """Whether ``obj``'s slot at offset ``at`` is set and holds ``value`` itself."""
    cdef PyObject* v = _at(obj, at)
    return v != NULL and v == <PyObject*>value


cdef inline bint _small_int(PyObject* v, long long* out) noexcept:
    """Whether ``v`` (a slot's value) is set and an ``int`` below 2**62 in size: then
    ``out`` holds it."""
    cdef int over = 0
    if v == NULL or type(<object>v) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(<object>v, &over)
    return not over and -_SMALL < out[0] < _SMALL


cdef object _now_ms(store):
    """``store.clock_ms()``; ``clock.wall_ms``'s ``int(time.time() * 1000)`` without a call."""
    clock = store.clock_ms
    if clock is _wall_ms:
        return int(_time() * 1000)
    return clock()


cdef object _room(store, str topic, object queue_id, Py_ssize_t size, Py_ssize_t* phy):
    """The queue of ``topic``/``queue_id`` when its next unit and a record of ``size``
    both have room now (the reference's common case), else None; ``phy``: where the
    record goes (``CommitLog.reserve``'s answer in that case)."""
    cdef long long pos, base, seg_size
    cdef PyObject* found
    cdef PyObject* segments
    cdef PyObject* pending
    cdef PyObject* seg
    queues = store.queues
    if type(queues) is dict:  # dict.get without the method call
        found = PyDict_GetItemWithError(queues, (topic, queue_id))
        cq = <object>found if found != NULL else None
    else:
        cq = queues.get((topic, queue_id))
    if cq is None:
        return None
    if _cq_ready != NULL:  # ensure_room's fast case, tested by the consume-queue twin
        f = _cq_ready(cq)
        if f is None:
            return None
    else:
        files = cq.files
        if not files:
            return None
        f = files[len(files) - 1]
        if not (cq.max_offset < f.ready_until and f.mm is not None):
            return None
    log = store.commitlog  # CommitLog.reserve's "fits the current segment" case
    if type(log) is not _CommitLog:
        return None
    segments = _at(log, L_SEGMENTS)
    pending = _at(log, L_PENDING)
    if (
        segments == NULL or type(<object>segments) is not list
        or not PyList_GET_SIZE(<object>segments)
        or pending == NULL or type(<object>pending) is not bytearray
        or not _small_int(_at(log, L_WRITTEN), &pos)
        or not _small_int(_at(log, L_SEGMENT_SIZE), &seg_size)
    ):
        return None
    seg = PyList_GET_ITEM(<object>segments, PyList_GET_SIZE(<object>segments) - 1)
    if type(<object>seg) is not _Segment or not _small_int(_at(<object>seg, S_BASE), &base):
        return None
    pos += PyByteArray_GET_SIZE(<object>pending)
    if not (base <= pos and pos + size + MIN_BLANK <= base + seg_size):
        return None  # reserve ends the segment or opens one: the reference does it
    store.maps.touch(f)
    phy[0] = pos
    return cq


cdef int _extend(object buf, const char* data, Py_ssize_t n) except -1:
    """``buf += data[:n]`` for a ``bytearray``: the same bytes (and the same BufferError
    while a view of it is exported), its capacity grown geometrically (``+=`` grows it to
    the exact size when the new size is over 1.125 times its capacity: a batch of re-puts
    reallocated and copied the whole buffer at each record)."""
    cdef PyByteArrayObject* b = <PyByteArrayObject*><PyObject*>buf
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf), need = size + n
    if b.ob_exports > 0 or b.ob_start != b.ob_bytes or need + 1 > b.ob_alloc:
        if b.ob_exports > 0 or b.ob_start != b.ob_bytes:
            PyByteArray_Resize(buf, need)  # what ``+=`` does (its BufferError)
        else:
            PyByteArray_Resize(buf, need * 2 if need > _MIN_PENDING // 2 else _MIN_PENDING)
    Py_SET_SIZE(buf, need)
    memcpy(b.ob_start + size, data, n)
    b.ob_start[need] = 0  # the trailing NUL every bytearray keeps
    return 0


cdef inline void _renew(object buf) noexcept:
    """``bytearray()`` in place of ``buf``, the write-out's fresh pending buffer, for a
    buffer nothing but the log and the write-out hold (so no one can tell it from a new
    one): emptied, its capacity kept for the next appends (up to ``_KEEP_PENDING``)."""
    cdef PyByteArrayObject* b = <PyByteArrayObject*><PyObject*>buf
    Py_SET_SIZE(buf, 0)
    b.ob_start = b.ob_bytes
    b.ob_start[0] = 0


cdef inline bint _wants(object topics, object names, str topic, dict properties):
    """``message_store.wants`` for a plan entry with a declared interest."""
    if topic in <frozenset>topics:
        return True
    for n in <tuple>names:
        if n in properties:
            return True
    return False


cdef _notify(store, req, str topic, dict properties, object phy, object size):
    """``MessageStore._notify``'s loop over the dispatchers' plan; ``phy`` and ``size``
    are ``req``'s (a live request). A listener that is the index twin's ``dispatch``
    bound to an index is called as a C function with them (what it would read back
    from ``req``); so is one that is the long-poll, HA or delay twin's ``on_dispatch``."""
    cdef _index_live_t fn
    cdef PyObject* func
    cdef int i
    dispatchers = store.dispatchers
    plan = dispatchers._plan
    if plan is None:
        plan = dispatchers.plan()
    for d, topics, names in <list>plan:
        if topics is not None and not _wants(topics, names, topic, properties):
            continue
        fn = NULL
        if PyMethod_Check(d):
            func = PyMethod_GET_FUNCTION(d)
            if _index_live != NULL and func == <PyObject*>_index_twin_dispatch:
                fn = _index_live
            else:
                for i in range(_n_listeners):
                    if func == _listener_funcs[i]:
                        fn = _listener_fns[i]
                        break
                else:
                    fn = _find_late(func)
        try:
            if fn != NULL:
                fn(<object>PyMethod_GET_SELF(d), req, properties, phy, size)
            else:
                d(req)
        except Exception as err:
            store._dispatch_failed(d, req, err)


cdef object _append(
    store, cq, str topic, object queue_id, dict properties, object phy, Py_ssize_t size,
    object code, object queue_offset, object store_ts, bytes record,
):
    """``_put`` after the build: append, dispatch, schedule the write, the result; ``phy``
    is where ``_room`` found the record goes."""
    cdef PyObject* pending
    cdef PyObject* appends
    cdef PyObject* rollbacks
    cdef Py_ssize_t n
    log = store.commitlog  # CommitLog.append: the pending bytes grown in place
    pending = _at(log, L_PENDING) if type(log) is _CommitLog else NULL
    if pending != NULL and type(<object>pending) is bytearray:
        _extend(<object>pending, PyBytes_AS_STRING(record), len(record))
    else:
        pending_o = log._pending
        pending_o += record
    store._last_record = phy
    guard = store.guard  # WriteGuard.appended, its fields in their slots
    size_o = size
    appends = _at(guard, G_APPENDS) if type(guard) is _WriteGuard else NULL
    rollbacks = _at(guard, G_ROLLBACKS) if appends != NULL else NULL
    if rollbacks != NULL and type(<object>rollbacks) is list:
        _put(guard, G_APPENDS, <object>appends + 1)
        _put(guard, G_END, phy + size_o)
        _put(guard, G_EPOCH, PyList_GET_SIZE(<object>rollbacks))
    else:
        guard.appends += 1
        guard._end = phy + size
        guard._epoch = len(guard._rollbacks)
    # the dataclasses' fields set without running their __init__, each straight into
    # its slot (what the field's descriptor does)
    req = _fresh(_DispatchRequest)
    _put(req, REQ_TOPIC, topic)
    _put(req, REQ_QID, queue_id)
    _put(req, REQ_PHY, phy)
    _put(req, REQ_SIZE, size_o)
    _put(req, REQ_CODE, code)
    _put(req, REQ_QOFF, queue_offset)
    _put(req, REQ_TS, store_ts)
    _put(req, REQ_PROPS, properties)
    _put(req, REQ_REPLAY, False)
    # MessageStore.dispatch, not a replay: the unit appended (the consume-queue twin's C
    # function when ``ConsumeQueue.append`` is still its ``append``)
    if (
        _cq_append != NULL
        and _PyType_Lookup(Py_TYPE(cq), _APPEND) == <PyObject*>_cq_twin_append
    ):
        _cq_append(cq, phy, size_o, code)
    else:
        cq.append(phy, size_o, code)
    changed = store._cp_changed
    if type(changed) is set:  # set.add without the method call
        PySet_Add(changed, cq)
    else:
        changed.add(cq)
    _notify(store, req, topic, properties, phy, size_o)
    if not store._write_scheduled:
        store._write_scheduled = True
        get_running_loop().call_soon(store.write_out)
    result = _fresh(_PutResult)
    _put(result, RES_STATUS, _PUT_OK)
    _put(result, RES_PHY, phy)
    _put(result, RES_SIZE, size_o)
    _put(result, RES_QOFF, queue_offset)
    _put(result, RES_TS, store_ts)
    _put(result, RES_CODE, code)
    _put(result, RES_REMARK, "")
    _put(result, RES_MSG_ID, "")
    return result


def put(store, msg):
    """``MessageStore.put``."""
    return _store_put(store, msg)


cdef object _store_put(object store, object msg):
    """``MessageStore.put`` (``put``'s body; the put-path twin calls it through ``PUT``)."""
    cdef Py_ssize_t size, pos
    cdef PyObject* f[10]
    cdef int i
    if type(msg) is not _MessageInner:
        return _pure.put(store, msg)  # a message of another class: the reference reads it
    for i in range(10):  # the fields straight from their slots (what each descriptor reads)
        f[i] = _at(msg, MSG_SLOTS[i])
        if f[i] == NULL:
            return _pure.put(store, msg)  # an unset field: the reference's AttributeError
    properties = <object>f[0]
    topic = <object>f[1]
    born_host = <object>f[2]
    body = <object>f[3]
    queue_id = <object>f[4]
    store_ts = <object>f[5]
    flag = <object>f[6]
    sys_flag = <object>f[7]
    born_ts = <object>f[8]
    reconsume = <object>f[9]
    props = _encoded(properties)
    topic_b = PyUnicode_AsUTF8String(topic) if type(topic) is str else topic.encode()
    store_host = store.store_host
    size = (
        RECORD_OVERHEAD_V4 + len(body) + len(topic_b) + len(props)
        + len(born_host[0]) + len(store_host[0]) - 8
    )
    if (
        type(topic) is not str
        or type(properties) is not dict
        or _refused(store.guard)
        or len(props) > MAX_PROPERTIES_BYTES
        or not 0 < len(topic_b) <= 127
        or size > store.max_record_size
    ):
        return _pure.put(store, msg)
    code = compute_tags_code(topic, properties)
    cq = _room(store, topic, queue_id, size, &pos)
    if cq is None:
        return _pure.put(store, msg)
    queue_offset = cq.max_offset
    phy = pos
    if store_ts is None:
        store_ts = _now_ms(store)
    try:
        record = encode_record(
            topic=topic_b,
            body=body,
            properties=props,
            queue_id=queue_id,
            flag=flag,
            queue_offset=queue_offset,
            physical_offset=phy,
            sys_flag=sys_flag,
            born_timestamp=born_ts,
            born_host=born_host,
            store_timestamp=store_ts,
            store_host=store_host,
            reconsume_times=reconsume,
        )
    except _ENCODE_ERRORS:
        return _pure.put(store, msg)  # nothing appended: the reference says why
    return _append(
        store, cq, topic, queue_id, properties, phy, size, code, queue_offset, store_ts, record
    )


def put_patched(store, src, view, topic, queue_id, properties):
    """``MessageStore.put_patched``."""
    return _put_patched(store, src, view, topic, queue_id, properties)


cdef object _put_patched(store, src, view, topic, queue_id, properties):
    """``MessageStore.put_patched`` (``put_patched``'s body; the re-put twin calls it
    through ``PUT_PATCHED``)."""
    cdef Py_ssize_t size, pos
    props = _encoded(properties)
    topic_b = PyUnicode_AsUTF8String(topic) if type(topic) is str else topic.encode()
    store_host = store.store_host
    size = patched_size(view, topic_b, props, store_host)
    if (
        type(topic) is not str
        or type(properties) is not dict
        or _refused(store.guard)
        or len(props) > MAX_PROPERTIES_BYTES
        or not 0 < len(topic_b) <= 127
        or size > store.max_record_size
    ):
        return _pure.put_patched(store, src, view, topic, queue_id, properties)
    code = compute_tags_code(topic, properties)
    cq = _room(store, topic, queue_id, size, &pos)
    if cq is None:
        return _pure.put_patched(store, src, view, topic, queue_id, properties)
    queue_offset = cq.max_offset
    phy = pos
    store_ts = _now_ms(store)
    try:
        record = patch_record(
            src,
            view,
            topic=topic_b,
            properties=props,
            queue_id=queue_id,
            queue_offset=queue_offset,
            physical_offset=phy,
            store_timestamp=store_ts,
            store_host=store_host,
        )
    except _ENCODE_ERRORS:
        return _pure.put_patched(store, src, view, topic, queue_id, properties)
    return _append(
        store, cq, topic, queue_id, properties, phy, size, code, queue_offset, store_ts, record
    )


def write_out(store):
    """``MessageStore.write_out``."""
    cdef Py_ssize_t total, done, n, pos
    cdef long long written, base
    cdef PyObject* data
    cdef PyObject* segments
    cdef PyObject* seg
    cdef PyObject* written_o
    log = store.commitlog
    guard = store.guard
    if type(log) is not _CommitLog or type(guard) is not _WriteGuard:
        return _pure.write_out(store)
    # the log's fields in their slots; one unset or of another type: the reference
    data = _at(log, L_PENDING)
    segments = _at(log, L_SEGMENTS)
    if (
        data == NULL or type(<object>data) is not bytearray
        or segments == NULL or type(<object>segments) is not list
        or _at(guard, G_FAILURE) == NULL
    ):
        return _pure.write_out(store)
    total = PyByteArray_GET_SIZE(<object>data)
    seg = NULL
    if total:
        if not PyList_GET_SIZE(<object>segments):
            return _pure.write_out(store)  # the reference's IndexError, raised by it
        seg = PyList_GET_ITEM(<object>segments, PyList_GET_SIZE(<object>segments) - 1)
        if (
            type(<object>seg) is not _Segment
            or not _small_int(_at(log, L_WRITTEN), &written)
            or not _small_int(_at(<object>seg, S_BASE), &base)
            or _at(<object>seg, S_FD) == NULL
        ):
            return _pure.write_out(store)
    store._write_scheduled = False
    if total:  # CommitLog.write_out
        data_o = <object>data  # held: the reference's ``data``
        pos = written - base
        fd = <object>_at(<object>seg, S_FD)
        done = 0
        try:
            while done < total:
                if done == 0:
                    n = _os.pwrite(fd, data_o, pos)
                else:
                    n = _os.pwrite(fd, memoryview(data_o)[done:], pos + done)
                if n <= 0:
                    raise OSError(_errno.EIO, "pwrite wrote nothing")
                done += n
        except OSError as err:
            store._write_failed(log._write_failed(err, data_o, done))
            return
        written_o = _at(log, L_WRITTEN)  # read again after the writes, as the reference
        if written_o != NULL:
            _put(log, L_WRITTEN, <object>written_o + total)
        else:
            log._written += total  # its AttributeError
        data = _at(log, L_PENDING)
        if (
            data == <PyObject*>data_o  # held by the log and here only: no one else sees it
            and Py_REFCNT(data_o) == 2
            and (<PyByteArrayObject*>data).ob_exports == 0
            and (<PyByteArrayObject*>data).ob_alloc <= _KEEP_PENDING
        ):
            _renew(data_o)
        else:
            _put(log, L_PENDING, bytearray())
    store._last_written_record = store._last_record
    if not _is(guard, G_FAILURE, None):  # WriteGuard.written's only case with work
        guard.written()


ctypedef object (*_put_t)(object, object)
cdef _put_t _store_put_fn = _store_put
# ``put`` as a C function for the put-path twin (``put/_path.pyx``), which calls it for a
# store whose ``put`` is this module's ``put`` bound to it
PUT = PyCapsule_New(<void*>_store_put_fn, b"kairosmq.server.store._message_store.PUT", NULL)

ctypedef object (*_put_patched_t)(object, object, object, object, object, object)
cdef _put_patched_t _put_patched_fn = _put_patched
# ``put_patched`` as a C function for the re-put twin (``schedule/_reput.pyx``), which
# calls it for a ``Reputs.put_patched`` that is this module's ``put_patched`` bound to a store
PUT_PATCHED = PyCapsule_New(
    <void*>_put_patched_fn, b"kairosmq.server.store._message_store.PUT_PATCHED", NULL
)
