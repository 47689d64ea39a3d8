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
  last renewal, and only its holder, expiry, or the holder leaving (its connection
  closed, unregistered or expired, with no registration left elsewhere) releases it.
* Tables are bounded: at most ``max_clients`` (group, client id) registrations; a
  heartbeat for a new one beyond that is refused (SYSTEM_BUSY) and registers nothing
  more; a group with no member left is removed, and lapsed locks are purged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol  # Any: structlog's logger; a predicate over ClientInfo

from kairosmq.protocol.bodies import ConsumerData, SubscriptionData
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.headers import ConsumerGroupRequestHeader

from ..remoting.transport import RequestRefused


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
    language: str = "OTHER"  # the LanguageCode name of its heartbeat (JAVA, CPP, PYTHON, ...)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    clients: dict[str, ClientInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"


class ClientRegistry:
    def __init__(
        self, expire_seconds: float = 120.0, log: Any = None, max_clients: int = 65536
    ) -> None:
        self.expire_seconds = expire_seconds
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[str, ClientInfo]] = {}
        self.log = log
        self.max_clients = max_clients
        # indexes, so a connection's close costs its own registrations, not the table:
        # conn_id -> {(is_consumer, group, client id)}; client id -> registrations
        self._by_conn: dict[int, set[tuple[bool, str, str]]] = {}
        self._count: dict[str, int] = {}
        self._total = 0

    @property
    def registrations(self) -> int:
        """(group, client id) pairs, producers and consumers."""
        return self._total

    def _admit(self, group: str, client_id: str) -> None:
        if self._total >= self.max_clients:
            raise RequestRefused(
                f"client table full: {self.max_clients} registrations "
                f"(max_clients); {client_id} not registered in {group}"
            )

    def _added(
        self,
        conn: ClientConnection,
        consumer: bool,
        group: str,
        client_id: str,
        new: bool,
        old: ClientConnection | None = None,
    ) -> None:
        if new:
            self._total += 1
            self._count[client_id] = self._count.get(client_id, 0) + 1
        if old is not None:
            regs = self._by_conn.get(old.conn_id)
            if regs is not None:
                regs.discard((consumer, group, client_id))
        self._by_conn.setdefault(conn.conn_id, set()).add((consumer, group, client_id))

    def _removed(self, info: ClientInfo, consumer: bool, group: str) -> None:
        self._total -= 1
        cid = info.client_id
        n = self._count[cid] - 1
        if n:
            self._count[cid] = n
        else:
            del self._count[cid]
        regs = self._by_conn.get(info.conn.conn_id)
        if regs is not None:
            regs.discard((consumer, group, cid))
            if not regs:
                del self._by_conn[info.conn.conn_id]

    # ---------------------------------------------------------------- heartbeat

    def register_consumer(
        self,
        data: ConsumerData,
        client_id: str,
        conn: ClientConnection,
        version: int = 0,
        language: str = "OTHER",
    ) -> bool:
        """Register or refresh a consumer; return True if the group's members changed."""
        info = self.consumers.get(data.group_name)
        existing = info.clients.get(client_id) if info is not None else None
        if existing is None:
            self._admit(data.group_name, client_id)
        if info is None:
            info = self.consumers[data.group_name] = ConsumerGroupInfo(data.group_name)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        for sub in data.subscriptions:
            prev = info.subscriptions.get(sub.topic)
            if prev is None or sub.sub_version >= prev.sub_version:
                info.subscriptions[sub.topic] = sub
        now = time.monotonic()
        if existing is not None and existing.conn is conn:
            existing.last_seen = now
            return False
        info.clients[client_id] = ClientInfo(client_id, conn, now, version, language)
        self._added(
            conn,
            True,
            data.group_name,
            client_id,
            existing is None,
            None if existing is None else existing.conn,
        )
        if self.log is not None:
            self.log.info(
                "client.registered", client_id=client_id, group=data.group_name, role="consumer"
            )
        self._notify_group(info)
        return True

    def register_producer(
        self,
        group: str,
        client_id: str,
        conn: ClientConnection,
        version: int = 0,
        language: str = "OTHER",
    ) -> None:
        existing = self.producers.get(group, {}).get(client_id)
        if existing is not None and existing.conn is conn:
            existing.last_seen = time.monotonic()
            return
        if existing is None:
            self._admit(group, client_id)
        members = self.producers.setdefault(group, {})
        members[client_id] = ClientInfo(client_id, conn, time.monotonic(), version, language)
        self._added(
            conn,
            False,
            group,
            client_id,
            existing is None,
            None if existing is None else existing.conn,
        )
        if self.log is not None:
            self.log.info("client.registered", client_id=client_id, group=group, role="producer")

    def unregister(
        self, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        members = self.producers.get(producer_group or "")
        gone = members.pop(client_id, None) if members is not None else None
        if members is not None and gone is not None:
            self._removed(gone, False, producer_group or "")
            self._logged_removal(client_id, producer_group or "", "producer")
            if not members:
                del self.producers[producer_group or ""]
        if consumer_group:
            info = self.consumers.get(consumer_group)
            left = info.clients.pop(client_id, None) if info is not None else None
            if info is not None and left is not None:
                self._removed(left, True, consumer_group)
                self._logged_removal(client_id, consumer_group, "consumer")
                self._notify_group(info)
                if not info.clients:
                    del self.consumers[consumer_group]

    def _logged_removal(self, client_id: str, group: str, role: str) -> None:
        if self.log is not None:
            self.log.info("client.unregistered", client_id=client_id, group=group, role=role)

    def connection_closed(self, conn: ClientConnection) -> set[str]:
        """Drop every registration made on ``conn``; return the client ids now gone
        from every group (their locks can be released). Costs the connection's own
        registrations (indexed by conn_id), not a scan of the tables."""
        regs = self._by_conn.pop(conn.conn_id, set())
        return self._drop(regs, lambda c: c.conn is conn)

    def expire(self) -> set[str]:
        deadline = time.monotonic() - self.expire_seconds
        regs = {(False, g, cid) for g, m in self.producers.items() for cid in m}
        regs |= {(True, g, cid) for g, i in self.consumers.items() for cid in i.clients}
        return self._drop(regs, lambda c: c.last_seen < deadline)

    def _drop(self, regs: set[tuple[bool, str, str]], pred: Any) -> set[str]:
        dropped: set[str] = set()
        changed: set[str] = set()
        for consumer, group, cid in regs:
            table = (
                self.consumers[group].clients
                if consumer and group in self.consumers
                else self.producers.get(group, {})
                if not consumer
                else {}
            )
            info = table.get(cid)
            if info is None or not pred(info):
                continue
            del table[cid]
            self._removed(info, consumer, group)
            dropped.add(cid)
            self._logged_removal(cid, group, "consumer" if consumer else "producer")
            if consumer:
                changed.add(group)
            elif not table:
                del self.producers[group]
        for group in changed:
            info_g = self.consumers[group]
            self._notify_group(info_g)
            if not info_g.clients:
                del self.consumers[group]
        return {cid for cid in dropped if not self.is_registered(cid)}

    def is_registered(self, client_id: str) -> bool:
        return client_id in self._count

    def _notify_group(self, info: ConsumerGroupInfo) -> None:
        for client in info.clients.values():
            client.conn.notify(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                ConsumerGroupRequestHeader(info.group).to_ext_fields(),
            )

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

    def try_lock(
        self, group: str, client_id: str, queues: list[tuple[str, int]]
    ) -> list[tuple[str, int]]:
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

    def release_clients(self, client_ids: set[str], group: str | None = None) -> int:
        """Release every lock held by these client ids (they left), in every group or only
        in ``group``; return how many."""
        if not client_ids:
            return 0
        gone = [
            k
            for k, (cid, _t) in self._locks.items()
            if cid in client_ids and (group is None or k[0] == group)
        ]
        for k in gone:
            del self._locks[k]
        return len(gone)

    def expire(self) -> int:
        """Purge lapsed locks (they already read as free); return how many."""
        deadline = time.monotonic() - self.lock_expire
        gone = [k for k, (_cid, t) in self._locks.items() if t < deadline]
        for k in gone:
            del self._locks[k]
        return len(gone)

    def __len__(self) -> int:
        return len(self._locks)

    def holder(self, group: str, topic: str, queue_id: int) -> str | None:
        cur = self._locks.get((group, topic, queue_id))
        if cur is None or time.monotonic() - cur[1] > self.lock_expire:
            return None
        return cur[0]
