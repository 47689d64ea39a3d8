# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``path.py``'s ``PutPath.put`` (chosen by ``protocol/native.py``;
``path.py`` is the reference and owns every rule of the put path).

``put`` makes the common put of a client send, a NORMAL or DELAYED ``MessageInner``, in
one C function: the stray DELAY dropped or the delay transform (``transform_delayed`` with
``round_up_ms=1``, inline), the store put (the store's own twin), the stats counter,
``_target_ready``'s "the target queue has a file (or has asked for its first)" case, the offset msg id (the bytes
``ids.create_offset_msg_id`` packs, written as hex here) and the ``message.scheduled`` /
``message.stored`` fields handed to the hot-path writer (``observe/logs.py``'s
``_fast_emit``) without ``MessageLog.info``'s frame (to the native writer,
``_logs.pyx``'s ``LineEmitter``, as values in a C array through its ``ROW``, in the
reference's keyword order, ``SCHEDULED_KEYS`` / ``STORED_KEYS``: no fields dict). It mirrors the reference step for
step. The message's fields (and a ``PutPath``'s own ``store``, ``stats``, ``msglog`` and
``config``, not a subclass's) are read and written straight through their slots (the
offsets its member descriptors use, read at import: a ``MessageInner`` not laid out as
a plain slotted dataclass fails the import and the pure core runs); an integer the
reference writes as text (``str``) and reads back (``int``) is kept as the integer it
was written from while the property still holds that very text, and the wall clock
(``clock.wall_ms``) is read as ``time.time()`` reads it, without the call.
The store put is the store twin's C function (``_message_store.PUT``) while
``store.put`` is that twin's ``put`` bound to the store (read as the reference reads it;
anything else is called). ``PUT`` holds the same put as a C function (``object (object self, object msg, object
kind, object due_ms)``) for the send twin to call without the Python call.

Anything else is handed to the reference before anything is changed: every other kind
(TIMER, RECALL, the transaction kinds, REPUT, RETRY, DLQ), a message of another class,
properties that are not a dict, a DELAY that is not an integer (the reference raises),
no delay levels configured; a target queue without a file goes to the reference's
``_target_ready``; a store host the offset id cannot pack goes to
``ids.create_offset_msg_id``.
"""

from cpython.object cimport PyObject
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.long cimport PyLong_AsLongLongAndOverflow
from protocol._capsules cimport _c_function
from protocol._slots cimport BASE_OBJECT, OBJECT_NEW, _field, _get, _own_slot, _plain, _put, _slot
from protocol._digits cimport _ascii_int, _dec


from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import DELAY, DELIVER_TIME, REAL_QID, REAL_TOPIC, UNIQ_KEY

from ..clock import wall_ms as _wall_ms
from ..config import BrokerConfig
from ..observe import logs as _logs
from ..observe.stats import BrokerStats
from ..store import MessageInner, PutResult, PutStatus
from ..store.message_store import MessageStore
from . import path as _ref
from .kind import MessageKind

# the store twin's ``put`` as a C function (``_message_store.PUT``), called in place of
# ``store.put(msg)`` while that is the twin's ``put`` bound to the store (anything else,
# or the twin missing: the Python call)
ctypedef object (*_store_put_t)(object, object)
cdef _store_put_t _store_put = NULL
cdef object _store_twin_put = None
try:
    from ..store import _message_store

    _store_put = <_store_put_t>PyCapsule_GetPointer(
        _message_store.PUT, b"kairosmq.server.store._message_store.PUT"
    )
    _store_twin_put = _message_store.put
except (ImportError, AttributeError):
    pass

# the hot-path log writer's row entry (``_logs.ROW``): a line written from the fields'
# values in a C array, without the fields dict, when the emitter is exactly the twin's
ctypedef int (*_row_t)(object, object, tuple, PyObject**) except -1
cdef _row_t _row = <_row_t>_c_function(_logs._twin, "ROW")
cdef object _LineEmitter = _logs._twin.LineEmitter if _row != NULL else None
# the keywords ``PutPath.put`` logs, in its order
SCHEDULED_KEYS = (
    "msg_id", "real_topic", "real_queue_id", "delay_level", "queue_offset", "phy_offset",
    "deliver_ts", "reconsume_times",
)
STORED_KEYS = (
    "msg_id", "topic", "queue_id", "queue_offset", "phy_offset", "size", "born_ts",
    "reconsume_times",
)
cdef tuple _SCHEDULED_KEYS = SCHEDULED_KEYS
cdef tuple _STORED_KEYS = STORED_KEYS

cdef extern from "time.h" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec* tp)
    int CLOCK_REALTIME

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)


cdef object _ref_put = _ref.reference.put
cdef object _NORMAL = MessageKind.NORMAL
cdef object _DELAYED = MessageKind.DELAYED
cdef object _PUT_OK = PutStatus.PUT_OK
cdef object _MessageLog = _logs.MessageLog
cdef object _MessageInner = MessageInner
cdef object _PutResult = PutResult
cdef str _SCHEDULE_TOPIC = SCHEDULE_TOPIC
cdef str _DELAY = DELAY
cdef str _DELIVER_TIME = DELIVER_TIME
cdef str _REAL_QID = REAL_QID
cdef str _REAL_TOPIC = REAL_TOPIC
cdef str _UNIQ_KEY = UNIQ_KEY
cdef bytes _HEX = b"0123456789ABCDEF"


_plain(MessageInner, BASE_OBJECT | OBJECT_NEW)
cdef Py_ssize_t M_TOPIC = _slot(MessageInner, "topic")
cdef Py_ssize_t M_QID = _slot(MessageInner, "queue_id")
cdef Py_ssize_t M_PROPS = _slot(MessageInner, "properties")
cdef Py_ssize_t M_STORE_TS = _slot(MessageInner, "store_timestamp")
cdef Py_ssize_t M_BORN_TS = _slot(MessageInner, "born_timestamp")
cdef Py_ssize_t M_RECONSUME = _slot(MessageInner, "reconsume_times")
_plain(PutResult, BASE_OBJECT)
cdef Py_ssize_t R_STATUS = _slot(PutResult, "status")
cdef Py_ssize_t R_PHY = _slot(PutResult, "phy_offset")
cdef Py_ssize_t R_SIZE = _slot(PutResult, "size")
cdef Py_ssize_t R_QOFF = _slot(PutResult, "queue_offset")
cdef Py_ssize_t R_MSG_ID = _slot(PutResult, "offset_msg_id")
# PutPath: the fields a put reads, in place for the class itself (a subclass is read
# through its attributes)
cdef object _PutPath = _ref.PutPath
cdef Py_ssize_t P_STORE = _slot(_PutPath, "store")
cdef Py_ssize_t P_STATS = _slot(_PutPath, "stats")
cdef Py_ssize_t P_MSGLOG = _slot(_PutPath, "msglog")
cdef Py_ssize_t P_CONFIG = _slot(_PutPath, "config")
# the store, the broker's config and counters: their fields read in their slots (exactly
# these classes; anything else is read through its attributes)
cdef type _Store = MessageStore
cdef Py_ssize_t S_CLOCK = _own_slot(_Store, "clock_ms")
cdef Py_ssize_t S_QUEUES = _own_slot(_Store, "queues")
cdef Py_ssize_t S_HOST = _own_slot(_Store, "store_host")
cdef type _Config = BrokerConfig
cdef Py_ssize_t K_LEVELS = _own_slot(_Config, "delay_levels_ms")
cdef Py_ssize_t K_LOG_MESSAGES = _own_slot(_Config, "log_messages")
cdef type _Stats = BrokerStats
cdef Py_ssize_t N_SCHEDULED = _own_slot(_Stats, "scheduled")
cdef Py_ssize_t N_STORED = _own_slot(_Stats, "stored")


cdef inline object _of(object obj, type cls, Py_ssize_t at, str name):
    """``obj.<name>``: read in its slot at ``at`` when ``obj`` is exactly a ``cls``."""
    if type(obj) is cls:
        return _field(obj, at, name)
    return getattr(obj, name)


cdef object _now_ms(store):
    """``store.clock_ms()``; ``clock.wall_ms``'s ``int(time.time() * 1000)`` read as
    ``time.time()`` reads the clock (``CLOCK_REALTIME`` in ns, then seconds as a double)."""
    cdef timespec ts
    cdef long long ns
    cdef double d
    clock = _of(store, _Store, S_CLOCK, "clock_ms")
    if clock is _wall_ms and clock_gettime(CLOCK_REALTIME, &ts) == 0:
        ns = <long long>ts.tv_sec * 1000000000 + ts.tv_nsec
        if ns % 1000000000 == 0:  # CPython's _PyTime_AsSecondsDouble
            d = <double>(ns // 1000000000)
        else:
            d = <double>ns
            d /= 1e9
        return <long long>(d * 1000.0)
    return clock()


cdef str _offset_msg_id(tuple store_host, object phy):
    """``PutPath.offset_msg_id``: ``ids.create_offset_msg_id``'s ``>4siq`` / ``>16siq``
    packing as upper-case hex, written directly (any other host: the reference)."""
    cdef bytes ip = store_host[0]
    cdef Py_ssize_t n = len(ip), i, k = 0
    cdef long long port, off
    cdef unsigned long long v
    cdef char buf[64]
    cdef const unsigned char* p = ip
    cdef const char* hexd = _HEX
    port_o = store_host[1]
    if (n != 4 and n != 16) or not (-2147483648 <= port_o <= 2147483647):
        return create_offset_msg_id(ip, port_o, phy)
    if not (-9223372036854775808 <= phy <= 9223372036854775807):
        return create_offset_msg_id(ip, port_o, phy)
    port = port_o
    off = phy
    for i in range(n):
        buf[k] = hexd[p[i] >> 4]
        buf[k + 1] = hexd[p[i] & 15]
        k += 2
    v = <unsigned long long>(<unsigned int>(<int>port))
    for i in range(7, -1, -1):
        buf[k + i] = hexd[v & 15]
        v >>= 4
    k += 8
    v = <unsigned long long>off
    for i in range(15, -1, -1):
        buf[k + i] = hexd[v & 15]
        v >>= 4
    k += 16
    return buf[:k].decode("ascii")


def put(self, msg, kind=_NORMAL, *, due_ms=0):
    """``PutPath.put``."""
    return _put_msg(self, msg, kind, due_ms)


cdef object _put_msg(object self, object msg, object kind, object due_ms):
    """``PutPath.put`` (``put``'s body; the send twin calls it through ``PUT``)."""
    cdef Py_ssize_t n
    cdef bint plain, row, slotted
    cdef long long parsed
    cdef PyObject* vals[8]
    cdef object f_id, f_topic, f_level, f_qid, f_qoff, f_size, f_born, f_rt
    cdef long level = 0
    if (kind is not _NORMAL and kind is not _DELAYED) or type(msg) is not _MessageInner:
        return _ref_put(self, msg, kind, due_ms=due_ms)
    props = _get(msg, M_PROPS)
    if type(props) is not dict:
        return _ref_put(self, msg, kind, due_ms=due_ms)
    slotted = type(self) is _PutPath
    store = _field(self, P_STORE, "store") if slotted else self.store
    topic = _get(msg, M_TOPIC)
    qid = None  # the target queue id as the integer REAL_QID was written from
    qid_text = deliver_text = deliver = None
    if _DELAY in <dict>props and topic != _SCHEDULE_TOPIC:
        if kind is _DELAYED:
            level_text = (<dict>props)[_DELAY]
            if _ascii_int(level_text, &parsed):
                level_o = parsed
            else:
                try:
                    level_o = int(level_text)
                except Exception:
                    return _ref_put(self, msg, kind, due_ms=due_ms)  # it raises, as it says
            if level_o > 0:
                config = _field(self, P_CONFIG, "config") if slotted else self.config
                levels_ms = _of(config, _Config, K_LEVELS, "delay_levels_ms")
                n = len(levels_ms)
                if n == 0:
                    return _ref_put(self, msg, kind, due_ms=due_ms)
                level = n if level_o > n else level_o  # transform_delayed, round_up_ms=1
        if level > 0:
            now = _now_ms(store)
            qid = _get(msg, M_QID)
            qid_text = _dec(qid)
            deliver = now + levels_ms[level - 1] + 1
            deliver_text = _dec(deliver)
            (<dict>props)[_REAL_TOPIC] = topic
            (<dict>props)[_REAL_QID] = qid_text
            (<dict>props)[_DELAY] = f"{level}"  # str(level), in C
            (<dict>props)[_DELIVER_TIME] = deliver_text
            topic = _SCHEDULE_TOPIC
            _put(msg, M_TOPIC, topic)
            _put(msg, M_QID, level - 1)
            _put(msg, M_STORE_TS, now)
        else:
            del (<dict>props)[_DELAY]
    store_put = store.put  # the attribute read as the reference reads it
    if (
        _store_put != NULL
        and PyMethod_Check(store_put)
        and PyMethod_GET_FUNCTION(store_put) == <PyObject*>_store_twin_put
    ):
        result = _store_put(<object>PyMethod_GET_SELF(store_put), msg)  # the store twin's, in C
    else:
        result = store_put(msg)
    plain = type(result) is _PutResult  # its fields read through their slots
    if (_get(result, R_STATUS) if plain else result.status) is not _PUT_OK:
        return result
    stats = _field(self, P_STATS, "stats") if slotted else self.stats
    if level > 0:
        _of(stats, _Stats, N_SCHEDULED, "scheduled")[level] += 1
        target = (<dict>props)[_REAL_TOPIC]
        qid_now = (<dict>props)[_REAL_QID]
        if qid_now is not qid_text or type(qid) is not int:
            qid = int(qid_now)  # int(str(q)) is q for an int q: read back only if changed
        queues = _of(store, _Store, S_QUEUES, "queues")
        key = (target, qid)
        # _target_ready: find_queue
        cq = (<dict>queues).get(key) if type(queues) is dict else queues.get(key)
        if cq is None or not (cq.files or cq._first_asked or cq.allocator is None):
            self._target_ready(target, qid_now)  # prepare_first would ask the allocator
    else:
        _of(stats, _Stats, N_STORED, "stored")[_get(msg, M_TOPIC)] += 1
    config = _field(self, P_CONFIG, "config") if slotted else self.config
    if not _of(config, _Config, K_LOG_MESSAGES, "log_messages"):
        return result
    msglog = _field(self, P_MSGLOG, "msglog") if slotted else self.msglog
    emit = None
    if type(msglog) is _MessageLog:
        if not _logs._info_enabled:  # MessageLog.enabled
            return result
        emit = _logs._fast_emit
    elif not msglog.enabled:
        return result
    phy = _get(result, R_PHY) if plain else result.phy_offset
    offset_id = _offset_msg_id(_of(store, _Store, S_HOST, "store_host"), phy)
    if plain:
        _put(result, R_MSG_ID, offset_id)
    else:
        result.offset_msg_id = offset_id
    row = emit is not None and _row != NULL and type(emit) is _LineEmitter
    if level > 0:
        event = "message.scheduled"
        if (<dict>props)[_DELIVER_TIME] is not deliver_text or type(deliver) is not int:
            deliver = int((<dict>props)[_DELIVER_TIME])
        if (<dict>props)[_REAL_QID] is not qid_text:
            qid = int((<dict>props)[_REAL_QID])
        if row:  # the line written from the values, no fields dict
            f_id = (<dict>props).get(_UNIQ_KEY) or offset_id
            f_topic = (<dict>props)[_REAL_TOPIC]
            f_level = level
            f_qoff = _get(result, R_QOFF) if plain else result.queue_offset
            f_rt = _get(msg, M_RECONSUME)
            vals[0] = <PyObject*>f_id
            vals[1] = <PyObject*>f_topic
            vals[2] = <PyObject*>qid
            vals[3] = <PyObject*>f_level
            vals[4] = <PyObject*>f_qoff
            vals[5] = <PyObject*>phy
            vals[6] = <PyObject*>deliver
            vals[7] = <PyObject*>f_rt
            _row(emit, event, _SCHEDULED_KEYS, vals)
            return result
        fields = _PyDict_NewPresized(8)  # the literal's keys, no resize on the way
        fields["msg_id"] = (<dict>props).get(_UNIQ_KEY) or offset_id
        fields["real_topic"] = (<dict>props)[_REAL_TOPIC]
        fields["real_queue_id"] = qid
        fields["delay_level"] = level
        fields["queue_offset"] = _get(result, R_QOFF) if plain else result.queue_offset
        fields["phy_offset"] = phy
        fields["deliver_ts"] = deliver
        fields["reconsume_times"] = _get(msg, M_RECONSUME)
    else:
        event = "message.stored"
        if row:  # the line written from the values, no fields dict
            f_id = (<dict>props).get(_UNIQ_KEY) or offset_id
            f_topic = _get(msg, M_TOPIC)
            f_qid = _get(msg, M_QID)
            f_qoff = _get(result, R_QOFF) if plain else result.queue_offset
            f_size = _get(result, R_SIZE) if plain else result.size
            f_born = _get(msg, M_BORN_TS)
            f_rt = _get(msg, M_RECONSUME)
            vals[0] = <PyObject*>f_id
            vals[1] = <PyObject*>f_topic
            vals[2] = <PyObject*>f_qid
            vals[3] = <PyObject*>f_qoff
            vals[4] = <PyObject*>phy
            vals[5] = <PyObject*>f_size
            vals[6] = <PyObject*>f_born
            vals[7] = <PyObject*>f_rt
            _row(emit, event, _STORED_KEYS, vals)
            return result
        fields = _PyDict_NewPresized(8)
        fields["msg_id"] = (<dict>props).get(_UNIQ_KEY) or offset_id
        fields["topic"] = _get(msg, M_TOPIC)
        fields["queue_id"] = _get(msg, M_QID)
        fields["queue_offset"] = _get(result, R_QOFF) if plain else result.queue_offset
        fields["phy_offset"] = phy
        fields["size"] = _get(result, R_SIZE) if plain else result.size
        fields["born_ts"] = _get(msg, M_BORN_TS)
        fields["reconsume_times"] = _get(msg, M_RECONSUME)
    if emit is not None:  # MessageLog.info's fast case
        emit(event, fields)
    else:
        msglog.info(event, **fields)
    return result


ctypedef object (*put_fn)(object, object, object, object)
cdef put_fn _put_ptr = _put_msg
# ``put`` as a C function for the send twin (``handlers/_send.pyx``)
PUT = PyCapsule_New(<void*>_put_ptr, b"kairosmq.server.put._path.PUT", NULL)
