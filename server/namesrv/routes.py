"""The name server's route tables: RocketMQ 4.9's ``RouteInfoManager``.

Owns: ``brokerAddrTable`` (broker name -> BrokerData: cluster and brokerId -> address),
``clusterAddrTable`` (cluster -> broker names), ``topicQueueTable`` (topic -> broker name ->
QueueData), ``brokerLiveTable`` (broker address -> ``BrokerLiveInfo``: last REGISTER time,
DataVersion, the connection it came on, HA address) and ``filterServerTable``; the operations
on them (register, unregister, expiry scan, connection loss, routes, cluster info, topic
lists, topic deletion, write-perm changes). Pure state: no I/O, time comes in as ``now_ms``.

Invariants:
* Only a master (brokerId 0) registration writes QueueData, and only when its DataVersion
  differs from the one last registered from that address (or the address is new). It
  creates or updates the QueueData of the topics it carries and, by default, leaves the
  broker's other topics alone (RocketMQ 4.9; 5.x by default): an Apache RocketMQ broker
  registers a topic created by ``updateTopic`` alone (``registerIncrementBrokerData``, one
  topic under the new DataVersion), so its other topics must stay; a topic goes with
  DELETE_TOPIC_IN_NAMESRV. With ``delete_topic_with_broker_registration`` (RocketMQ 5's
  ``deleteTopicWithBrokerRegistration``; only for clusters whose brokers always send their
  whole table, as kairosmq brokers do) the broker's QueueData of topics missing from the
  body are removed: a topic deleted in a broker leaves its route on the next register.
* One address has one brokerId: registering an address under a new id (slave -> master
  switch) removes its old entry first.
* When a broker name loses its last address (unregister, expiry, connection loss) it leaves
  ``brokerAddrTable`` and its cluster, and its QueueData leave every topic; a topic with no
  QueueData left leaves ``topicQueueTable``. A route is returned only when the topic has
  QueueData and at least one of its brokers has an address.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any  # Any: the transport Connection a broker registered on (opaque here)

from kairosmq.protocol.bodies import MASTER_ID, BrokerData, QueueData
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE
from kairosmq.protocol.registration import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerResult,
    TopicConfigSerializeWrapper,
)

BROKER_CHANNEL_EXPIRED_MS = 120_000  # RocketMQ BROKER_CHANNEL_EXPIRED_TIME


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: float
    data_version: DataVersion
    conn: Any  # the transport Connection the broker registered on (None: unknown)
    ha_server_addr: str
    broker_name: str = ""


@dataclass(frozen=True, slots=True)
class Registered:
    """What one REGISTER_BROKER did: the answer plus what to log."""

    result: RegisterBrokerResult
    first: bool  # a new address for this broker name
    topics_changed: bool  # the QueueData were rewritten from the body


@dataclass(frozen=True, slots=True)
class Removed:
    broker_addr: str
    broker_name: str
    live: BrokerLiveInfo | None


class RouteInfoManager:
    def __init__(
        self,
        broker_expiry_ms: float = BROKER_CHANNEL_EXPIRED_MS,
        delete_topic_with_broker_registration: bool = False,
    ) -> None:
        self.broker_expiry_ms = broker_expiry_ms
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------ register / unregister

    def register_broker(
        self,
        *,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        wrapper: TopicConfigSerializeWrapper | None,
        filter_servers: list[str] | None,
        conn: Any,
        now_ms: float,
    ) -> Registered:
        """``wrapper`` None: the request had no body (RocketMQ then registers DataVersion
        0/0 and no topics)."""
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        data = self.broker_addr_table.get(broker_name)
        first = data is None
        if data is None:
            data = self.broker_addr_table[broker_name] = BrokerData(broker_name, {}, cluster_name)
        addrs = data.broker_addrs
        for bid in [b for b, a in addrs.items() if a == broker_addr and b != broker_id]:
            del addrs[bid]  # slave -> master switch: one record per address
        old = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        first = first or old is None
        version = wrapper.data_version if wrapper is not None else DataVersion()
        changed = False
        if broker_id == MASTER_ID and wrapper is not None:
            if self.is_broker_topic_config_changed(broker_addr, version) or first:
                changed = True
                self._replace_queue_datas(broker_name, wrapper)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            now_ms, version, conn, ha_server_addr, broker_name
        )
        if filter_servers is not None:
            if filter_servers:
                self.filter_server_table[broker_addr] = list(filter_servers)
            else:
                self.filter_server_table.pop(broker_addr, None)
        ha = master = None
        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            if master_addr is not None and (live := self.broker_live_table.get(master_addr)):
                ha, master = live.ha_server_addr, master_addr
        return Registered(RegisterBrokerResult(ha, master), first, changed)

    def _replace_queue_datas(self, broker_name: str, wrapper: TopicConfigSerializeWrapper) -> None:
        table = wrapper.topic_config_table
        if self.delete_topic_with_broker_registration:
            for topic, by_broker in list(self.topic_queue_table.items()):
                # mypy infers pop's default from the bool on the left of the `and`
                if topic not in table and by_broker.pop(broker_name, None) and not by_broker:  # type: ignore[arg-type]
                    del self.topic_queue_table[topic]
        for cfg in table.values():
            self.topic_queue_table.setdefault(cfg.topic_name, {})[broker_name] = QueueData(
                broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.topic_sys_flag
            )

    def unregister_broker(
        self, *, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> bool:
        """Drop one address of a broker name; True when something was registered."""
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        data = self.broker_addr_table.get(broker_name)
        removed = data is not None and data.broker_addrs.pop(broker_id, None) is not None
        if data is not None and not data.broker_addrs:
            del self.broker_addr_table[broker_name]
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            self._remove_topics_of(broker_name)
        return live is not None or removed

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic, by_broker in list(self.topic_queue_table.items()):
            by_broker.pop(broker_name, None)
            if not by_broker:
                del self.topic_queue_table[topic]

    # ------------------------------------------------------------ liveness

    def is_broker_topic_config_changed(self, broker_addr: str, version: DataVersion) -> bool:
        prev = self.broker_live_table.get(broker_addr)
        return prev is None or prev.data_version != version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        prev = self.broker_live_table.get(broker_addr)
        return prev.data_version if prev is not None else None

    def touch(self, broker_addr: str, now_ms: float) -> None:
        """``updateBrokerInfoUpdateTimestamp`` (QUERY_DATA_VERSION with an unchanged version)."""
        if (prev := self.broker_live_table.get(broker_addr)) is not None:
            prev.last_update_ms = now_ms

    def scan_not_active_broker(self, now_ms: float) -> list[Removed]:
        """Drop every broker address silent for longer than the expiry."""
        out: list[Removed] = []
        for addr, live in list(self.broker_live_table.items()):
            if live.last_update_ms + self.broker_expiry_ms < now_ms:
                del self.broker_live_table[addr]
                removed = self._destroy(addr)
                out.append(Removed(addr, removed or live.broker_name, live))
        return out

    def on_connection_lost(self, conn: Any) -> Removed | None:
        """RocketMQ ``onChannelDestroy``: the broker that registered on ``conn``, if any."""
        for addr, live in self.broker_live_table.items():
            if live.conn is conn:
                del self.broker_live_table[addr]
                name = self._destroy(addr)
                return Removed(addr, name or live.broker_name, live)
        return None

    def _destroy(self, broker_addr: str) -> str | None:
        self.filter_server_table.pop(broker_addr, None)
        for name, data in list(self.broker_addr_table.items()):
            for bid, addr in list(data.broker_addrs.items()):
                if addr == broker_addr:
                    del data.broker_addrs[bid]
                    if not data.broker_addrs:
                        del self.broker_addr_table[name]
                        for cluster, names in list(self.cluster_addr_table.items()):
                            if name in names:
                                names.discard(name)
                                if not names:
                                    del self.cluster_addr_table[cluster]
                        self._remove_topics_of(name)
                    return name
        return None

    # ------------------------------------------------------------ reads

    def pickup_topic_route(
        self, topic: str
    ) -> tuple[list[QueueData], list[BrokerData], dict[str, list[str]]] | None:
        """(queueDatas, brokerDatas, filterServerTable) of ``topic`` across every broker."""
        by_broker = self.topic_queue_table.get(topic)
        if not by_broker:
            return None
        brokers = [
            BrokerData(d.broker_name, dict(d.broker_addrs), d.cluster)
            for name in sorted(by_broker)
            if (d := self.broker_addr_table.get(name)) is not None
        ]
        if not brokers:
            return None
        filters = {
            addr: list(servers)
            for b in brokers
            for addr in b.broker_addrs.values()
            if (servers := self.filter_server_table.get(addr))
        }
        return [by_broker[n] for n in sorted(by_broker)], brokers, filters

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {
                n: BrokerData(d.broker_name, dict(d.broker_addrs), d.cluster)
                for n, d in sorted(self.broker_addr_table.items())
            },
            {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
        )

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(
            t for t, by_broker in self.topic_queue_table.items() if names.intersection(by_broker)
        )

    def system_topics(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster and broker names (the topics RocketMQ
        brokers create after them) and one broker address to ask for more."""
        topics = set(self.cluster_addr_table)
        for names in self.cluster_addr_table.values():
            topics.update(names)
        addr = next(
            (a for d in self.broker_addr_table.values() for a in d.broker_addrs.values()), None
        )
        return sorted(topics), addr

    # ------------------------------------------------------------ admin writes

    def delete_topic(self, topic: str, cluster: str | None = None) -> int:
        """Drop ``topic``'s QueueData (of ``cluster``'s brokers only, when given); return how
        many brokers' QueueData went."""
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is None:
            return 0
        if cluster is None:
            del self.topic_queue_table[topic]
            return len(by_broker)
        count = 0
        for name in self.cluster_addr_table.get(cluster, set()):
            if by_broker.pop(name, None) is not None:
                count += 1
        if not by_broker:
            del self.topic_queue_table[topic]
        return count

    def change_write_perm(self, broker_name: str, wipe: bool) -> int:
        """WIPE (clear PERM_WRITE) or ADD (PERM_READ|PERM_WRITE) on every topic of
        ``broker_name``; return the topic count."""
        count = 0
        for by_broker in self.topic_queue_table.values():
            qd = by_broker.get(broker_name)
            if qd is not None:
                perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
                by_broker[broker_name] = dataclasses.replace(qd, perm=perm)
                count += 1
        return count
