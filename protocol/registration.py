"""Broker <-> name server registration: the wire forms of RocketMQ 4.9's BrokerOuterAPI.

Owns (sans-IO, checked against apache/rocketmq ``rocketmq-all-4.9.8``):
* headers: ``RegisterBrokerRequestHeader`` (REGISTER_BROKER 103), ``RegisterBrokerResponseHeader``,
  ``UnRegisterBrokerRequestHeader`` (104), ``QueryDataVersionRequestHeader`` /
  ``QueryDataVersionResponseHeader`` (322), ``WipeWritePermOfBrokerRequestHeader`` (205) /
  ``AddWritePermOfBrokerRequestHeader`` (327) and their responses,
  ``GetTopicsByClusterRequestHeader`` (224), ``DeleteTopicFromNamesrvRequestHeader`` (216);
* bodies: ``DataVersion``, ``TopicConfigData`` (RocketMQ ``TopicConfig``),
  ``TopicConfigSerializeWrapper``, ``RegisterBrokerBody`` in both forms (fastjson JSON, and
  the ``compressed=true`` binary form of ``RegisterBrokerBody.encode(true)``), ``ClusterInfo``
  (GET_BROKER_CLUSTER_INFO 106), ``TopicList`` bodies, ``RegisterBrokerResult``;
* builders a broker uses (``build_register_broker``; ``register_body_parts`` and
  ``register_broker_request``, the same body built in parts between other work;
  ``build_unregister_broker``, ``build_query_data_version``) and
  ``decode_register_response``.

Invariants:
* ``bodyCrc32`` is RocketMQ's ``UtilAll.crc32``: CRC-32 of the body bytes masked to 31 bits; 0
  means "not checked" (``body_crc32``).
* The compressed form is zlib (Java ``DeflaterOutputStream``, BEST_COMPRESSION) of: int32 length
  + DataVersion JSON, int32 topic count, per topic int32 length + ``TopicConfig.encode()``
  (``"name read write perm filterType"``: topicSysFlag and order are not carried), then int32
  length + JSON array of filter servers; big-endian ints. Decoding is bounded: at most
  ``MAX_INFLATED`` bytes are inflated, every length is checked against what remains.
* Every malformed body raises ``ValueError`` with a message naming what is wrong.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any  # Any: JSON values of RocketMQ's fastjson bodies, before their checks

import orjson

from .bodies import BrokerData, _obj
from .codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from .commands import RemotingCommand, request
from .errors import shown
from .headers import Header, wire

MAX_INFLATED = 64 * 1024 * 1024  # a compressed register body inflates to at most this
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG


def body_crc32(body: bytes) -> int:
    """RocketMQ ``UtilAll.crc32``: CRC-32 masked to a non-negative int32."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ------------------------------------------------------------------ headers


@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    broker_name: str = wire("brokerName")
    broker_addr: str = wire("brokerAddr")
    cluster_name: str = wire("clusterName")
    ha_server_addr: str = wire("haServerAddr")
    broker_id: int = wire("brokerId")
    compressed: bool = wire("compressed", default=False)
    body_crc32: int = wire("bodyCrc32", default=0)


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = wire("haServerAddr", default=None)
    master_addr: str | None = wire("masterAddr", default=None)


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    broker_name: str = wire("brokerName")
    broker_addr: str = wire("brokerAddr")
    cluster_name: str = wire("clusterName")
    broker_id: int = wire("brokerId")


@dataclass(slots=True)
class QueryDataVersionRequestHeader(Header):
    """QUERY_DATA_VERSION (322); the body is the broker's DataVersion JSON."""

    broker_name: str = wire("brokerName")
    broker_addr: str = wire("brokerAddr")
    cluster_name: str = wire("clusterName")
    broker_id: int = wire("brokerId")


@dataclass(slots=True)
class QueryDataVersionResponseHeader(Header):
    changed: bool = wire("changed")


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    broker_name: str = wire("brokerName")


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: int = wire("wipeTopicCount")


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(Header):
    add_topic_count: int = wire("addTopicCount")


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(Header):
    cluster: str = wire("cluster")


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216): every broker's queues, or those of ``clusterName``."""

    topic: str = wire("topic")
    cluster_name: str | None = wire("clusterName", default=None)


# ------------------------------------------------------------------ bodies


def _int(d: dict[str, Any], key: str, default: int) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError as err:
        raise ValueError(f"{key} must be an integer, got {value!r}") from err


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ ``DataVersion``: equal when timestamp and counter are."""

    timestamp: int = 0
    counter: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any) -> DataVersion:
        if not isinstance(d, dict):
            raise ValueError("dataVersion is not a JSON object")
        return cls(timestamp=_int(d, "timestamp", 0), counter=_int(d, "counter", 0))

    @classmethod
    def from_json(cls, raw: bytes | str) -> DataVersion:
        return cls.from_dict(_obj(raw))

    def next(self, now_ms: int) -> DataVersion:
        """RocketMQ ``nextVersion``: a new timestamp, the counter plus one."""
        return DataVersion(now_ms, self.counter + 1)


@dataclass(frozen=True, slots=True)
class TopicConfigData:
    """RocketMQ ``TopicConfig`` as a broker registers it (defaults are Java's)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, d: Any, name: str | None = None) -> TopicConfigData:
        if not isinstance(d, dict):
            raise ValueError("a topic config is not a JSON object")
        topic = d.get("topicName", name)
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic config without a topicName: {d!r:.200}")
        ftype = d.get("topicFilterType", "SINGLE_TAG")
        if isinstance(ftype, int) and not isinstance(ftype, bool) and 0 <= ftype < 2:
            ftype = TOPIC_FILTER_TYPES[ftype]
        if ftype not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topic {topic}: unknown topicFilterType {ftype!r}")
        return cls(
            topic,
            _int(d, "readQueueNums", 16),
            _int(d, "writeQueueNums", 16),
            _int(d, "perm", 6),
            ftype,
            _int(d, "topicSysFlag", 0),
            bool(d.get("order", False)),
        )

    def encode_compact(self) -> bytes:
        """``TopicConfig.encode()`` of the compressed register body."""
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} "
            f"{self.perm} {self.topic_filter_type}"
        ).encode()

    @classmethod
    def decode_compact(cls, raw: bytes) -> TopicConfigData:
        parts = raw.decode("utf-8", errors="replace").split(" ")
        if len(parts) != 5 or not parts[0] or parts[4] not in TOPIC_FILTER_TYPES:
            raise ValueError(
                f"bad compressed topic config {shown(raw, 200)}: expected "
                "'name readQueueNums writeQueueNums perm topicFilterType'"
            )
        try:
            nums = [int(p) for p in parts[1:4]]
        except ValueError as err:
            raise ValueError(f"bad compressed topic config {shown(raw, 200)}: {err}") from err
        return cls(parts[0], nums[0], nums[1], nums[2], parts[4])


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper:
    """``{"dataVersion": ..., "topicConfigTable": {name: TopicConfig}}``."""

    topic_config_table: dict[str, TopicConfigData] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_dict(),
            "topicConfigTable": {k: v.to_dict() for k, v in self.topic_config_table.items()},
        }

    @classmethod
    def from_dict(cls, d: Any) -> TopicConfigSerializeWrapper:
        if not isinstance(d, dict):
            raise ValueError("topicConfigSerializeWrapper is not a JSON object")
        table = d.get("topicConfigTable")
        table = {} if table is None else table
        if not isinstance(table, dict):
            raise ValueError("topicConfigTable is not a JSON object")
        configs = {}
        for name, value in table.items():
            cfg = TopicConfigData.from_dict(value, str(name))
            configs[cfg.topic_name] = cfg
        version = d.get("dataVersion")
        return cls(
            configs, DataVersion.from_dict(version) if version is not None else DataVersion()
        )


def _int_bytes(n: int) -> bytes:
    return struct.pack(">i", n)


class _Inflated:
    """A bounded reader over the inflated bytes of a compressed register body."""

    def __init__(self, data: bytes) -> None:
        inflater = zlib.decompressobj()
        try:
            self.buf = inflater.decompress(data, MAX_INFLATED)
        except zlib.error as err:
            raise ValueError(f"compressed register body does not inflate: {err}") from err
        if inflater.unconsumed_tail:
            raise ValueError(f"compressed register body inflates beyond {MAX_INFLATED} bytes")
        self.pos = 0

    def read(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(
                f"compressed register body: {what} needs {n} bytes, {len(self.buf) - self.pos} left"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def read_int(self, what: str) -> int:
        value: int = struct.unpack(">i", self.read(4, what))[0]
        return value


REGISTER_PART_TOPICS = 200  # topic configs encoded per part of a register body


def register_body_parts(
    configs: list[TopicConfigData],
    data_version: DataVersion,
    filter_servers: list[str],
    compressed: bool,
) -> Iterator[bytes]:
    """``RegisterBrokerBody.encode``'s bytes in parts of ``REGISTER_PART_TOPICS`` topics
    (``compressed``: the bytes before deflating), so a broker with 100k topics can build
    its registration between other work. ``configs`` have distinct names (a topic table's
    values)."""
    if compressed:
        version = data_version.to_json()
        yield _int_bytes(len(version)) + version + _int_bytes(len(configs))
        for i in range(0, len(configs), REGISTER_PART_TOPICS):
            part = []
            for cfg in configs[i : i + REGISTER_PART_TOPICS]:
                one = cfg.encode_compact()
                part += [_int_bytes(len(one)), one]
            yield b"".join(part)
        servers = orjson.dumps(filter_servers)
        yield _int_bytes(len(servers)) + servers
        return
    yield (
        b'{"filterServerList":'
        + orjson.dumps(filter_servers)
        + b',"topicConfigSerializeWrapper":{"dataVersion":'
        + data_version.to_json()
        + b',"topicConfigTable":{'
    )
    for i in range(0, len(configs), REGISTER_PART_TOPICS):
        chunk = orjson.dumps(
            {c.topic_name: c.to_dict() for c in configs[i : i + REGISTER_PART_TOPICS]}
        )[1:-1]
        yield chunk if i == 0 else b"," + chunk
    yield b"}}}"


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """RocketMQ ``RegisterBrokerBody``: the topic config wrapper and filter server list."""

    topic_config_wrapper: TopicConfigSerializeWrapper = TopicConfigSerializeWrapper()
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        wrapper = self.topic_config_wrapper
        raw = b"".join(
            register_body_parts(
                list(wrapper.topic_config_table.values()),
                wrapper.data_version,
                self.filter_server_list,
                compressed,
            )
        )
        return zlib.compress(raw, 9) if compressed else raw

    @classmethod
    def decode(cls, raw: bytes, compressed: bool = False) -> RegisterBrokerBody:
        if not compressed:
            d = _obj(raw)
            servers = d.get("filterServerList")
            servers = [] if servers is None else servers
            if not isinstance(servers, list):
                raise ValueError("filterServerList is not a JSON array")
            wrapper = d.get("topicConfigSerializeWrapper")
            return cls(
                TopicConfigSerializeWrapper.from_dict(wrapper)
                if wrapper is not None
                else TopicConfigSerializeWrapper(),
                [str(s) for s in servers],
            )
        src = _Inflated(raw)
        version = DataVersion.from_json(src.read(src.read_int("dataVersion length"), "dataVersion"))
        count = src.read_int("topic count")
        if count < 0:
            raise ValueError(f"compressed register body: negative topic count {count}")
        configs: dict[str, TopicConfigData] = {}
        for i in range(count):
            one = src.read(src.read_int(f"topic config {i} length"), f"topic config {i}")
            cfg = TopicConfigData.decode_compact(one)
            configs[cfg.topic_name] = cfg
        raw_servers = src.read(src.read_int("filterServerList length"), "filterServerList")
        try:  # RocketMQ logs a bad filter server list and goes on with an empty one
            servers = orjson.loads(raw_servers)
        except orjson.JSONDecodeError:
            servers = []
        if not isinstance(servers, list):
            servers = []
        return cls(TopicConfigSerializeWrapper(configs, version), [str(s) for s in servers])


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a broker learns from one name server: its master (slaves) and the
    ORDER_TOPIC_CONFIG KV table."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO (106) body: brokers by name and broker names by cluster."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "brokerAddrTable": {k: v.to_dict() for k, v in self.broker_addr_table.items()},
                "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> ClusterInfo:
        d = _obj(raw)
        try:
            brokers = {
                str(k): BrokerData.from_dict(v) for k, v in (d.get("brokerAddrTable") or {}).items()
            }
            clusters = {
                str(k): [str(n) for n in v] for k, v in (d.get("clusterAddrTable") or {}).items()
            }
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"cluster info is malformed: {err!r}") from err
        return cls(brokers, clusters)


def encode_topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """RocketMQ ``TopicList``: ``{"topicList": [...]}`` (and ``brokerAddr`` when set)."""
    out: dict[str, Any] = {"topicList": sorted(topics)}
    if broker_addr is not None:
        out["brokerAddr"] = broker_addr
    return orjson.dumps(out)


def decode_topic_list(raw: bytes | str) -> list[str]:
    topics = _obj(raw).get("topicList") or []
    if not isinstance(topics, list):
        raise ValueError("topicList is not a JSON array")
    return [str(t) for t in topics]


def decode_kv_table(raw: bytes | str) -> dict[str, str]:
    """RocketMQ ``KVTable`` (``{"table": {k: v}}``); an empty body is an empty table."""
    if not raw:
        return {}
    table = _obj(raw).get("table") or {}
    if not isinstance(table, dict):
        raise ValueError("KVTable.table is not a JSON object")
    return {str(k): str(v) for k, v in table.items()}


# ------------------------------------------------------------------ builders (broker side)


def build_register_broker(
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    ha_server_addr: str,
    topic_configs: Iterable[TopicConfigData],
    data_version: DataVersion,
    broker_id: int = 0,
    filter_servers: Iterable[str] = (),
    compressed: bool = False,
    oneway: bool = False,
) -> RemotingCommand:
    """A REGISTER_BROKER (103) request as RocketMQ 4.9's ``BrokerOuterAPI.registerBrokerAll``
    builds it (body encoded per ``compressed``, ``bodyCrc32`` set)."""
    wrapper = TopicConfigSerializeWrapper({c.topic_name: c for c in topic_configs}, data_version)
    body = RegisterBrokerBody(wrapper, list(filter_servers)).encode(compressed)
    return register_broker_request(
        body,
        cluster_name=cluster_name,
        broker_name=broker_name,
        broker_addr=broker_addr,
        ha_server_addr=ha_server_addr,
        broker_id=broker_id,
        compressed=compressed,
        crc32=body_crc32(body),
        oneway=oneway,
    )


def register_broker_request(
    body: bytes,
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    ha_server_addr: str,
    broker_id: int,
    compressed: bool,
    crc32: int,
    oneway: bool = False,
) -> RemotingCommand:
    """REGISTER_BROKER around a body already encoded (``register_body_parts``, deflated
    when ``compressed``) and its ``body_crc32``."""
    header = RegisterBrokerRequestHeader(
        broker_name, broker_addr, cluster_name, ha_server_addr, broker_id, compressed, crc32
    )
    return request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body, oneway=oneway)


def decode_register_response(cmd: RemotingCommand) -> RegisterBrokerResult:
    """The answer to REGISTER_BROKER; ``ValueError`` (with the code and remark) unless
    SUCCESS."""
    if cmd.code != ResponseCode.SUCCESS:
        raise ValueError(f"REGISTER_BROKER refused: code {cmd.code}: {cmd.remark}")
    h = RegisterBrokerResponseHeader.from_ext_fields(cmd.ext_fields)
    return RegisterBrokerResult(h.ha_server_addr, h.master_addr, decode_kv_table(cmd.body))


def build_unregister_broker(
    *, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int = 0
) -> RemotingCommand:
    header = UnRegisterBrokerRequestHeader(broker_name, broker_addr, cluster_name, broker_id)
    return request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields())


def build_query_data_version(
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    data_version: DataVersion,
    broker_id: int = 0,
) -> RemotingCommand:
    header = QueryDataVersionRequestHeader(broker_name, broker_addr, cluster_name, broker_id)
    return request(RequestCode.QUERY_DATA_VERSION, header.to_ext_fields(), data_version.to_json())


def decode_query_data_version(cmd: RemotingCommand, mine: DataVersion) -> bool:
    """RocketMQ ``needRegister`` for one name server: True when the broker must register
    (changed, or the name server holds another version, or it did not answer SUCCESS)."""
    if cmd.code != ResponseCode.SUCCESS:
        return True
    changed = QueryDataVersionResponseHeader.from_ext_fields(cmd.ext_fields).changed
    if cmd.body and DataVersion.from_json(cmd.body) != mine:
        changed = True
    return changed
