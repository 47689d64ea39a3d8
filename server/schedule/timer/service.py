"""TimerService: fire timer messages at their due millisecond, exactly once; recall them.

Owns: the loaded buckets (a ``TimerWindow`` of ``(due_ms, phy, size)`` entries), the
firing task, the fired cursor and its checkpoint state (with the level recall marks it
writes, ``schedule/recalls.py``), the dispatch listener that feeds ``TimerBuckets`` from
timer and recall records, and the recall decision. The re-put of a due timer (restore,
patched put, outcome, skips, the origin in flight) is ``schedule/reput.py``'s, shared
with the delay levels.

Records (all in the commit log; ``TIMER_TOPIC`` is a system topic no client may send to):
* a timer record: ``TIMER_TOPIC`` queue 0, properties ``TIMER_OUT_MS`` (due ms),
  ``REAL_TOPIC``/``REAL_QID`` (where it fires to);
* a recall record: ``TIMER_TOPIC`` queue 1, ``KAIROS_RECALL_TARGET=<due>:<phy>``;
* an operator's reschedule: a timer record (a copy of the message, due at the new
  instant) that also carries ``KAIROS_RESCHEDULE_OF=<due>:<phy>`` (and
  ``KAIROS_RECALL_KIND``): its dispatch adds the new timer and cancels the old one (a
  CANCEL entry, or a level mark), so the move is one append (``schedule/pending/``);
* a fired copy: the real topic, ``KAIROS_TIMER_ORIGIN=<due>:<phy>`` (the timer record).

Invariants:
* Never early: an entry fires only when the clock reads at least its due ms; the task
  sleeps to the head's due instant (or until an earlier timer arrives), never on a period.
* Exactly once across ``kill -9``: timers fire in ``(due, phy)`` order and the cursor is
  the last fired pair. It moves when a fired copy is dispatched (the same synchronous
  append), is saved with each store checkpoint and, after a crash, rebuilt by replaying
  the fired copies after it: progress comes from the log. A failed re-put leaves the
  entry at the head (nothing overtakes it); a dropped write rolls the cursor back.
* A new timer is never behind the cursor: ``admit`` lifts a due time below the cursor's
  (a wall clock that stepped back) to the cursor's, so "fired" is exactly "<= cursor".
* Recall is decided on the loop without an await between the check and the recall
  record's append, so a recall and a fire in the same millisecond give exactly one of
  "recalled" / "already fired". A recall record is dispatched into the target's bucket
  as a CANCEL entry, so a recalled timer never fires, even after ``kill -9``.
* Memory: only buckets starting within ``lookahead_ms`` are loaded, and no further
  bucket is loaded while ``max_loaded`` entries wait (a backlog after downtime drains
  bucket by bucket, in due order).
* Batches: a fire turn takes up to ``batch`` due entries, reads their records at once
  and re-puts them with one ``Reputs.put_many``; each is settled (cursor, the wall clock
  read for its lateness) right after its own put, before the next is tried, so
  progress, skips and a RETRY move exactly as with one put at a time, and the dispatch
  of a fired copy knows its origin by the identity of its properties (no parse). The
  batch's stats and ``timer.fired`` events go to ``on_fired`` once, after it.
* Short loop stalls: a bucket loads as its own task (the firing goes on), in a thread
  paced until just before it starts; its sorted slices join the heap as they fall due.

The fire path here (``_fire``, ``_settle``) is the reference; its native twin
(``_service.pyx``, chosen by ``protocol/native.py``) runs a turn in one C frame and hands
a skip to it (tests/server/test_native_timer_fire.py). ``on_dispatch``'s twin takes the
fired copy's case only, called by the store's twin as a C function (a compiled copy
called as Python cost more than the interpreter's specialised attribute reads here).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Awaitable, Callable
from types import ModuleType, SimpleNamespace
from typing import Any  # Any: a service's snapshot state (JSON); results of blocking work

from kairosmq.protocol import native
from kairosmq.protocol.naming import TIMER_TOPIC
from kairosmq.protocol.properties import (
    INT64_DIGITS,
    RECALL_KIND,
    RECALL_TARGET,
    RESCHEDULE_OF,
    TIMER_ORIGIN,
    parse_decimal,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ...clock import sub_ms, wall_ms
from ...observe.logs import get_logger
from ...store import DispatchRequest, MessageStore
from ...store.message_store import interested_in
from ...store.record_check import stored_physical_offset
from ..delivered import Fired
from ..recalls import LevelRecalls
from ..reput import RETRY_PAUSE, Attempt, Outcome, PutPatched, Reputs, restore_timer_view
from ..waker import PreciseWaker
from .buckets import KIND_CANCEL, TimerBuckets, cancels
from .retention import RetentionWalk
from .topic import RECALL_QUEUE, TIMER_QUEUE, RecallOutcome, parse_pair
from .window import Entry, Slice, TimerWindow, slice_live

PACE_UNTIL_MS = 500  # a bucket load runs unpaced from this long before the bucket starts
_UNREAD = "the timer record cannot be read (retention or damage)"


class TimerService:
    """Fires timer records to their real topics; a StateProvider of the store."""

    name = "timer"

    def __init__(
        self,
        store: MessageStore,
        buckets: TimerBuckets,
        *,
        on_fired: Callable[[list[Fired]], None] | None = None,
        level_recalls: LevelRecalls | None = None,
        clock_ms: Callable[[], int] | None = None,
        batch: int = 256,
        lookahead_ms: int = 2_000,
        max_loaded: int = 400_000,
        run_blocking: Callable[..., Awaitable[Any]] | None = None,
        put_patched: PutPatched | None = None,
    ) -> None:
        self.store = store
        self.buckets = buckets
        self.on_fired = on_fired  # DeliveryLog.timers_fired: stats, timer.fired
        self._fired: list[Fired] = []  # this put_many's DONE re-puts, for on_fired
        # recalled schedule records not yet passed (the level tasks read them)
        self.level_recalls = level_recalls if level_recalls is not None else LevelRecalls()
        self.clock_ms = clock_ms or wall_ms  # the broker passes the store's clock
        self.batch = batch
        self.lookahead_ms = lookahead_ms
        self.max_loaded = max_loaded
        self.run_blocking = run_blocking or asyncio.to_thread  # file reads (tests: inline)
        self.cursor: tuple[int, int] = (0, -1)
        self.log = get_logger("timer")
        # the re-puts (reput.py): in flight (due, phy); undo: (previous cursor, the entry
        # to re-arm) per fired copy not yet written
        self.reputs: Reputs[tuple[tuple[int, int], Entry]] = Reputs(
            store, restore_timer_view, put_patched=put_patched
        )
        self.skipped = 0
        self.window = TimerWindow()  # the loaded buckets' timers
        self._cancelled: set[int] = set()  # recalled phys inside the loaded window
        self._future: list[int] = []  # heap of buckets beyond the window
        self._known: set[int] = set()
        self._future_min: dict[int, int] = {}  # earliest due added online, per future bucket
        self._loaded_through = -1
        # the lowest bucket loaded, or added to inside the loaded span, since the start
        # (None: none yet): before the first fire it is the span's low end (the cursor's
        # bucket is after it); loads go up, so ``_loaded_through`` alone is not
        self._span_low: int | None = None
        self.retention = RetentionWalk(
            store, lambda: self.cursor, buckets, lambda *a: self.run_blocking(*a)
        )
        self._loading: int | None = None
        self._loading_min: int | None = None  # the loading bucket's earliest known due
        self._loading_extra: list[Entry] = []
        self._wake: asyncio.Future[None] | None = None  # what the sleeping task awaits
        self._task: asyncio.Task[None] | None = None
        self._loader: asyncio.Task[None] | None = None  # the bucket load in flight
        self._waker: PreciseWaker | None = None
        self._started = False
        self._pending_key: tuple[int, int, int | None, int | None] | None = None
        self._pending_sorted: list[int] = []
        store.rollback_listeners.append(self.rollback)

    # ------------------------------------------------------------- StateProvider

    def snapshot(self) -> dict[str, Any]:
        return {"cursor": list(self.cursor), "level_recalls": self.level_recalls.snapshot()}

    def restore(self, state: Any) -> None:
        if isinstance(state, dict):
            cur = state.get("cursor")
            if (
                isinstance(cur, list)
                and len(cur) == 2
                and all(isinstance(v, int) and 0 <= v < 1 << 63 for v in cur)
            ):
                self.cursor = (cur[0], cur[1])
            self.level_recalls.restore(state.get("level_recalls"))

    # ------------------------------------------------------------- admission

    def admit(self, due_ms: int) -> int:
        """The due time to store for a new timer: never behind the fired cursor."""
        return max(due_ms, self.cursor[0])

    @property
    def pending_in_memory(self) -> int:
        return len(self.window)

    def next_due(self) -> int | None:
        """The earliest pending due ms (the head of the loaded window; for a bucket being
        loaded or not loaded yet, the earliest due added to it since the start, else its
        start), or None."""
        found = [
            d
            for d in (self.window.next_live(self.cursor, self._cancelled), self._loading_min)
            if d is not None
        ]
        found += [e[0] for e in self._loading_extra]
        if self._future:  # not loaded yet (the task loads it next)
            first = self._future[0]
            found.append(self._future_min.get(first, first * self.buckets.bucket_ms))
        return min(found) if found else None

    def pending_buckets(self) -> list[int]:
        """The buckets that may hold pending timers, ascending: the fired cursor's (before
        the first fire: the lowest loaded since the start) through the loaded ones, the
        one loading and those not loaded yet (``_known``); sorted once per change (a load
        or a new bucket), for browsing."""
        # the cursor is not in the key: a bucket it passed stays listed, and readers skip
        # what it passed anyway
        key = (len(self._known), self._loaded_through, self._loading, self._span_low)
        if self._pending_key != key or not self._started:
            first = self.buckets.bucket_of(self.cursor[0]) if self.cursor[1] >= 0 else None
            if not self._started:  # before start: what the files and buffers hold
                found = self.buckets.buckets()
                low = first if first is not None else (found[0] if found else 0)
                self._pending_sorted = [b for b in found if b >= low]
            else:
                low = first if first is not None else self._loaded_through
                if first is None and self._span_low is not None:
                    # before a fire: from the first loaded bucket (a later load must not
                    # hide it) or a lower one a timer was added to
                    low = min(low, self._span_low)
                near: set[int] = set(range(low, self._loaded_through + 1))
                if len(near) > 4_096:  # a long loaded span (a backlog): the buckets there
                    near &= set(self.buckets.buckets())
                if self._loading is not None:
                    near.add(self._loading)
                self._pending_sorted = sorted(near | self._known)
            self._pending_key = key
        return self._pending_sorted

    # ------------------------------------------------------------- dispatch

    @interested_in(topics=(TIMER_TOPIC,), properties=(TIMER_ORIGIN,))  # timers, recalls, fires
    def on_dispatch(self, req: DispatchRequest) -> None:
        props = req.properties
        if req.topic == TIMER_TOPIC:
            if req.queue_id == TIMER_QUEUE:
                raw = props.get(TIMER_OUT_MS, "")
                due = parse_decimal(raw, INT64_DIGITS)
                if due is not None:
                    self._add((due, req.phy_offset, req.size))
                    replaced = parse_pair(props.get(RESCHEDULE_OF, ""))
                    if replaced is not None:  # an operator's reschedule: the same append
                        self._replace(replaced, props.get(RECALL_KIND))
                else:
                    self.log.error(
                        "timer.record_skipped",
                        phy_offset=req.phy_offset,
                        reason=f"{TIMER_OUT_MS}={raw[:40]!r} is not a due time",
                    )
            elif req.queue_id == RECALL_QUEUE:
                target = parse_pair(props.get(RECALL_TARGET, ""))
                if target is None:
                    return
                self._replace(target, props.get(RECALL_KIND))
            return
        reputs = self.reputs
        if props is reputs.in_flight_props and not req.replay:  # the fire being made
            pair = reputs.in_flight
            assert pair is not None
        else:
            origin = props.get(TIMER_ORIGIN)
            if origin is None:
                return
            pair = parse_pair(origin)
            if pair is None or (not req.replay and not reputs.made(pair)):
                self.log.warning(
                    "timer.origin_ignored", phy_offset=req.phy_offset, origin=origin[:64]
                )
                return
        if pair > self.cursor:
            prev = self.cursor
            self.cursor = pair
            if not req.replay:
                self.reputs.undo.add(req.phy_offset, (prev, (pair[0], pair[1], 0)))

    def _add(self, entry: Entry) -> None:
        bucket = self.buckets.add(entry[0], entry[1], entry[2])
        if not self._started:
            return
        if bucket <= self._loaded_through:
            self._span_from(bucket)
            if self.window.push(entry):
                self._poke()
        elif bucket == self._loading:
            self._loading_extra.append(entry)
        else:
            if entry[0] < self._future_min.get(bucket, entry[0] + 1):
                self._future_min[bucket] = entry[0]
            if bucket not in self._known:
                self._known.add(bucket)
                heapq.heappush(self._future, bucket)
                if self._future[0] == bucket:
                    self._poke()

    def _replace(self, target: tuple[int, int], kind: str | None) -> None:
        """A recall record's or a reschedule's target never fires: a level mark for a
        schedule record (``kind`` "level"), else a CANCEL entry for the timer."""
        if kind == "level":
            self.level_recalls.mark(target[1])
        else:
            self._cancel(*target)

    def _cancel(self, due: int, phy: int) -> None:
        bucket = self.buckets.add(due, phy, 0, KIND_CANCEL)
        if self._started and (bucket <= self._loaded_through or bucket == self._loading):
            self._cancelled.add(phy)

    def rollback(self, kept: int) -> None:
        """Store rollback listener: fired copies at or after ``kept`` were dropped, so
        their timers are pending again."""
        for prev, entry in self.reputs.undo.rollback_from(kept):
            self.cursor = min(self.cursor, prev)
            self.window.push(entry)  # size 0: re-read by phy when it fires
        self._poke()

    # ------------------------------------------------------------- recall

    def is_fired(self, due: int, phy: int) -> bool:
        return (due, phy) <= self.cursor

    async def recall_state(self, due: int, phy: int) -> RecallOutcome | None:
        """What a recall of the timer ``(due, phy)`` finds now, or None if it is pending.

        The caller appends the recall record right after a None, without awaiting."""
        if self.is_fired(due, phy):
            return RecallOutcome.ALREADY_FIRED
        if phy in self._cancelled:
            return RecallOutcome.ALREADY_RECALLED
        bucket = self.buckets.bucket_of(due)
        if bucket > self._loaded_through and bucket != self._loading:
            pending = self.buckets.pending_bytes(bucket)
            live = await self.run_blocking(self.buckets.load, bucket, pending)
            more = self.buckets.pending_bytes(bucket)[len(pending) :]
            if not any(e[1] == phy for e in live) or cancels(more, phy):
                return RecallOutcome.ALREADY_RECALLED
        if self.is_fired(due, phy):  # it may have fired while the bucket was read
            return RecallOutcome.ALREADY_FIRED
        return RecallOutcome.ALREADY_RECALLED if phy in self._cancelled else None

    def level_recall_state(self, phy: int, fired: bool) -> RecallOutcome | None:
        """The same decision for a level-delayed message (its schedule record at ``phy``;
        ``fired``: the scheduler's progress is past it)."""
        if fired:
            return RecallOutcome.ALREADY_FIRED
        return RecallOutcome.ALREADY_RECALLED if phy in self.level_recalls else None

    # ------------------------------------------------------------- task

    def start(
        self, spawn: Callable[[str, Callable[[Any], Any]], asyncio.Task[None]] | None = None
    ) -> None:
        first = self.buckets.bucket_of(self.cursor[0]) if self.cursor[1] >= 0 else 0
        self._known = {b for b in self.buckets.buckets() if b >= first}
        self._future = sorted(self._known)
        self._loaded_through = first - 1
        self._started = True
        if self.clock_ms is wall_ms and self._waker is None:  # a test's clock: call_later
            self._waker = PreciseWaker.create(asyncio.get_running_loop())
        if spawn is not None:
            self._task = spawn("timer", lambda _st: self._run())
        else:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="timer")

    async def stop(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loader
            self._loader = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._waker is not None:
            self._waker.close()
            self._waker = None

    def _poke(self) -> None:
        """Wake the sleeping task (an earlier timer or bucket arrived, or a rollback)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            loader = self._start_load()
            if loader is not None and loader.done():
                self._loader = None
                loader.result()  # a failed load fails the task (its supervisor restarts it)
                continue
            now = self.clock_ms()
            self.window.promote(now)
            head = self.window.head_due()
            if head is not None and head <= now:
                ok = self._fire(now)
                await asyncio.sleep(0 if ok else RETRY_PAUSE)
                continue
            wake = self.window.wake_at()
            if self._future and loader is None:  # else the load pokes when it is done
                load_at = self._future[0] * self.buckets.bucket_ms - self.lookahead_ms
                wake = load_at if wake is None else min(wake, load_at)
            # one future per sleep, woken by the waker/timer or ``_poke``; state is re-read
            self._wake = fut = loop.create_future()
            handle = None
            if wake is not None and self._waker is not None:
                self._waker.arm(wake, fut)  # waker.py: sub-millisecond, wall clock
            elif wake is not None:
                delay = max(0.0, wake - now - sub_ms(self.clock_ms)) / 1000
                handle = loop.call_later(delay, _resolve, fut)
            try:
                await fut
            finally:
                self._wake = None
                if handle is not None:
                    handle.cancel()

    def _start_load(self) -> asyncio.Task[None] | None:
        """The running bucket load, else one started for the next bucket if it starts
        within the lookahead (and the heap holds fewer than ``max_loaded`` entries) or if
        nothing is loaded. One at a time, in order, as its own task (firing goes on)."""
        if self._loader is not None:
            return self._loader
        if self._future and (
            not self.window
            or (
                self._future[0] * self.buckets.bucket_ms <= self.clock_ms() + self.lookahead_ms
                and self.pending_in_memory < self.max_loaded
            )
        ):
            self._loader = asyncio.get_running_loop().create_task(
                self._load_next(), name="timer-load"
            )
        return self._loader

    async def _load_next(self) -> None:
        bucket = heapq.heappop(self._future)
        self._known.discard(bucket)
        self._loading_min = self._future_min.pop(bucket, bucket * self.buckets.bucket_ms)
        self._loading, self._loading_extra = bucket, []
        try:
            pending = self.buckets.pending_bytes(bucket)
            # fired ones are dropped in the thread (the cursor only grows meanwhile, and
            # ``_fire`` skips anything at or below it anyway); paced unless due soon
            parts = await self.run_blocking(
                self._load_sliced,
                bucket,
                pending,
                self.cursor,
                bucket * self.buckets.bucket_ms - PACE_UNTIL_MS,
            )
        except BaseException:
            heapq.heappush(self._future, bucket)
            self._known.add(bucket)
            raise
        finally:
            self._loading, self._loading_min = None, None
            self._poke()
        # entries added while the file was read, and recalls: few, so into the heap
        for e in self._loading_extra:
            self.window.push(e)
        self._loading_extra = []
        self._loaded_through = bucket
        self._span_from(bucket)
        self.window.add_slices(parts)

    def _span_from(self, bucket: int) -> None:
        """``bucket`` is in the loaded span: lower its low end (``pending_buckets``)."""
        if self._span_low is None or bucket < self._span_low:
            self._span_low = bucket

    def _load_sliced(
        self, bucket: int, pending: bytes, after: tuple[int, int], pace_until: int
    ) -> list[Slice]:
        """In the load thread: the bucket's live entries after ``after``, sliced; while
        the clock is before ``pace_until`` (ms) it sleeps twice the CPU time of each step,
        so the load takes at most a third of a core from the loop."""
        clock = self.clock_ms

        def pace(work_s: float) -> None:
            if clock() < pace_until:
                time.sleep(2 * work_s)

        return slice_live((self.buckets.read_file(bucket), pending), after, pace)

    def _fire(self, now: int) -> bool:
        """Fire up to ``batch`` due timers; False if a re-put failed (retry later)."""
        fired = 0
        while fired < self.batch:
            due_now = self.window.take_due(now, self.batch - fired, self.cursor, self._cancelled)
            if not due_now:
                break
            # the entries' sizes come from the records' own dispatch (0 after a rollback):
            # one read for neighbouring records (they were sent together), plus their
            # PHYSICALOFFSET field, not the full checked read
            sized = [(phy, size) for _due, phy, size in due_now if size > 0]
            recs = dict(
                zip((phy for phy, _ in sized), self.store.commitlog.read_many(sized), strict=False)
            )
            # the batch: each timer once (a duplicate entry of one fired sorts next to it),
            # in (due, phy) order, its record or None if it cannot be read
            batch: list[tuple[bytes | None, int, int]] = []
            last = self.cursor
            for due, phy, size in due_now:
                if (due, phy) <= last:
                    continue
                last = (due, phy)
                rec = recs.get(phy) if size > 0 else self.store.read_at(phy)
                if rec is not None and stored_physical_offset(rec) != phy:
                    rec = None
                batch.append((rec, due, phy))
            try:
                settled = self.reputs.put_many(batch, _UNREAD, self._settle)
            finally:
                if self._fired:
                    done, self._fired = self._fired, []
                    if self.on_fired is not None:
                        self.on_fired(done)
            fired += settled
            if settled < len(batch):  # a RETRY: it and the rest back at the head
                for e in due_now:  # nothing overtakes them
                    if (e[0], e[1]) > self.cursor:
                        self.window.push(e)
                return False
        return True

    def _settle(self, attempt: Attempt, due: int, phy: int) -> None:
        """After one re-put of ``_fire``'s batch: progress past it, its stats and event."""
        if attempt.outcome is Outcome.SKIP:
            self._skip(due, phy, attempt.reason)
            return
        if self.cursor < (due, phy):  # dispatch did not see the origin: never loop
            self.cursor = (due, phy)
        if self.on_fired is not None:
            assert attempt.target is not None and attempt.result is not None
            self._fired.append((attempt.target, attempt.result, due, time.time()))

    def _skip(self, due: int, phy: int, reason: str) -> None:
        self.skipped += 1
        if self.cursor < (due, phy):
            self.cursor = (due, phy)
        self.log.error("timer.record_skipped", phy_offset=phy, reason=reason)

    # ------------------------------------------------------------- housekeeping

    def retention_floor(self, scan: int = 100_000) -> int | None:
        """The lowest commit-log offset a pending timer's record lies at, or None
        (``RetentionWalk.floor``)."""
        return self.retention.floor(scan)

    async def delete_fired_buckets(self) -> int:
        return await self.retention.delete_fired_buckets()  # retention.py

    # ------------------------------------------------------------- checkpoint

    def take_dirty(self) -> dict[int, bytes]:
        """On the loop, with the store snapshot: the bucket appends the checkpoint must
        write before it records its offset."""
        return self.buckets.take_dirty()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# ------------------------------------------------------------------ the native twin

# The fire path above is the reference (tests/server/test_native_timer_fire.py holds the
# twin to it); the twin's (``_service.pyx``) replaces it when protocol/native.py chooses it.
reference = SimpleNamespace(
    _settle=TimerService._settle, _fire=TimerService._fire, on_dispatch=TimerService.on_dispatch
)


def _load_twin() -> ModuleType:
    from . import _service  # type: ignore[attr-defined]

    twin: ModuleType = _service  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    TimerService._settle = _twin._settle  # type: ignore[method-assign]
    TimerService._fire = _twin._fire  # type: ignore[method-assign]
    # the twin's listener, with the reference's declared interest
    TimerService.on_dispatch = interested_in(  # type: ignore[method-assign]
        topics=(TIMER_TOPIC,), properties=(TIMER_ORIGIN,)
    )(_twin.on_dispatch)
