# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``pull.py``'s PULL_MESSAGE (chosen by ``protocol/native.py``;
``pull.py`` is the reference and owns every rule of a pull).

``handle_pull``, ``answer`` and ``hold`` (``PullMessageProcessor.handle_pull``,
``_answer`` and ``_hold``, whose ``answer`` closure is ``HeldAnswer``) make the common
pull in one C function each, mirroring the reference step for step: the header decoded
by its compiled codec (no ``from_ext_fields`` frames), ``check_pull``'s and the group's
checks (their passing case read in place, any other case asked of them), the
request-carried TAG expression looked up in the parsed table, the offset commit of the
sysFlag, the read (``reads.get`` called directly, its tagsCode set tested in C), the
hold decision, and the answer: the response header's four fields written as
``to_ext_fields`` writes them, the stats, one ``message.pulled`` event per record given
to the log's hot-path writer, and the response command filled without its
``__init__``. A held pull's wake (``HeldAnswer``) releases its admission, reads and
answers the same way.

Anything else goes to the reference, which decides: a filter not in the table
(``_filter``: parsed there, and a SQL92 selector is read by ``_get``), an answer that is
not FOUND or with ``slave_read_enable`` (``_answer``).
"""

from kairosmq.protocol.codes import (
    BROKER_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    PERM_READ,
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    LanguageCode,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import PullMessageRequestHeader
from kairosmq.protocol.message import summarize_records
from kairosmq.protocol.sql92 import Selector

from ..observe import logs as _logs
from ..remoting import ingress as _ingress
from ..remoting.ingress import check_pull as _check_pull
from ..remoting.longpoll import PullHolds
from ..tables.clients import ClientRegistry
from ..tables.subscriptions import SubscriptionGroupManager
from ..tables.topics import TopicConfig, TopicConfigManager
from ..store import GetStatus
from . import pull as _ref

cdef object _pure = _ref.reference
cdef object _FOUND = GetStatus.FOUND
cdef object _OVERFLOW_ONE = GetStatus.OFFSET_OVERFLOW_ONE
cdef object _NO_MESSAGE = GetStatus.NO_MESSAGE_IN_QUEUE
cdef object _TOPIC_NOT_EXIST = ResponseCode.TOPIC_NOT_EXIST
cdef object _NO_PERMISSION = ResponseCode.NO_PERMISSION
cdef int _SUCCESS = int(ResponseCode.SUCCESS)
cdef object _JAVA = LanguageCode.JAVA
cdef object _MessageLog = _logs.MessageLog
cdef str _MASTER = str(_ref.MASTER_ID)
cdef object _MISS = object()
cdef object _new = object.__new__
cdef Py_ssize_t _TAG_CHARS = _ref._TAG_FILTER_CHARS
cdef object _from_ext = None  # PullMessageRequestHeader's compiled decoder (first pull)


cdef object _checked(topics, h):
    """``ingress.check_pull``: a group name already validated, a topic of the table, a
    queue id within its queues and an offset >= 0 read in place; any other request goes
    to ``check_pull``, which refuses it or answers alike."""
    group = h.consumer_group
    if type(group) is not str or group not in _ingress._groups.ok:
        return _check_pull(topics, h)
    cfg = topics.topics.get(h.topic) if type(topics) is TopicConfigManager else None
    if type(cfg) is not TopicConfig:
        return _check_pull(topics, h)
    queue_id = h.queue_id
    if (
        queue_id < 0
        or queue_id >= max(cfg.read_queue_nums, cfg.write_queue_nums)  # queue_nums
        or h.queue_offset < 0
    ):
        return _check_pull(topics, h)
    return cfg


cdef bint _acquired(holds, conn) except -1:
    """``PullHolds.acquire``, read in place (another admission class is asked)."""
    if type(holds) is not PullHolds:
        return holds.acquire(conn)
    n = getattr(conn, "held_pulls", 0)
    if n >= holds.per_connection or holds.held >= holds.limit:
        holds.refused += 1
        return False
    conn.held_pulls = n + 1
    holds.held += 1
    return True


cdef inline bint _is_tag_type(object t):
    """``property_filter.is_tag_type``."""
    return not t or t.upper() == "TAG"


def handle_pull(self, conn, cmd):
    """``PullMessageProcessor.handle_pull``."""
    global _from_ext
    cdef long long sys_flag
    if _from_ext is None:
        _from_ext = PullMessageRequestHeader._codec(False)[0]
    h = _from_ext(cmd.ext_fields)
    cfg = _checked(self.topics, h)
    subs = self.subscriptions
    if subs is not None:  # the group's config first, as RocketMQ does
        group = h.consumer_group
        clients = self.clients
        info = (
            clients.consumers.get(group)  # ClientRegistry.group_info
            if type(clients) is ClientRegistry
            else clients.group_info(group)
        )
        model = info.message_model if info is not None else None
        # SubscriptionGroupManager.pull_refusal's "no refusal" read in place: an existing
        # group, consumeEnable, not a broadcast consumer of a group without
        # consumeBroadcastEnable; any other case asks it (it auto-creates the group)
        gcfg = subs.table.get(group) if type(subs) is SubscriptionGroupManager else None
        if (
            gcfg is None
            or not gcfg.consume_enable
            or (model == "BROADCASTING" and not gcfg.consume_broadcast_enable)
        ):
            refused = subs.pull_refusal(group, model)
            if refused is not None:
                return cmd.error(*refused)
    topic = h.topic
    if cfg is None:
        return cmd.error(_TOPIC_NOT_EXIST, f"topic {topic} does not exist")
    if not cfg.perm & PERM_READ:
        return cmd.error(_NO_PERMISSION, f"topic {topic} is not readable")
    sys_flag = h.sys_flag
    codes = _MISS
    if sys_flag & PULL_SUBSCRIPTION:  # ``_filter``'s table, read in place
        expr = h.subscription
        if expr and len(expr) <= _TAG_CHARS and _is_tag_type(h.expression_type):
            codes = self._tag_filters.get(expr, _MISS)
    if codes is _MISS:
        codes = self._filter(h)
    if sys_flag & PULL_COMMIT_OFFSET and h.commit_offset >= 0:
        self.offsets.commit(h.consumer_group, topic, h.queue_id, h.commit_offset)
    result = _read(self, h, codes)
    status = result.status
    if (
        (status is _OVERFLOW_ONE or (status is _NO_MESSAGE and h.queue_offset == 0))
        and sys_flag & PULL_SUSPEND
        and self.config.long_polling
        and self.running()
    ):
        if _acquired(self.holds, conn):
            self._hold(conn, cmd, h, codes)
            return None
    return answer(self, cmd, h, result)


cdef object _read(self, h, codes):
    """``PullMessageProcessor._get``: the tag or no filter read directly."""
    cdef Py_ssize_t max_count
    if isinstance(codes, Selector):
        return self._get(h, codes)
    max_count = h.max_msg_nums
    if max_count > 512:
        max_count = 512
    if max_count < 1:
        max_count = 1
    return self.reads.get(
        h.topic,
        h.queue_id,
        h.queue_offset,
        max_count,
        max_bytes=self.config.pull_max_bytes,
        match=codes,
    )


cdef class HeldAnswer:
    """``_hold``'s ``answer(notified)``: the held pull's release, read and answer."""

    cdef object proc, conn, cmd, h, codes

    def __init__(self, proc, conn, cmd, h, codes):
        self.proc, self.conn, self.cmd, self.h, self.codes = proc, conn, cmd, h, codes

    def __call__(self, notified):
        proc, conn, cmd = self.proc, self.conn, self.cmd
        holds = proc.holds
        if type(holds) is PullHolds:  # PullHolds.release
            conn.held_pulls -= 1
            holds.held -= 1
        else:
            holds.release(conn)
        try:
            response = proc._answer(cmd, self.h, _read(proc, self.h, self.codes))
        except Exception as err:  # every failure becomes an answer
            response = conn.server.failure_answer(conn, cmd, err)
        if not cmd.flag & FLAG_ONEWAY:
            conn.send(response)


def hold(self, conn, cmd, h, codes):
    """``PullMessageProcessor._hold``."""
    timeout_ms = h.suspend_timeout_millis  # max(0, min(.., max_pull_hold_ms)), any int
    cap = self.config.max_pull_hold_ms
    if timeout_ms > cap:
        timeout_ms = cap
    if timeout_ms < 0:
        timeout_ms = 0
    # parsed into ``h``: what is held keeps no raw header (memory per held pull)
    held = _new(RemotingCommand)  # RemotingCommand(..) without its __init__ frame
    held.code = cmd.code
    held.opaque = cmd.opaque
    held.flag = cmd.flag
    held.language = cmd.language
    held.version = cmd.version
    held.remark = cmd.remark
    held.ext_fields = {}
    held.body = b""
    held.serialize_type = cmd.serialize_type
    cmd = held
    self.log.debug(
        "pull.held",
        group=h.consumer_group,
        topic=h.topic,
        queue_id=h.queue_id,
        queue_offset=h.queue_offset,
        timeout_ms=timeout_ms,
    )
    self.notifier.hold(h.topic, h.queue_id, HeldAnswer(self, conn, cmd, h, codes), timeout_ms / 1000)


def answer(self, cmd, h, result):
    """``PullMessageProcessor._answer``."""
    cdef Py_ssize_t n
    config = self.config
    if result.status is not _FOUND or config.slave_read_enable:
        return _pure._answer(self, cmd, h, result)
    ext = {  # PullMessageResponseHeader.to_ext_fields: suggestWhichBrokerId 0 (the master)
        "suggestWhichBrokerId": _MASTER,
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
    }
    chunks = result.chunks
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    n = len(result.units)
    topic = h.topic
    group = h.consumer_group
    stats = self.stats
    stats.pulled[topic] += n
    stats.group_pulled[(topic, group)] += n
    msglog = self.msglog
    fast = type(msglog) is _MessageLog
    # MessageLog.enabled and MessageLog.info's emitter, read in place
    if config.log_messages and (_logs._info_enabled if fast else msglog.enabled):
        emit = _logs._fast_emit if fast else None
        queue_id = h.queue_id
        for s in summarize_records(body):
            if emit is None:
                msglog.info(
                    "message.pulled",
                    msg_id=s.msg_id,
                    group=group,
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=s.queue_offset,
                    born_ts=s.born_timestamp,
                    reconsume_times=s.reconsume_times,
                )
            else:  # MessageLog.info's fast case
                emit(
                    "message.pulled",
                    {
                        "msg_id": s.msg_id,
                        "group": group,
                        "topic": topic,
                        "queue_id": queue_id,
                        "queue_offset": s.queue_offset,
                        "born_ts": s.born_timestamp,
                        "reconsume_times": s.reconsume_times,
                    },
                )
    # cmd.response(SUCCESS, ext_fields=ext, body=body), without its frames
    out = _new(RemotingCommand)
    out.code = _SUCCESS
    out.opaque = cmd.opaque
    out.flag = FLAG_RESPONSE
    out.language = _JAVA
    out.version = BROKER_VERSION
    out.remark = None
    out.ext_fields = ext
    out.body = body
    out.serialize_type = cmd.serialize_type
    return out
