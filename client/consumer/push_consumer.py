"""PushConsumer: RocketMQ's DefaultMQPushConsumer(Impl) for the bundled client.

Owns: the public consumer API (``subscribe``, ``unsubscribe``, ``register_listener``,
``assigned_queues``; ``start``, ``shutdown`` and ``async with`` come from
``ClientLifecycle``), the per-group timers (route 30 s, heartbeat 30 s, rebalance 20 s,
offset persist 5 s, orderly lock renewal 20 s), what a heartbeat says (subscriptions),
building the consume service at start, the broker's requests to a consumer
(NOTIFY_CONSUMER_IDS_CHANGED here, the others in callbacks.py) and the send-back fallback
producer. It holds a ``Rebalance`` (rebalance.py, RocketMQ's RebalanceImpl): the
subscriptions, the table ``MessageQueue -> ProcessQueue`` of owned queues, the rebalance
pass and the orderly locks; a new queue's start offset (``computePullFromWhere``) is
offset_store.py's.

Invariants:
* CLUSTERING: the owned queues are ``allocate_averagely(client_id, queues, members)``;
  a queue leaves the table (dropped, pulling stopped, offset persisted with an
  acknowledged UPDATE_CONSUMER_OFFSET, orderly lock released) before another member's
  rebalance can see it free, so two members never consume one queue in steady state.
  The ``%RETRY%<group>`` topic is subscribed automatically.
* Several brokers: the queues of every broker of a route are split; each is pulled from,
  and its offset kept on, its own broker. Every ``poll_name_server_interval`` the routes
  are refreshed; a broker no route lists is forgotten and a change of a topic's queues
  wakes the rebalance. A message whose storing broker cannot take it back is re-sent to
  ``%RETRY%<group>`` through an internal producer (``_send_back_fallback``, Java's
  ``sendMessageBack`` fallback); that producer starts on first use, stops on shutdown.
* Master/slave (docs/replication.md): the consumer heartbeats every broker of its routes,
  slaves too; a queue is pulled where the last answer suggested (the master, or a slave
  when the master is gone from the route: pull.py), and offsets are read and committed on
  the master, else on a slave (``_offset_addr_of``). Sends back, locks and queue-offset
  lookups go to the master only, as RocketMQ's.
* BROADCASTING: every queue is owned, offsets live in a local file, nothing is retried.
* Rebalances run one at a time (the rebalance's timer task); NOTIFY_CONSUMER_IDS_CHANGED
  from a broker only wakes that task.
* ``shutdown`` stops pulling, lets running listener calls finish (bounded), persists
  offsets, unlocks, unregisters, then closes connections.
* Options are ``PushConsumerOptions`` (client/options.py); the attributes copied from
  them (``group``, ``message_model``, ...) never change after construction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from kairosmq.protocol.bodies import MASTER_ID, ConsumerData, HeartbeatData
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import UnregisterClientRequestHeader
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.naming import retry_topic

from ..common import CLIENT_INNER_PRODUCER, Periodic, check_group, check_topic
from ..errors import ClientError, ClientStateError
from ..lifecycle import ClientLifecycle, ServiceState
from ..message import MessageQueue
from ..options import (
    ClientConfig,
    MessageModel,
    ProducerOptions,
    PushConsumerOptions,
    build_options,
)
from ..producer.producer import Producer
from ..remoting import RemotingClient
from . import callbacks
from .consume_service import (
    ConcurrentConsumeService,
    Listener,
    ListenerRunner,
    OrderlyConsumeService,
    SendBack,
    retry_message,
)
from .offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from .pull import Subscription
from .rebalance import Rebalance
from .selector import MessageSelector, check_in_brokers, tag_filter

__all__ = ["MessageModel", "PushConsumer"]

log = logging.getLogger("kairosmq.client.consumer")


class PushConsumer(ClientLifecycle):
    """An asyncio RocketMQ push consumer (long-poll pulls driven by rebalance).

    ``PushConsumer(group, namesrv, options=PushConsumerOptions(...), **overrides)``: the
    options (docs/client.md lists every field), with ``group``/``namesrv`` and any keyword
    named like a field (``pull_batch_size=64``) applied on top; ``request_timeout`` is
    accepted for ``mq_client_api_timeout``. ``InvalidName`` if the group breaks the naming
    rules, ``ValueError`` for an option out of range.
    """

    kind = "consumer"

    def __init__(
        self,
        group: str | None = None,
        namesrv: str | list[str] | None = None,
        *,
        options: PushConsumerOptions | None = None,
        **overrides: Any,
    ) -> None:
        if "request_timeout" in overrides:
            overrides["mq_client_api_timeout"] = overrides.pop("request_timeout")
        opts = build_options(
            PushConsumerOptions, options, consumer_group=group, namesrv_addr=namesrv, **overrides
        )
        check_group(opts.consumer_group)
        super().__init__(opts, on_request=self._on_request)
        self.options = opts
        self.group = opts.consumer_group
        self.message_model = opts.message_model
        self.consume_from_where = opts.consume_from_where
        self.consume_timestamp = opts.consume_timestamp
        self.pull_threshold_for_queue = opts.pull_threshold_for_queue
        self._clustering = opts.message_model is MessageModel.CLUSTERING
        self._offsets: OffsetStore
        if self._clustering:
            self._offsets = RemoteOffsetStore(
                self._pool, self.group, self._offset_addr_of, self.request_timeout
            )
        else:
            directory = opts.offset_store_dir or Path.home() / ".kairosmq_offsets"
            self._offsets = LocalOffsetStore(directory, self.group)
        self._rebalance = Rebalance(self, opts, self._offsets)
        self._subs = self._rebalance.subscriptions  # RocketMQ keeps them in RebalanceImpl
        self._listener: Listener | None = None
        self._orderly = False
        self._service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._runner: ListenerRunner | None = None
        self._producer: Producer | None = None  # send-back fallback, started on first use
        self._producer_started: asyncio.Task[None] | None = None
        self._timers = [
            Periodic("consumer-route", opts.poll_name_server_interval, self._poll_routes),
            Periodic("consumer-heartbeat", opts.heartbeat_broker_interval, self._heartbeat_all),
            Periodic(
                "consumer-offsets",
                opts.persist_consumer_offset_interval,
                self._rebalance.persist_offsets,
            ),
            self._rebalance.timer,
        ]

    # ------------------------------------------------------------ configuration

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Subscribe to ``topic`` with a tag expression (``"*"`` or ``"TagA || TagB"``) or
        a ``MessageSelector`` (``MessageSelector.sql("a > 5 AND region = 'eu'")``)."""
        check_topic(topic)
        sel = (
            expression
            if isinstance(expression, MessageSelector)
            else MessageSelector.tag(expression)
        )
        keep = tag_filter(sel.expression) if sel.is_tag else None  # SQL92: broker only
        self._subs[topic] = Subscription(
            topic, sel.expression, int(time.time() * 1000), keep, sel.expression_type
        )
        if self.running:
            self._spawn(self._heartbeat_all())
            self._rebalance.timer.wake()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self.running:
            self._rebalance.timer.wake()

    def register_listener(self, fn: Listener, *, orderly: bool = False) -> None:
        """Set the listener ``fn(msgs, context) -> ConsumeStatus`` (async or sync).

        With ``orderly=True`` each queue's messages are handed over one batch after
        another in queue order (CLUSTERING: only while this client holds the queue lock).
        """
        if self._state is not ServiceState.CREATE_JUST:
            raise ClientStateError("register the listener before start()")
        self._listener = fn
        self._orderly = orderly

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently owns (sorted)."""
        return sorted(self._rebalance.process_queues)

    # ------------------------------------------------------------ lifecycle hooks

    def _check_startable(self) -> None:
        if self._listener is None:
            raise ClientStateError("register_listener() before start()")
        if not self._subs:
            raise ClientStateError("subscribe() to at least one topic before start()")

    async def _start(self) -> None:
        """Look up routes, check SQL92 subscriptions, heartbeat, do the first rebalance."""
        opts = self.options
        assert self._listener is not None
        if self._clustering:
            rt = retry_topic(self.group)
            self._subs[rt] = Subscription(rt, "*", int(time.time() * 1000), None)
        # consume_timeout (minutes) bounds concurrent calls only: a retried orderly batch
        # must never overlap a call still running in a thread
        self._runner = ListenerRunner(
            self._listener,
            opts.consume_thread_max,
            None if self._orderly else opts.consume_timeout * 60,
        )
        # None or -1: RocketMQ's default, 16 for concurrent listeners, unlimited orderly
        limit = None if opts.max_reconsume_times in (None, -1) else opts.max_reconsume_times
        max_retry = 16 if limit is None else limit
        send_back = SendBack(
            self._pool.invoke,
            self._addr_of,
            self.group,
            max_retry,
            self._send_back_fallback if self._clustering else None,
        )
        kw: dict[str, Any] = dict(
            clustering=self._clustering,
            batch_size=opts.consume_message_batch_max_size,
            max_concurrency=opts.consume_thread_max,
        )
        record_offset = self._rebalance.record_offset
        if self._orderly:
            self._service = OrderlyConsumeService(
                self._runner,
                send_back,
                record_offset,
                suspend_millis=opts.suspend_current_queue_time_millis,
                max_reconsume_times=limit,
                **kw,
            )
            if self._clustering:
                self._timers.append(
                    Periodic("consumer-lock", opts.lock_renew_interval, self._rebalance.renew_locks)
                )
        else:
            self._service = ConcurrentConsumeService(self._runner, send_back, record_offset, **kw)
        self._rebalance.start(self._service, orderly=self._orderly)
        await self._refresh_routes()
        # SQL92 subscriptions must compile at every broker (Java checkClientInBroker)
        await check_in_brokers(
            self._pool.invoke,
            self._routes.broker_addrs(),
            self.client_id,
            self.group,
            self._subs.values(),
            self.request_timeout,
        )
        await self._heartbeat_all()
        await self._refresh_routes()  # the heartbeat may have created %RETRY%<group>
        await self._rebalance.do_rebalance()

    async def _shutdown(self) -> None:
        """Stop pulling, drain listener calls, persist offsets, unlock orderly queues."""
        for bg in list(self._bg):
            bg.cancel()
        self._rebalance.stop_pulling()  # the orderly tasks are drained below
        assert self._service is not None
        await self._service.drain(self.options.await_termination_seconds)
        await self._rebalance.release_all()
        if self._producer is not None:
            await self._producer.shutdown()

    def _close(self) -> None:
        if self._runner is not None:
            self._runner.close()

    def _unregister_header(self) -> UnregisterClientRequestHeader:
        return UnregisterClientRequestHeader(self.client_id, consumer_group=self.group)

    def _heartbeat_data(self) -> HeartbeatData:
        subs = [
            MessageSelector(s.expression_type, s.expression).subscription_data(
                s.topic, s.sub_version
            )
            for s in self._subs.values()
        ]
        consumer = ConsumerData(
            self.group,
            subs,
            message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
        )
        return HeartbeatData(self.client_id, [CLIENT_INNER_PRODUCER], [consumer])

    # ------------------------------------------------------------ broker plumbing

    def _addr_of(self, broker_name: str) -> str | None:
        return self._routes.broker_addr(broker_name)

    def _offset_addr_of(self, broker_name: str) -> str | None:
        """Where consumer offsets are read and committed: the master, else a slave
        (RocketMQ's RemoteBrokerOffsetStore falls back the same way)."""
        found = self._routes.find_in_subscribe(broker_name, MASTER_ID)
        return None if found is None else found[0]

    def _broker_addrs(self) -> set[str]:
        return self._routes.all_addrs()  # RocketMQ's consumers heartbeat slaves too

    def _on_request(self, _client: RemotingClient, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code in callbacks.CODES:  # consumerStatus / resetOffsetByTime (callbacks.py)
            return callbacks.on_request(cmd, self.options, self._rebalance)
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and self.running:
            self._rebalance.timer.wake()
            return cmd.response() if not cmd.is_oneway else None
        return None

    async def _refresh_routes(self) -> None:
        for topic in list(self._subs):
            try:
                await self._routes.refresh(topic)
            except ClientError as err:
                log.info("no route for %s yet: %s", topic, err)

    async def _poll_routes(self) -> None:
        """Every ``poll_name_server_interval``: refresh the routes, forget brokers no route
        lists, heartbeat new ones, and rebalance at once when a topic's queues changed (a
        broker joined or left) instead of at the next rebalance round."""
        before = {t: self._queues_of(t) for t in self._subs}
        await self._refresh_routes()
        await self._sync_brokers()
        if any(self._queues_of(t) != q for t, q in before.items()):
            self._rebalance.timer.wake()

    def _queues_of(self, topic: str) -> list[MessageQueue] | None:
        info = self._routes.cached(topic)
        return None if info is None else info.subscribe_queues

    async def _send_back_fallback(self, msg: MessageExt, delay_level: int) -> bool:
        """Java's sendMessageBack fallback: the storing broker could not take ``msg`` back,
        so re-send it to ``%RETRY%<group>`` (any broker) through an internal producer,
        as the broker would have (RETRY_TOPIC, ORIGIN_MESSAGE_ID, RECONSUME_TIME + 1,
        delay level 3 + reconsume times). False if that fails too."""
        if delay_level < 0 or not self.running:
            return False  # straight to the DLQ is the storing broker's job
        try:
            producer = await self._inner_producer()
            await producer.send(retry_message(msg, self.group, self._max_retry()))
        except ClientError as err:
            log.warning(
                "send-back fallback of %s to %s failed: %s",
                msg.msg_id,
                retry_topic(self.group),
                err,
            )
            return False
        return True

    def _max_retry(self) -> int:
        limit = self.options.max_reconsume_times
        return 16 if limit in (None, -1) else limit  # type: ignore[return-value]

    async def _inner_producer(self) -> Producer:
        if self._producer is None:
            base = {f.name: getattr(self.options, f.name) for f in fields(ClientConfig)}
            base["instance_name"] = None  # its own client id: it is another connection set
            self._producer = Producer(
                options=ProducerOptions(**base, producer_group=CLIENT_INNER_PRODUCER)
            )
            self._producer_started = asyncio.get_running_loop().create_task(self._producer.start())
        assert self._producer_started is not None
        await asyncio.shield(self._producer_started)
        return self._producer
