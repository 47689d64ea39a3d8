"""QueueOwnership: the rebalance pass and the consumer's table of owned queues.

Owns: ``_rebalance`` (per subscribed topic: route, member list from the broker,
``allocate_averagely`` in CLUSTERING or every queue in BROADCASTING), the table
``MessageQueue -> ProcessQueue`` (``_pqs``) with each owned queue's tasks (``_pq_tasks``:
its pull loop, plus the orderly consume task) and adding/removing a queue (start offset,
orderly lock, offset persist, unlock). ``PushConsumer`` (consumer.py) inherits these and
owns the state they read (subscriptions, routes, offset store, locker, consume service).

Invariants:
* A queue leaves the table (dropped, pull loop cancelled, a running orderly batch let
  finish for up to 1 s, offset persisted with an acknowledged UPDATE_CONSUMER_OFFSET,
  orderly lock released) before ``_remove_queue`` returns, so another member's rebalance
  never sees it free while this one still consumes it.
* CLUSTERING orderly: a queue is added only once its broker lock is held.
* A pass that misses a route or a lock wakes the rebalance timer again after 1 s instead
  of waiting the full interval; a member list that cannot be fetched leaves the topic's
  queues as they are.
* Queues of topics no longer subscribed are removed in every pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kairosmq.protocol.bodies import decode_consumer_list
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import ConsumerGroupRequestHeader

from ..common import Periodic
from ..errors import ClientError
from ..message import MessageQueue
from ..remoting import RemotingPool
from ..route import RouteCache
from .consume_service import ConcurrentConsumeService, OrderlyConsumeService
from .offset_store import ConsumeFromWhere, OffsetStore, compute_start_offset
from .process_queue import ProcessQueue
from .pull import PullSettings, Subscription, pull_loop
from .queue_lock import QueueLocker
from .rebalance import allocate_averagely

__all__ = ["QueueOwnership"]

# the consumer's logger: rebalance messages keep the name they always had
log = logging.getLogger("kairosmq.client.consumer")


class QueueOwnership:
    """Rebalance and queue-table methods of ``PushConsumer`` (a mixin over the state below)."""

    group: str
    client_id: str
    request_timeout: float
    consume_from_where: ConsumeFromWhere
    consume_timestamp: int | None
    pull_threshold_for_queue: int
    running: bool
    _clustering: bool
    _orderly: bool
    _subs: dict[str, Subscription]
    _routes: RouteCache
    _pool: RemotingPool
    _offsets: OffsetStore
    _locker: QueueLocker
    _service: ConcurrentConsumeService | OrderlyConsumeService | None
    _pull_settings: PullSettings
    _pqs: dict[MessageQueue, ProcessQueue]
    _pq_tasks: dict[MessageQueue, list[asyncio.Task[None]]]
    _heartbeated: set[str]
    _rebalance_timer: Periodic
    _heartbeat_all: Callable[[], Awaitable[None]]
    _heartbeat: Callable[[str, bytes], Awaitable[None]]
    _heartbeat_data: Callable[[], Any]
    _addr_of: Callable[[str], str | None]
    _record_offset: Callable[[ProcessQueue, int], None]

    async def _rebalance(self) -> None:
        lock_failed = False
        for topic in list(self._subs):
            info = self._routes.cached(topic)
            if info is None:
                try:
                    info = await self._routes.refresh(topic)
                except ClientError as err:
                    # The topic may be created any moment (first send auto-creates it):
                    # look again in a second rather than after the full interval.
                    log.info("rebalance skips %s: %s", topic, err)
                    lock_failed = True
                    continue
            if not self._routes.broker_addrs() <= self._heartbeated:
                await self._heartbeat_all()  # a broker we never told about our group
            mqs = info.subscribe_queues
            if self._clustering:
                cids = await self._consumer_ids(info.broker_addrs.values())
                if cids is None:
                    continue
                mine = set(allocate_averagely(self.client_id, mqs, cids))
            else:
                mine = set(mqs)
            lock_failed |= await self._update_queues(topic, mine)
        for mq in [mq for mq in self._pqs if mq.topic not in self._subs]:
            await self._remove_queue(mq)
        if lock_failed and self.running:  # a lock or a route is missing
            asyncio.get_running_loop().call_later(1.0, self._rebalance_timer.wake)

    async def _consumer_ids(self, addrs: Any) -> list[str] | None:
        """The group's members from the first broker of the route that lists this client.

        Brokers in reconnect backoff (dead) are asked last. A broker that does not list
        this client yet (restarted, or our heartbeat has not reached it) is heartbeated and
        the next one asked (the first one twice): its list would leave this member out and
        make it drop every queue. None when no broker answers with a list that includes
        this client (the queues then stay as they are).
        """
        order = sorted(addrs, key=lambda a: (self._pool.backing_off(a), a))
        for addr in order + order[:1]:  # the first one again after heartbeating it
            try:
                resp = await self._pool.invoke(
                    addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    ConsumerGroupRequestHeader(self.group).to_ext_fields(),
                    timeout=self.request_timeout,
                )
            except ClientError as err:
                log.info("consumer list from %s failed: %s", addr, err)
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            try:
                cids = decode_consumer_list(resp.body)
            except ValueError as err:
                log.warning("bad consumer list from %s: %s", addr, err)
                continue
            if self.client_id in cids:
                return cids
            log.info("broker %s does not list %s in group %s yet: heartbeating it", addr,
                     self.client_id, self.group)
            await self._heartbeat(addr, self._heartbeat_data().to_json())
        return None

    async def _update_queues(self, topic: str, mine: set[MessageQueue]) -> bool:
        """Drop queues of ``topic`` no longer ours, add new ones; True if a lock failed."""
        for mq in [mq for mq in self._pqs if mq.topic == topic and mq not in mine]:
            await self._remove_queue(mq)
        lock_failed = False
        for mq in sorted(mine - self._pqs.keys()):
            if not self.running:
                break
            if self._orderly and self._clustering and not await self._locker.lock([mq], self._pqs):
                lock_failed = True
                continue
            try:
                offset = await compute_start_offset(
                    self._offsets, mq, self.consume_from_where, self.consume_timestamp,
                    pool=self._pool, addr_of=self._addr_of, timeout=self.request_timeout,
                )
            except ClientError as err:
                log.info("cannot compute the start offset of %s: %s", mq, err)
                continue
            pq = ProcessQueue(mq, offset, self.pull_threshold_for_queue)
            if self._orderly and self._clustering:
                pq.locked, pq.lock_time = True, time.monotonic()
            self._add_queue(pq)
        return lock_failed

    def _add_queue(self, pq: ProcessQueue) -> None:
        assert self._service is not None
        self._pqs[pq.mq] = pq
        self._offsets.update(pq.mq, pq.next_offset, increase_only=False)
        loop = asyncio.get_running_loop()
        sub = self._subs[pq.mq.topic]
        tasks = [loop.create_task(pull_loop(
            pq, sub, self._pull_settings, self._pool, self._addr_of,
            lambda p: self._offsets.cached(p.mq), self._service.submit, self._record_offset,
        ), name=f"pull {pq.mq}")]
        orderly_task = self._service.start_queue(pq)
        if orderly_task is not None:
            tasks.append(orderly_task)
        self._pq_tasks[pq.mq] = tasks

    async def _remove_queue(self, mq: MessageQueue) -> None:
        pq = self._pqs.pop(mq)
        pq.drop()
        tasks = self._pq_tasks.pop(mq, [])
        for t in tasks[:1]:
            t.cancel()
        if pq.consuming:  # orderly: let the running batch finish before unlocking
            await asyncio.wait(tasks[1:], timeout=1.0)
        self._offsets.update(mq, pq.commit_offset)
        await self._offsets.persist([mq], final=True)
        self._offsets.remove(mq)
        if self._orderly and self._clustering:
            await self._locker.unlock([mq])
        for t in tasks:
            t.cancel()
