"""Typed request/response headers ("custom headers" carried in extFields).

Owns: one frozen dataclass per RocketMQ header with its wire names (the long Java names,
and the short V2 names of SEND_MESSAGE_V2/SEND_BATCH_MESSAGE), and the two conversions
``from_ext_fields`` / ``to_ext_fields``.

Invariants:
* A required field that is missing, or a number that does not parse, raises
  ``HeaderError`` naming the wire field; the connection stays up and the request gets
  an error response. Unknown keys (``bname``, ``Signature``, ...) are ignored.
* ``to_ext_fields`` writes every value as a string and leaves out ``None``; booleans are
  ``true``/``false`` and accepted back as ``true``/``1`` (the C++ client sends ``0``/``1``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .errors import HeaderError

_REQ = dataclasses.MISSING
H = TypeVar("H", bound="Header")


def wire(name: str, *, v2: str | None = None, default: Any = _REQ) -> Any:
    """Declare a header field: its long wire name, optional V2 short name, default."""
    return dataclasses.field(default=default, metadata={"wire": name, "v2": v2})


def _parse_int(key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise HeaderError(f"header field {key!r} must be an integer, got {raw!r}") from None


def _parse_bool(_key: str, raw: str) -> bool:
    return raw.lower() in ("true", "1")


def _parse_str(_key: str, raw: str) -> str:
    return raw


_PARSERS = {"int": _parse_int, "bool": _parse_bool, "str": _parse_str}


@dataclass(frozen=True, slots=True)
class Header:
    """Base class; subclasses declare fields with ``wire(...)``."""

    _spec: ClassVar[dict[type, list[tuple[str, str, str | None, Any, bool]]]] = {}

    @classmethod
    def _fields(cls) -> list[tuple[str, str, str | None, Any, bool]]:
        spec = Header._spec.get(cls)
        if spec is None:
            spec = []
            for f in dataclasses.fields(cls):
                kind = str(f.type).split("|")[0].strip()
                spec.append(
                    (f.name, f.metadata["wire"], f.metadata["v2"], _PARSERS[kind],
                     f.default is _REQ)
                )
            Header._spec[cls] = spec
        return spec

    @classmethod
    def from_ext_fields(cls: type[H], ext: dict[str, str], *, v2: bool = False) -> H:
        kwargs: dict[str, Any] = {}
        for attr, name, short, parse, required in cls._fields():
            key = short if (v2 and short) else name
            raw = ext.get(key)
            if raw is None or (raw == "" and parse is not _parse_str):
                if required:
                    raise HeaderError(f"missing required header field {key!r} ({name})")
                continue
            kwargs[attr] = parse(key, raw)
        return cls(**kwargs)

    def to_ext_fields(self, *, v2: bool = False) -> dict[str, str]:
        out: dict[str, str] = {}
        for attr, name, short, _parse, _req in self._fields():
            v = getattr(self, attr)
            if v is None:
                continue
            key = short if (v2 and short) else name
            if isinstance(v, bool):
                out[key] = "true" if v else "false"
            else:
                out[key] = str(v)
        return out


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str = wire("producerGroup", v2="a")
    topic: str = wire("topic", v2="b")
    default_topic: str = wire("defaultTopic", v2="c", default="TBW102")
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


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str = wire("msgId")
    queue_id: int = wire("queueId")
    queue_offset: int = wire("queueOffset")
    transaction_id: str | None = wire("transactionId", default=None)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int = wire("suggestWhichBrokerId")
    next_begin_offset: int = wire("nextBeginOffset")
    min_offset: int = wire("minOffset")
    max_offset: int = wire("maxOffset")


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    commit_offset: int = wire("commitOffset")


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(Header):
    """Response of QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int = wire("offset")


@dataclass(frozen=True, slots=True)
class QueueRequestHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME requests."""

    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    timestamp: int = wire("timestamp")


@dataclass(frozen=True, slots=True)
class EarliestMsgStoretimeResponseHeader(Header):
    timestamp: int = wire("timestamp")


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(Header):
    offset: int = wire("offset")


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = wire("clientID")
    producer_group: str | None = wire("producerGroup", default=None)
    consumer_group: str | None = wire("consumerGroup", default=None)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP and NOTIFY_CONSUMER_IDS_CHANGED."""

    consumer_group: str = wire("consumerGroup")


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int = wire("offset")
    group: str = wire("group")
    delay_level: int = wire("delayLevel", default=0)
    origin_msg_id: str | None = wire("originMsgId", default=None)
    origin_topic: str | None = wire("originTopic", default=None)
    unit_mode: bool = wire("unitMode", default=False)
    max_reconsume_times: int | None = wire("maxReconsumeTimes", default=None)


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str = wire("topic")


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(Header):
    topic: str = wire("topic")
    default_topic: str = wire("defaultTopic", default="TBW102")
    read_queue_nums: int = wire("readQueueNums", default=4)
    write_queue_nums: int = wire("writeQueueNums", default=4)
    perm: int = wire("perm", default=6)
    topic_filter_type: str = wire("topicFilterType", default="SINGLE_TAG")
    topic_sys_flag: int = wire("topicSysFlag", default=0)
    order: bool = wire("order", default=False)


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER and other single-topic requests."""

    topic: str = wire("topic")
