"""JSON bodies of the remoting protocol: route data, heartbeat, consumer list, lock batches.

Owns: typed values for the JSON bodies RocketMQ carries besides message records
(RocketMQ ``TopicRouteData``/``BrokerData``/``QueueData``, ``HeartbeatData``/``ConsumerData``/
``SubscriptionData``, ``GetConsumerListByGroupResponseBody``, ``LockBatchRequestBody``/
``LockBatchResponseBody``/``UnlockBatchRequestBody``), their ``to_json``/``from_json``, and
the tag-expression parser both sides share (``parse_tag_expression``); at the end, the admin
bodies mqadmin reads (``KVTable``, MessageQueue-keyed ``TopicStatsTable``/``ConsumeStats``
in fastjson's object-key form, ``ConsumerConnection``); and the one non-JSON body, the
``key=value`` properties text of the broker's and the name server's config requests
(``properties_to_string`` / ``string_to_properties``, RocketMQ's MixAll pair; also the
broker's ``config/broker.properties``).

Invariants:
* Encoding writes standard JSON with quoted map keys and the field names Java uses.
* Decoding is tolerant the way the reference asks: enums may come as names or ordinals
  (C++ sends ordinals), ``subVersion`` may be a string, optional keys may be missing,
  and route data written by an old name server with unquoted numeric map keys
  (``{0:"ip:port"}``) is accepted. Malformed input raises ``ValueError``.
* A tag expression ``*`` (or empty) subscribes to every tag and has empty tag/code sets;
  otherwise tags are split on ``||``, stripped, de-duplicated in order, and each code is
  Java's ``String.hashCode`` of the tag (what the broker compares with a CQ tagsCode).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any  # Any: JSON values of RocketMQ's fastjson bodies, before their checks

import orjson

from .message import java_string_hash

SUB_ALL = "*"
MASTER_ID = 0

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)

_UNQUOTED_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")


def _loads(raw: bytes | str) -> Any:
    data = raw.encode() if isinstance(raw, str) else raw
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # RocketMQ name servers answer old clients with unquoted numeric map keys.
        try:
            return orjson.loads(_UNQUOTED_KEY.sub(rb'\1"\2"\3', data))
        except orjson.JSONDecodeError as err:
            raise ValueError(f"body is not JSON: {err}") from err


def _obj(raw: bytes | str) -> dict[str, Any]:
    value = _loads(raw)
    if not isinstance(value, dict):
        raise ValueError("body is not a JSON object")
    return value


def java_json_object(raw: bytes | str) -> dict[str, Any]:
    """A JSON object as a Java broker writes it (fastjson: numeric map keys may be
    unquoted); ``ValueError`` if it is not one."""
    return _obj(raw)


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < len(names):
            return names[value]
        raise ValueError(f"enum ordinal {value} out of range for {names[0]}...")
    text = str(value)
    if text not in names:
        raise ValueError(f"unknown enum value {text!r}")
    return text


def parse_tag_expression(expression: str | None) -> tuple[list[str], list[int]]:
    """Split ``"TagA || TagB"`` into (tags, codes); ``*``/empty means all: ([], [])."""
    if expression is None:
        return [], []
    expr = expression.strip()
    if not expr or expr == SUB_ALL:
        return [], []
    tags: list[str] = []
    for part in expr.split("||"):
        tag = part.strip()
        if tag and tag not in tags:
            tags.append(tag)
    return tags, [java_string_hash(t) for t in tags]


# ------------------------------------------------------------------ route data


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueueData:
        return cls(
            broker_name=str(d["brokerName"]),
            read_queue_nums=int(d.get("readQueueNums", 0)),
            write_queue_nums=int(d.get("writeQueueNums", 0)),
            perm=int(d.get("perm", 6)),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    broker_name: str
    broker_addrs: dict[int, str]
    cluster: str = "DefaultCluster"

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(k): v for k, v in self.broker_addrs.items()},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BrokerData:
        addrs = d.get("brokerAddrs") or {}
        return cls(
            broker_name=str(d["brokerName"]),
            broker_addrs={int(k): str(v) for k, v in addrs.items()},
            cluster=str(d.get("cluster", "DefaultCluster")),
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    order_topic_conf: str | None = None

    def to_json(self) -> bytes:
        out: dict[str, Any] = {
            "brokerDatas": [b.to_dict() for b in self.broker_datas],
            "filterServerTable": {},
            "queueDatas": [q.to_dict() for q in self.queue_datas],
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        return orjson.dumps(out)

    @classmethod
    def from_json(cls, raw: bytes | str) -> TopicRouteData:
        d = _obj(raw)
        try:
            return cls(
                queue_datas=[QueueData.from_dict(q) for q in d.get("queueDatas") or []],
                broker_datas=[BrokerData.from_dict(b) for b in d.get("brokerDatas") or []],
                order_topic_conf=d.get("orderTopicConf"),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"route data is malformed: {err!r}") from err


# ------------------------------------------------------------------ heartbeat


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def build(cls, topic: str, expression: str | None, sub_version: int) -> SubscriptionData:
        """The subscription a client sends for ``topic`` with a TAG ``expression``."""
        expr = (expression or "").strip() or SUB_ALL
        tags, codes = parse_tag_expression(expr)
        return cls(topic, expr, tags, codes, sub_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": self.code_set,
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags_set,
            "topic": self.topic,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubscriptionData:
        sub = str(d.get("subString") or SUB_ALL)
        tags = [str(t) for t in d.get("tagsSet") or []]
        codes = [int(c) for c in d.get("codeSet") or []]
        if sub != SUB_ALL and not tags:
            tags, codes = parse_tag_expression(sub)
        elif tags and len(codes) != len(tags):
            codes = [java_string_hash(t) for t in tags]
        return cls(
            topic=str(d["topic"]),
            sub_string=sub,
            tags_set=tags,
            code_set=codes,
            sub_version=int(d.get("subVersion") or 0),
            expression_type=str(d.get("expressionType") or "TAG"),
            class_filter_mode=bool(d.get("classFilterMode", False)),
        )


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group_name: str
    subscriptions: list[SubscriptionData]
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    unit_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_dict() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConsumerData:
        return cls(
            group_name=str(d["groupName"]),
            subscriptions=[
                SubscriptionData.from_dict(s) for s in d.get("subscriptionDataSet") or []
            ],
            consume_type=_enum(d.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=_enum(d.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=_enum(
                d.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"
            ),
            unit_mode=bool(d.get("unitMode", False)),
        )


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [c.to_dict() for c in self.consumers],
                "producerDataSet": [{"groupName": g} for g in self.producer_groups],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> HeartbeatData:
        d = _obj(raw)
        try:
            return cls(
                client_id=str(d["clientID"]),
                producer_groups=[str(p["groupName"]) for p in d.get("producerDataSet") or []],
                consumers=[ConsumerData.from_dict(c) for c in d.get("consumerDataSet") or []],
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"heartbeat body is malformed: {err!r}") from err


# ------------------------------------------------------------------ consumer list, locks


def encode_consumer_list(client_ids: list[str]) -> bytes:
    return orjson.dumps({"consumerIdList": client_ids})


def decode_consumer_list(raw: bytes | str) -> list[str]:
    ids = _obj(raw).get("consumerIdList") or []
    if not isinstance(ids, list):
        raise ValueError("consumerIdList is not a list")
    return [str(i) for i in ids]


@dataclass(frozen=True, slots=True, order=True)
class MessageQueueData:
    """``{"topic","brokerName","queueId"}`` as lock bodies carry it."""

    topic: str
    broker_name: str
    queue_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MessageQueueData:
        return cls(str(d["topic"]), str(d["brokerName"]), int(d["queueId"]))


@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ request body."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueueData]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": [m.to_dict() for m in self.mq_set],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> LockBatchRequest:
        d = _obj(raw)
        try:
            return cls(
                consumer_group=str(d["consumerGroup"]),
                client_id=str(d["clientId"]),
                mq_set=[MessageQueueData.from_dict(m) for m in d.get("mqSet") or []],
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"lock body is malformed: {err!r}") from err


def encode_lock_response(locked: list[MessageQueueData]) -> bytes:
    return orjson.dumps({"lockOKMQSet": [m.to_dict() for m in locked]})


def decode_lock_response(raw: bytes | str) -> list[MessageQueueData]:
    try:
        return [MessageQueueData.from_dict(m) for m in _obj(raw).get("lockOKMQSet") or []]
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"lock response is malformed: {err!r}") from err


# ---- admin bodies (mqadmin / rocketmq-dashboard): RocketMQ KVTable, TopicStatsTable, ConsumeStats,
# ConsumerConnection. Maps keyed by MessageQueue are written the way fastjson writes a map
# with object keys (``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``): not standard
# JSON, but exactly what the Java tools' fastjson parser reads back.


def properties_to_string(props: Mapping[str, str]) -> str:
    """``MixAll.properties2String``: ``key=value`` lines, by key (GET_BROKER_CONFIG and
    GET_NAMESRV_CONFIG bodies, the broker's ``config/broker.properties``)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


def string_to_properties(text: str) -> dict[str, str]:
    """``MixAll.string2Properties``: ``key=value`` lines (``key:value`` too; ``#``/``!``
    comments and blank lines skipped; keys and values stripped; the last of a key wins)
    (UPDATE_BROKER_CONFIG and UPDATE_NAMESRV_CONFIG bodies, ``config/broker.properties``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def encode_kv_table(table: dict[str, str]) -> bytes:
    """RocketMQ ``KVTable``: ``{"table":{k:v}}`` with string values."""
    return orjson.dumps({"table": {k: str(v) for k, v in table.items()}})


def encode_mq_map(entries: list[tuple[MessageQueueData, dict[str, Any]]]) -> bytes:
    """A fastjson ``Map<MessageQueue, V>``: object keys, in the order given."""
    parts = [orjson.dumps(mq.to_dict()) + b":" + orjson.dumps(value) for mq, value in entries]
    return b"{" + b",".join(parts) + b"}"


def encode_mq_table(
    field_name: str,
    entries: list[tuple[MessageQueueData, dict[str, Any]]],
    extra: dict[str, Any] | None = None,
) -> bytes:
    """``{<extra fields>, "<field_name>": <mq map>}`` (RocketMQ ``TopicStatsTable``: offsetTable
    of TopicOffset; ``ConsumeStats``: consumeTps + offsetTable of OffsetWrapper)."""
    head = orjson.dumps(extra or {})[:-1]  # '{...' without the closing brace
    sep = b"," if len(head) > 1 else b""
    return head + sep + orjson.dumps(field_name) + b":" + encode_mq_map(entries) + b"}"


def decode_mq_table(
    raw: bytes | str, field_name: str
) -> tuple[dict[MessageQueueData, dict[str, Any]], dict[str, Any]]:
    """Read back what ``encode_mq_table`` writes (tests and kairosmq tools): the map by
    queue, and the other top-level fields."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    marker = orjson.dumps(field_name).decode() + ":"
    at = text.find(marker)
    if at < 0:
        raise ValueError(f"no {field_name} in body")
    dec = _json_decoder()
    pos = at + len(marker)
    if text[pos : pos + 1] != "{":
        raise ValueError(f"{field_name} is not a map")
    pos += 1
    table: dict[MessageQueueData, dict[str, Any]] = {}
    while text[pos : pos + 1] != "}":
        key, pos = dec.raw_decode(text, pos)
        if text[pos : pos + 1] != ":":
            raise ValueError(f"{field_name}: ':' expected at {pos}")
        value, pos = dec.raw_decode(text, pos + 1)
        table[MessageQueueData.from_dict(key)] = value
        if text[pos : pos + 1] == ",":
            pos += 1
    rest = text[:at] + '"_":0' + text[pos + 1 :]
    others = dict(_loads(rest.replace("{,", "{")))
    others.pop("_", None)
    return table, others


def _json_decoder() -> Any:
    import json  # only the test/tool side decodes fastjson object keys

    return json.JSONDecoder()


def encode_consumer_connection(
    connections: list[dict[str, Any]],
    subscriptions: list[SubscriptionData],
    consume_type: str,
    message_model: str,
    consume_from_where: str,
) -> bytes:
    """RocketMQ ``ConsumerConnection``: connectionSet of ``Connection`` (clientId, clientAddr,
    language, version), subscriptionTable by topic, and the group's enums."""
    return orjson.dumps(
        {
            "connectionSet": connections,
            "consumeFromWhere": consume_from_where,
            "consumeType": consume_type,
            "messageModel": message_model,
            "subscriptionTable": {s.topic: s.to_dict() for s in subscriptions},
        }
    )
