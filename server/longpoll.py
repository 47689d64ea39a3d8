"""Long polling: park pulls until a message arrives in their queue or a deadline passes.

Owns: ``ArrivalNotifier`` — waiters keyed by (topic, queue id). The store's dispatch
listener calls ``notify`` for every stored unit; PULL handlers (and the delay scheduler)
``await wait(...)``. RocketMQ's PullRequestHoldService plus NotifyMessageArrivingListener.

Invariants: ``notify`` is O(1) when nobody waits on the key (one dict lookup per stored
message); a waiter wakes at most once; ``close`` wakes every waiter so a stopping broker
answers held pulls instead of dropping them.
"""

from __future__ import annotations

import asyncio


class ArrivalNotifier:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future[bool]]] = {}
        self.closed = False

    @property
    def held(self) -> int:
        return sum(len(s) for s in self._waiters.values())

    def notify(self, topic: str, queue_id: int) -> None:
        waiters = self._waiters.pop((topic, queue_id), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    async def wait(self, topic: str, queue_id: int, timeout: float | None) -> bool:
        """Wait for an arrival on the queue; True if notified, False on timeout/close."""
        if self.closed:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        key = (topic, queue_id)
        self._waiters.setdefault(key, set()).add(fut)
        timer = None if timeout is None else loop.call_later(timeout, _expire, fut)
        try:
            return await fut and not self.closed
        finally:
            if timer is not None:
                timer.cancel()
            s = self._waiters.get(key)
            if s is not None:
                s.discard(fut)
                if not s:
                    del self._waiters[key]

    def close(self) -> None:
        self.closed = True
        for waiters in list(self._waiters.values()):
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)
        self._waiters.clear()


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
