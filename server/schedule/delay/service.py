"""Delayed delivery: ScheduleService (one task per level), RocketMQ's delay-level scheduler.

Owns: ``ScheduleService``. The send side's transform into ``SCHEDULE_TOPIC_XXXX`` and the
level table's parser are ``levels.py``'s; the re-put of a due record (its restore, the
patched put, its outcome, skips, the origin in flight) is ``schedule/reput.py``'s, shared
with the timer service; the recall marks it consults are ``schedule/recalls.py``'s.

Invariants:
* Never early, late by milliseconds: a level's queue is FIFO by due time, so each task
  reads only its head and sleeps the exact countdown (re-checking the wall clock on
  waking); an empty level waits on the arrival notifier, not a poll. A due backlog
  drains in batches of ``batch`` without a sleep per message.
* Exactly-once transfer: a re-put record carries ``KAIROS_SCHEDULE_ORIGIN=level:offset``
  and the level's progress advances only when that record is dispatched (``on_dispatch``),
  i.e. in the same synchronous append. Progress is a StateProvider of the store's
  checkpoint, and recovery replays the log after it, so after kill -9 nothing is lost and
  nothing is re-put twice.
* A failed re-put leaves progress unchanged: the same message is retried after a pause,
  and no later message of that level overtakes it. A record that can never be delivered
  (undecodable, bad REAL_QID, a re-put refused as illegal) is skipped with an ``error``
  event ``schedule.record_skipped``: a level task never stalls or dies on a record.
* A recalled record (``recalled``: RECALL_MESSAGE won) is passed over, never re-put.
* Only the scheduler moves progress: online, ``on_dispatch`` accepts an origin only for
  the re-put the scheduler itself is making (the request carries that re-put's own
  properties, or ``level:offset`` equal to the one in flight); on replay, only a level
  in range with an offset below the schedule queue's end. Anything else (``x``, a
  20-digit value) is ignored and logged.
* A failed commit-log write that drops a re-put undoes the progress it made
  (``rollback``, a store rollback listener), so the message is re-put again.
* ``_drain`` here is the reference. Its native twin (``_service.pyx``, chosen by
  ``protocol/native.py``) runs it step for step, its ``settle`` a C callable
  (tests/server/test_native_delay_service.py: the same progress, bytes, skips and
  deliveries).
* ``correctDeliverTimestamp`` (RocketMQ): after the wall clock steps back, a head whose
  due time lies beyond ``now + the level's delay`` is delivered at most one delay after
  the scheduler first saw it so (``schedule.due_capped``), not hours later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any  # Any: a service's snapshot state (JSON); the supervisor's task state

from kairosmq.protocol import native
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import INT64_DIGITS, SCHEDULE_ORIGIN, parse_decimal_pair

from ...clock import sub_ms, wall_ms
from ...observe.logs import get_logger
from ...remoting.longpoll import ArrivalNotifier
from ...store import DispatchRequest, MessageStore
from ...store.consumequeue import HOLE
from ...store.message_store import interested_in
from ..delivered import Delivered
from ..reput import RETRY_PAUSE, Attempt, Outcome, PutPatched, Reputs, restore_delayed_view
from ..waker import PreciseWaker

_LEVEL_DIGITS = 4  # an origin's level: at most 4 digits (then checked against the table)
_FIRST_CHUNK = 8  # schedule units read per first look at a level's head (_drain)
_RECALLED = "recalled"  # a batch item passed over: its RECALL_MESSAGE won (_drain)


class ScheduleService:
    """One asyncio task per delay level moving due messages to their real topics."""

    name = "schedule"

    def __init__(
        self,
        store: MessageStore,
        notifier: ArrivalNotifier,
        levels_ms: tuple[int, ...],
        *,
        on_delivered: Callable[[list[Delivered]], None] | None = None,
        recalled: Callable[[int], bool] | None = None,
        batch: int = 256,
        clock_ms: Callable[[], int] | None = None,
        put_patched: PutPatched | None = None,
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.levels_ms = levels_ms
        # DeliveryLog.delivered: stats, message.delivered (once per drain)
        self.on_delivered = on_delivered
        # LevelRecalls.pass_record: a recalled schedule record is passed over
        self.recalled = recalled
        self.batch = batch
        self.clock_ms = clock_ms or wall_ms  # the broker passes the store's clock
        self.progress: dict[int, int] = {lvl: 0 for lvl in range(1, len(levels_ms) + 1)}
        self.tasks: list[asyncio.Task[None]] = []
        self.log = get_logger("schedule")
        # the re-puts (reput.py): in flight (level, offset); undo: (level, previous progress)
        self.reputs: Reputs[tuple[int, int]] = Reputs(
            store, restore_delayed_view, put_patched=put_patched
        )
        self.skipped = 0
        self._cap: dict[int, int] = {}  # level -> capped due ms (clock stepped back)
        self._wakers: dict[int, PreciseWaker] = {}  # level -> its task's timerfd
        store.rollback_listeners.append(self.rollback)

    # ------------------------------------------------------------- StateProvider

    def snapshot(self) -> dict[str, int]:
        return {str(k): v for k, v in self.progress.items()}

    def restore(self, state: Any) -> None:
        """Progress from a checkpoint; entries that are not level -> offset are ignored."""
        if not isinstance(state, dict):
            return
        for k, v in state.items():
            try:
                level, off = int(k), int(v)
            except (TypeError, ValueError):
                continue
            if level in self.progress and 0 <= off < 1 << 63:
                self.progress[level] = off

    @interested_in(properties=(SCHEDULE_ORIGIN,))  # its re-puts, fresh or replayed
    def on_dispatch(self, req: DispatchRequest) -> None:
        props = req.properties
        if req.topic == SCHEDULE_TOPIC:
            return
        parsed: tuple[int, int] | str | None
        if props is self.reputs.in_flight_props and not req.replay:  # the re-put being made
            parsed = self.reputs.in_flight
        else:
            origin = props.get(SCHEDULE_ORIGIN)
            if origin is None:
                return
            parsed = self._parse_origin(origin, req.replay)
            if isinstance(parsed, str):
                self.log.warning(
                    "schedule.origin_ignored",
                    phy_offset=req.phy_offset,
                    origin=origin[:64],
                    reason=parsed,
                )
                return
        assert parsed is not None
        level, off = parsed
        prev = self.progress[level]
        if prev <= off:
            self.progress[level] = off + 1
            if not req.replay:
                self.reputs.undo.add(req.phy_offset, (level, prev))

    def _parse_origin(self, origin: str, replay: bool) -> tuple[int, int] | str:
        """(level, offset) of an origin the scheduler may trust, else the reason not to."""
        pair = parse_decimal_pair(origin, _LEVEL_DIGITS, INT64_DIGITS)
        if pair is None:
            return "not <level>:<offset>"
        level, off = pair
        if level not in self.progress:
            return f"no delay level {level}"
        if not replay:
            if not self.reputs.made((level, off)):
                return "not a re-put the scheduler is making"
            return level, off
        cq = self.store.find_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None or off >= cq.max_offset:
            return f"offset {off} is past the end of level {level}'s queue"
        return level, off

    def rollback(self, kept: int) -> None:
        """Store rollback listener: undo progress made by re-puts at or after ``kept``."""
        levels: set[int] = set()
        for level, prev in self.reputs.undo.rollback_from(kept):
            self.progress[level] = min(self.progress[level], prev)
            levels.add(level)
        for level in levels:  # wake a level task that went to wait on the notifier
            self.notifier.notify(SCHEDULE_TOPIC, level - 1)

    # ------------------------------------------------------------- queries

    def backlog(self) -> dict[int, tuple[int, int | None]]:
        """Per level: (pending count, next due ms or None)."""
        out: dict[int, tuple[int, int | None]] = {}
        for level, off in self.progress.items():
            cq = self.store.find_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                out[level] = (0, None)
                continue
            start = max(off, cq.min_offset)
            head = cq.get(start)
            out[level] = (max(0, cq.max_offset - start), head[2] if head else None)
        return out

    # ------------------------------------------------------------- tasks

    def start(
        self, spawn: Callable[[str, Callable[[Any], Any]], asyncio.Task[None]] | None = None
    ) -> None:
        """Start one task per level; ``spawn(name, factory)`` (the broker's supervisor)
        runs each under supervision: restarted with backoff if it raises."""
        loop = asyncio.get_running_loop()
        for level in self.progress:
            if self.clock_ms is wall_ms and level not in self._wakers:  # else a test's clock
                waker = PreciseWaker.create(loop)
                if waker is not None:
                    self._wakers[level] = waker
            name = f"schedule-level-{level}"
            if spawn is not None:
                self.tasks.append(spawn(name, self._runner(level)))
            else:
                self.tasks.append(loop.create_task(self._run(level), name=name))

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        for waker in self._wakers.values():
            waker.close()
        self._wakers.clear()

    def _runner(self, level: int) -> Callable[[Any], Any]:
        return lambda _st: self._run(level)

    async def _run(self, level: int) -> None:
        qid = level - 1
        while True:
            off = self.progress[level]
            cq = self.store.find_queue(SCHEDULE_TOPIC, qid)
            if cq is None or off >= cq.max_offset:
                await self.notifier.wait(SCHEDULE_TOPIC, qid, None)
                if self.notifier.closed:  # stopping: a closed notifier returns at once, so
                    return  # looping here would spin without ever yielding to the loop
                continue
            if off < cq.min_offset:  # expired by retention
                self.progress[level] = cq.min_offset
                continue
            head = cq.get(off) or HOLE  # None: a lost unit; _drain passes over holes
            now = self.clock_ms()
            wait_ms = self._due(level, off, head[2], now) - now
            if wait_ms > 0:
                waker = self._wakers.get(level)
                if waker is not None:  # a timerfd at the due ms (schedule/waker.py)
                    await waker.wait_until(now + wait_ms)
                else:  # to the due instant on the sub-millisecond clock (clock_ms
                    # truncates); the loop re-checks, so an early wake never delivers early
                    await asyncio.sleep(max(0.0, wait_ms - sub_ms(self.clock_ms)) / 1000)
                continue
            if not self._drain(level, cq):
                await asyncio.sleep(RETRY_PAUSE)
            else:
                await asyncio.sleep(0)

    def _due(self, level: int, off: int, due: int, now: int) -> int:
        """RocketMQ's correctDeliverTimestamp: the head's due time, capped at the instant
        one level delay after the scheduler first found it beyond ``now + delay`` (the wall
        clock stepped back after it was stored)."""
        limit = now + self.levels_ms[level - 1]
        if due <= limit:
            self._cap.pop(level, None)
            return due
        cap = self._cap.get(level)
        if cap is None:
            cap = self._cap[level] = limit
            self.log.warning(
                "schedule.due_capped",
                delay_level=level,
                queue_offset=off,
                deliver_ts=due,
                capped_ts=cap,
            )
        return min(due, cap)

    def _skip(self, level: int, off: int, phy: int, reason: str) -> None:
        """Pass over a schedule record that can never be delivered (logged, counted)."""
        self.skipped += 1
        if self.progress[level] <= off:
            self.progress[level] = off + 1
        self.log.error(
            "schedule.record_skipped",
            delay_level=level,
            queue_offset=off,
            phy_offset=phy,
            reason=reason,
        )

    def _drain(self, level: int, cq: Any) -> bool:
        """Re-put up to ``batch`` due messages; False if a re-put failed (retry later)."""
        start = self.progress[level]
        now = self.clock_ms()
        log_min = self.store.commitlog.min_offset
        cap = self._cap.get(level)
        stepped = now + self.levels_ms[level - 1]
        due: list[tuple[int, int, int]] = []
        # Read the head in growing chunks (8, 32, 128, ...): under steady load only a few
        # units are due per wake-up, and unpacking a whole batch of not-yet-due units
        # each time cost more than the re-puts (py-spy, docs/performance.md).
        pos, want, chunk = start, self.batch, _FIRST_CHUNK
        while want > 0:
            units = cq.units(pos, min(chunk, want))
            if not units:
                break
            for unit in units:
                due_ts = unit[2]
                if cap is not None and due_ts > stepped:
                    due_ts = min(due_ts, cap)
                if due_ts > now:
                    want = 0
                    break
                if unit[0] < log_min and not due:  # removed by retention: nothing to deliver
                    start += 1
                    self.progress[level] = start
                    continue
                due.append(unit)
            else:
                pos += len(units)
                want -= len(units)
                chunk *= 4
        if not due:
            return True
        records = self.store.commitlog.read_many([(u[0], u[1]) for u in due])
        if len(records) < len(due):
            due = due[: len(records)]  # a read failed: retry the rest on the next round
        recalled = self.recalled
        # the batch: a RECALL_MESSAGE that won is passed over in its place (no record)
        batch = [
            (None if recalled is not None and recalled(u[0]) else records[i], level, start + i)
            for i, u in enumerate(due)
        ]

        def settle(attempt: Attempt, level: int, off: int) -> None:
            phy, _size, deliver_ts = due[off - start]
            if attempt.outcome is Outcome.SKIP and attempt.reason is not _RECALLED:
                self._skip(level, off, phy, attempt.reason)
                return
            if self.progress[level] <= off:  # dispatch did not see the origin: never loop
                self.progress[level] = off + 1
            if attempt.outcome is Outcome.DONE and self.on_delivered is not None:
                assert attempt.target is not None and attempt.result is not None
                done.append(
                    (attempt.target, attempt.result, level, off, deliver_ts, now, time.time())
                )

        done: list[Delivered] = []
        try:
            settled = self.reputs.put_many(batch, _RECALLED, settle)
        finally:
            if done and self.on_delivered is not None:
                self.on_delivered(done)
        return settled == len(batch)  # else a RETRY: the same record on the next round


# ------------------------------------------------------------------ the native twin

# ``ScheduleService._drain`` above is the reference (tests/server/test_native_delay_service.py
# holds the twin to it); the twin's (``_service.pyx``) replaces it when protocol/native.py
# chooses it.
reference = SimpleNamespace(drain=ScheduleService._drain, on_dispatch=ScheduleService.on_dispatch)


def _load_twin() -> ModuleType:
    from . import _service  # type: ignore[attr-defined]

    twin: ModuleType = _service  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    ScheduleService._drain = _twin.drain  # type: ignore[method-assign]
    # the twin's listener, with the reference's declared interest
    ScheduleService.on_dispatch = interested_in(properties=(SCHEDULE_ORIGIN,))(  # type: ignore[method-assign]
        _twin.on_dispatch
    )
