"""ProcessQueue: the messages of one assigned queue that were pulled but not yet finished.

Owns: in-flight tracking per ``MessageQueue`` (RocketMQ's ``ProcessQueue``), the commit
offset derived from it, flow-control counters, the orderly hand-over cursor and the
orderly lock state.

Invariants:
* ``commit_offset`` never passes an unfinished message: it is the smallest queue offset
  still in flight, or, when nothing is in flight, the next offset to pull (so messages
  filtered out by tag and empty pulls still move it). It never goes backwards.
* Messages enter in queue-offset order (pulls of one queue are sequential), so the
  arrival deque is sorted and the smallest in-flight offset is found in amortised O(1).
* Orderly hand-over: ``take(n)`` returns the next ``n`` messages in queue order that were
  not taken yet; ``give_back`` puts a batch back at the front so it is retried first.
* Once ``dropped`` (the queue was rebalanced away or the consumer stops), the owner stops
  pulling and dispatching; results of consumption still finish their bookkeeping.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from kairosmq.protocol.message import MessageExt

from ..message import MessageQueue

# A lock older than this is treated as lost (RocketMQ REBALANCE_LOCK_MAX_LIVE_TIME, 30 s).
LOCK_MAX_LIVE = 30.0


class ProcessQueue:
    __slots__ = (
        "mq",
        "dropped",
        "_msgs",
        "_order",
        "_next_offset",
        "_committed",
        "msg_size",
        "_space",
        "_threshold",
        "_pending",
        "_arrived",
        "locked",
        "lock_time",
        "consuming",
    )

    def __init__(self, mq: MessageQueue, next_offset: int, threshold: int = 1000) -> None:
        self.mq = mq
        self.dropped = False
        self._msgs: dict[int, MessageExt] = {}
        self._order: deque[int] = deque()
        self._next_offset = next_offset
        self._committed = next_offset
        self.msg_size = 0
        self._threshold = threshold
        self._space = asyncio.Event()
        self._space.set()
        # orderly state
        self._pending: deque[MessageExt] = deque()
        self._arrived = asyncio.Event()
        self.locked = False
        self.lock_time = 0.0
        self.consuming = False

    # ------------------------------------------------------------ pulled / finished

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def msg_count(self) -> int:
        return len(self._msgs)

    def put(self, msgs: list[MessageExt], next_offset: int, *, orderly: bool = False) -> None:
        """Record a pull: ``msgs`` (already tag-filtered) and where the next pull starts."""
        for m in msgs:
            off = m.queue_offset
            if off not in self._msgs:
                self._msgs[off] = m
                self._order.append(off)
                self.msg_size += len(m.body)
                if orderly:
                    self._pending.append(m)
        if next_offset > self._next_offset:
            self._next_offset = next_offset
        if len(self._msgs) >= self._threshold:
            self._space.clear()
        if orderly and msgs:
            self._arrived.set()

    def reset(self, offset: int) -> None:
        """The broker moved us (PULL_OFFSET_MOVED): continue and commit from ``offset``."""
        self._next_offset = offset
        self._committed = offset

    def remove(self, msgs: list[MessageExt]) -> int:
        """Mark ``msgs`` finished; return the (possibly advanced) commit offset."""
        for m in msgs:
            if self._msgs.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        if len(self._msgs) < self._threshold:
            self._space.set()
        return self.commit_offset

    @property
    def commit_offset(self) -> int:
        order, msgs = self._order, self._msgs
        while order and order[0] not in msgs:
            order.popleft()
        offset = order[0] if order else self._next_offset
        if offset > self._committed:
            self._committed = offset
        return self._committed

    async def wait_for_space(self) -> None:
        """Flow control: block while ``threshold`` or more messages are in flight."""
        await self._space.wait()

    def drop(self) -> None:
        self.dropped = True
        self._space.set()
        self._arrived.set()

    # ------------------------------------------------------------ orderly hand-over

    def take(self, n: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        pending = self._pending
        while pending and len(out) < n:
            out.append(pending.popleft())
        if not pending:
            self._arrived.clear()
        return out

    def give_back(self, msgs: list[MessageExt]) -> None:
        self._pending.extendleft(reversed(msgs))
        if msgs:
            self._arrived.set()

    async def wait_arrival(self) -> None:
        await self._arrived.wait()

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def lock_valid(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.locked and now - self.lock_time <= LOCK_MAX_LIVE
