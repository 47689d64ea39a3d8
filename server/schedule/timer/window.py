"""The timer service's loaded window: the timers about to fall due (a heap and the run
of a promoted slice) and the sorted slices of loaded buckets waiting to join them.

Owns: ``TimerWindow`` (heap + run + slices, their counts, promotion and the due pops) and
``slice_live`` (a bucket's entry bytes decoded, filtered and cut into sorted ``SLICE_MS``
slices in one paced pass, in the load thread).

Invariants:
* Every loaded entry is in the heap, the run or exactly one slice; slices are in due
  order and each is sorted by ``(due, phy)``, so a slice alone is already a valid heap.
* A slice is promoted no later than ``PROMOTE_AHEAD_MS`` before its first entry is due
  (``wake_at`` tells the sleeping task when), so the earlier of the heap's head and the
  run's (its last entry: the run is a promoted slice reversed) is always the earliest
  due entry once ``promote(now)`` ran: slices never hold a due entry. Entries leave in
  ``(due, phy, size)`` order, as from one heap; a burst of timers due at one instant
  (one slice) pops from the run's end, not through a heap of them all.
* Short loop stalls: a bucket (up to a minute of timers) is sorted slice by slice in the
  load thread; on the loop a promotion costs one slice, never a heapify of a bucket.

``TimerWindow.take_due`` here is the reference; its native twin (``_window.pyx``, chosen
by ``protocol/native.py``) is the same loop in C (tests/server/test_native_timer_fire.py).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain
from types import ModuleType, SimpleNamespace

from kairosmq.protocol import native

from .buckets import ENTRY, KIND_CANCEL, KIND_TIMER

SLICE_MS = 100  # a loaded bucket is kept as sorted slices of this span
PROMOTE_AHEAD_MS = 20  # a slice joins the heap this long before its first entry is due
PACE_ENTRIES = 2048  # the load thread's step between pauses (~1-2 ms of CPU)
Entry = tuple[int, int, int]  # (due_ms, phy_offset, size)
Slice = list[Entry]  # sorted by (due, phy)


def slice_live(
    parts: Iterable[bytes],
    after: tuple[int, int] = (0, -1),
    pace: Callable[[float], None] | None = None,
) -> list[Slice]:
    """Bucket entry bytes (``ENTRY`` records, file then buffered) as sorted ``SLICE_MS``
    slices of the live timers later than ``after`` (a fired cursor): duplicates dropped,
    recalled (``KIND_CANCEL``) ones dropped. One pass, in the load thread.

    ``pace(work_s)`` is called after each ``PACE_ENTRIES`` entries with the CPU time they
    took: the service sleeps there when the bucket is not due soon, so a minute of timers
    (300k at 5,000/s: ~0.2 s of Python) is spread out instead of taking the GIL from the
    firing loop in one burst."""
    by_slice: dict[int, Slice] = {}
    cancelled: set[int] = set()
    a_due, a_phy = after
    step = PACE_ENTRIES * ENTRY.size
    for data in parts:
        view = memoryview(data)
        for start in range(0, len(data), step):
            t0 = time.thread_time()
            for due, phy, size, kind in ENTRY.iter_unpack(view[start : start + step]):
                if kind == KIND_TIMER:
                    if due < a_due or (due == a_due and phy <= a_phy):
                        continue
                    part = by_slice.get(due // SLICE_MS)
                    if part is None:
                        by_slice[due // SLICE_MS] = [(due, phy, size)]
                    else:
                        part.append((due, phy, size))
                elif kind == KIND_CANCEL:
                    cancelled.add(phy)
            if pace is not None:
                pace(time.thread_time() - t0)
        view.release()
    out = []
    for key in sorted(by_slice):
        part = by_slice[key]
        part.sort()  # entries arrive roughly in due order: nearly sorted, cheap
        if len(set(part)) != len(part):  # a timer's entry written twice (replay)
            part = [e for i, e in enumerate(part) if i == 0 or e != part[i - 1]]
        if cancelled:
            part = [e for e in part if e[1] not in cancelled]
        if part:
            out.append(part)
    return out


class TimerWindow:
    """Loaded timers about to fall due (a heap and the promoted run), sorted slices for
    the rest."""

    def __init__(self) -> None:
        self.heap: list[Entry] = []
        # a promoted slice consumed from its end: sorted descending, its earliest last
        self.run: list[Entry] = []
        self.slices: deque[Slice] = deque()
        self._sliced = 0

    def __len__(self) -> int:
        return len(self.heap) + len(self.run) + self._sliced

    def push(self, entry: Entry) -> bool:
        """Add one entry (an online add or a rollback); True if it is the new head."""
        heapq.heappush(self.heap, entry)
        return self.heap[0] == entry and not (self.run and self.run[-1] < entry)

    def add_slices(self, parts: list[Slice]) -> None:
        """Append a loaded bucket's slices (later than every slice already held)."""
        for part in parts:
            self.slices.append(part)
            self._sliced += len(part)

    def promote(self, now: int) -> None:
        """Move every slice whose first entry is due within ``PROMOTE_AHEAD_MS`` into the
        run (when it is empty: the slice reversed, O(1) pops) or else the heap."""
        slices = self.slices
        while slices and slices[0][0][0] <= now + PROMOTE_AHEAD_MS:
            part = slices.popleft()
            self._sliced -= len(part)
            if not self.run:
                part.reverse()
                self.run = part
            elif not self.heap:
                self.heap = part  # sorted: already a heap
            elif len(part) > len(self.heap):
                self.heap.extend(part)
                heapq.heapify(self.heap)
            else:
                for e in part:
                    heapq.heappush(self.heap, e)

    def _head(self) -> Entry | None:
        """The earliest promoted entry: the heap's or the run's head."""
        heap, run = self.heap, self.run
        if heap and (not run or heap[0] < run[-1]):
            return heap[0]
        return run[-1] if run else None

    def head_due(self) -> int | None:
        head = self._head()
        return head[0] if head is not None else None

    def wake_at(self) -> int | None:
        """When the firing task must look again: the head or the next promotion."""
        wake = self.head_due()
        if self.slices:
            at = self.slices[0][0][0] - PROMOTE_AHEAD_MS
            wake = at if wake is None else min(wake, at)
        return wake

    def take_due(
        self, now: int, limit: int, cursor: tuple[int, int], cancelled: set[int]
    ) -> list[Entry]:
        """Pop up to ``limit`` due entries in ``(due, phy)`` order (the earlier of the
        heap's and the run's heads each time), dropping those at or below ``cursor``
        (fired) and recalled ones (their marks are discarded)."""
        out: list[Entry] = []
        heap, run = self.heap, self.run
        while len(out) < limit:
            if heap and (not run or heap[0] < run[-1]):
                if heap[0][0] > now:
                    break
                e = heapq.heappop(heap)
            elif run and run[-1][0] <= now:
                e = run.pop()
            else:
                break
            if (e[0], e[1]) <= cursor or e[1] in cancelled:
                cancelled.discard(e[1])
                continue
            out.append(e)
        return out

    def next_live(self, cursor: tuple[int, int], cancelled: set[int]) -> int | None:
        """The earliest due ms of an entry neither fired nor recalled, or None."""
        found = [
            due
            for due, phy, _size in heapq.nsmallest(64, chain(self.heap, self.run[-64:]))
            if (due, phy) > cursor and phy not in cancelled
        ][:1]
        first = next(
            (
                due
                for part in self.slices
                for due, phy, _size in part
                if (due, phy) > cursor and phy not in cancelled
            ),
            None,
        )
        if first is not None:
            found.append(first)
        return min(found) if found else None


# ``TimerWindow.take_due`` above is the reference (tests/server/test_native_timer_fire.py
# holds the twin to it); the twin's (``_window.pyx``) replaces it when protocol/native.py
# chooses it.
reference = SimpleNamespace(take_due=TimerWindow.take_due)


def _load_twin() -> ModuleType:
    from . import _window  # type: ignore[attr-defined]

    twin: ModuleType = _window  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    TimerWindow.take_due = _twin.take_due  # type: ignore[method-assign]
