"""Typed request/response headers ("custom headers" carried in extFields).

Owns: one dataclass per RocketMQ header (treated as immutable; not frozen because
frozen construction costs microseconds on the send path) with its wire names (the long Java names,
and the short V2 names of SEND_MESSAGE_V2/SEND_BATCH_MESSAGE), and the two conversions
``from_ext_fields`` / ``to_ext_fields``.

Invariants:
* A required field that is missing, or a number that does not parse, raises
  ``HeaderError`` naming the wire field; the connection stays up and the request gets
  an error response. Unknown keys (``bname``, ``Signature``, ...) are ignored.
* ``to_ext_fields`` writes every value as a string and leaves out ``None``; booleans are
  ``true``/``false`` and accepted back as ``true``/``1`` (the C++ client sends ``0``/``1``).
* ``_compile`` is the reference codec; its native twin ``_headers.pyx`` (the same fields
  walked over a C array, the dataclass built without its ``__init__``) replaces it when
  ``native.py`` chooses it; tests/protocol/test_native_headers.py holds the two equal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar, TypeVar  # Any: field values of any type; exec-built codecs

from . import native
from .errors import HeaderError, shown
from .naming import AUTO_CREATE_TOPIC_KEY

_REQ = dataclasses.MISSING
H = TypeVar("H", bound="Header")


def wire(name: str, *, v2: str | None = None, default: Any = _REQ) -> Any:
    """Declare a header field: its long wire name, optional V2 short name, default."""
    return dataclasses.field(default=default, metadata={"wire": name, "v2": v2})


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
DEFAULT_REGION = "DefaultRegion"  # BrokerConfig.regionId: a send answer's MSG_REGION


def _parse_int(key: str, raw: str) -> int:
    """A header integer: what Java's ``Long.parseLong`` accepts (int64 range)."""
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is not None and _INT64_MIN <= value <= _INT64_MAX:
        return value
    raise HeaderError(
        f"header field {key!r} must be an integer in the int64 range, got {shown(raw)}"
    )


def _compile(cls: type, v2: bool) -> tuple[Any, Any]:
    """Generate straight-line from/to functions for one header class (like dataclasses
    does for ``__init__``): the per-request cost is a handful of dict operations."""
    lines_from = ["def from_ext(ext):", "    kw = {}"]
    lines_to = ["def to_ext(self):", "    out = {}"]
    for f in dataclasses.fields(cls):
        name, short = f.metadata["wire"], f.metadata["v2"]
        key = short if (v2 and short) else name
        kind = str(f.type).split("|")[0].strip()
        required = f.default is _REQ
        lines_from.append(f"    raw = ext.get({key!r})")
        empty = "raw is None" if kind == "str" else "raw is None or raw == ''"
        if required:
            lines_from.append(f"    if {empty}: _missing({key!r}, {name!r})")
            indent = "    "
        else:
            lines_from.append(f"    if not ({empty}):")
            indent = "        "
        conv = {
            "int": f"_parse_int({key!r}, raw)",
            "bool": "raw.lower() in ('true', '1')",
            "str": "raw",
        }[kind]
        lines_from.append(f"{indent}kw[{f.name!r}] = {conv}")
        lines_to.append(f"    v = self.{f.name}")
        value = {"int": "str(v)", "str": "v", "bool": "'true' if v else 'false'"}[kind]
        if required:
            lines_to.append(f"    out[{key!r}] = {value}")
        else:
            lines_to.append(f"    if v is not None: out[{key!r}] = {value}")
    lines_from.append("    return cls(**kw)")
    lines_to.append("    return out")
    ns: dict[str, Any] = {"cls": cls, "_parse_int": _parse_int, "_missing": _missing}
    exec("\n".join(lines_from) + "\n" + "\n".join(lines_to), ns)  # noqa: S102
    return ns["from_ext"], ns["to_ext"]


def _missing(key: str, name: str) -> None:
    raise HeaderError(f"missing required header field {key!r} ({name})")


@dataclass(slots=True)
class Header:
    """Base class; subclasses declare fields with ``wire(...)``."""

    _codecs: ClassVar[dict[tuple[type, bool], tuple[Any, Any]]] = {}

    @classmethod
    def _codec(cls, v2: bool) -> tuple[Any, Any]:
        codec = Header._codecs.get((cls, v2))
        if codec is None:
            codec = Header._codecs[(cls, v2)] = _compile(cls, v2)
        return codec

    @classmethod
    def from_ext_fields(cls: type[H], ext: dict[str, str], *, v2: bool = False) -> H:
        result: H = cls._codec(v2)[0](ext)
        return result

    def to_ext_fields(self, *, v2: bool = False) -> dict[str, str]:
        out: dict[str, str] = self._codec(v2)[1](self)
        return out


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str = wire("producerGroup", v2="a")
    topic: str = wire("topic", v2="b")
    default_topic: str = wire("defaultTopic", v2="c", default=AUTO_CREATE_TOPIC_KEY)
    default_topic_queue_nums: int = wire("defaultTopicQueueNums", v2="d", default=4)
    queue_id: int = wire("queueId", v2="e", default=-1)
    sys_flag: int = wire("sysFlag", v2="f", default=0)
    born_timestamp: int = wire("bornTimestamp", v2="g", default=0)
    flag: int = wire("flag", v2="h", default=0)
    properties: str | None = wire("properties", v2="i", default=None)
    reconsume_times: int | None = wire("reconsumeTimes", v2="j", default=None)
    unit_mode: bool | None = wire("unitMode", v2="k", default=None)
    max_reconsume_times: int | None = wire("maxReconsumeTimes", v2="l", default=None)
    batch: bool | None = wire("batch", v2="m", default=None)
    broker_name: str | None = wire("brokerName", v2="n", default=None)


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str = wire("msgId")
    queue_id: int = wire("queueId")
    queue_offset: int = wire("queueOffset")
    transaction_id: str | None = wire("transactionId", default=None)
    recall_handle: str | None = wire("recallHandle", default=None)  # RocketMQ 5.3
    # the extra fields RocketMQ's SendMessageProcessor adds to the answer (addExtField)
    msg_region: str | None = wire("MSG_REGION", default=None)  # DEFAULT_REGION
    trace_on: bool | None = wire("TRACE_ON", default=None)


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    queue_offset: int = wire("queueOffset")
    max_msg_nums: int = wire("maxMsgNums", default=32)
    sys_flag: int = wire("sysFlag", default=0)
    commit_offset: int = wire("commitOffset", default=0)
    suspend_timeout_millis: int = wire("suspendTimeoutMillis", default=15000)
    subscription: str | None = wire("subscription", default=None)
    sub_version: int = wire("subVersion", default=0)
    expression_type: str | None = wire("expressionType", default=None)


@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int = wire("suggestWhichBrokerId")
    next_begin_offset: int = wire("nextBeginOffset")
    min_offset: int = wire("minOffset")
    max_offset: int = wire("maxOffset")


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    commit_offset: int = wire("commitOffset")


@dataclass(slots=True)
class OffsetResponseHeader(Header):
    """Response of QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int = wire("offset")


@dataclass(slots=True)
class QueueRequestHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME requests."""

    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    timestamp: int = wire("timestamp")


@dataclass(slots=True)
class EarliestMsgStoretimeResponseHeader(Header):
    timestamp: int = wire("timestamp")


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    offset: int = wire("offset")


@dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = wire("clientID")
    producer_group: str | None = wire("producerGroup", default=None)
    consumer_group: str | None = wire("consumerGroup", default=None)


@dataclass(slots=True)
class ConsumerGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP and NOTIFY_CONSUMER_IDS_CHANGED (the broker's call)."""

    consumer_group: str = wire("consumerGroup")


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int = wire("offset")
    group: str = wire("group")
    delay_level: int = wire("delayLevel", default=0)
    origin_msg_id: str | None = wire("originMsgId", default=None)
    origin_topic: str | None = wire("originTopic", default=None)
    unit_mode: bool = wire("unitMode", default=False)
    max_reconsume_times: int | None = wire("maxReconsumeTimes", default=None)


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str = wire("topic")


@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    topic: str = wire("topic")
    default_topic: str = wire("defaultTopic", default=AUTO_CREATE_TOPIC_KEY)
    read_queue_nums: int = wire("readQueueNums", default=4)
    write_queue_nums: int = wire("writeQueueNums", default=4)
    perm: int = wire("perm", default=6)
    topic_filter_type: str = wire("topicFilterType", default="SINGLE_TAG")
    topic_sys_flag: int = wire("topicSysFlag", default=0)
    order: bool = wire("order", default=False)


@dataclass(slots=True)
class TopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER and other single-topic requests."""

    topic: str = wire("topic")


@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12): by key, or by msgId when ext field ``_UNIQUE_KEY_QUERY`` is
    ``"true"`` (exactly, as RocketMQ compares it; MixAll.UNIQUE_MSG_QUERY_FLAG, an extra
    field RocketMQ adds beside its header).

    RocketMQ requires ``topic``; kairosmq also accepts it empty (any topic).
    """

    key: str = wire("key")
    topic: str = wire("topic", default="")
    max_num: int = wire("maxNum", default=32)
    begin_timestamp: int = wire("beginTimestamp", default=0)
    end_timestamp: int = wire("endTimestamp", default=0)
    unique_key_query: str | None = wire("_UNIQUE_KEY_QUERY", default=None)


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int = wire("indexLastUpdateTimestamp")
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset")


@dataclass(slots=True)
class ResendDlqRequestHeader(Header):
    """KAIROS_RESEND_DLQ (903): resend up to ``maxNum`` dead letters of a group, or the
    one at ``queueId``/``queueOffset``."""

    consumer_group: str = wire("consumerGroup")
    max_num: int = wire("maxNum", default=1000)
    to_retry_topic: bool = wire("toRetryTopic", default=False)
    # resend each as a timer due this many ms after the resend (kairosmq, issue 33)
    delay_ms: int | None = wire("delayMs", default=None)
    # only the dead letter at this queue and offset of %DLQ%<group> (a workbench row)
    queue_id: int | None = wire("queueId", default=None)
    queue_offset: int | None = wire("queueOffset", default=None)


@dataclass(slots=True)
class BrowseDlqRequestHeader(Header):
    """KAIROS_BROWSE_DLQ (911): ``%DLQ%<consumerGroup>`` messages after ``cursor``
    (``<queueId>:<queueOffset>``, the next to show), ``limit`` per page, with bodies when
    ``withBody`` (an export)."""

    consumer_group: str = wire("consumerGroup")
    cursor: str | None = wire("cursor", default=None)
    limit: int = wire("limit", default=50)
    with_body: bool = wire("withBody", default=False)


@dataclass(slots=True)
class EndHalfMessageRequestHeader(Header):
    """KAIROS_END_HALF_MESSAGE (912): an admin commits or rolls back the pending half
    message at ``commitLogOffset`` (``action``: commit | rollback)."""

    commit_log_offset: int = wire("commitLogOffset")
    action: str = wire("action")


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS (208): one group's offsets, on every topic it has offsets for or
    on ``topic`` only."""

    consumer_group: str = wire("consumerGroup")
    topic: str | None = wire("topic", default=None)


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321): ``count`` consume-queue units from ``index``."""

    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    index: int = wire("index")
    count: int = wire("count")
    consumer_group: str | None = wire("consumerGroup", default=None)


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS (317, ``mqadmin brokerConsumeStats``)."""

    is_order: bool = wire("isOrder", default=False)


@dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204). Missing, the group is empty (refused by the
    handler's group check, whose remark names it)."""

    producer_group: str = wire("producerGroup", default="")


@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222): move ``group``'s offsets on ``topic`` to the
    first message stored at or after ``timestamp`` (-1: the queue's end); the broker relays
    the same header to each consumer as RESET_CONSUMER_CLIENT_OFFSET (220)."""

    topic: str = wire("topic")
    group: str = wire("group")
    timestamp: int = wire("timestamp")
    is_force: bool = wire("isForce", default=True)


@dataclass(slots=True)
class KvConfigRequestHeader(Header):
    """PUT_KV_CONFIG (100, with ``value``), GET_KV_CONFIG (101), DELETE_KV_CONFIG (102)."""

    namespace: str = wire("namespace")
    key: str = wire("key")
    value: str | None = wire("value", default=None)


@dataclass(slots=True)
class KvConfigResponseHeader(Header):
    """GET_KV_CONFIG's answer (GetKVConfigResponseHeader)."""

    value: str = wire("value")


@dataclass(slots=True)
class KvNamespaceRequestHeader(Header):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str = wire("namespace")


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP (207): drop a group's config (and, asked, its offsets)."""

    group_name: str = wire("groupName")
    remove_offset: bool = wire("removeOffset", default=False)


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307): admin -> broker, relayed as is to the client."""

    consumer_group: str = wire("consumerGroup")
    client_id: str = wire("clientId")
    jstack_enable: bool = wire("jstackEnable", default=False)


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA (315): one stats item (``TOPIC_PUT_NUMS`` / ``topic``, ...)."""

    stats_name: str = wire("statsName")
    stats_key: str = wire("statsKey")


@dataclass(slots=True)
class RecallMessageRequestHeader(Header):
    """RECALL_MESSAGE (370): cancel the delayed/timer message a send's recallHandle names."""

    producer_group: str = wire("producerGroup")
    topic: str = wire("topic")
    recall_handle: str = wire("recallHandle")


@dataclass(slots=True)
class RecallMessageResponseHeader(Header):
    msg_id: str = wire("msgId")


@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37): a producer commits or rolls back a half message."""

    producer_group: str = wire("producerGroup")
    tran_state_table_offset: int = wire("tranStateTableOffset")  # the half's queue offset
    commit_log_offset: int = wire("commitLogOffset")  # the half's commit-log offset
    commit_or_rollback: int = wire("commitOrRollback")  # 0 unknown, 8 commit, 12 rollback
    msg_id: str = wire("msgId")
    from_transaction_check: bool | None = wire("fromTransactionCheck", default=None)
    transaction_id: str | None = wire("transactionId", default=None)


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39, broker -> producer, one-way)."""

    tran_state_table_offset: int = wire("tranStateTableOffset")
    commit_log_offset: int = wire("commitLogOffset")
    msg_id: str | None = wire("msgId", default=None)
    transaction_id: str | None = wire("transactionId", default=None)
    offset_msg_id: str | None = wire("offsetMsgId", default=None)


@dataclass(slots=True)
class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326, broker -> requesting client): the reply's send
    header plus where it was born and stored (RocketMQ's ReplyMessageRequestHeader)."""

    producer_group: str = wire("producerGroup")
    topic: str = wire("topic")
    default_topic: str = wire("defaultTopic", default=AUTO_CREATE_TOPIC_KEY)
    default_topic_queue_nums: int = wire("defaultTopicQueueNums", default=4)
    queue_id: int = wire("queueId", default=-1)
    sys_flag: int = wire("sysFlag", default=0)
    born_timestamp: int = wire("bornTimestamp", default=0)
    flag: int = wire("flag", default=0)
    properties: str | None = wire("properties", default=None)
    reconsume_times: int | None = wire("reconsumeTimes", default=None)
    unit_mode: bool | None = wire("unitMode", default=None)
    born_host: str | None = wire("bornHost", default=None)
    store_host: str | None = wire("storeHost", default=None)
    store_timestamp: int = wire("storeTimestamp", default=0)


@dataclass(slots=True)
class TransactionStatusRequestHeader(Header):
    """KAIROS_GET_TRANSACTION_STATUS (906): optionally one producer group."""

    producer_group: str | None = wire("producerGroup", default=None)


# ------------------------------------------------------------------ the native twin

# ``_compile`` above is the reference (parity tests hold the twin to it); ``Header._codec``
# calls the twin's ``compile_codec`` (``_headers.pyx``) instead when protocol/native.py
# chooses it.
reference = SimpleNamespace(compile=_compile)


def _load_twin() -> ModuleType:
    from . import _headers  # type: ignore[attr-defined]

    twin: ModuleType = _headers  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    _compile = _twin.compile_codec
