"""Long polling: park pulls until a message arrives in their queue or a deadline passes.

Owns: ``ArrivalNotifier`` — waiters keyed by (topic, queue id). The store's dispatch
listener calls ``notify`` for every stored unit. Held pulls register a ``Held`` callback
(``hold``: no task, no coroutine per pull); the delay scheduler ``await``s ``wait(...)``.
RocketMQ's PullRequestHoldService plus NotifyMessageArrivingListener. ``PullHolds`` — the
count of held pulls per connection and in total, with their limits.

The arrival path (``on_dispatch``, ``notify``, ``hold``, ``Held.fire``, ``_wake``) is the
reference of its native twin (``_longpoll.pyx``, chosen by ``protocol/native.py``).

Invariants: ``notify`` is O(1) when nobody waits on the key (one dict lookup per stored
message); a waiter wakes at most once; the held pulls of a key wake in one loop callback
after the arrival (so the appends of this loop turn are written and answered together);
``close`` wakes every waiter so a stopping broker answers held pulls instead of dropping
them. A pull is held only if ``PullHolds.acquire`` admitted it (below both limits); beyond
them it is answered at once (PULL_NOT_FOUND), so held pulls cost bounded memory; every
admitted hold is released exactly once (``Held`` fires once: arrival, deadline or close).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any  # Any: a connection (only its held_pulls attribute is read)

from kairosmq.protocol import native

if TYPE_CHECKING:
    from ..store.types import DispatchRequest


class Held:
    """A held pull: ``answer(notified)`` runs once, on an arrival in its queue (True), at
    its deadline or when the notifier closes (False)."""

    __slots__ = ("answer", "key", "timer", "done")

    def __init__(self, answer: Callable[[bool], None], key: tuple[str, int]) -> None:
        self.answer = answer
        self.key = key
        self.timer: asyncio.TimerHandle | None = None
        self.done = False

    def fire(self, notified: bool) -> None:
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.answer(notified)


class ArrivalNotifier:
    # slots: the native twin reads the tables ``notify`` looks at per stored message in
    # place (``_longpoll.pyx``)
    __slots__ = ("_waiters", "_held", "closed", "_loop")

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future[bool]]] = {}
        self._held: dict[tuple[str, int], dict[Held, None]] = {}  # insertion order kept
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def held(self) -> int:
        return sum(len(s) for s in self._waiters.values()) + sum(
            len(h) for h in self._held.values()
        )

    def is_waiting(self, topic: str, queue_id: int) -> bool:
        """Something (a held pull, the scheduler) waits for an arrival in the queue."""
        key = (topic, queue_id)
        return bool(self._waiters.get(key) or self._held.get(key))

    def on_dispatch(self, req: DispatchRequest) -> None:
        """The store's dispatch listener: ``notify`` of a stored record's queue (a record
        replayed at recovery wakes nobody)."""
        if not req.replay:
            self.notify(req.topic, req.queue_id)

    def notify(self, topic: str, queue_id: int) -> None:
        key = (topic, queue_id)
        if self._waiters:
            waiters = self._waiters.pop(key, None)
            if waiters:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(True)
        if self._held:
            held = self._held.pop(key, None)
            if held and self._loop is not None:
                self._loop.call_soon(_wake, held)

    def hold(
        self, topic: str, queue_id: int, answer: Callable[[bool], None], timeout: float
    ) -> Held:
        """Park a pull: ``answer(True)`` after the next arrival in the queue,
        ``answer(False)`` after ``timeout`` seconds or at close (at once if closed)."""
        h = Held(answer, (topic, queue_id))
        if self.closed:
            h.fire(False)
            return h
        loop = self._loop = self._loop or asyncio.get_running_loop()
        self._held.setdefault(h.key, {})[h] = None
        h.timer = loop.call_later(timeout, self._expire_held, h)
        return h

    def _expire_held(self, h: Held) -> None:
        parked = self._held.get(h.key)
        if parked is not None:
            parked.pop(h, None)
            if not parked:
                del self._held[h.key]
        h.timer = None
        h.fire(False)

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
        held, self._held = list(self._held.values()), {}
        for parked in held:
            _wake(parked, False)


def _wake(held: dict[Held, None], notified: bool = True) -> None:
    for h in held:
        try:
            h.fire(notified)
        except Exception as err:  # noqa: BLE001 - one failed answer must not keep the others
            asyncio.get_running_loop().call_exception_handler(
                {"message": "a held pull's answer failed", "exception": err}
            )


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


# ------------------------------------------------------------------ the native twin

# the arrival path above is the reference (tests/server/test_longpoll.py runs on both
# cores; tests/server/handlers/test_native_pull.py wakes held pulls through it); the
# twin's (``_longpoll.pyx``) replace it when protocol/native.py chooses it.
reference = SimpleNamespace(
    on_dispatch=ArrivalNotifier.on_dispatch,
    notify=ArrivalNotifier.notify,
    hold=ArrivalNotifier.hold,
    fire=Held.fire,
    wake=_wake,
)


def _load_twin() -> ModuleType:
    from . import _longpoll  # type: ignore[attr-defined]

    twin: ModuleType = _longpoll  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    ArrivalNotifier.on_dispatch = _twin.on_dispatch  # type: ignore[method-assign]
    ArrivalNotifier.notify = _twin.notify  # type: ignore[method-assign]
    ArrivalNotifier.hold = _twin.hold  # type: ignore[method-assign]
    Held.fire = _twin.fire  # type: ignore[method-assign]
    _wake = _twin.wake
