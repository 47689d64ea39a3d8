# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``send.py``'s ``SendMessageProcessor.handle_send`` (chosen by
``protocol/native.py``; ``send.py`` and ``remoting/ingress.py`` are the reference and own
every rule of a send).

``handle_send`` makes the common single send, SEND_MESSAGE or SEND_MESSAGE_V2 to a topic
that exists and is writable, in one C function: the header decoded by the header twin's
decoder (the one ``SendMessageRequestHeader.from_ext_fields`` runs), ``check_send_header``'s
checks of a known user topic (a validated producer group, the queue id within the
topic's queues, ``flag`` and ``reconsumeTimes`` within int32, ``producer_sys_flag``),
the body size, ``message_properties`` (the properties twin's decode; DELAY an integer),
WAIT dropped and CLUSTER set, the queue chosen (``random.randrange`` for queueId < 0, as
``_resolve_topic``), the ``MessageInner`` filled field by field, the kind (DELAYED with a
DELAY property, else NORMAL), the put (``self.put``: the put path, its own twin), the
recall handle (``admission.recall_handle`` and ``timer.encode_recall_handle``, inline)
and the SUCCESS answer (``_respond``'s ext fields in ``SendMessageResponseHeader``'s
order, the ``RemotingCommand`` filled as ``cmd.response`` fills it). It mirrors the
reference step for step.

In C rather than through Python: the request, its header, the topic's config, the
``MessageInner``, the put result, the answer and (for a ``SendMessageProcessor`` itself,
not a subclass) the processor's ``topics``, ``config`` and ``put`` are read and written
straight through their slots (the offsets their member descriptors use, read at import: a class not laid
out as a plain slotted dataclass fails the import and the pure core runs); the put is the
put twin's C function (``put/_path.pyx``'s ``PUT``) when ``self.put`` is that twin bound
to its ``PutPath``; the recall handle's base64url is written here for a handle of at most
1 KiB of UTF-8 (a longer one, or text UTF-8 cannot hold, goes the reference's way); a
DELAY of ASCII digits is read without ``int()``; the header and the properties are
decoded through the header and properties twins' C entry points (``FROM_EXT``,
``DECODE``) when the decoder in use is exactly that twin's (else the Python call, as
before); ``GuardedSend`` calls this body without the Python call when its handler is
this twin's ``handle_send``.

Anything else is handed to the reference before anything is changed, which decides and
says why: a batch (code 320 or ``batch=true``), a topic not in the table (auto-creation,
a bad name), a system or %RETRY% topic, a producer group not validated yet, a queue id,
flag, reconsumeTimes or maxReconsumeTimes out of range, a transaction sysFlag
(PREPARED, ROLLBACK), a body over ``max_message_size``, properties naming broker-internal
keys (``KAIROS_``, ``REAL_``), a DELAY that is not an integer, ``TRAN_MSG``, timer
properties, a topic not writable or without write queues. After the put, a refused put and
SYNC_FLUSH are answered by the reference's ``_respond``.
"""

from cpython.object cimport PyObject
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from libc.string cimport memcpy
from protocol._capsules cimport _c_function
from protocol._slots cimport BASE_OBJECT, OBJECT_NEW, _field, _fresh, _get, _own_slot, _plain, _put, _slot
from protocol._digits cimport _ascii_int, _dec

import random as _random
from binascii import b2a_base64
from inspect import isawaitable

from kairosmq.protocol.codes import (
    FLAG_RESPONSE,
    PERM_WRITE,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    BROKER_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import DEFAULT_REGION, SendMessageRequestHeader
from kairosmq.protocol.naming import (
    AUTO_CREATE_TOPIC_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from kairosmq.protocol.properties import (
    BROKER_PROPERTY_PREFIX,
    CLUSTER,
    DELAY,
    DELIVER_TIME,
    REAL_TOPIC,
    TIMER_PROPERTIES,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
    decode_properties,
)
from kairosmq.protocol.timer import RECALL_HANDLE_VERSION, _URLSAFE

from ..config import BrokerConfig, FlushMode
from ..put import path as _path
from ..put.kind import MessageKind
from ..remoting import ingress as _ingress
from ..remoting.ingress import refuse as _refuse
from ..remoting.transport import Connection
from ..store import MessageInner, PutResult, PutStatus
from ..tables.topics import TopicConfig, TopicConfigManager
from kairosmq.protocol import headers as _headers_mod
from kairosmq.protocol import properties as _properties_mod
from . import send as _ref

cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    # NULL with the error set (a surrogate): the caller clears it
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size)
    void PyErr_Clear()
    object PyUnicode_DecodeASCII(const char* s, Py_ssize_t size, const char* errors)
    dict _PyDict_NewPresized(Py_ssize_t minused)


cdef object _ref_handle = _ref.reference.handle_send
# the broker's config and the connection, their fields read in their slots (exactly
# these classes; anything else is read through its attributes)
cdef type _Config = BrokerConfig
cdef Py_ssize_t K_MAX_SIZE = _own_slot(_Config, "max_message_size")
cdef Py_ssize_t K_CLUSTER = _own_slot(_Config, "cluster_name")
cdef Py_ssize_t K_BROKER = _own_slot(_Config, "broker_name")
cdef Py_ssize_t K_FLUSH = _own_slot(_Config, "flush_mode")
cdef type _Connection = Connection
cdef Py_ssize_t N_BORN_IP = _own_slot(_Connection, "born_ip")
cdef Py_ssize_t N_PEER_PORT = _own_slot(_Connection, "peer_port")


cdef inline object _of(object obj, type cls, Py_ssize_t at, str name):
    """``obj.<name>``: read in its slot at ``at`` when ``obj`` is exactly a ``cls``."""
    if type(obj) is cls:
        return _field(obj, at, name)
    return getattr(obj, name)
cdef object _from_v1 = SendMessageRequestHeader._codec(False)[0]
cdef object _from_v2 = SendMessageRequestHeader._codec(True)[0]
cdef object _groups_ok = _ingress._groups.ok
cdef long long _SEND_V1 = RequestCode.SEND_MESSAGE
cdef long long _SEND_V2 = RequestCode.SEND_MESSAGE_V2
cdef long long _INT32_MIN = _ingress.INT32_MIN
cdef long long _INT32_MAX = _ingress.INT32_MAX
cdef long long _TX_TYPE = SYSFLAG_TRANSACTION_PREPARED | SYSFLAG_TRANSACTION_COMMIT
cdef long long _KEPT = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TRANSACTION_COMMIT
cdef long long _COMPRESSED = SYSFLAG_COMPRESSED
cdef long long _COMPRESSION_TYPE = _ingress.SYSFLAG_COMPRESSION_TYPE
cdef long long _COMMIT = SYSFLAG_TRANSACTION_COMMIT
cdef long long _PERM_WRITE = PERM_WRITE
cdef object _NORMAL = MessageKind.NORMAL
cdef object _DELAYED = MessageKind.DELAYED
cdef object _PUT_OK = PutStatus.PUT_OK
cdef object _SYNC_FLUSH = FlushMode.SYNC_FLUSH
cdef object _SUCCESS = int(ResponseCode.SUCCESS)
cdef object _FLAG_RESPONSE = FLAG_RESPONSE
cdef object _JAVA = LanguageCode.JAVA
cdef object _VERSION = BROKER_VERSION
cdef object _RemotingCommand = RemotingCommand
cdef object _SendHeader = SendMessageRequestHeader
cdef object _MessageInner = MessageInner
cdef object _PutResult = PutResult
cdef object _TopicConfigManager = TopicConfigManager
cdef object _TopicConfig = TopicConfig
cdef tuple _TIMER_PROPERTIES = tuple(TIMER_PROPERTIES)
cdef str _RETRY_PREFIX = RETRY_GROUP_TOPIC_PREFIX
cdef str _SYSTEM_PREFIX = SYSTEM_TOPIC_PREFIX
cdef str _BROKER_PREFIX = BROKER_PROPERTY_PREFIX
cdef str _DELAY = DELAY
cdef str _TRAN_MSG = TRAN_MSG
cdef str _WAIT = WAIT
cdef str _CLUSTER = CLUSTER
cdef str _DELIVER_TIME = DELIVER_TIME
cdef str _REAL_TOPIC = REAL_TOPIC
cdef str _UNIQ_KEY = UNIQ_KEY
cdef str _REGION = DEFAULT_REGION
cdef str _HANDLE_VERSION = RECALL_HANDLE_VERSION
cdef bytes _URLSAFE_TABLE = _URLSAFE
cdef bytes _B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
if bytes(range(256))[43:44].translate(_URLSAFE) != b"-" or bytes([47]).translate(_URLSAFE) != b"_":
    raise ImportError("timer._URLSAFE is not base64url's table")


# ------------------------------------------------------------------ slots


_plain(MessageInner, BASE_OBJECT | OBJECT_NEW, 10)  # handle_send fills every field of both
_plain(RemotingCommand, BASE_OBJECT | OBJECT_NEW, 9)
_plain(PutResult, BASE_OBJECT | OBJECT_NEW)
_plain(SendMessageRequestHeader, OBJECT_NEW)
# MessageInner: every field, set in this order
cdef Py_ssize_t M_TOPIC = _own_slot(MessageInner, "topic")
cdef Py_ssize_t M_QID = _own_slot(MessageInner, "queue_id")
cdef Py_ssize_t M_BODY = _own_slot(MessageInner, "body")
cdef Py_ssize_t M_PROPS = _own_slot(MessageInner, "properties")
cdef Py_ssize_t M_FLAG = _own_slot(MessageInner, "flag")
cdef Py_ssize_t M_SYS_FLAG = _own_slot(MessageInner, "sys_flag")
cdef Py_ssize_t M_BORN_TS = _own_slot(MessageInner, "born_timestamp")
cdef Py_ssize_t M_BORN_HOST = _own_slot(MessageInner, "born_host")
cdef Py_ssize_t M_RECONSUME = _own_slot(MessageInner, "reconsume_times")
cdef Py_ssize_t M_STORE_TS = _own_slot(MessageInner, "store_timestamp")
# RemotingCommand: every field
cdef Py_ssize_t C_CODE = _own_slot(RemotingCommand, "code")
cdef Py_ssize_t C_OPAQUE = _own_slot(RemotingCommand, "opaque")
cdef Py_ssize_t C_FLAG = _own_slot(RemotingCommand, "flag")
cdef Py_ssize_t C_LANGUAGE = _own_slot(RemotingCommand, "language")
cdef Py_ssize_t C_VERSION = _own_slot(RemotingCommand, "version")
cdef Py_ssize_t C_REMARK = _own_slot(RemotingCommand, "remark")
cdef Py_ssize_t C_EXT = _own_slot(RemotingCommand, "ext_fields")
cdef Py_ssize_t C_BODY = _own_slot(RemotingCommand, "body")
cdef Py_ssize_t C_SERIALIZE = _own_slot(RemotingCommand, "serialize_type")
# PutResult: the fields the answer reads
cdef Py_ssize_t R_STATUS = _own_slot(PutResult, "status")
cdef Py_ssize_t R_PHY = _own_slot(PutResult, "phy_offset")
cdef Py_ssize_t R_QOFF = _own_slot(PutResult, "queue_offset")
cdef Py_ssize_t R_MSG_ID = _own_slot(PutResult, "offset_msg_id")
# TopicConfig: the numbers the send checks
_plain(TopicConfig, BASE_OBJECT)
cdef Py_ssize_t T_READ = _own_slot(TopicConfig, "read_queue_nums")
cdef Py_ssize_t T_WRITE = _own_slot(TopicConfig, "write_queue_nums")
cdef Py_ssize_t T_PERM = _own_slot(TopicConfig, "perm")
# SendMessageRequestHeader: the fields the send reads (and sys_flag, written)
cdef Py_ssize_t H_GROUP = _slot(SendMessageRequestHeader, "producer_group")
cdef Py_ssize_t H_TOPIC = _slot(SendMessageRequestHeader, "topic")
cdef Py_ssize_t H_QID = _slot(SendMessageRequestHeader, "queue_id")
cdef Py_ssize_t H_SYS_FLAG = _slot(SendMessageRequestHeader, "sys_flag")
cdef Py_ssize_t H_BORN_TS = _slot(SendMessageRequestHeader, "born_timestamp")
cdef Py_ssize_t H_FLAG = _slot(SendMessageRequestHeader, "flag")
cdef Py_ssize_t H_PROPS = _slot(SendMessageRequestHeader, "properties")
cdef Py_ssize_t H_RECONSUME = _slot(SendMessageRequestHeader, "reconsume_times")
cdef Py_ssize_t H_MAX_RECONSUME = _slot(SendMessageRequestHeader, "max_reconsume_times")
cdef Py_ssize_t H_BATCH = _slot(SendMessageRequestHeader, "batch")
# SendMessageProcessor: the fields a send reads, in place for the class itself (a
# subclass is read through its attributes)
cdef object _Proc = _ref.SendMessageProcessor
cdef Py_ssize_t P_TOPICS = _own_slot(_Proc, "topics")
cdef Py_ssize_t P_CONFIG = _own_slot(_Proc, "config")
cdef Py_ssize_t P_PUT = _own_slot(_Proc, "put")


# ------------------------------------------------------------------ the put, called in C

ctypedef object (*put_fn)(object, object, object, object)
cdef put_fn _put_c = NULL  # put/_path.pyx's ``put`` as a C function, when it is chosen
cdef object _put_twin = None
_put_c = <put_fn>_c_function(_path._twin, "PUT")
if _put_c != NULL:
    _put_twin = _path._twin.put


# ------------------------------------------------------------------ the decoders, called in C

ctypedef object (*unary_fn)(object)
ctypedef object (*binary_fn)(object, object)
cdef binary_fn _from_ext_c = NULL  # protocol/_headers.pyx's ``FromExt`` call, when chosen
cdef object _FromExt = None
_from_ext_c = <binary_fn>_c_function(_headers_mod._twin, "FROM_EXT")
if _from_ext_c != NULL:
    _FromExt = _headers_mod._twin.FromExt
cdef unary_fn _decode_c = NULL  # protocol/_properties.pyx's ``decode_properties``, when chosen
cdef object _decode_twin = None
_decode_c = <unary_fn>_c_function(_properties_mod._twin, "DECODE")
if _decode_c != NULL:
    _decode_twin = _properties_mod._twin.decode_properties


cdef inline object _header(object decode, object ext):
    """``decode(ext)``: in C when ``decode`` is the headers twin's ``FromExt`` and ``ext`` a
    dict, else the Python call (which raises as it always did)."""
    if _from_ext_c != NULL and type(decode) is _FromExt and type(ext) is dict:
        return _from_ext_c(decode, ext)
    return decode(ext)


# ------------------------------------------------------------------ the recall handle


cdef inline bint _canonical_int(str s):
    """Whether ``s`` is what ``str(int(s))`` gives back: ASCII digits, an optional ``-``,
    no leading zero (but ``0``)."""
    cdef Py_ssize_t n = len(s), i = 0
    cdef Py_UCS4 c
    if n == 0 or n > 19:
        return False
    if s[0] == "-":
        i = 1
        if n == 1 or s[1] == "0":
            return False
    elif s[0] == "0":
        return n == 1
    while i < n:
        c = s[i]
        if c < 48 or c > 57:
            return False
        i += 1
    return True


cdef object _recall_text(str target, str broker, str due, str uniq):
    """``timer.encode_recall_handle(target, broker, int(due), uniq)`` for a ``due`` that
    ``_canonical_int`` accepts, base64url written here; None to let the reference's code
    make it (text UTF-8 cannot hold, a handle over 1 KiB)."""
    cdef const char* parts[5]
    cdef Py_ssize_t sizes[5]
    cdef char raw[1024]
    cdef char out[1368]
    cdef const char* b64 = _B64URL
    cdef Py_ssize_t n = 0, i, k = 0
    cdef unsigned int v
    cdef str part
    for i, part in enumerate((_HANDLE_VERSION, target, broker, due, uniq)):
        parts[i] = PyUnicode_AsUTF8AndSize(part, &sizes[i])
        if parts[i] == NULL:
            PyErr_Clear()
            return None
        n += sizes[i] + 1
    n -= 1
    if n > 1024:
        return None
    n = 0
    for i in range(5):
        if i:
            raw[n] = 32  # " "
            n += 1
        memcpy(raw + n, parts[i], sizes[i])
        n += sizes[i]
    i = 0
    while i + 2 < n:
        v = (<unsigned char>raw[i] << 16) | (<unsigned char>raw[i + 1] << 8) | <unsigned char>raw[i + 2]
        out[k] = b64[(v >> 18) & 63]
        out[k + 1] = b64[(v >> 12) & 63]
        out[k + 2] = b64[(v >> 6) & 63]
        out[k + 3] = b64[v & 63]
        k += 4
        i += 3
    if n - i == 1:
        v = <unsigned char>raw[i] << 16
        out[k] = b64[(v >> 18) & 63]
        out[k + 1] = b64[(v >> 12) & 63]
        out[k + 2] = 61  # "="
        out[k + 3] = 61
        k += 4
    elif n - i == 2:
        v = (<unsigned char>raw[i] << 16) | (<unsigned char>raw[i + 1] << 8)
        out[k] = b64[(v >> 18) & 63]
        out[k + 1] = b64[(v >> 12) & 63]
        out[k + 2] = b64[(v >> 6) & 63]
        out[k + 3] = 61
        k += 4
    return PyUnicode_DecodeASCII(out, k, NULL)


cdef bint _plain_topic(str topic):
    """Not ``naming.is_system_topic`` and not a %RETRY% topic."""
    return not (
        topic == SCHEDULE_TOPIC
        or topic == AUTO_CREATE_TOPIC_KEY
        or topic.startswith(_SYSTEM_PREFIX)
        or topic == TIMER_TOPIC
        or topic.startswith(_RETRY_PREFIX)
    )


cdef inline bint _ll(object v, long long* out) noexcept:
    """Whether ``v`` is an ``int`` within 64 bits (its value put in ``out``)."""
    cdef int overflow = 0
    if type(v) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    return not overflow


def handle_send(self, conn, cmd):
    """``SendMessageProcessor.handle_send``."""
    return _handle(self, conn, cmd)


cdef object _handle(object self, object conn, object cmd):
    """``handle_send``'s body (``GuardedSend`` calls it without the Python call)."""
    cdef long long code
    cdef long long raw_flag, kept, parsed, qid, reads, writes, v
    if type(cmd) is not _RemotingCommand:
        return _ref_handle(self, conn, cmd)
    code = _get(cmd, C_CODE)
    if code == _SEND_V2:
        h = _header(_from_v2, _get(cmd, C_EXT))
    elif code == _SEND_V1:
        h = _header(_from_v1, _get(cmd, C_EXT))
    else:  # a batch
        return _ref_handle(self, conn, cmd)
    # ingress.check_send_header, a known user topic
    cdef bint slotted = type(self) is _Proc
    topics = _field(self, P_TOPICS, "topics") if slotted else self.topics
    if type(h) is not _SendHeader or type(topics) is not _TopicConfigManager:
        return _ref_handle(self, conn, cmd)
    topic = _get(h, H_TOPIC)
    if type(topic) is not str or _get(h, H_BATCH):
        return _ref_handle(self, conn, cmd)
    table = topics.topics
    cfg = (<dict>table).get(topic) if type(table) is dict else table.get(topic)
    if cfg is None or not _plain_topic(topic) or _get(h, H_GROUP) not in _groups_ok:
        return _ref_handle(self, conn, cmd)
    if type(cfg) is not _TopicConfig:
        return _ref_handle(self, conn, cmd)
    queue_id = _get(h, H_QID)
    write_queues = _get(cfg, T_WRITE)
    # ingress.check_queue_id, the numbers read in C (checks of anything else: the reference)
    if not (_ll(queue_id, &qid) and _ll(_get(cfg, T_READ), &reads) and _ll(write_queues, &writes)):
        return _ref_handle(self, conn, cmd)
    if qid >= 0 and not qid < (reads if reads > writes else writes):
        return _ref_handle(self, conn, cmd)
    reconsume = _get(h, H_RECONSUME)
    flag = _get(h, H_FLAG)
    max_reconsume = _get(h, H_MAX_RECONSUME)
    if (
        not (_ll(flag, &v) and _INT32_MIN <= v <= _INT32_MAX)
        or (reconsume is not None and not (_ll(reconsume, &v) and 0 <= v <= _INT32_MAX))
        or (
            max_reconsume is not None
            and not (_ll(max_reconsume, &v) and _INT32_MIN <= v <= _INT32_MAX)
        )
    ):
        return _ref_handle(self, conn, cmd)
    raw_flag = _get(h, H_SYS_FLAG)
    if raw_flag & _TX_TYPE != 0 and raw_flag & _TX_TYPE != _COMMIT:  # PREPARED, ROLLBACK
        return _ref_handle(self, conn, cmd)
    kept = raw_flag & _KEPT  # producer_sys_flag
    if raw_flag & _COMPRESSED and raw_flag & _COMPRESSION_TYPE:
        kept |= raw_flag & _COMPRESSION_TYPE
    # _check_body_size
    config = _field(self, P_CONFIG, "config") if slotted else self.config
    body = _get(cmd, C_BODY)
    if len(body) > _of(config, _Config, K_MAX_SIZE, "max_message_size"):
        return _ref_handle(self, conn, cmd)
    # _props: ingress.message_properties
    raw = _get(h, H_PROPS)
    if raw and (_BROKER_PREFIX in raw or "REAL_" in raw):
        return _ref_handle(self, conn, cmd)
    raw = raw or ""
    if _decode_c != NULL and type(raw) is str and decode_properties is _decode_twin:
        props = _decode_c(raw)
    else:
        props = decode_properties(raw)
    if type(props) is not dict:
        return _ref_handle(self, conn, cmd)
    level = (<dict>props).get(_DELAY)
    if level is not None and not _ascii_int(level, &parsed):
        try:
            int(level)
        except Exception:
            return _ref_handle(self, conn, cmd)
    if _TRAN_MSG in <dict>props:  # is_half
        return _ref_handle(self, conn, cmd)
    for key in _TIMER_PROPERTIES:  # timer_due, timer_kind
        if key in <dict>props:
            return _ref_handle(self, conn, cmd)
    # _resolve_topic, the topic known
    if not (_ll(_get(cfg, T_PERM), &v) and v & _PERM_WRITE):
        return _ref_handle(self, conn, cmd)
    if qid < 0:
        if not writes > 0:
            return _ref_handle(self, conn, cmd)
        queue_id = _random.randrange(write_queues)
    # from here on the send is the reference's common case
    (<dict>props).pop(_WAIT, None)
    (<dict>props)[_CLUSTER] = _of(config, _Config, K_CLUSTER, "cluster_name")
    kept_o = kept
    _put(h, H_SYS_FLAG, kept_o)  # h.sys_flag = producer_sys_flag(h.sys_flag)
    msg = _fresh(_MessageInner)  # the dataclass's fields set without running its __init__
    _put(msg, M_TOPIC, topic)
    _put(msg, M_QID, queue_id)
    _put(msg, M_BODY, body)
    _put(msg, M_PROPS, props)
    _put(msg, M_FLAG, flag)
    _put(msg, M_SYS_FLAG, kept_o)
    _put(msg, M_BORN_TS, _get(h, H_BORN_TS))
    _put(msg, M_BORN_HOST, (
        _of(conn, _Connection, N_BORN_IP, "born_ip"),
        _of(conn, _Connection, N_PEER_PORT, "peer_port"),
    ))
    _put(msg, M_RECONSUME, reconsume or 0)
    _put(msg, M_STORE_TS, None)
    kind = _DELAYED if _DELAY in <dict>props else _NORMAL  # _kind, not a %RETRY% topic
    put = _field(self, P_PUT, "put") if slotted else self.put
    if _put_c is not NULL and PyMethod_Check(put) and (
        <object>PyMethod_GET_FUNCTION(put) is _put_twin
    ):  # the put path's twin, called in C
        result = _put_c(<object>PyMethod_GET_SELF(put), msg, kind, 0)
    else:
        result = put(msg, kind, due_ms=0)
    recall = None  # admission.recall_handle
    if kind is _DELAYED:
        due = (<dict>props).get(_DELIVER_TIME)
        target = (<dict>props).get(_REAL_TOPIC)
        uniq = (<dict>props).get(_UNIQ_KEY)
        if due and target and uniq and not (
            (<str>target).startswith(_RETRY_PREFIX)
            if type(target) is str
            else target.startswith(_RETRY_PREFIX)
        ):
            broker_name = _of(config, _Config, K_BROKER, "broker_name")
            if (
                type(due) is str
                and type(target) is str
                and type(broker_name) is str
                and type(uniq) is str
                and _canonical_int(due)
            ):
                recall = _recall_text(target, broker_name, due, uniq)
            if recall is None:
                raw_handle = (
                    f"{_HANDLE_VERSION} {target} {broker_name} {int(due)} {uniq}"
                ).encode()
                recall = (
                    b2a_base64(raw_handle, newline=False)
                    .translate(_URLSAFE_TABLE)
                    .decode("ascii")
                )
    # _respond
    if type(result) is _PutResult:
        status = _get(result, R_STATUS)
    else:
        status = result.status
    if status is not _PUT_OK or _of(config, _Config, K_FLUSH, "flush_mode") is _SYNC_FLUSH:
        return self._respond(conn, cmd, h, [result], queue_id, recall)
    if type(result) is _PutResult:
        msg_id = _get(result, R_MSG_ID) or self.offset_msg_id(_get(result, R_PHY))
        queue_offset = _get(result, R_QOFF)
    else:
        msg_id = result.offset_msg_id or self.offset_msg_id(result.phy_offset)
        queue_offset = result.queue_offset
    ext = _PyDict_NewPresized(6)  # the answer's fields, no resize on the way
    ext["msgId"] = msg_id
    ext["queueId"] = _dec(queue_id)
    ext["queueOffset"] = _dec(queue_offset)
    if recall is not None:
        ext["recallHandle"] = recall
    ext["MSG_REGION"] = _REGION
    ext["TRACE_ON"] = "true"
    response = _fresh(_RemotingCommand)  # cmd.response(SUCCESS, ext_fields=ext)
    _put(response, C_CODE, _SUCCESS)
    _put(response, C_OPAQUE, _get(cmd, C_OPAQUE))
    _put(response, C_FLAG, _FLAG_RESPONSE)
    _put(response, C_LANGUAGE, _JAVA)
    _put(response, C_VERSION, _VERSION)
    _put(response, C_REMARK, None)
    _put(response, C_EXT, ext)
    _put(response, C_BODY, b"")
    _put(response, C_SERIALIZE, _get(cmd, C_SERIALIZE))
    return response


cdef class GuardedSend:
    """The send handlers' entry as the handler table wraps them (``handlers/__init__.py``'s
    ``_guarded``: ``ingress.guarded`` over ``after_topic_write``) in one C call: a refusal
    raised as ``HeaderError`` answered by ``ingress.refuse``; an answer that changed the
    topic table, or an awaitable one, goes through ``handlers._when_written``."""

    cdef object handler, topics, stats, log
    cdef object proc  # the SendMessageProcessor when ``handler`` is its twin handle_send
    cdef bint plain  # a TopicConfigManager: its change counter read in place of ``version``

    def __init__(self, handler, topics, stats, log):
        self.handler = handler
        self.proc = None
        if PyMethod_Check(handler) and <object>PyMethod_GET_FUNCTION(handler) is handle_send:
            self.proc = <object>PyMethod_GET_SELF(handler)  # called in C, not through Python
        self.topics = topics
        self.plain = type(topics) is _TopicConfigManager
        self.stats = stats
        self.log = log

    def __call__(self, conn, cmd):
        table_file = self.topics.file if self.plain else None
        try:
            before = table_file._changes if table_file is not None else self.topics.version
            if self.proc is not None:
                answer = _handle(self.proc, conn, cmd)
            else:
                answer = self.handler(conn, cmd)
        except HeaderError as err:  # ingress.guarded
            return _refuse(self.stats, self.log, conn, cmd, err.response_code, str(err))
        now = table_file._changes if table_file is not None else self.topics.version
        if now == before and (
            type(answer) is _RemotingCommand or answer is None or not isawaitable(answer)
        ):
            return answer
        from . import _when_written  # after_topic_write's other case

        return _when_written(self.topics, cmd, answer, before)
