"""The native fire path of the timers (server/schedule/timer/_service.pyx, _window.pyx and
server/store/_undo.pyx) against the reference (``service.reference``,
``window.reference``, ``undo.reference``).

Same fire batch, same state out: two timer services on real stores (real files, the
same clock) are given the same timers — good ones, one whose REAL_QID names no queue (a
SKIP), one recalled, entries written twice, entries re-armed with size 0 as after a
rollback (read by offset) — and the same store failure at the same put (a RETRY); one
runs the reference's ``_fire``/``_settle``/``take_due``/``UndoLog.add``, the other the
twins' (both dispatch through the one ``on_dispatch``: it has no twin). Then the same
cursor, skips, undo entries, heap, recall marks, ``on_fired`` rows (stats and
``timer.fired`` come from them: tests/server/test_native_delivered.py), the same
``_fire`` answers and the same stored bytes.
``take_due`` and ``UndoLog.add`` are also held to the reference on generated input.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: results compared whole across the two cores

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.naming import TIMER_TOPIC
from kairosmq.protocol.properties import REAL_QID, REAL_TOPIC, RECALL_TARGET
from kairosmq.protocol.timer import TIMER_OUT_MS
from kairosmq.server.schedule.timer import TimerBuckets, TimerService, service, window
from kairosmq.server.schedule.timer.topic import RECALL_QUEUE, format_pair
from kairosmq.server.schedule.timer.window import TimerWindow
from kairosmq.server.store import (
    MessageInner,
    MessageStore,
    PutResult,
    PutStatus,
    record_check,
    undo,
)
from kairosmq.server.store.undo import UndoLog

from tests.twins import outcome, twin

BASE = 1_700_000_040_000
HOST = (b"\x7f\x00\x00\x01", 10911)
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def twins() -> tuple[ModuleType, ModuleType, ModuleType]:
    return (
        twin("server.schedule.timer.service"),
        twin("server.schedule.timer.window"),
        twin("server.store.undo"),
    )


def _classes(nat: bool, twins: tuple[ModuleType, ModuleType, ModuleType]) -> type[TimerService]:
    """A TimerService whose fire path is the twins' (``nat``) or the reference's,
    whatever core the process chose."""
    svc_m, win_m, undo_m = twins if nat else (service.reference, window.reference, undo.reference)

    class Undo(UndoLog[Any]):
        add = undo_m.add

    class Window(TimerWindow):
        take_due = win_m.take_due

    class Service(TimerService):
        _settle = svc_m._settle
        _fire = svc_m._fire
        on_dispatch = svc_m.on_dispatch

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.window = Window()
            store = args[0]
            self.reputs.undo = Undo(lambda: store.commitlog.written_offset)

    return Service


class Side:
    """One store + timer service, loaded as after a bucket load (entries in the heap)."""

    def __init__(self, root: Path, cls: type[TimerService], fail_at: int | None, batch: int):
        self.now = BASE
        self.store = MessageStore(
            root / "store",
            store_host=HOST,
            segment_size=1 << 20,
            units_per_file=1000,
            clock_ms=lambda: self.now,
        )
        self.rows: list[Any] = []
        self.puts = 0
        self.fail_at = fail_at
        self.timer = cls(
            self.store,
            TimerBuckets(root / "store" / "timer"),
            clock_ms=lambda: self.now,
            batch=batch,
            on_fired=self.rows.extend,
            put_patched=self._put,
        )
        self.store.providers.append(self.timer)
        self.store.dispatchers.append(self.timer.on_dispatch)
        self.store.open()
        self.timer._started = True  # the buckets are loaded: adds go into the heap
        self.timer._loaded_through = 1 << 40

    def _put(self, record: bytes, *args: Any) -> PutResult:
        self.puts += 1
        if self.puts == self.fail_at:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected")
        return self.store.put_patched(record, *args)

    def timer_record(self, i: int, due: int, qid: str) -> int:
        msg = MessageInner(
            topic=TIMER_TOPIC,
            queue_id=0,
            body=f"m{i}".encode(),
            born_timestamp=BASE,
            properties={
                REAL_TOPIC: "Real",
                REAL_QID: qid,
                TIMER_OUT_MS: str(due),
                "UNIQ_KEY": f"U{i}",
            },
        )
        res = self.store.put(msg)
        assert res.status is PutStatus.PUT_OK
        return res.phy_offset

    def recall(self, due: int, phy: int) -> None:
        msg = MessageInner(
            topic=TIMER_TOPIC,
            queue_id=RECALL_QUEUE,
            body=b"0",
            properties={RECALL_TARGET: format_pair(due, phy)},
        )
        assert self.store.put(msg).status is PutStatus.PUT_OK

    def state(self) -> tuple[Any, ...]:
        t = self.timer
        real = [
            b"".join(self.store.get("Real", q, 0, 1000, max_bytes=1 << 24).chunks) for q in range(4)
        ]
        fired = [
            (tg.topic, tg.queue_id, list(tg.properties.items()), tg.reconsume_times, r, due)
            for tg, r, due, _wall in self.rows
        ]
        return (
            t.cursor,
            t.skipped,
            list(t.reputs.undo._entries),  # type: ignore[attr-defined]
            t.reputs.undo._trim_at,  # type: ignore[attr-defined]
            list(t.window.heap),
            sorted(t._cancelled),
            fired,
            real,
        )


timers = st.lists(
    st.tuples(
        st.integers(0, 3),  # due: BASE + this
        st.sampled_from(["0", "1", "3", "0", "x"]),  # REAL_QID ("x": never re-put)
        st.sampled_from(["", "", "twice", "rolled", "recalled"]),
    ),
    min_size=1,
    max_size=14,
)


@PARITY
@given(timers, st.one_of(st.none(), st.integers(1, 12)), st.integers(1, 6))
def test_the_same_turns_fire_the_same(
    twins: tuple[ModuleType, ModuleType, ModuleType],
    spec: list[tuple[int, str, str]],
    fail_at: int | None,
    batch: int,
) -> None:
    async def main() -> None:  # the store schedules its writes on the running loop
        with tempfile.TemporaryDirectory() as tmp:
            sides = [
                Side(Path(tmp) / name, _classes(nat, twins), fail_at, batch)
                for name, nat in (("ref", False), ("nat", True))
            ]
            for side in sides:
                for i, (d, qid, how) in enumerate(spec):
                    due = BASE + d
                    phy = side.timer_record(i, due, qid)
                    if how == "twice":
                        (entry,) = [e for e in side.timer.window.heap if e[1] == phy]
                        side.timer.window.push(entry)  # an entry written twice
                    elif how == "rolled":
                        side.timer.window.push((due, phy, 0))  # re-armed by a rollback
                    elif how == "recalled":
                        side.recall(due, phy)
            answers: list[list[object]] = [[], []]
            for step in range(6):  # turns as the clock moves past every due
                for k, side in enumerate(sides):
                    side.now = BASE + step
                    answers[k].append(outcome(side.timer._fire, side.now))
            assert answers[0] == answers[1]
            assert sides[0].state() == sides[1].state()
            assert sides[0].puts == sides[1].puts
            for side in sides:
                side.store.close()

    asyncio.run(main())


entries = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9), st.integers(0, 3)), max_size=20)


def _window(heap: list[tuple[int, int, int]], run: list[tuple[int, int, int]]) -> TimerWindow:
    """A window whose heap holds ``heap`` (pushed online) and whose run is the promoted
    slice ``run``."""
    w = TimerWindow()
    w.add_slices([sorted(run)] if run else [])
    w.promote(10)
    for e in heap:
        w.push(e)
    return w


@settings(derandomize=True, database=None, deadline=None, max_examples=400)
@given(
    entries,
    entries,
    st.integers(-1, 7),
    st.integers(0, 25),
    st.tuples(st.integers(0, 6), st.integers(-1, 9)),
    st.sets(st.integers(0, 9)),
)
def test_take_due(
    twins: tuple[ModuleType, ModuleType, ModuleType],
    heap: list[tuple[int, int, int]],
    run: list[tuple[int, int, int]],
    now: int,
    limit: int,
    cursor: tuple[int, int],
    cancelled: set[int],
) -> None:
    """The twin against the reference, and the reference against one heap of every entry
    (the order a heap alone gives: the run changes nothing but the cost)."""
    a, b = _window(heap, run), _window(heap, run)
    ca, cb = set(cancelled), set(cancelled)
    got = twins[1].take_due(a, now, limit, cursor, ca)
    want = window.reference.take_due(b, now, limit, cursor, cb)
    assert (got, a.heap, a.run, ca) == (want, b.heap, b.run, cb)
    one = TimerWindow()
    for e in heap + run:
        one.push(e)
    c1 = set(cancelled)
    assert window.reference.take_due(one, now, limit, cursor, c1) == want and c1 == cb
    assert sorted(one.heap) == sorted(b.heap + b.run)


@settings(derandomize=True, database=None, deadline=None, max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3000)), max_size=3000))
def test_undo_add(
    twins: tuple[ModuleType, ModuleType, ModuleType], steps: list[tuple[int, int]]
) -> None:
    """Adds in offset order with the written offset moving: the same entries kept and the
    same next trim."""
    written = [0]
    a: UndoLog[int] = UndoLog(lambda: written[0])
    b: UndoLog[int] = UndoLog(lambda: written[0])
    phy = 0
    for gap, moved in steps:
        phy += gap
        written[0] = min(phy, moved + written[0])
        twins[2].add(a, phy, gap)
        undo.reference.add(b, phy, gap)
    assert (a._entries, a._trim_at) == (b._entries, b._trim_at)  # type: ignore[attr-defined]


def test_the_service_uses_the_chosen_core() -> None:
    """The classes' methods are the twins' exactly when protocol/native.py chose them
    (the dispatch listener with the reference's declared interest)."""
    from kairosmq.protocol import native

    chosen = native.chosen()
    for mod, cls, names in (
        ("service", TimerService, ("_settle", "_fire", "on_dispatch")),
        ("window", TimerWindow, ("take_due",)),
    ):
        ref = {"service": service, "window": window}[mod].reference
        nat = chosen[f"kairosmq.server.schedule.timer.{mod}"] == "native"
        for name in names:
            assert (getattr(cls, name) is getattr(ref, name)) is not nat
    assert (UndoLog.add is undo.reference.add) is not (
        chosen["kairosmq.server.store.undo"] == "native"
    )
    assert TimerService.on_dispatch.dispatch_interest == (  # type: ignore[attr-defined]
        service.reference.on_dispatch.dispatch_interest
    )


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(st.binary(max_size=64), st.sampled_from([bytes, bytearray, memoryview]))
def test_stored_physical_offset(data: bytes, kind: type) -> None:
    """The PHYSICALOFFSET field (signed, big-endian) or None when too short; a buffer of
    another type goes to the reference."""
    nat = twin("server.store.record_check")
    buf = kind(data)
    assert outcome(nat.stored_physical_offset, buf) == outcome(
        record_check.reference.stored_physical_offset, buf
    )
