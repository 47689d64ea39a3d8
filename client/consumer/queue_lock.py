"""Orderly queue locks: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ on the broker owning a queue.

Owns: building the ``LockBatchRequest`` body for ``(group, client_id)`` and sending lock,
renew and unlock requests, grouped per broker. It holds no table of its own: the
Rebalance's ``MessageQueue -> ProcessQueue`` table (rebalance.py, which holds the locker)
is passed in, and ``lock`` records the outcome on those process queues (``locked``,
``lock_time``).

Invariants:
* one lock request only names queues of one broker (``renew``/``unlock`` group them);
* after a lock answer every listed queue still in the table has ``locked`` set to whether
  the broker granted it, and a granted one gets ``lock_time = time.monotonic()``;
* a failed request (no address, connection, timeout, bad body) locks nothing and is
  only logged; unlock failures are logged too (the broker lock then simply expires).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from kairosmq.protocol.bodies import LockBatchRequest, MessageQueueData, decode_lock_response
from kairosmq.protocol.codes import RequestCode, ResponseCode

from ..errors import ClientError
from ..message import MessageQueue
from ..remoting import RemotingPool
from .process_queue import ProcessQueue

log = logging.getLogger("kairosmq.client.consumer.lock")


def _by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    by_broker: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        by_broker.setdefault(mq.broker_name, []).append(mq)
    return by_broker


class QueueLocker:
    """Locks queues of ``group`` for ``client_id`` (RocketMQ ``RebalanceImpl.lock``)."""

    def __init__(
        self,
        pool: RemotingPool,
        group: str,
        client_id: str,
        addr_of: Callable[[str], str | None],
        request_timeout: float = 3.0,
    ) -> None:
        self._pool = pool
        self._group = group
        self._client_id = client_id
        self._addr_of = addr_of
        self._timeout = request_timeout

    def _body(self, mqs: list[MessageQueue]) -> bytes:
        data = [MessageQueueData(m.topic, m.broker_name, m.queue_id) for m in mqs]
        return LockBatchRequest(self._group, self._client_id, data).to_json()

    async def lock(self, mqs: list[MessageQueue], pqs: Mapping[MessageQueue, ProcessQueue]) -> bool:
        """LOCK_BATCH_MQ for ``mqs`` (one broker); True if all of them were locked.

        The outcome is recorded on the entries of ``pqs`` for ``mqs`` (looked up after
        the answer, so queues added or removed meanwhile are handled).
        """
        addr = self._addr_of(mqs[0].broker_name)
        if addr is None:
            return False
        try:
            resp = await self._pool.invoke(
                addr,
                RequestCode.LOCK_BATCH_MQ,
                None,
                self._body(mqs),
                timeout=self._timeout,
            )
            locked = decode_lock_response(resp.body) if resp.code == ResponseCode.SUCCESS else []
        except (ClientError, ValueError) as err:
            log.info("lock of %s failed: %s", [str(m) for m in mqs], err)
            return False
        got = {MessageQueue(m.topic, m.broker_name, m.queue_id) for m in locked}
        now = time.monotonic()
        for mq in mqs:
            pq = pqs.get(mq)
            if pq is not None:
                pq.locked = mq in got
                if pq.locked:
                    pq.lock_time = now
        return all(mq in got for mq in mqs)

    async def renew(self, pqs: Mapping[MessageQueue, ProcessQueue]) -> None:
        """Re-lock every queue in ``pqs``, one request per broker."""
        for mqs in _by_broker(pqs).values():
            await self.lock(mqs, pqs)

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ for ``mqs``, one request per broker; failures are logged."""
        for name, group in _by_broker(mqs).items():
            addr = self._addr_of(name)
            if addr is None:
                continue
            try:
                await self._pool.invoke(
                    addr,
                    RequestCode.UNLOCK_BATCH_MQ,
                    None,
                    self._body(group),
                    timeout=self._timeout,
                )
            except ClientError as err:
                log.info("unlock of %s failed: %s", [str(m) for m in group], err)
