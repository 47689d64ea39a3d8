"""RocketMQ's own admin requests, as ``mqadmin`` and rocketmq-dashboard send them:
GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26), GET_TOPIC_STATS_INFO (202),
GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204) and
QUERY_TOPIC_CONSUME_BY_WHO (300). (GET_CONSUME_STATS, 208, is consume_stats.py's.)

Owns: ``AdminBrokerProcessor`` (RocketMQ's name; services: store reads, the disk guard,
topic table, offset table, client registry, the scheduler's progress, stats, endpoints,
uptime and config values), the broker side of those codes, answered with RocketMQ's
bodies and field names
(``KVTable``, ``TopicStatsTable``, ``ConsumerConnection``,
``ProducerConnection``, ``GroupList``; properties text for configs). Maps keyed by
``MessageQueue`` are written as fastjson writes them (``bodies.encode_mq_map``).

Invariants:
* Read-only: nothing here changes broker state except the TPS sampler below (one per
  processor, so per broker).
* Runtime stats reuse ``BrokerStats`` counters (server/observe/stats.py); put/get TPS are rates of
  those counters over 10 s / 1 min / 10 min windows, from samples taken when runtime info
  is asked for (the first answer is the average since boot). Keys RocketMQ has with no
  meaning here (thread-pool queues, page-cache lock, transient store pool) answer 0, as an
  idle Java broker does, so the Java tools can parse them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any  # Any: JSON values; BrokerConfig values of several types

import orjson
from kairosmq.protocol.bodies import (
    MessageQueueData,
    encode_consumer_connection,
    encode_kv_table,
    encode_mq_table,
    properties_to_string,
)
from kairosmq.protocol.codes import BROKER_VERSION, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetProducerConnectionListRequestHeader,
    TopicRequestHeader,
)
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.naming import SCHEDULE_TOPIC, group_of_retry_topic

from ...remoting import ingress
from ...store.consumequeue import UNIT_SIZE

if TYPE_CHECKING:
    from ...config import BrokerConfig
    from ...endpoints import Endpoints
    from ...observe.stats import BrokerStats
    from ...remoting.transport import Connection
    from ...store.guard import WriteGuard
    from ...store.message_store import MessageStore
    from ...tables.clients import ClientRegistry
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager

VERSION_DESC = "V4_9_8"  # MQVersion.getVersionDesc(BROKER_VERSION)
CLIENT_LANGUAGE = "OTHER"  # a client registered without a language (ClientInfo.language)
_WINDOWS_S = (10.0, 60.0, 600.0)


class _Rates:
    """Samples of (monotonic seconds, put total, get total), at most one a second, kept
    for the longest window; a rate over a window is measured back to the newest sample at
    least that old (or the oldest one: boot, with zero counts)."""

    __slots__ = ("samples",)

    def __init__(self, boot: float) -> None:
        self.samples: deque[tuple[float, int, int]] = deque([(boot, 0, 0)])

    def tps(self, now: float, put: int, get: int) -> tuple[str, str]:
        if now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, put, get))
            while len(self.samples) > 2 and now - self.samples[1][0] >= _WINDOWS_S[-1]:
                self.samples.popleft()
        puts, gets = [], []
        for window in _WINDOWS_S:
            base = self.samples[0]
            for s in self.samples:
                if now - s[0] >= window:
                    base = s
            dt = max(now - base[0], 1e-3)
            puts.append(f"{(put - base[1]) / dt:.2f}")
            gets.append(f"{(get - base[2]) / dt:.2f}")
        return " ".join(puts), " ".join(gets)


def _runtime(seconds: float) -> str:
    """StoreStatsService.getFormatRuntime."""
    s = int(seconds)
    return (
        f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, "
        f"{s % 60} seconds ]"
    )


# BrokerConfig field -> RocketMQ's name for the same setting (value converted)
_RMQ_NAMES: dict[str, tuple[str, Any]] = {
    "broker_name": ("brokerName", str),
    "cluster_name": ("brokerClusterName", str),
    "data_dir": ("storePathRootDir", lambda p: str(Path(p).resolve())),
    "commitlog_segment_size": ("mappedFileSizeCommitLog", str),
    "consumequeue_units_per_file": ("mappedFileSizeConsumeQueue", lambda n: str(n * UNIT_SIZE)),
    "flush_mode": ("flushDiskType", lambda m: str(getattr(m, "value", m))),
    "file_reserved_hours": ("fileReservedTime", lambda h: f"{h:g}"),
    "max_message_size": ("maxMessageSize", str),
    "auto_create_topic": ("autoCreateTopicEnable", lambda b: str(b).lower()),
    "default_queue_nums": ("defaultTopicQueueNums", str),
    "delay_levels": ("messageDelayLevel", str),
    "long_polling": ("longPollingEnable", lambda b: str(b).lower()),
    "enable_property_filter": ("enablePropertyFilter", lambda b: str(b).lower()),
    "disk_max_used_ratio": ("diskMaxUsedSpaceRatio", lambda r: str(round(r * 100))),
    "idle_timeout": ("serverChannelMaxIdleTimeSeconds", lambda s: f"{s:g}"),
    "vip_channel": ("vipChannelEnabled", lambda b: str(b).lower()),
    "flush_interval": ("flushIntervalCommitLog", lambda s: str(round(s * 1000))),  # ms
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _connection(
    client_id: str, peer: str, version: int, language: str = CLIENT_LANGUAGE
) -> dict[str, Any]:
    return {"clientAddr": peer, "clientId": client_id, "language": language, "version": version}


class AdminBrokerProcessor:
    """GET_BROKER_RUNTIME_INFO, GET_BROKER_CONFIG, GET_TOPIC_STATS_INFO,
    GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST and
    QUERY_TOPIC_CONSUME_BY_WHO."""

    def __init__(
        self,
        *,
        reads: MessageStore,
        guard: WriteGuard,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        schedule_progress: Callable[[], dict[int, int]],
        stats: BrokerStats,
        endpoints: Endpoints,
        uptime_ms: Callable[[], float],
        config: BrokerConfig,
    ) -> None:
        self.reads = reads
        self.guard = guard
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.schedule_progress = schedule_progress
        self.stats = stats
        self.endpoints = endpoints
        self.uptime_ms = uptime_ms
        self.config = config
        self._rates: _Rates | None = None

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (also what ``brokerStatus`` prints)."""
        st = self.stats
        now = time.monotonic()
        uptime_s = self.uptime_ms() / 1000
        put_total = sum(st.stored.values()) + sum(st.scheduled.values())
        get_total = sum(st.pulled.values())
        if self._rates is None:
            self._rates = _Rates(now - uptime_s)
        put_tps, get_tps = self._rates.tps(now, put_total, get_total)
        log_min, log_max = self.reads.phy_range()
        now_ms = int(time.time() * 1000)
        data_dir = str(Path(self.config.data_dir).resolve())
        ratio = f"{self.guard.used_ratio}"
        earliest = 0
        if log_max > log_min:
            rec = self.reads.read_at(log_min)
            if rec is not None:
                try:
                    earliest = decode_record(rec).store_timestamp
                except MessageDecodeError:
                    earliest = 0
        info: dict[str, Any] = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": BROKER_VERSION,
            "bootTimestamp": now_ms - int(uptime_s * 1000),
            "runtime": _runtime(uptime_s),
            "putTps": put_tps,
            "getTransferedTps": get_tps,
            "getFoundTps": get_tps,
            "getTotalTps": get_tps,
            "getMissTps": "0.00 0.00 0.00",
            "putMessageTimesTotal": max(put_total, 1),
            "putMessageFailedTimes": 0,
            "msgPutTotalTodayNow": put_total,
            "msgGetTotalTodayNow": get_total,
            "msgPutTotalTodayMorning": 0,
            "msgGetTotalTodayMorning": 0,
            "msgPutTotalYesterdayMorning": 0,
            "msgGetTotalYesterdayMorning": 0,
            "commitLogMinOffset": log_min,
            "commitLogMaxOffset": log_max,
            "commitLogDiskRatio": ratio,
            f"commitLogDiskRatio_{data_dir}": ratio,
            "consumeQueueDiskRatio": ratio,
            "earliestMessageTimeStamp": earliest,
            "dispatchBehindBytes": 0,
            "pageCacheLockTimeMills": 0,
            "startAcceptSendRequestTimeStamp": 0,
            "remainTransientStoreBufferNumbs": 0,
        }
        for pool in ("send", "pull", "query"):
            info[f"{pool}ThreadPoolQueueSize"] = 0
            info[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = 0
        for level, progress in sorted(self.schedule_progress().items()):
            hi = self.reads.max_offset(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{progress},{hi}"
        return {k: str(v) for k, v in info.items()}

    def handle_runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=encode_kv_table(self.runtime_info()))

    def broker_config(self) -> dict[str, str]:
        """GET_BROKER_CONFIG's properties: RocketMQ names where the setting is RocketMQ's,
        kairosmq's own settings in camelCase (``maxPullHoldMs``, ``scheduleBatch``, ...)."""
        cfg, ep = self.config, self.endpoints
        out = {
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "brokerIP1": ep.advertised_host,
            "namesrvAddr": ep.namesrv_address,
            "listenPort": str(ep.port),
            "namesrvPort": str(ep.namesrv_port),
        }
        for f in fields(cfg):
            if not f.init or f.name in ("port", "namesrv_port"):
                continue
            value = getattr(cfg, f.name)
            if f.name in _RMQ_NAMES:
                key, conv = _RMQ_NAMES[f.name]
                out[key] = conv(value)
            else:
                out[_camel(f.name)] = (
                    ""
                    if value is None
                    else (str(value).lower() if isinstance(value, bool) else str(value))
                )
        if ep.ha_port:  # the HA listener as bound (a master; RocketMQ haListenPort)
            out["haListenPort"] = str(ep.ha_port)
        return out

    def handle_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=properties_to_string(self.broker_config()).encode())

    def handle_topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
        cfg = ingress.check_known_topic(self.topics, h.topic)
        if cfg is None:
            return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        name = self.config.broker_name
        entries = []
        for qid in range(cfg.write_queue_nums):
            lo = max(0, self.reads.min_offset(h.topic, qid))
            hi = max(0, self.reads.max_offset(h.topic, qid))
            ts = (self.reads.store_time_at(h.topic, qid, hi - 1) or 0) if hi > 0 else 0
            entries.append(
                (
                    MessageQueueData(h.topic, name, qid),
                    {"lastUpdateTimestamp": ts, "maxOffset": hi, "minOffset": lo},
                )
            )
        return cmd.response(body=encode_mq_table("offsetTable", entries))

    def handle_consumer_connections(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        info = self.clients.consumers.get(h.consumer_group)
        if info is None or not info.clients:
            return cmd.error(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{h.consumer_group}] not online",
            )
        conns = [
            _connection(c.client_id, c.conn.peer, c.version, c.language)
            for c in info.clients.values()
        ]
        body = encode_consumer_connection(
            conns,
            list(info.subscriptions.values()),
            info.consume_type,
            info.message_model,
            info.consume_from_where,
        )
        return cmd.response(body=body)

    def handle_producer_connections(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        group = GetProducerConnectionListRequestHeader.from_ext_fields(
            cmd.ext_fields
        ).producer_group
        ingress.check_group(group, "producerGroup")
        clients = self.clients.producers.get(group) or {}
        if not clients:
            return cmd.error(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        conns = [
            _connection(c.client_id, c.conn.peer, c.version, c.language) for c in clients.values()
        ]
        return cmd.response(body=orjson.dumps({"connectionSet": conns}))

    def handle_consume_by_who(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Groups subscribed to the topic or holding offsets on it (RocketMQ GroupList)."""
        h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_known_topic(self.topics, h.topic)
        groups = {g for g, info in self.clients.consumers.items() if h.topic in info.subscriptions}
        groups.update(g for g, table in self.offsets.table.items() if h.topic in table)
        retry_group = group_of_retry_topic(h.topic)
        if retry_group:
            groups.add(retry_group)
        return cmd.response(body=orjson.dumps({"groupList": sorted(groups)}))
