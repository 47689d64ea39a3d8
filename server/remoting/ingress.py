"""Ingress: the checks every client request passes before the broker acts on it.

Owns: ``Rejected`` (a refusal: RocketMQ code + remark naming the field and the bad value)
and the per-request checks the handlers call right after decoding their header or body:
names, integers, queue ids, sizes, the send ``sysFlag`` and message properties. Also
``guarded``: the wrapper (applied to every handler in ``handlers/__init__.py``) that
answers a refusal, counts it (``stats.rejected``) and logs ``request.rejected``; the
transport's native twin makes its ``run`` in C (it reads the closure: ``run``'s code and
its cells ``handler``, ``log``, ``stats``, checked when the twin is imported).

Invariants:
* Nothing is appended, created or committed for a request that fails a check. Internal
  put paths (scheduler re-put, send-back, DLQ resend) call ``put/path.py``'s ``PutPath``
  directly and do not pass through here: their broker-written properties are kept.
* Names: every topic and group a request carries is checked with ``protocol.naming``
  (1..127 / 1..255 characters of ``[%|a-zA-Z0-9_-]``, fullmatch), so no name reaching
  the file system (consume-queue directories are named after topics; ``%RETRY%`` and
  ``%DLQ%`` topics after groups) contains ``/``, ``.`` or NUL. Bad names answer
  SYSTEM_ERROR, as RocketMQ's ``msgCheck`` does for topics. Topics already in the topic
  table are valid by construction (``tables/topics.py``), so the send and pull paths skip the
  regex for them; validated groups are remembered in a bounded set.
* Integers: every numeric header field is within int64 (``protocol/headers.py`` refuses
  the rest while decoding, as Java's ``Long.parseLong`` would); fields stored in 32-bit
  record slots (``flag``, ``reconsumeTimes``) are within int32; offsets a client asks
  for or commits (``queueOffset``, ``commitOffset``, commit-log ``offset``) are >= 0; a
  ``queueId`` is within the topic's queue count (for an unknown topic: within
  0..MAX_QUEUE_NUMS-1, the largest count a topic can have). A ``commitOffset`` below 0 (pull or
  UPDATE_CONSUMER_OFFSET) means "none" - Java clients send -1 without the commit flag,
  ali-ons sends UPDATE_CONSUMER_OFFSET with -1 - and is ignored (never stored), not
  refused, as RocketMQ does.
  ``maxMsgNums`` and ``suspendTimeoutMillis`` are clamped (in ``handlers/pull.py``), as
  RocketMQ clamps them, rather than refused.
* ``sysFlag`` of a send, bit by bit (``producer_sys_flag``):
  - 0x1 COMPRESSED, 0x2 MULTI_TAGS: kept (the producer's to set);
  - 0x700 compression type (RocketMQ 5 clients: LZ4/ZSTD/ZLIB): kept with 0x1, else
    dropped, so a 5.x consumer can still inflate the body;
  - transaction type 0x4 PREPARED: cleared (a half message is told by ``TRAN_MSG=true``,
    as RocketMQ's SendMessageProcessor does; the send path refuses PREPARED without it),
    0xC ROLLBACK: refused with NO_PERMISSION; 0x8 COMMIT: kept (a committed message is an
    ordinary one);
  - 0x10 BORNHOST_V6, 0x20 STOREHOST_V6 and every other bit: masked (silently cleared).
    Host-format bits describe the record layout; the store sets them from the real
    addresses. Masking, not refusing, because Java clients on IPv6 hosts set 0x10.
* Properties of a client send (``message_properties``): ``KAIROS_*`` (the scheduler's
  ``KAIROS_SCHEDULE_ORIGIN``/``KAIROS_DELIVER_MS``), ``REAL_TOPIC`` and ``REAL_QID`` are
  broker-internal and stripped; ``DELAY`` must be an integer (a level <= 0 is no
  delay, as RocketMQ's ``getDelayTimeLevel() > 0``);
  ``TRAN_MSG=true`` makes a single send a half message (``server/transaction/``); a
  batch carrying it is refused (MESSAGE_ILLEGAL). Timer properties are checked on the
  send path (``server/schedule/timer/admission.py``: a bad value is MESSAGE_ILLEGAL).
* Work per request is bounded by its bytes (the frame), as RocketMQ bounds it: a batch
  (4 MiB body) and a heartbeat have no count limit (the send and client handlers spread a
  big one over loop turns); ``max_groups_per_heartbeat`` (producer and consumer groups,
  each) and ``max_subscriptions_per_heartbeat`` are optional (off by default).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers; header classes

from kairosmq.protocol.bodies import HeartbeatData, LockBatchRequest, MessageQueueData
from kairosmq.protocol.codes import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError, shown
from kairosmq.protocol.naming import (
    TRACE_TOPIC,
    is_system_topic,
    validate_group,
    validate_queue_topic,
    validate_topic,
)
from kairosmq.protocol.properties import (
    BROKER_INTERNAL_PROPERTIES,
    BROKER_PROPERTY_PREFIX,
    DELAY,
    decode_properties,
)

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.stats import BrokerStats
    from ..tables.topics import TopicConfig, TopicConfigManager
    from .transport import Connection, Handler

SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
# the most queues UPDATE_AND_CREATE_TOPIC gives a topic. RocketMQ 4.9.8 checks nothing
# (any int); queues cost nothing until used (consume queues are made on first use), but a
# topic's statistics answer one entry per queue, so a count stays bounded
MAX_QUEUE_NUMS = 65535
PERM_ALL = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
SYSFLAG_COMPRESSION_TYPE = 0x700  # RocketMQ 5 MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
_TRANSACTION_TYPE = SYSFLAG_TRANSACTION_PREPARED | SYSFLAG_TRANSACTION_COMMIT
_KEPT_SYS_FLAGS = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TRANSACTION_COMMIT


class Rejected(HeaderError):
    """A request refused by a check: ``code`` and a remark naming the field and value.

    A ``HeaderError`` so that the transport answers it correctly even from an unwrapped
    handler; ``guarded`` adds the count and the ``request.rejected`` event.
    """

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark, code)
        self.code = code
        self.remark = remark


def guarded(handler: Handler, stats: BrokerStats, log: Any) -> Handler:
    """Wrap a handler: a refusal (or a header it cannot decode) becomes the error answer,
    counted in ``stats.rejected`` and logged as ``request.rejected``."""

    @functools.wraps(handler)
    def run(conn: Connection, cmd: RemotingCommand) -> Any:
        try:
            return handler(conn, cmd)
        except HeaderError as err:
            return refuse(stats, log, conn, cmd, err.response_code, str(err))

    return run


def refuse(
    stats: BrokerStats, log: Any, conn: Connection, cmd: RemotingCommand, code: int, remark: str
) -> RemotingCommand:
    stats.rejected += 1
    log.warning(
        "request.rejected", peer=conn.peer, request_code=cmd.code, code=int(code), remark=remark
    )
    return cmd.error(code, remark)


# ------------------------------------------------------------------ names


class _NameCache:
    """Names already validated (bounded: once full, further names are checked each time)."""

    def __init__(self, validate: Callable[[object], str | None], limit: int) -> None:
        self._validate = validate
        self.ok: set[str] = set()
        self._limit = limit

    def check(self, name: str, field: str) -> None:
        if name in self.ok:
            return
        bad = self._validate(name)
        if bad is not None:
            raise Rejected(SYSTEM_ERROR, f"{field}: {bad}")
        if len(self.ok) < self._limit:
            self.ok.add(name)


_groups = _NameCache(validate_group, 65536)


def check_topic(topic: str, field: str = "topic") -> None:
    """Refuse a topic name that breaks the naming rules (SYSTEM_ERROR)."""
    bad = validate_topic(topic)
    if bad is not None:
        raise Rejected(SYSTEM_ERROR, f"{field}: {bad}")


def check_known_topic(
    topics: TopicConfigManager, topic: str, field: str = "topic"
) -> TopicConfig | None:
    """The topic's config if it exists (valid by construction), else check the name as a
    queue topic (``naming.validate_queue_topic``: a retry/DLQ topic of a valid group may
    be longer than 127 characters)."""
    cfg = topics.get(topic)
    if cfg is None:
        bad = validate_queue_topic(topic)
        if bad is not None:
            raise Rejected(SYSTEM_ERROR, f"{field}: {bad}")
    return cfg


def check_group(group: str, field: str = "group") -> None:
    """Refuse a group name that breaks the naming rules (SYSTEM_ERROR)."""
    _groups.check(group, field)


def check_optional_group(group: str | None, field: str) -> None:
    if group:
        _groups.check(group, field)


# ------------------------------------------------------------------ integers


def check_int32(value: int, field: str) -> None:
    if not INT32_MIN <= value <= INT32_MAX:
        raise Rejected(SYSTEM_ERROR, f"{field} {shown(value)} is outside the int32 range")


def check_offset(value: int, field: str) -> None:
    if value < 0:
        raise Rejected(SYSTEM_ERROR, f"{field} {value} is negative; offsets start at 0")


def check_queue_id(
    cfg: TopicConfig | None, topic: str, queue_id: int, field: str = "queueId"
) -> None:
    """``queue_id`` within the topic's queues (an unknown topic: 0..MAX_QUEUE_NUMS-1)."""
    limit = cfg.queue_nums if cfg is not None else MAX_QUEUE_NUMS
    if not 0 <= queue_id < limit:
        raise Rejected(
            SYSTEM_ERROR,
            f"{field} {shown(queue_id)} is out of range: topic {topic} has {limit} queues"
            if cfg is not None
            else f"{field} {shown(queue_id)} is out of range 0..{MAX_QUEUE_NUMS - 1}",
        )


def check_queue(topics: TopicConfigManager, topic: str, queue_id: int) -> TopicConfig | None:
    """Name and queue id of a (topic, queueId) request; the topic's config if it exists."""
    cfg = check_known_topic(topics, topic)
    check_queue_id(cfg, topic, queue_id)
    return cfg


# ------------------------------------------------------------------ sends


def producer_sys_flag(flag: int) -> int:
    """The send's sysFlag with only the bits a producer may set (see the module doc)."""
    tx = flag & _TRANSACTION_TYPE
    if tx == SYSFLAG_TRANSACTION_ROLLBACK:
        raise Rejected(
            ResponseCode.NO_PERMISSION,
            f"sysFlag {flag:#x} marks a rolled-back transaction message; a "
            f"rollback is an END_TRANSACTION, not a send",
        )
    kept = flag & _KEPT_SYS_FLAGS
    if flag & SYSFLAG_COMPRESSED and flag & SYSFLAG_COMPRESSION_TYPE:
        kept |= flag & SYSFLAG_COMPRESSION_TYPE
    return kept


def check_send_header(topics: TopicConfigManager, h: Any) -> TopicConfig | None:
    """Names and integers of a SEND_MESSAGE(_V2)/SEND_BATCH_MESSAGE header; the topic's
    config if it exists. System topics are refused with NO_PERMISSION, except the trace
    topic while it exists (RocketMQ's ``traceTopicEnable``)."""
    cfg = topics.get(h.topic)
    if cfg is None or is_system_topic(h.topic):  # known user topics were validated
        check_topic(h.topic)
        # the trace topic is in the table only with trace_topic_enable (server/handlers/reply.py)
        if is_system_topic(h.topic) and not (cfg is not None and h.topic == TRACE_TOPIC):
            raise Rejected(
                ResponseCode.NO_PERMISSION,
                f"the topic {h.topic} is a system topic; clients cannot send to it",
            )
    if h.producer_group not in _groups.ok:
        _groups.check(h.producer_group, "producerGroup")
    if h.queue_id >= 0:
        check_queue_id(cfg, h.topic, h.queue_id)
    if not INT32_MIN <= h.flag <= INT32_MAX:
        check_int32(h.flag, "flag")
    if h.reconsume_times is not None:
        check_int32(h.reconsume_times, "reconsumeTimes")
        if h.reconsume_times < 0:
            raise Rejected(SYSTEM_ERROR, f"reconsumeTimes {h.reconsume_times} is negative")
    if h.max_reconsume_times is not None:
        check_int32(h.max_reconsume_times, "maxReconsumeTimes")
    h.sys_flag = producer_sys_flag(h.sys_flag)
    return cfg


def message_properties(raw: str | None) -> dict[str, str]:
    """Decode a client's properties, strip broker-internal ones, refuse what must not be
    stored (a malformed DELAY)."""
    props = decode_properties(raw or "")
    if raw and (BROKER_PROPERTY_PREFIX in raw or "REAL_" in raw):
        for key in [k for k in props if k.startswith(BROKER_PROPERTY_PREFIX)]:
            del props[key]
        for key in BROKER_INTERNAL_PROPERTIES:
            props.pop(key, None)
    level = props.get(DELAY)
    if level is not None:
        try:
            int(level)  # <= 0: no delay, as RocketMQ (the put path drops it)
        except ValueError:
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL, f"DELAY must be an integer level, got {shown(level)}"
            ) from None
    return props


def delay_level(props: dict[str, str]) -> int:
    """The DELAY level of checked properties (``message_properties``); 0 without one."""
    level = props.get(DELAY)
    return int(level) if level is not None else 0


def check_batch_items(items: int) -> None:
    """A batch has at least one message. No upper count: RocketMQ has none, a batch is
    bounded by its bytes (``max_message_size``, 4 MiB), and the send path stores a big one
    over several loop turns (``handlers/send.py`` BATCH_SLICE)."""
    if items == 0:
        raise Rejected(ResponseCode.MESSAGE_ILLEGAL, "the batch has no messages")


# ------------------------------------------------------------------ consumers


def check_send_back(h: Any) -> None:
    """CONSUMER_SEND_MSG_BACK: group (it names %RETRY%/%DLQ% topics), originTopic, offset."""
    _groups.check(h.group, "group")
    if h.origin_topic:
        check_topic(h.origin_topic, "originTopic")
    check_offset(h.offset, "offset")
    check_int32(h.delay_level, "delayLevel")
    if h.max_reconsume_times is not None:
        check_int32(h.max_reconsume_times, "maxReconsumeTimes")


def check_heartbeat(topics: TopicConfigManager, cfg: BrokerConfig, data: HeartbeatData) -> None:
    """Names of a heartbeat, and its counts when the (optional) count limits are set."""
    if cfg.max_groups_per_heartbeat is not None or cfg.max_subscriptions_per_heartbeat:
        _check_heartbeat_counts(cfg, data)
    for group in data.producer_groups:
        _groups.check(group, "producerDataSet.groupName")
    for consumer in data.consumers:
        _groups.check(consumer.group_name, "consumerDataSet.groupName")
        for sub in consumer.subscriptions:
            check_known_topic(topics, sub.topic, "subscriptionDataSet.topic")


def _check_heartbeat_counts(cfg: BrokerConfig, data: HeartbeatData) -> None:
    groups = cfg.max_groups_per_heartbeat
    if groups is not None and len(data.producer_groups) > groups:
        raise Rejected(
            SYSTEM_ERROR,
            f"the heartbeat names {len(data.producer_groups)} "
            f"producer groups, the limit is {cfg.max_groups_per_heartbeat} "
            f"(max_groups_per_heartbeat)",
        )
    if groups is not None and len(data.consumers) > groups:
        raise Rejected(
            SYSTEM_ERROR,
            f"the heartbeat names {len(data.consumers)} consumer "
            f"groups, the limit is {cfg.max_groups_per_heartbeat} "
            f"(max_groups_per_heartbeat)",
        )
    subs = sum(len(c.subscriptions) for c in data.consumers)
    limit = cfg.max_subscriptions_per_heartbeat
    if limit is not None and subs > limit:
        raise Rejected(
            SYSTEM_ERROR,
            f"the heartbeat carries {subs} subscriptions, the limit "
            f"is {limit} (max_subscriptions_per_heartbeat)",
        )


def check_lock_batch(topics: TopicConfigManager, req: LockBatchRequest) -> list[MessageQueueData]:
    """Names of a LOCK/UNLOCK_BATCH_MQ body; the queues that exist (others are not locked).
    No count limit, as RocketMQ: the body's bytes (the frame) bound it."""
    _groups.check(req.consumer_group, "consumerGroup")
    wanted = []
    for mq in req.mq_set:
        cfg = check_known_topic(topics, mq.topic, "mqSet.topic")
        if cfg is not None and 0 <= mq.queue_id < cfg.queue_nums:
            wanted.append(mq)
    return wanted


def check_pull(topics: TopicConfigManager, h: Any) -> TopicConfig | None:
    """PULL_MESSAGE: group, topic, queue id, queueOffset >= 0; the topic's config or None
    (the caller answers TOPIC_NOT_EXIST for a valid name that is not a topic)."""
    _groups.check(h.consumer_group, "consumerGroup")
    cfg = check_known_topic(topics, h.topic)
    if cfg is not None:
        check_queue_id(cfg, h.topic, h.queue_id)
    check_offset(h.queue_offset, "queueOffset")
    return cfg


def check_consumer_queue(
    topics: TopicConfigManager, group: str, topic: str, queue_id: int
) -> TopicConfig | None:
    """QUERY/UPDATE_CONSUMER_OFFSET: group, topic and queue id."""
    _groups.check(group, "consumerGroup")
    return check_queue(topics, topic, queue_id)


def check_create_topic(h: Any) -> int:
    """UPDATE_AND_CREATE_TOPIC: name (not a system topic), queue counts, perm; the count."""
    check_topic(h.topic)
    if is_system_topic(h.topic):
        raise Rejected(ResponseCode.NO_PERMISSION, f"{h.topic} is a system topic")
    for field, value in (
        ("readQueueNums", h.read_queue_nums),
        ("writeQueueNums", h.write_queue_nums),
    ):
        if not 0 <= value <= MAX_QUEUE_NUMS:
            raise Rejected(SYSTEM_ERROR, f"{field} {shown(value)} is outside 0..{MAX_QUEUE_NUMS}")
    if max(h.read_queue_nums, h.write_queue_nums) < 1:
        raise Rejected(SYSTEM_ERROR, f"queue numbers must be within 1..{MAX_QUEUE_NUMS}")
    if h.perm & ~PERM_ALL:
        raise Rejected(
            SYSTEM_ERROR,
            f"perm {shown(h.perm)} has bits outside {PERM_ALL:#x} "
            f"(PERM_PRIORITY|PERM_READ|PERM_WRITE|PERM_INHERIT)",
        )
    return int(max(h.read_queue_nums, h.write_queue_nums))


def check_admin_topic(topic: str) -> None:
    """DELETE_TOPIC_IN_BROKER and other admin requests naming one existing-or-not topic."""
    bad = validate_queue_topic(topic)
    if bad is not None:
        raise Rejected(SYSTEM_ERROR, f"topic: {bad}")
    if is_system_topic(topic):
        raise Rejected(ResponseCode.NO_PERMISSION, f"{topic} is a system topic")


def check_query_message(h: Any) -> None:
    """QUERY_MESSAGE: an optional topic; the key is free text (a key or a msgId)."""
    if h.topic:
        bad = validate_queue_topic(h.topic)
        if bad is not None:
            raise Rejected(SYSTEM_ERROR, f"topic: {bad}")
    if not h.key:
        raise Rejected(SYSTEM_ERROR, "key: the key is blank")
