# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``path.py``'s ``PutPath.put`` (chosen by ``protocol/native.py``;
``path.py`` is the reference and owns every rule of the put path).

``put`` makes the common put of a client send, a NORMAL or DELAYED message, in one C
function: the stray DELAY dropped or the delay transform (``transform_delayed`` with
``round_up_ms=1``, inline), the store put (the store's own twin), the stats counter,
``_target_ready``'s "the target queue has a file (or has asked for its first)" case, the offset msg id (the bytes
``ids.create_offset_msg_id`` packs, written as hex here) and the ``message.scheduled`` /
``message.stored`` fields handed to the hot-path writer (``observe/logs.py``'s
``_fast_emit``) without ``MessageLog.info``'s frame. It mirrors the reference step for
step.

Anything else is handed to the reference before anything is changed: every other kind
(TIMER, RECALL, the transaction kinds, REPUT, RETRY, DLQ), properties that are not a
dict, a DELAY that is not an integer (the reference raises), no delay levels configured;
a target queue without a file goes to the reference's ``_target_ready``; a store host
the offset id cannot pack goes to ``ids.create_offset_msg_id``.
"""

from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import DELAY, DELIVER_TIME, REAL_QID, REAL_TOPIC, UNIQ_KEY

from ..clock import wall_ms as _wall_ms
from ..observe import logs as _logs
from ..store import PutStatus
from . import path as _ref
from .kind import MessageKind

from time import time as _time

cdef object _ref_put = _ref.reference.put
cdef object _NORMAL = MessageKind.NORMAL
cdef object _DELAYED = MessageKind.DELAYED
cdef object _PUT_OK = PutStatus.PUT_OK
cdef object _MessageLog = _logs.MessageLog
cdef str _SCHEDULE_TOPIC = SCHEDULE_TOPIC
cdef str _DELAY = DELAY
cdef str _DELIVER_TIME = DELIVER_TIME
cdef str _REAL_QID = REAL_QID
cdef str _REAL_TOPIC = REAL_TOPIC
cdef str _UNIQ_KEY = UNIQ_KEY
cdef bytes _HEX = b"0123456789ABCDEF"


cdef object _now_ms(store):
    """``store.clock_ms()``; ``clock.wall_ms``'s ``int(time.time() * 1000)`` without a call."""
    clock = store.clock_ms
    if clock is _wall_ms:
        return int(_time() * 1000)
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
    cdef Py_ssize_t n
    if kind is not _NORMAL and kind is not _DELAYED:
        return _ref_put(self, msg, kind, due_ms=due_ms)
    props = msg.properties
    if type(props) is not dict:
        return _ref_put(self, msg, kind, due_ms=due_ms)
    level = 0
    store = self.store
    if _DELAY in <dict>props and msg.topic != _SCHEDULE_TOPIC:
        if kind is _DELAYED:
            try:
                level = int((<dict>props)[_DELAY])
            except Exception:
                return _ref_put(self, msg, kind, due_ms=due_ms)  # it raises, as it says
        if level > 0:
            levels_ms = self.config.delay_levels_ms
            n = len(levels_ms)
            if n == 0:
                return _ref_put(self, msg, kind, due_ms=due_ms)
            if level > n:  # transform_delayed, round_up_ms=1
                level = n
            now = _now_ms(store)
            (<dict>props)[_REAL_TOPIC] = msg.topic
            (<dict>props)[_REAL_QID] = str(msg.queue_id)
            (<dict>props)[_DELAY] = str(level)
            (<dict>props)[_DELIVER_TIME] = str(now + levels_ms[level - 1] + 1)
            msg.topic = _SCHEDULE_TOPIC
            msg.queue_id = level - 1
            msg.store_timestamp = now
        else:
            del (<dict>props)[_DELAY]
    result = store.put(msg)
    if result.status is not _PUT_OK:
        return result
    if level > 0:
        self.stats.scheduled[level] += 1
        target = (<dict>props)[_REAL_TOPIC]
        qid = (<dict>props)[_REAL_QID]
        cq = store.queues.get((target, int(qid)))  # _target_ready: find_queue
        if cq is None or not (cq.files or cq._first_asked or cq.allocator is None):
            self._target_ready(target, qid)  # prepare_first would ask the allocator
    else:
        self.stats.stored[msg.topic] += 1
    if not self.config.log_messages:
        return result
    msglog = self.msglog
    emit = None
    if type(msglog) is _MessageLog:
        if not _logs._info_enabled:  # MessageLog.enabled
            return result
        emit = _logs._fast_emit
    elif not msglog.enabled:
        return result
    phy = result.phy_offset
    offset_id = _offset_msg_id(store.store_host, phy)
    result.offset_msg_id = offset_id
    if level > 0:
        event = "message.scheduled"
        fields = {
            "msg_id": (<dict>props).get(_UNIQ_KEY) or offset_id,
            "real_topic": (<dict>props)[_REAL_TOPIC],
            "real_queue_id": int((<dict>props)[_REAL_QID]),
            "delay_level": level,
            "queue_offset": result.queue_offset,
            "phy_offset": phy,
            "deliver_ts": int((<dict>props)[_DELIVER_TIME]),
            "reconsume_times": msg.reconsume_times,
        }
    else:
        event = "message.stored"
        fields = {
            "msg_id": (<dict>props).get(_UNIQ_KEY) or offset_id,
            "topic": msg.topic,
            "queue_id": msg.queue_id,
            "queue_offset": result.queue_offset,
            "phy_offset": phy,
            "size": result.size,
            "born_ts": msg.born_timestamp,
            "reconsume_times": msg.reconsume_times,
        }
    if emit is not None:  # MessageLog.info's fast case
        emit(event, fields)
    else:
        msglog.info(event, **fields)
    return result
