"""Delayed delivery: the delay transform and ScheduleService (one task per level).

Owns: ``transform_delayed`` (divert a message with a delay level into
``SCHEDULE_TOPIC_XXXX`` queue ``level-1``, saving REAL_TOPIC/REAL_QID and the due time),
``restore_delayed`` (the inverse, for the re-put) and ``ScheduleService``.

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
  and no later message of that level overtakes it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from kairosmq.protocol.message import decode_record
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
)

from .longpoll import ArrivalNotifier
from .store import SCHEDULE_TOPIC, DispatchRequest, MessageInner, MessageStore, PutStatus

RETRY_PAUSE = 0.2


def _wall_ms() -> int:
    return int(time.time() * 1000)


def transform_delayed(msg: MessageInner, level: int, levels_ms: tuple[int, ...],
                      now_ms: int) -> int:
    """Divert ``msg`` into the schedule topic in place; return the (clamped) level."""
    level = min(level, len(levels_ms))
    props = msg.properties
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    props[DELAY] = str(level)
    props[DELIVER_TIME] = str(now_ms + levels_ms[level - 1])
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
    msg.store_timestamp = now_ms
    return level


def restore_delayed(record: bytes, level: int, schedule_offset: int) -> MessageInner:
    """The message to re-put for a due schedule record (real topic/queue, no DELAY)."""
    m = decode_record(record)
    props = dict(m.properties)
    props.pop(DELAY, None)
    props[SCHEDULE_ORIGIN] = f"{level}:{schedule_offset}"
    return MessageInner(
        topic=props.get(REAL_TOPIC, m.topic),
        queue_id=int(props.get(REAL_QID, "0")),
        body=m.body,
        properties=props,
        flag=m.flag,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        reconsume_times=m.reconsume_times,
    )


class ScheduleService:
    """One asyncio task per delay level moving due messages to their real topics."""

    name = "schedule"

    def __init__(
        self,
        store: MessageStore,
        notifier: ArrivalNotifier,
        levels_ms: tuple[int, ...],
        *,
        put: Callable[[MessageInner], Any],
        on_delivered: Callable[[MessageInner, Any, int, int, int], None] | None = None,
        batch: int = 256,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.levels_ms = levels_ms
        self.put = put
        self.on_delivered = on_delivered
        self.batch = batch
        self.clock_ms = clock_ms or _wall_ms
        self.progress: dict[int, int] = {lvl: 0 for lvl in range(1, len(levels_ms) + 1)}
        self.tasks: list[asyncio.Task[None]] = []
        self.delivered = 0
        self.put_failures = 0

    # ------------------------------------------------------------- StateProvider

    def snapshot(self) -> dict[str, int]:
        return {str(k): v for k, v in self.progress.items()}

    def restore(self, state: Any) -> None:
        for k, v in (state or {}).items():
            if int(k) in self.progress:
                self.progress[int(k)] = int(v)

    def on_dispatch(self, req: DispatchRequest) -> None:
        origin = req.properties.get(SCHEDULE_ORIGIN)
        if origin is None or req.topic == SCHEDULE_TOPIC:
            return
        level_s, _, off_s = origin.partition(":")
        level, off = int(level_s), int(off_s)
        if self.progress.get(level, -1) <= off:
            self.progress[level] = off + 1

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

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for level in self.progress:
            self.tasks.append(loop.create_task(self._run(level), name=f"schedule-level-{level}"))

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()

    async def _run(self, level: int) -> None:
        qid = level - 1
        while True:
            off = self.progress[level]
            cq = self.store.find_queue(SCHEDULE_TOPIC, qid)
            if cq is None or off >= cq.max_offset:
                await self.notifier.wait(SCHEDULE_TOPIC, qid, None)
                continue
            if off < cq.min_offset:  # expired by retention
                self.progress[level] = cq.min_offset
                continue
            head = cq.get(off)
            assert head is not None
            wait_ms = head[2] - self.clock_ms()
            if wait_ms > 0:
                # Sleep to the due instant on the sub-millisecond clock (clock_ms truncates);
                # the loop re-checks, so an early timer wake-up never delivers early.
                frac = time.time() * 1000 % 1 if self.clock_ms is _wall_ms else 0.0
                await asyncio.sleep(max(0.0, wait_ms - frac) / 1000)
                continue
            if not self._drain(level, cq):
                await asyncio.sleep(RETRY_PAUSE)
            else:
                await asyncio.sleep(0)

    def _drain(self, level: int, cq: Any) -> bool:
        """Re-put up to ``batch`` due messages; False if a re-put failed."""
        start = self.progress[level]
        now = self.clock_ms()
        log_min = self.store.commitlog.min_offset
        due = []
        for unit in cq.units(start, self.batch):
            if unit[2] > now:
                break
            if unit[0] < log_min and not due:  # removed by retention: nothing to deliver
                start += 1
                self.progress[level] = start
                continue
            due.append(unit)
        if not due:
            return True
        records = self.store.commitlog.read_many([(u[0], u[1]) for u in due])
        if len(records) < len(due):
            due = due[: len(records)]  # a read failed: retry the rest on the next round
        for i, (_phy, _size, deliver_ts) in enumerate(due):
            off = start + i
            msg = restore_delayed(records[i], level, off)
            result = self.put(msg)
            if result.status is not PutStatus.PUT_OK:
                self.put_failures += 1
                return False
            if self.progress[level] <= off:  # dispatch did not see the origin: never loop
                self.progress[level] = off + 1
            self.delivered += 1
            if self.on_delivered is not None:
                self.on_delivered(msg, result, level, deliver_ts, now)
        return True
