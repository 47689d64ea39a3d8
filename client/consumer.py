"""PushConsumer: subscriptions, heartbeats, rebalance, queue ownership and offsets.

Owns: the public consumer API (``subscribe``, ``register_listener``, ``start``,
``shutdown``, ``async with``), the per-group timers (route 30 s, heartbeat 30 s,
rebalance 20 s, offset persist 5 s, orderly lock renewal 20 s), heartbeats and the
broker's NOTIFY_CONSUMER_IDS_CHANGED. The rebalance pass and the table
``MessageQueue -> ProcessQueue`` of owned queues are ``QueueOwnership`` in
``consumer_queues`` (inherited). Orderly locks live in ``queue_lock``, a new queue's start
offset (``computePullFromWhere``) in ``offset_store``.

Invariants:
* CLUSTERING: the owned queues are ``allocate_averagely(client_id, queues, members)``;
  a queue leaves the table (dropped, pulling stopped, offset persisted with an
  acknowledged UPDATE_CONSUMER_OFFSET, orderly lock released) before another member's
  rebalance can see it free, so two members never consume one queue in steady state.
  The ``%RETRY%<group>`` topic is subscribed automatically.
* BROADCASTING: every queue is owned, offsets live in a local file, nothing is retried.
* Rebalances run one at a time (one timer task); NOTIFY_CONSUMER_IDS_CHANGED from a
  broker only wakes that task.
* ``shutdown`` stops pulling, lets running listener calls finish (bounded), persists
  offsets, unlocks, unregisters, then closes connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from enum import Enum
from pathlib import Path
from typing import Any

from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
)
from kairosmq.protocol.codes import RequestCode, ResponseCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand

from .common import (
    CLIENT_INNER_PRODUCER,
    Periodic,
    check_group,
    check_topic,
    make_client_id,
    retry_topic,
    unregister_client,
)
from .consume import (
    ConcurrentConsumeService,
    Listener,
    ListenerRunner,
    OrderlyConsumeService,
    SendBack,
)
from .consumer_queues import QueueOwnership
from .errors import ClientError, ClientStateError
from .message import MessageQueue
from .offset_store import (
    ConsumeFromWhere,
    LocalOffsetStore,
    OffsetStore,
    RemoteOffsetStore,
)
from .process_queue import ProcessQueue
from .pull import PullSettings, Subscription
from .queue_lock import QueueLocker
from .rebalance import tag_filter
from .remoting import RemotingClient, RemotingPool, local_ip
from .route import RouteCache
from .selector import MessageSelector, check_in_brokers

log = logging.getLogger("kairosmq.client.consumer")


class MessageModel(Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class PushConsumer(QueueOwnership):
    """An asyncio RocketMQ push consumer (long-poll pulls driven by rebalance).

    Args:
        group: consumer group (``InvalidName`` if it breaks the naming rules).
        namesrv: name server address(es).
        message_model: CLUSTERING (queues split over members) or BROADCASTING (all).
        consume_from_where: where a group without a stored offset starts.
        consume_timestamp: ms, for ``ConsumeFromWhere.TIMESTAMP`` (default: 30 min ago).
        consume_thread_min / consume_thread_max: bounds of concurrent listener calls
            (20 / 20; at most ``max`` run at once, sync listeners in a pool of that size;
            ``min`` defaults to ``min(20, max)``).
        consume_message_batch_max_size: messages per listener call (1).
        pull_batch_size: messages per pull (32).
        pull_threshold_for_queue: in-flight messages per queue before pulling pauses (1000).
        max_reconsume_times: retries before the DLQ (16 concurrent; unlimited orderly).
        suspend_current_queue_time_millis: orderly pause before a local retry (1000).
        offset_store_dir: BROADCASTING offsets directory (``~/.kairosmq_offsets``).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | list[str] = "127.0.0.1:9876",
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp: int | None = None,
        consume_thread_min: int | None = None,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        max_reconsume_times: int | None = None,
        suspend_current_queue_time_millis: int = 1000,
        pull_time_delay_millis_when_exception: int = 3000,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        rebalance_interval: float = 20.0,
        persist_consumer_offset_interval: float = 5.0,
        lock_renew_interval: float = 20.0,
        offset_store_dir: str | Path | None = None,
        await_termination_seconds: float = 5.0,
        instance_name: str | None = None,
        request_timeout: float = 3.0,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        if consume_thread_min is None:
            consume_thread_min = min(20, consume_thread_max)
        if not 1 <= consume_thread_min <= consume_thread_max:
            raise ValueError("need 1 <= consume_thread_min <= consume_thread_max")
        if not 1 <= consume_message_batch_max_size <= 1024 or not 1 <= pull_batch_size <= 1024:
            raise ValueError("batch sizes must be within 1..1024")
        check_group(group)
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.await_termination_seconds = await_termination_seconds
        self.request_timeout = request_timeout
        self.client_id = make_client_id(local_ip(), instance_name)
        self._clustering = message_model is MessageModel.CLUSTERING
        self._pull_settings = PullSettings(
            group, retry_topic(group), pull_batch_size=pull_batch_size,
            pull_time_delay_millis_when_exception=pull_time_delay_millis_when_exception,
            commit_offset_on_pull=self._clustering,
        )
        self._pool = RemotingPool(on_request=self._on_request, serialize_type=serialize_type)
        self._routes = RouteCache(self._pool, namesrv, request_timeout)
        self._offsets: OffsetStore
        if self._clustering:
            self._offsets = RemoteOffsetStore(self._pool, group, self._addr_of, request_timeout)
        else:
            directory = offset_store_dir or Path.home() / ".kairosmq_offsets"
            self._offsets = LocalOffsetStore(directory, group)
        self._locker = QueueLocker(self._pool, group, self.client_id, self._addr_of,
                                   request_timeout)
        self._subs: dict[str, Subscription] = {}
        self._listener: Listener | None = None
        self._orderly = False
        self._service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._runner: ListenerRunner | None = None
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pq_tasks: dict[MessageQueue, list[asyncio.Task[None]]] = {}
        self._bg: set[asyncio.Task[None]] = set()
        self._heartbeated: set[str] = set()
        self._rebalance_timer = Periodic("consumer-rebalance", rebalance_interval, self._rebalance)
        self._timers = [
            Periodic("consumer-route", poll_name_server_interval, self._refresh_routes),
            Periodic("consumer-heartbeat", heartbeat_broker_interval, self._heartbeat_all),
            Periodic("consumer-offsets", persist_consumer_offset_interval, self._persist),
            self._rebalance_timer,
        ]
        self._lock_renew_interval = lock_renew_interval
        self._state = "created"

    # ------------------------------------------------------------ configuration

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (``"*"`` or ``"TagA || TagB"``) or
        a ``MessageSelector`` (``MessageSelector.sql("a > 5 AND region = 'eu'")``)."""
        check_topic(topic)
        sel = (expression if isinstance(expression, MessageSelector)
               else MessageSelector.tag(expression))
        keep = tag_filter(sel.expression) if sel.is_tag else None  # SQL92: broker only
        self._subs[topic] = Subscription(topic, sel.expression, int(time.time() * 1000), keep,
                                         sel.expression_type)
        if self._state == "running":
            self._spawn_soon(self._heartbeat_all())
            self._rebalance_timer.wake()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self._state == "running":
            self._rebalance_timer.wake()

    def register_listener(self, fn: Listener, *, orderly: bool = False) -> None:
        """Set the listener ``fn(msgs, context) -> ConsumeStatus`` (async or sync).

        With ``orderly=True`` each queue's messages are handed over one batch after
        another in queue order (CLUSTERING: only while this client holds the queue lock).
        """
        if self._state != "created":
            raise ClientStateError("register the listener before start()")
        self._listener = fn
        self._orderly = orderly

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Look up routes, heartbeat, and do the first rebalance before returning."""
        if self._state != "created":
            raise ClientStateError(f"consumer is {self._state}; start() runs once")
        if self._listener is None:
            raise ClientStateError("register_listener() before start()")
        if not self._subs:
            raise ClientStateError("subscribe() to at least one topic before start()")
        if self._clustering:
            rt = retry_topic(self.group)
            self._subs[rt] = Subscription(rt, "*", int(time.time() * 1000), None)
        self._runner = ListenerRunner(self._listener, self.consume_thread_max)
        max_retry = 16 if self.max_reconsume_times is None else self.max_reconsume_times
        send_back = SendBack(self._pool.invoke, self._addr_of, self.group, max_retry)
        kw: dict[str, Any] = dict(
            clustering=self._clustering, batch_size=self.consume_message_batch_max_size,
            max_concurrency=self.consume_thread_max,
        )
        if self._orderly:
            self._service = OrderlyConsumeService(
                self._runner, send_back, self._record_offset,
                suspend_millis=self.suspend_current_queue_time_millis,
                max_reconsume_times=self.max_reconsume_times, **kw,
            )
            self._pull_settings.orderly = True
            self._pull_settings.needs_lock = self._clustering
            if self._clustering:
                self._timers.append(
                    Periodic("consumer-lock", self._lock_renew_interval,
                             lambda: self._locker.renew(self._pqs))
                )
        else:
            self._service = ConcurrentConsumeService(
                self._runner, send_back, self._record_offset, **kw
            )
        self._state = "running"
        await self._refresh_routes()
        try:  # SQL92 subscriptions must compile at every broker (Java checkClientInBroker)
            await check_in_brokers(self._pool.invoke, self._routes.broker_addrs(),
                                   self.client_id, self.group, self._subs.values(),
                                   self.request_timeout)
        except ClientError:
            self._pool.close()
            self._runner.close()
            self._state = "shutdown"
            raise
        await self._heartbeat_all()
        await self._refresh_routes()  # the heartbeat may have created %RETRY%<group>
        await self._rebalance()
        for t in self._timers:
            t.start()

    async def shutdown(self) -> None:
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        for t in self._timers:
            await t.stop()
        for bg in list(self._bg):
            bg.cancel()
        for tasks in self._pq_tasks.values():
            tasks[0].cancel()  # the pull loop; the orderly task is drained below
        assert self._service is not None
        await self._service.drain(self.await_termination_seconds)
        mqs = list(self._pqs)
        for mq, pq in self._pqs.items():
            pq.drop()
            self._offsets.update(mq, pq.commit_offset)
        await self._offsets.persist(mqs, final=True)
        if self._orderly and self._clustering:
            await self._locker.unlock(mqs)
        for tasks in self._pq_tasks.values():
            for t in tasks:
                t.cancel()
        every = [t for ts in self._pq_tasks.values() for t in ts]
        await asyncio.gather(*every, return_exceptions=True)
        await unregister_client(self._pool, self._routes.broker_addrs(),
                                {"clientID": self.client_id, "consumerGroup": self.group})
        self._pool.close()
        if self._runner is not None:
            self._runner.close()
        self._state = "shutdown"

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently owns (sorted)."""
        return sorted(self._pqs)

    # ------------------------------------------------------------ broker plumbing

    def _addr_of(self, broker_name: str) -> str | None:
        return self._routes.broker_addr(broker_name)

    def _on_request(self, _client: RemotingClient, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and self._state == "running":
            self._rebalance_timer.wake()
            return cmd.response() if not cmd.is_oneway else None
        return None

    def _spawn_soon(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _refresh_routes(self) -> None:
        for topic in list(self._subs):
            try:
                await self._routes.refresh(topic)
            except ClientError as err:
                log.info("no route for %s yet: %s", topic, err)

    async def _heartbeat_all(self) -> None:
        subs = [
            MessageSelector(s.expression_type, s.expression).subscription_data(
                s.topic, s.sub_version)
            for s in self._subs.values()
        ]
        consumer = ConsumerData(
            self.group, subs, message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
        )
        body = HeartbeatData(self.client_id, [CLIENT_INNER_PRODUCER], [consumer]).to_json()
        for addr in self._routes.broker_addrs():
            self._heartbeated.add(addr)
            try:
                resp = await self._pool.invoke(addr, RequestCode.HEART_BEAT, None, body,
                                               timeout=self.request_timeout)
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("heartbeat to %s answered %d %s", addr, resp.code, resp.remark)
            except ClientError as err:
                log.warning("heartbeat to %s failed: %s", addr, err)

    async def _persist(self) -> None:
        for mq, pq in self._pqs.items():
            self._offsets.update(mq, pq.commit_offset)
        await self._offsets.persist(list(self._pqs))

    def _record_offset(self, pq: ProcessQueue, offset: int) -> None:
        if not pq.dropped:
            self._offsets.update(pq.mq, offset)
