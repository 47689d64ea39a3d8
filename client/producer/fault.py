"""Latency fault tolerance of the producer: RocketMQ 4.9's ``MQFaultStrategy`` and
``LatencyFaultToleranceImpl`` (``sendLatencyFaultEnable``).

Owns: ``LatencyFaultTolerance`` (broker name -> ``FaultItem``: the last send latency and
the instant from which the broker is available again; ``pick_one_at_least``) and
``FaultStrategy`` (queue choice and the latency -> not-available-duration table, whose
default values, Java's, are options.py's ``LATENCY_MAX`` / ``NOT_AVAILABLE_DURATION``).

Invariants (as RocketMQ 4.9.8):
* Disabled (the default, as in Java), ``select`` is plain round robin that skips the
  broker of the previous failed attempt (``selectOneMessageQueue(lastBrokerName)``) and
  ``update`` records nothing.
* Enabled, every send attempt records its broker's latency; the broker is unavailable
  for ``not_available_duration[i]`` ms where ``i`` is the largest index with
  ``latency >= latency_max[i]``. A failed attempt (connection refused or lost, timeout,
  broker error) counts as a latency of ``ISOLATION_LATENCY_MILLIS`` (30000 ms), which the
  default table maps to 600000 ms.
* ``select`` returns the next queue (round robin) of an available broker; when none is
  available it takes ``pick_one_at_least`` (available first, then lowest latency, then
  earliest end of isolation; rotating over the better half) and a queue id of it, so a
  send is always attempted somewhere.
* kairosmq adds one rule in both modes: a broker whose connection is in reconnect
  backoff (its last connect was refused or timed out, client/remoting.py) counts as
  unavailable while another broker is available, so a killed broker costs at most one
  fast-failing attempt per backoff window.
* Time comes from an injectable clock (ms), so tests run it without sleeping.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..message import MessageQueue
from ..options import LATENCY_MAX, NOT_AVAILABLE_DURATION

ISOLATION_LATENCY_MILLIS = 30000

Clock = Callable[[], float]  # milliseconds


def _now_ms() -> float:
    return time.monotonic() * 1000


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency: float
    start_timestamp: float  # ms on the strategy's clock: available again from here

    def available(self, now: float) -> bool:
        return now - self.start_timestamp >= 0


class LatencyFaultTolerance:
    """RocketMQ's ``LatencyFaultToleranceImpl`` over broker names."""

    def __init__(self, clock: Clock = _now_ms) -> None:
        self._clock = clock
        self._items: dict[str, FaultItem] = {}
        self._worst = itertools.count(1)

    def update(self, name: str, current_latency: float, not_available_duration: float) -> None:
        start = self._clock() + not_available_duration
        item = self._items.get(name)
        if item is None:
            self._items[name] = FaultItem(name, current_latency, start)
        else:
            item.current_latency, item.start_timestamp = current_latency, start

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.available(self._clock())

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """A broker to try when none is available: among the better half of the table."""
        if not self._items:
            return None
        now = self._clock()
        ranked = sorted(
            self._items.values(),
            key=lambda i: (not i.available(now), i.current_latency, i.start_timestamp),
        )
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        return ranked[next(self._worst) % half].name

    def items(self) -> dict[str, FaultItem]:
        return dict(self._items)


class FaultStrategy:
    """RocketMQ's ``MQFaultStrategy``: queue selection and fault bookkeeping.

    ``enabled`` is ``send_latency_fault_enable``; ``latency_max`` and
    ``not_available_duration`` (ms, same length, ascending) are Java's tables.
    ``backing_off(broker_name)`` says whether the broker's connection is in reconnect
    backoff (the producer wires it to the remoting pool).
    """

    def __init__(
        self,
        enabled: bool = False,
        *,
        latency_max: Sequence[int] = LATENCY_MAX,
        not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION,
        clock: Clock = _now_ms,
        backing_off: Callable[[str], bool] | None = None,
    ) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration need the same length")
        self.enabled = enabled
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.tolerance = LatencyFaultTolerance(clock)
        self._backing_off = backing_off or (lambda _name: False)
        self._index = itertools.count(1)

    def not_available_for(self, latency: float) -> int:
        """``computeNotAvailableDuration``: ms a broker answering in ``latency`` ms rests."""
        for limit, duration in zip(
            reversed(self.latency_max), reversed(self.not_available_duration), strict=True
        ):
            if latency >= limit:
                return duration
        return 0

    def update(self, broker_name: str, latency: float, isolation: bool) -> None:
        """Record one send attempt (``isolation``: it failed). No-op when disabled."""
        if self.enabled:
            duration = self.not_available_for(ISOLATION_LATENCY_MILLIS if isolation else latency)
            self.tolerance.update(broker_name, latency, duration)

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None) -> MessageQueue:
        """The queue of the next attempt (``last_broker``: broker of the failed previous one)."""
        n = len(queues)
        if n == 0:
            raise ValueError("no queue to select from")
        index = next(self._index)
        if not self.enabled:
            return self._round_robin(queues, index, last_broker)
        ok = self.tolerance.is_available
        for i in range(n):
            mq = queues[(index + i) % n]
            if ok(mq.broker_name) and not self._backing_off(mq.broker_name):
                return mq
        for i in range(n):  # every broker rests or backs off: one not in backoff at least
            mq = queues[(index + i) % n]
            if ok(mq.broker_name):
                return mq
        name = self.tolerance.pick_one_at_least()
        ids = sorted(q.queue_id for q in queues if q.broker_name == name)
        if ids:
            return MessageQueue(queues[0].topic, name, ids[next(self._index) % len(ids)])  # type: ignore[arg-type]
        if name is not None:
            self.tolerance.remove(name)  # a broker the route no longer has
        return queues[index % n]

    def _round_robin(
        self, queues: Sequence[MessageQueue], index: int, avoid: str | None
    ) -> MessageQueue:
        """``selectOneMessageQueue(lastBrokerName)``: the next queue of another broker than
        ``avoid``; brokers in connect backoff come last (after ``avoid`` itself)."""
        n = len(queues)
        ranked: list[tuple[int, int]] = []
        for i in range(n):
            mq = queues[(index + i) % n]
            rank = (2 if self._backing_off(mq.broker_name) else 0) + (mq.broker_name == avoid)
            if rank == 0:
                return mq
            ranked.append((rank, i))
        return queues[(index + min(ranked)[1]) % n]
