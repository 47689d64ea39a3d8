"""Rebalance: which queues this consumer owns, and the table of owned queues.

Owns: ``Rebalance`` (RocketMQ's ``RebalanceImpl`` / ``RebalancePushImpl`` for one
consumer group): the subscriptions (``subscriptionInner``), the table ``MessageQueue ->
ProcessQueue`` of owned queues (``processQueueTable``) with each owned queue's tasks (its
pull loop, plus the orderly consume task), the rebalance pass (``do_rebalance``, per
subscribed topic: route, member list from a broker, ``allocate_averagely`` in CLUSTERING
or every queue in BROADCASTING; its own timer, ``timer``), adding a queue (orderly lock,
start offset, pull loop: ``dispatchPullRequest``), removing one (offset persisted,
unlock: ``removeUnnecessaryMessageQueue``) and the orderly locks (``QueueLocker``).
Also ``allocate_averagely`` (RocketMQ's ``AllocateMessageQueueAveragely``, a pure
function). ``PushConsumer`` (push_consumer.py) holds one ``Rebalance`` and gives it the
client (routes, connections, heartbeats), its options and its offset store; it sets the
consume service and the orderly flag at start (``start``).

Invariants:
* Allocation: given the same sorted queue list and the same sorted client-id list, every
  member computes the same split, each queue goes to exactly one member, and shares
  differ by at most one queue (the first ``len(mqs) % len(cids)`` members get the extra
  ones). A client id missing from the list gets nothing (not yet registered by heartbeat).
* A queue leaves the table (dropped, pull loop cancelled, a running orderly batch let
  finish for up to 1 s, offset persisted with an acknowledged UPDATE_CONSUMER_OFFSET,
  orderly lock released) before ``_remove_queue`` returns, so another member's rebalance
  never sees it free while this one still consumes it.
* CLUSTERING orderly: a queue is added only once its broker lock is held.
* A pass that misses a route or a lock wakes the rebalance timer again after 1 s instead
  of waiting the full interval; a member list that cannot be fetched leaves the topic's
  queues as they are.
* Queues of topics no longer subscribed are removed in every pass.
* Passes run one at a time (one timer task); ``timer.wake()`` only wakes that task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from kairosmq.protocol.bodies import decode_consumer_list
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import ConsumerGroupRequestHeader
from kairosmq.protocol.naming import retry_topic

from ..common import Periodic
from ..errors import ClientError
from ..lifecycle import ClientLifecycle
from ..message import MessageQueue
from ..options import MessageModel, PushConsumerOptions
from .consume_service import ConcurrentConsumeService, OrderlyConsumeService
from .offset_store import OffsetStore, compute_start_offset
from .process_queue import ProcessQueue
from .pull import PullSettings, Subscription, pull_loop
from .queue_lock import QueueLocker

__all__ = ["Rebalance", "allocate_averagely"]

# the consumer's logger: rebalance messages keep the name they always had
log = logging.getLogger("kairosmq.client.consumer")


def allocate_averagely(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """The queues ``current_cid`` owns; inputs need not be sorted (they are sorted here)."""
    mqs = sorted(mq_all)
    cids = sorted(set(cid_all))
    if not mqs or current_cid not in cids:
        return []
    index = cids.index(current_cid)
    n_mq, n_cid = len(mqs), len(cids)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    count = min(average, n_mq - start)
    return [mqs[(start + i) % n_mq] for i in range(max(0, count))]


class Rebalance:
    """The owned queues of one push consumer and the pass that decides them."""

    def __init__(
        self, client: ClientLifecycle, options: PushConsumerOptions, offsets: OffsetStore
    ) -> None:
        self.client = client
        self.group = options.consumer_group
        self.clustering = options.message_model is MessageModel.CLUSTERING
        self.orderly = False  # set by start()
        self.subscriptions: dict[str, Subscription] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.offsets = offsets
        self.service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self.timer = Periodic("consumer-rebalance", options.rebalance_interval, self.do_rebalance)
        self._options = options
        self._tasks: dict[MessageQueue, list[asyncio.Task[None]]] = {}
        self._pool = client._pool
        self._routes = client._routes
        self._addr_of = client._routes.broker_addr
        self._timeout = client.request_timeout
        self._locker = QueueLocker(
            self._pool, self.group, client.client_id, self._addr_of, self._timeout
        )
        self._pull = PullSettings(
            self.group,
            retry_topic(self.group),
            pull_batch_size=options.pull_batch_size,
            pull_time_delay_millis_when_exception=options.pull_time_delay_millis_when_exception,
            pull_interval=options.pull_interval,
            commit_offset_on_pull=self.clustering,
        )

    def start(
        self, service: ConcurrentConsumeService | OrderlyConsumeService, *, orderly: bool
    ) -> None:
        """Set what the first pass needs: the consume service and the listener's kind."""
        self.service = service
        self.orderly = orderly
        if orderly:
            self._pull.orderly = True
            self._pull.needs_lock = self.clustering

    # ------------------------------------------------------------ the pass

    async def do_rebalance(self) -> None:
        client = self.client
        lock_failed = False
        for topic in list(self.subscriptions):
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
            if not client._broker_addrs() <= client._heartbeated:
                await client._heartbeat_all()  # a broker we never told about our group
            mqs = info.subscribe_queues
            if self.clustering:
                cids = await self._consumer_ids(info.all_addrs(), set(info.broker_addrs.values()))
                if cids is None:
                    continue
                mine = set(allocate_averagely(client.client_id, mqs, cids))
            else:
                mine = set(mqs)
            lock_failed |= await self._update_queues(topic, mine)
        for mq in [mq for mq in self.process_queues if mq.topic not in self.subscriptions]:
            await self._remove_queue(mq)
        if lock_failed and client.running:  # a lock or a route is missing
            asyncio.get_running_loop().call_later(1.0, self.timer.wake)

    async def _consumer_ids(self, addrs: Any, masters: Any = ()) -> list[str] | None:
        """The group's members from the first broker of the route that lists this client.

        Masters are asked before slaves (RocketMQ's selectBrokerAddr: the master, else a
        slave), brokers in reconnect backoff (dead) last. A broker that does not list
        this client yet (restarted, or our heartbeat has not reached it) is heartbeated and
        the next one asked (the first one twice): its list would leave this member out and
        make it drop every queue. None when no broker answers with a list that includes
        this client (the queues then stay as they are).
        """
        client = self.client
        order = sorted(addrs, key=lambda a: (self._pool.backing_off(a), a not in masters, a))
        for addr in order + order[:1]:  # the first one again after heartbeating it
            try:
                resp = await self._pool.invoke(
                    addr,
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    ConsumerGroupRequestHeader(self.group).to_ext_fields(),
                    timeout=self._timeout,
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
            if client.client_id in cids:
                return cids
            log.info(
                "broker %s does not list %s in group %s yet: heartbeating it",
                addr,
                client.client_id,
                self.group,
            )
            await client._heartbeat(addr, client._heartbeat_data().to_json())
        return None

    # ------------------------------------------------------------ the table

    async def _update_queues(self, topic: str, mine: set[MessageQueue]) -> bool:
        """Drop queues of ``topic`` no longer ours, add new ones; True if a lock failed."""
        pqs = self.process_queues
        for mq in [mq for mq in pqs if mq.topic == topic and mq not in mine]:
            await self._remove_queue(mq)
        locking = self.orderly and self.clustering
        lock_failed = False
        for mq in sorted(mine - pqs.keys()):
            if not self.client.running:
                break
            if locking and not await self._locker.lock([mq], pqs):
                lock_failed = True
                continue
            opts = self._options
            try:
                offset = await compute_start_offset(
                    self.offsets,
                    mq,
                    opts.consume_from_where,
                    opts.consume_timestamp,
                    pool=self._pool,
                    addr_of=self._addr_of,
                    timeout=self._timeout,
                )
            except ClientError as err:
                log.info("cannot compute the start offset of %s: %s", mq, err)
                continue
            pq = ProcessQueue(mq, offset, opts.pull_threshold_for_queue)
            if locking:
                pq.locked, pq.lock_time = True, time.monotonic()
            self._add_queue(pq)
        return lock_failed

    def _add_queue(self, pq: ProcessQueue) -> None:
        assert self.service is not None
        self.process_queues[pq.mq] = pq
        self.offsets.update(pq.mq, pq.next_offset, increase_only=False)
        loop = asyncio.get_running_loop()
        sub = self.subscriptions[pq.mq.topic]
        tasks = [
            loop.create_task(
                pull_loop(
                    pq,
                    sub,
                    self._pull,
                    self._pool,
                    self._routes.find_in_subscribe,
                    lambda p: self.offsets.cached(p.mq),
                    self.service.submit,
                    self.record_offset,
                ),
                name=f"pull {pq.mq}",
            )
        ]
        orderly_task = self.service.start_queue(pq)
        if orderly_task is not None:
            tasks.append(orderly_task)
        self._tasks[pq.mq] = tasks

    async def _remove_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq)
        pq.drop()
        tasks = self._tasks.pop(mq, [])
        for t in tasks[:1]:
            t.cancel()
        if pq.consuming:  # orderly: let the running batch finish before unlocking
            await asyncio.wait(tasks[1:], timeout=1.0)
        self.offsets.update(mq, pq.commit_offset)
        await self.offsets.persist([mq], final=True)
        self.offsets.remove(mq)
        if self.orderly and self.clustering:
            await self._locker.unlock([mq])
        for t in tasks:
            t.cancel()

    def forget_queue(self, mq: MessageQueue) -> None:
        """Drop ``mq`` at once (nothing awaited, its offset left to the caller): its pull
        loop and orderly task are cancelled and the next pass adds it again."""
        pq = self.process_queues.pop(mq)
        pq.drop()
        for task in self._tasks.pop(mq, []):
            task.cancel()

    # ------------------------------------------------------------ offsets and locks

    def record_offset(self, pq: ProcessQueue, offset: int) -> None:
        """A queue's new commit offset (consume service, pull loop); ignored once dropped."""
        if not pq.dropped:
            self.offsets.update(pq.mq, offset)

    async def persist_offsets(self) -> None:
        """Every ``persist_consumer_offset_interval``: each owned queue's commit offset."""
        for mq, pq in self.process_queues.items():
            self.offsets.update(mq, pq.commit_offset)
        await self.offsets.persist(list(self.process_queues))

    async def renew_locks(self) -> None:
        """Every ``lock_renew_interval`` (orderly CLUSTERING): lock the owned queues again."""
        await self._locker.renew(self.process_queues)

    # ------------------------------------------------------------ shutdown

    def stop_pulling(self) -> None:
        """Cancel every owned queue's pull loop (the orderly tasks are the service's to
        drain)."""
        for tasks in self._tasks.values():
            tasks[0].cancel()

    async def release_all(self) -> None:
        """At shutdown, after the consume service drained: drop every queue, persist its
        offset (acknowledged), unlock orderly queues, end every queue task."""
        mqs = list(self.process_queues)
        for mq, pq in self.process_queues.items():
            pq.drop()
            self.offsets.update(mq, pq.commit_offset)
        await self.offsets.persist(mqs, final=True)
        if self.orderly and self.clustering:
            await self._locker.unlock(mqs)
        for tasks in self._tasks.values():
            for t in tasks:
                t.cancel()
        every = [t for ts in self._tasks.values() for t in ts]
        await asyncio.gather(*every, return_exceptions=True)
