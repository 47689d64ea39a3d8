"""Who is connected: producer and consumer groups, subscriptions, and queue locks.

Owns: ``ClientRegistry`` — heartbeats register a client id on a connection under its
producer/consumer groups with their subscriptions (RocketMQ's ConsumerManager and
ProducerManager), expiry of silent clients, NOTIFY_CONSUMER_IDS_CHANGED when a
consumer group's membership changes, and ``LockManager`` for orderly consumers.

Invariants:
* A group's subscription for a topic is the latest one any member sent; pulls that
  carry no subscription use it (Java clients do not send one by default).
* A client disappears from its groups when its connection closes, when it unregisters,
  or when it has not sent a heartbeat for ``expire_seconds``.
* A queue lock is held by one client id; it lapses ``lock_expire`` seconds after its
  last renewal, and only its holder (or expiry) releases it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from kairosmq.protocol.bodies import ConsumerData, SubscriptionData


class ClientConnection(Protocol):
    conn_id: int
    peer: str

    def notify(self, code: int, ext_fields: dict[str, str]) -> None: ...


@dataclass(slots=True)
class ClientInfo:
    client_id: str
    conn: ClientConnection
    last_seen: float
    version: int = 0


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    clients: dict[str, ClientInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"


class ClientRegistry:
    def __init__(self, expire_seconds: float = 120.0, log: Any = None) -> None:
        self.expire_seconds = expire_seconds
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[str, ClientInfo]] = {}
        self.log = log

    # ---------------------------------------------------------------- heartbeat

    def register_consumer(
        self, data: ConsumerData, client_id: str, conn: ClientConnection, version: int = 0
    ) -> bool:
        """Register or refresh a consumer; return True if the group's members changed."""
        info = self.consumers.get(data.group_name)
        if info is None:
            info = self.consumers[data.group_name] = ConsumerGroupInfo(data.group_name)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        for sub in data.subscriptions:
            prev = info.subscriptions.get(sub.topic)
            if prev is None or sub.sub_version >= prev.sub_version:
                info.subscriptions[sub.topic] = sub
        existing = info.clients.get(client_id)
        now = time.monotonic()
        if existing is not None and existing.conn is conn:
            existing.last_seen = now
            return False
        info.clients[client_id] = ClientInfo(client_id, conn, now, version)
        if self.log is not None:
            self.log.info("client.registered", client_id=client_id, group=data.group_name,
                          role="consumer")
        self._notify_group(info)
        return True

    def register_producer(self, group: str, client_id: str, conn: ClientConnection) -> None:
        members = self.producers.setdefault(group, {})
        existing = members.get(client_id)
        if existing is not None and existing.conn is conn:
            existing.last_seen = time.monotonic()
            return
        members[client_id] = ClientInfo(client_id, conn, time.monotonic())
        if self.log is not None:
            self.log.info("client.registered", client_id=client_id, group=group, role="producer")

    def unregister(
        self, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        if producer_group and self.producers.get(producer_group, {}).pop(client_id, None):
            self._logged_removal(client_id, producer_group, "producer")
        if consumer_group:
            info = self.consumers.get(consumer_group)
            if info is not None and info.clients.pop(client_id, None) is not None:
                self._logged_removal(client_id, consumer_group, "consumer")
                self._notify_group(info)

    def _logged_removal(self, client_id: str, group: str, role: str) -> None:
        if self.log is not None:
            self.log.info("client.unregistered", client_id=client_id, group=group, role=role)

    def connection_closed(self, conn: ClientConnection) -> None:
        self._drop(lambda c: c.conn is conn)

    def expire(self) -> None:
        deadline = time.monotonic() - self.expire_seconds
        self._drop(lambda c: c.last_seen < deadline)

    def _drop(self, pred: Any) -> None:
        for group, members in self.producers.items():
            for cid in [cid for cid, c in members.items() if pred(c)]:
                del members[cid]
                self._logged_removal(cid, group, "producer")
        for info in self.consumers.values():
            gone = [cid for cid, c in info.clients.items() if pred(c)]
            for cid in gone:
                del info.clients[cid]
                self._logged_removal(cid, info.group, "consumer")
            if gone:
                self._notify_group(info)

    def _notify_group(self, info: ConsumerGroupInfo) -> None:
        from kairosmq.protocol.codes import RequestCode

        for client in info.clients.values():
            client.conn.notify(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                               {"consumerGroup": info.group})

    # ---------------------------------------------------------------- queries

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return sorted(info.clients) if info else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info else None

    def group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)


class LockManager:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ state: (group, topic, queue) -> holder."""

    def __init__(self, lock_expire: float = 60.0) -> None:
        self.lock_expire = lock_expire
        self._locks: dict[tuple[str, str, int], tuple[str, float]] = {}

    def try_lock(self, group: str, client_id: str, queues: list[tuple[str, int]]) -> list[
        tuple[str, int]
    ]:
        """Lock or renew the queues free or held by ``client_id``; return those now held."""
        now = time.monotonic()
        held: list[tuple[str, int]] = []
        for topic, qid in queues:
            key = (group, topic, qid)
            cur = self._locks.get(key)
            if cur is None or cur[0] == client_id or now - cur[1] > self.lock_expire:
                self._locks[key] = (client_id, now)
                held.append((topic, qid))
        return held

    def unlock(self, group: str, client_id: str, queues: list[tuple[str, int]]) -> None:
        for topic, qid in queues:
            key = (group, topic, qid)
            cur = self._locks.get(key)
            if cur is not None and cur[0] == client_id:
                del self._locks[key]

    def holder(self, group: str, topic: str, queue_id: int) -> str | None:
        cur = self._locks.get((group, topic, queue_id))
        if cur is None or time.monotonic() - cur[1] > self.lock_expire:
            return None
        return cur[0]
