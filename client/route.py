"""Topic routes: name-server lookup (GET_ROUTEINFO_BY_TOPIC) and the client's route cache.

Owns: ``TopicRouteInfo`` (a route turned into publish/subscribe ``MessageQueue`` lists,
master addresses and every brokerId's address) and ``RouteCache`` (lookup, de-duplicated
concurrent fetches, refresh, RocketMQ's ``findBrokerAddressInSubscribe``).

Invariants:
* Producers publish to ``writeQueueNums`` queues of writable (perm WRITE) brokers that
  have a master (id 0); consumers read ``readQueueNums`` queues of readable brokers.
  Queue lists are sorted, so every client of a group sees the same order.
* On TOPIC_NOT_EXIST a producer lookup (``allow_default=True``) falls back to the route of
  ``TBW102`` with ``min(4, readQueueNums)`` queues per broker, as the Java producer does;
  the broker auto-creates the topic on the first send. Each refresh retries the real route.
* Name servers are tried in turn; the last one that answered is asked first next time.
* Several brokers: a route's queues are those of all its brokers; ``broker_addrs()`` is
  the union over every cached route's masters (the brokers a producer heartbeats;
  ``all_addrs()`` adds the slaves, which a consumer heartbeats too, as RocketMQ's), and a
  refresh replaces a topic's route whole, so a broker the name server dropped disappears.
* Master/slave (docs/replication.md): a consumer reads a broker name's queues at the
  brokerId it was told (``find_in_subscribe``), else at the lowest id the route lists:
  the master while it is there, a slave (brokerId >= 1) when the name server dropped it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from kairosmq.protocol.headers import GetRouteInfoRequestHeader
from kairosmq.protocol.naming import AUTO_CREATE_TOPIC_KEY

from .errors import BrokerError, ClientError, NoRouteError
from .message import MessageQueue
from .remoting import RemotingPool

log = logging.getLogger("kairosmq.client.route")

DEFAULT_TOPIC_QUEUE_NUMS = 4


@dataclass(frozen=True, slots=True)
class TopicRouteInfo:
    topic: str
    route: TopicRouteData
    publish_queues: list[MessageQueue]
    subscribe_queues: list[MessageQueue]
    broker_addrs: dict[str, str]  # broker name -> master address
    from_default: bool = False
    # broker name -> brokerId -> address (the master is 0, slaves >= 1)
    addr_table: dict[str, dict[int, str]] = field(default_factory=dict)

    def all_addrs(self) -> set[str]:
        return {a for ids in self.addr_table.values() for a in ids.values()}

    @classmethod
    def build(
        cls, topic: str, route: TopicRouteData, *, from_default: bool = False
    ) -> TopicRouteInfo:
        masters = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr}
        pub: list[MessageQueue] = []
        sub: list[MessageQueue] = []
        for q in route.queue_datas:
            wn, rn = q.write_queue_nums, q.read_queue_nums
            if from_default:
                wn = rn = min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums)
            if q.perm & PERM_WRITE and q.broker_name in masters:
                pub.extend(MessageQueue(topic, q.broker_name, i) for i in range(wn))
            if q.perm & PERM_READ:
                sub.extend(MessageQueue(topic, q.broker_name, i) for i in range(rn))
        return cls(
            topic,
            route,
            sorted(pub),
            sorted(sub),
            {k: v for k, v in masters.items() if v},
            from_default,
            {
                b.broker_name: {i: a for i, a in b.broker_addrs.items() if a}
                for b in route.broker_datas
            },
        )


class RouteCache:
    """Routes by topic, fetched from the name server(s) on demand and on refresh."""

    def __init__(self, pool: RemotingPool, namesrv: str | list[str], timeout: float) -> None:
        addrs = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
        self._namesrv = [a.strip() for a in addrs if a.strip()]
        if not self._namesrv:
            raise ValueError("at least one name server address is required")
        self._pool = pool
        self._timeout = timeout
        self._routes: dict[str, TopicRouteInfo] = {}
        self._allow_default: dict[str, bool] = {}
        self._inflight: dict[str, asyncio.Future[TopicRouteInfo]] = {}
        self.default_topic = AUTO_CREATE_TOPIC_KEY  # a producer's create_topic_key

    def cached(self, topic: str) -> TopicRouteInfo | None:
        return self._routes.get(topic)

    def topics(self) -> list[str]:
        return list(self._routes)

    def broker_addr(self, broker_name: str) -> str | None:
        """The master address of ``broker_name`` in the most recently fetched route that
        lists it (a broker restarted elsewhere is found at its new address first)."""
        for info in reversed(self._routes.values()):
            addr = info.broker_addrs.get(broker_name)
            if addr:
                return addr
        return None

    def broker_addrs(self) -> set[str]:
        return {a for info in self._routes.values() for a in info.broker_addrs.values()}

    def all_addrs(self) -> set[str]:
        """Every address of every cached route: masters and slaves."""
        return {a for info in self._routes.values() for a in info.all_addrs()}

    def find_in_subscribe(self, broker_name: str, broker_id: int) -> tuple[str, int] | None:
        """RocketMQ's ``findBrokerAddressInSubscribe(name, id, false)``: the address of
        ``broker_id`` of ``broker_name``, else of the lowest brokerId the newest route
        lists (the master, else a slave); with that id. None: no route lists the name."""
        for info in reversed(self._routes.values()):
            ids = info.addr_table.get(broker_name)
            if ids:
                bid = broker_id if broker_id in ids else min(ids)
                return ids[bid], bid
        return None

    async def get(self, topic: str, *, allow_default: bool = False) -> TopicRouteInfo:
        """The cached route of ``topic``, fetched first if unknown.

        Raises:
            NoRouteError: no name server knows the topic (nor TBW102, when allowed).
        """
        info = self._routes.get(topic)
        if info is not None:
            return info
        return await self.refresh(topic, allow_default=allow_default)

    async def refresh(self, topic: str, *, allow_default: bool = False) -> TopicRouteInfo:
        """Fetch ``topic``'s route now (concurrent callers share one request)."""
        self._allow_default[topic] = self._allow_default.get(topic, False) or allow_default
        fut = self._inflight.get(topic)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[topic] = fut
            try:
                info = await self._fetch(topic, self._allow_default[topic])
                self._routes.pop(topic, None)  # newest last: broker_addr prefers it
                self._routes[topic] = info
                fut.set_result(info)
            except asyncio.CancelledError:
                fut.cancel()
                raise
            except Exception as err:
                fut.set_exception(err)
                fut.exception()  # mark retrieved; the raise below reports it
                raise
            finally:
                del self._inflight[topic]
            return info
        return await asyncio.shield(fut)

    async def refresh_all(self) -> None:
        """Refresh every cached topic; failures keep the old route and are logged."""
        for topic in list(self._routes):
            try:
                await self.refresh(topic)
            except ClientError as err:
                log.warning("route refresh for %s failed: %s", topic, err)

    async def _fetch(self, topic: str, allow_default: bool) -> TopicRouteInfo:
        route = await self._ask(topic)
        if route is not None:
            return TopicRouteInfo.build(topic, route)
        if allow_default:
            default = await self._ask(self.default_topic)
            if default is not None:
                return TopicRouteInfo.build(topic, default, from_default=True)
        raise NoRouteError(f"no route for topic {topic!r} on name server {self._namesrv}")

    async def _ask(self, topic: str) -> TopicRouteData | None:
        """One GET_ROUTEINFO_BY_TOPIC; None on TOPIC_NOT_EXIST."""
        last: ClientError | None = None
        for _ in range(len(self._namesrv)):
            addr = self._namesrv[0]
            try:
                resp = await self._pool.invoke(
                    addr,
                    RequestCode.GET_ROUTEINFO_BY_TOPIC,
                    GetRouteInfoRequestHeader(topic).to_ext_fields(),
                    timeout=self._timeout,
                )
            except ClientError as err:
                last = err
                self._namesrv.append(self._namesrv.pop(0))
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError.for_code(resp.code, resp.remark, addr)
            try:
                return TopicRouteData.from_json(resp.body)
            except ValueError as err:
                raise NoRouteError(f"route of {topic!r} from {addr} is malformed: {err}") from err
        assert last is not None
        raise last
