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

Anything else is handed to the reference before anything is changed, which decides and
says why: a batch (code 320 or ``batch=true``), a topic not in the table (auto-creation,
a bad name), a system or %RETRY% topic, a producer group not validated yet, a queue id,
flag, reconsumeTimes or maxReconsumeTimes out of range, a transaction sysFlag
(PREPARED, ROLLBACK), a body over ``max_message_size``, properties naming broker-internal
keys (``KAIROS_``, ``REAL_``), a DELAY that is not an integer, ``TRAN_MSG``, timer
properties, a topic not writable or without write queues. After the put, a refused put and
SYNC_FLUSH are answered by the reference's ``_respond``.
"""

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

from ..config import FlushMode
from ..put.kind import MessageKind
from ..remoting import ingress as _ingress
from ..remoting.ingress import refuse as _refuse
from ..store import MessageInner, PutStatus
from ..tables.topics import TopicConfigManager
from . import send as _ref

cdef object _ref_handle = _ref.reference.handle_send
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
cdef object _MessageInner = MessageInner
cdef object _TopicConfigManager = TopicConfigManager
cdef object _new = object.__new__
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


cdef bint _plain_topic(str topic):
    """Not ``naming.is_system_topic`` and not a %RETRY% topic."""
    return not (
        topic == SCHEDULE_TOPIC
        or topic == AUTO_CREATE_TOPIC_KEY
        or topic.startswith(_SYSTEM_PREFIX)
        or topic == TIMER_TOPIC
        or topic.startswith(_RETRY_PREFIX)
    )


cdef bint _int32(object v):
    return _INT32_MIN <= v <= _INT32_MAX


def handle_send(self, conn, cmd):
    """``SendMessageProcessor.handle_send``."""
    cdef long long code = cmd.code
    cdef long long raw_flag, kept
    if code == _SEND_V2:
        h = _from_v2(cmd.ext_fields)
    elif code == _SEND_V1:
        h = _from_v1(cmd.ext_fields)
    else:  # a batch
        return _ref_handle(self, conn, cmd)
    # ingress.check_send_header, a known user topic
    topic = h.topic
    topics = self.topics
    if type(topics) is not _TopicConfigManager or type(topic) is not str or h.batch:
        return _ref_handle(self, conn, cmd)
    cfg = topics.topics.get(topic)
    if cfg is None or not _plain_topic(topic) or h.producer_group not in _groups_ok:
        return _ref_handle(self, conn, cmd)
    queue_id = h.queue_id
    if queue_id >= 0 and not queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
        return _ref_handle(self, conn, cmd)
    reconsume = h.reconsume_times
    if (
        not _int32(h.flag)
        or (reconsume is not None and not 0 <= reconsume <= _INT32_MAX)
        or (h.max_reconsume_times is not None and not _int32(h.max_reconsume_times))
    ):
        return _ref_handle(self, conn, cmd)
    raw_flag = h.sys_flag
    if raw_flag & _TX_TYPE != 0 and raw_flag & _TX_TYPE != _COMMIT:  # PREPARED, ROLLBACK
        return _ref_handle(self, conn, cmd)
    kept = raw_flag & _KEPT  # producer_sys_flag
    if raw_flag & _COMPRESSED and raw_flag & _COMPRESSION_TYPE:
        kept |= raw_flag & _COMPRESSION_TYPE
    # _check_body_size
    config = self.config
    body = cmd.body
    if len(body) > config.max_message_size:
        return _ref_handle(self, conn, cmd)
    # _props: ingress.message_properties
    raw = h.properties
    if raw and (_BROKER_PREFIX in raw or "REAL_" in raw):
        return _ref_handle(self, conn, cmd)
    props = decode_properties(raw or "")
    if type(props) is not dict:
        return _ref_handle(self, conn, cmd)
    level = (<dict>props).get(_DELAY)
    if level is not None:
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
    if not cfg.perm & _PERM_WRITE:
        return _ref_handle(self, conn, cmd)
    if queue_id < 0:
        write_queues = cfg.write_queue_nums
        if not write_queues > 0:
            return _ref_handle(self, conn, cmd)
        queue_id = _random.randrange(write_queues)
    # from here on the send is the reference's common case
    (<dict>props).pop(_WAIT, None)
    (<dict>props)[_CLUSTER] = config.cluster_name
    h.sys_flag = kept
    msg = _new(_MessageInner)  # the dataclass's fields set without running its __init__
    msg.topic = topic
    msg.queue_id = queue_id
    msg.body = body
    msg.properties = props
    msg.flag = h.flag
    msg.sys_flag = kept
    msg.born_timestamp = h.born_timestamp
    msg.born_host = (conn.born_ip, conn.peer_port)
    msg.reconsume_times = reconsume or 0
    msg.store_timestamp = None
    kind = _DELAYED if _DELAY in <dict>props else _NORMAL  # _kind, not a %RETRY% topic
    result = self.put(msg, kind, due_ms=0)
    recall = None  # admission.recall_handle
    if kind is _DELAYED:
        due = (<dict>props).get(_DELIVER_TIME)
        target = (<dict>props).get(_REAL_TOPIC)
        uniq = (<dict>props).get(_UNIQ_KEY)
        if due and target and uniq and not target.startswith(_RETRY_PREFIX):
            raw_handle = (
                f"{_HANDLE_VERSION} {target} {config.broker_name} {int(due)} {uniq}"
            ).encode()
            recall = (
                b2a_base64(raw_handle, newline=False).translate(_URLSAFE_TABLE).decode("ascii")
            )
    # _respond
    if result.status is not _PUT_OK or config.flush_mode is _SYNC_FLUSH:
        return self._respond(conn, cmd, h, [result], queue_id, recall)
    ext = {
        "msgId": result.offset_msg_id or self.offset_msg_id(result.phy_offset),
        "queueId": str(queue_id),
        "queueOffset": str(result.queue_offset),
    }
    if recall is not None:
        ext["recallHandle"] = recall
    ext["MSG_REGION"] = _REGION
    ext["TRACE_ON"] = "true"
    response = _new(_RemotingCommand)  # cmd.response(SUCCESS, ext_fields=ext)
    response.code = _SUCCESS
    response.opaque = cmd.opaque
    response.flag = _FLAG_RESPONSE
    response.language = _JAVA
    response.version = _VERSION
    response.remark = None
    response.ext_fields = ext
    response.body = b""
    response.serialize_type = cmd.serialize_type
    return response


cdef class GuardedSend:
    """The send handlers' entry as the handler table wraps them (``handlers/__init__.py``'s
    ``_guarded``: ``ingress.guarded`` over ``after_topic_write``) in one C call: a refusal
    raised as ``HeaderError`` answered by ``ingress.refuse``; an answer that changed the
    topic table, or an awaitable one, goes through ``handlers._when_written``."""

    cdef object handler, topics, stats, log
    cdef bint plain  # a TopicConfigManager: its change counter read in place of ``version``

    def __init__(self, handler, topics, stats, log):
        self.handler = handler
        self.topics = topics
        self.plain = type(topics) is _TopicConfigManager
        self.stats = stats
        self.log = log

    def __call__(self, conn, cmd):
        table_file = self.topics.file if self.plain else None
        try:
            before = table_file._changes if table_file is not None else self.topics.version
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
