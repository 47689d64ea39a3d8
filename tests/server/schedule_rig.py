"""A store + notifier + scheduler wired like the broker wires them, on a virtual loop.

Shared by tests/server/test_schedule.py (wake instants, retries, retention) and
tests/server/test_schedule_faults.py (a wall clock that steps back, bad records).

Owns: ``Rig`` (a real MessageStore on a tmp directory, the ScheduleService built through
its public constructor with the broker's re-put, ``schedule/reput.py``: the restore view
and the patched put; the store write under it, ``put_patched``, records each attempt and
fails on demand) and ``Attempt``.
The scheduler's clock is ``BASE_MS + loop ms + step_ms``: tests move ``step_ms`` to step
the wall clock; ``Attempt.loop_ms`` is the loop's own (never stepped) time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kairosmq.protocol.message import RecordView, decode_records
from kairosmq.protocol.properties import DELIVER_TIME
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.schedule.delay.levels import transform_delayed
from kairosmq.server.schedule.delay.service import ScheduleService
from kairosmq.server.store import (
    DispatchRequest,
    MessageInner,
    MessageStore,
    PutResult,
    PutStatus,
)

from tests.helpers import VirtualLoop

BASE_MS = 1_700_000_000_000
HOST = (b"\x7f\x00\x00\x01", 10911)
SEG = 64 * 1024


@dataclass(slots=True)
class Attempt:
    """One call of the scheduler's ``put``: the clocks then, the body, and the outcome."""

    at_ms: int  # the scheduler's (wall) clock
    body: bytes
    deliver_ms: int
    ok: bool
    loop_ms: int = 0  # the loop's clock (not stepped)


class Rig:
    """Store + notifier + scheduler on ``clock_ms`` (default: the stepped wall clock)."""

    def __init__(
        self,
        root: Path,
        loop: VirtualLoop,
        *,
        levels: tuple[int, ...],
        clock_ms: Callable[[], int] | None = None,
        batch: int = 256,
        upf: int = 1000,
    ) -> None:
        self.loop = loop
        self.levels = levels
        self.step_ms = 0
        self.clock_ms = clock_ms or self.wall_ms
        self.store = MessageStore(
            root, store_host=HOST, segment_size=SEG, units_per_file=upf, clock_ms=self.clock_ms
        )
        self.store.open()
        self.notifier = ArrivalNotifier()
        self.sched = ScheduleService(
            self.store,
            self.notifier,
            levels,
            batch=batch,
            clock_ms=self.clock_ms,
            put_patched=self.put_patched,
        )
        self.store.providers.append(self.sched)
        self.store.dispatchers.append(self._notify)
        self.store.dispatchers.append(self.sched.on_dispatch)
        self.attempts: list[Attempt] = []
        self.fail_next = 0

    def wall_ms(self) -> int:
        return BASE_MS + self.loop_ms() + self.step_ms

    def loop_ms(self) -> int:
        return round(self.loop.time() * 1000)

    def _notify(self, req: DispatchRequest) -> None:
        if not req.replay:
            self.notifier.notify(req.topic, req.queue_id)

    def put_patched(
        self, record: bytes, view: RecordView, topic: str, queue_id: int, props: dict[str, str]
    ) -> PutResult:
        """The store write of the scheduler's re-put: the real store, failing
        ``fail_next`` times first."""
        body = record[view.body_start : view.body_end]
        deliver = int(props[DELIVER_TIME])
        if self.fail_next > 0:
            self.fail_next -= 1
            self.attempts.append(Attempt(self.clock_ms(), body, deliver, False, self.loop_ms()))
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected failure")
        result = self.store.put_patched(record, view, topic, queue_id, props)
        self.attempts.append(
            Attempt(
                self.clock_ms(), body, deliver, result.status is PutStatus.PUT_OK, self.loop_ms()
            )
        )
        return result

    def schedule(self, body: bytes, level: int, **props: str) -> int:
        """Store a delayed message the way the broker's put path does (``props`` set after
        the transform, to plant a bad record); return its due ms."""
        msg = MessageInner(topic="Real", queue_id=0, body=body, born_timestamp=BASE_MS)
        transform_delayed(msg, level, self.levels, self.clock_ms())
        msg.properties.update(props)
        assert self.store.put(msg).status is PutStatus.PUT_OK
        return int(msg.properties[DELIVER_TIME])

    @property
    def delivered(self) -> list[Attempt]:
        return [a for a in self.attempts if a.ok]

    @property
    def reputs(self) -> list[tuple[bytes, int]]:
        """(body, loop ms) of each successful re-put."""
        return [(a.body, a.loop_ms) for a in self.delivered]

    def real_bodies(self) -> list[bytes]:
        """Bodies in the real topic's queue, in queue order (what a consumer would pull)."""
        res = self.store.get("Real", 0, 0, 10_000, max_bytes=1 << 30)
        return [m.body for m in decode_records(b"".join(res.chunks))]

    def close(self) -> None:
        self.store.close()
