"""Long polling: park pulls until a message arrives in their queue or a deadline passes.

Owns: ``ArrivalNotifier`` — waiters keyed by (topic, queue id). The store's dispatch
listener calls ``notify`` for every stored unit; PULL handlers (and the delay scheduler)
``await wait(...)``. RocketMQ's PullRequestHoldService plus NotifyMessageArrivingListener.
``PullHolds`` — the count of held pulls per connection and in total, with their limits.

Invariants: ``notify`` is O(1) when nobody waits on the key (one dict lookup per stored
message); a waiter wakes at most once; ``close`` wakes every waiter so a stopping broker
answers held pulls instead of dropping them. A pull is held only if ``PullHolds.acquire``
admitted it (below both limits); beyond them it is answered at once (PULL_NOT_FOUND), so
held pulls cost bounded memory; every admitted hold is released exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


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


class PullHolds:
    """Admission of long-polled pulls: at most ``per_connection`` held per connection
    (counted in the connection's ``held_pulls`` attribute) and ``total`` overall."""

    def __init__(self, per_connection: int, total: int) -> None:
        self.per_connection = per_connection
        self.limit = total
        self.held = 0
        self.refused = 0

    def acquire(self, conn: Any) -> bool:
        n = getattr(conn, "held_pulls", 0)
        if n >= self.per_connection or self.held >= self.limit:
            self.refused += 1
            return False
        conn.held_pulls = n + 1
        self.held += 1
        return True

    def release(self, conn: Any) -> None:
        conn.held_pulls -= 1
        self.held -= 1

    async def run(self, conn: Any, hold: Awaitable[T]) -> T:
        """Await an admitted hold, releasing it however it ends."""
        try:
            return await hold
        finally:
            self.release(conn)
