"""Retention of timer records: the lowest commit-log offset a pending timer needs.

Owns: ``RetentionWalk`` — a walk along the timer queue (``TIMER_TOPIC`` queue 0, in send
order) past the timers at or below the fired cursor (``_low`` is where it stopped), and
the deletion of bucket files wholly before the cursor.

Invariants: the walk only moves forward, and stops at the first unit whose ``(due, phy)``
is above the cursor, so the floor it reports is never higher than the record of a pending
timer (until a walk caught up, it is lower than needed: retention keeps more, not less).
Housekeeping asks for the floor only when a commit-log segment has expired (the walk
costs ~1 µs per fired timer, on the loop: asked every minute it stalled the firing task).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any  # Any: results of work run off the loop

from kairosmq.protocol.naming import TIMER_TOPIC

from ...observe.logs import get_logger
from ...store import MessageStore
from .buckets import TimerBuckets
from .topic import TIMER_QUEUE


class RetentionWalk:
    """Where retention must stop for the timers still pending."""

    def __init__(
        self,
        store: MessageStore,
        cursor: Callable[[], tuple[int, int]],
        buckets: TimerBuckets,
        run_blocking: Callable[..., Awaitable[Any]],
    ) -> None:
        self.store = store
        self.cursor = cursor  # the timer service's fired cursor
        self.buckets = buckets
        self.run_blocking = run_blocking  # file work off the loop (tests: inline)
        self._low = 0  # timer-queue offset below which every timer fired
        self.log = get_logger("timer")

    async def delete_fired_buckets(self) -> int:
        """Remove the files of buckets wholly before the fired cursor (one bucket of
        margin); every entry in them fired or was recalled. Returns how many."""
        due, phy = self.cursor()
        if phy < 0:
            return 0
        below = self.buckets.bucket_of(due) - 1
        gone: int = await self.run_blocking(self.buckets.delete_below, below)
        if gone:
            self.log.info(
                "timer.buckets_deleted", count=gone, before_ts=below * self.buckets.bucket_ms
            )
        return gone

    def floor(self, scan: int = 100_000) -> int | None:
        """The lowest commit-log offset a pending timer's record lies at (retention keeps
        every segment from there on), or None when no timer is pending. Walks at most
        ``scan`` units from where the last call stopped."""
        self._walk(scan)
        return self._floor()

    def _walk(self, scan: int) -> bool:
        """Move ``_low`` past fired timers, at most ``scan`` units; True when it stopped at
        a pending timer or the queue's end."""
        cq = self.store.find_queue(TIMER_TOPIC, TIMER_QUEUE)
        if cq is None:
            return True
        off = max(self._low, cq.min_offset)
        cursor = self.cursor()
        end = cq.max_offset
        while off < end and scan > 0:
            units = list(cq.units(off, min(scan, 4096)))
            if not units:
                break
            for phy, _size, due in units:
                if phy >= 0 and (due, phy) > cursor:
                    self._low = off
                    return True
                off += 1
            scan -= len(units)
        self._low = off
        return off >= end or scan > 0

    def _floor(self) -> int | None:
        cq = self.store.find_queue(TIMER_TOPIC, TIMER_QUEUE)
        if cq is None or self._low >= cq.max_offset:
            return None
        unit = cq.get(self._low)
        return unit[0] if unit is not None else None
