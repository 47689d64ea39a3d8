"""The native twin of the delay levels' drain (server/schedule/delay/_service.pyx)
against the reference (``service.reference``).

Same store, same due schedule records, same clock: the twin's ``drain`` and the
reference's ``_drain`` return the same, move the same progress, store the same bytes,
skip and log the same records, report the same deliveries and note the same undo.
Schedules: generated (levels, due
or not, a bad REAL_QID, recalled records, a re-put the store refuses for a while, small
batches, a wall clock stepped back).
"""

from __future__ import annotations

import types
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: results compared whole across the two cores

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import REAL_QID, SCHEDULE_ORIGIN
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.schedule.delay import service
from kairosmq.server.schedule.delay.levels import transform_delayed
from kairosmq.server.schedule.delay.service import ScheduleService
from kairosmq.server.schedule.recalls import LevelRecalls
from kairosmq.server.store import (
    MessageInner,
    MessageStore,
    PutResult,
    PutStatus,
)

from tests.twins import twin

ref = service.reference
HOST = (b"\x7f\x00\x00\x01", 10911)
NOW = 1_700_000_000_000
LEVELS = (1000, 5000, 10000)
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.schedule.delay.service")


class Rig:
    """A real store and a ScheduleService whose drain is one core's."""

    def __init__(
        self,
        root: Path,
        drain: Any,
        batch: int,
        marks: bool = False,
        on_dispatch: Any = None,
        put_patched: Any = None,
    ) -> None:
        self.now = NOW
        self.store = MessageStore(
            root, store_host=HOST, segment_size=1 << 20, clock_ms=lambda: self.now
        )
        self.store.open()
        self.store._write_scheduled = True  # no loop here: written out by hand
        self.delivered: list[tuple[Any, ...]] = []
        # recalled: a plain callable, or ``LevelRecalls.pass_record`` (what the broker
        # wires: the twin runs its steps inline on the marks, dropping each one passed)
        self.recalls = LevelRecalls()
        self.recalled_phy: set[int] = self.recalls.marks if marks else set()
        self.fail = 0
        self.sched = ScheduleService(
            self.store,
            ArrivalNotifier(),
            LEVELS,
            on_delivered=self._delivered,
            recalled=self.recalls.pass_record if marks else lambda phy: phy in self.recalled_phy,
            batch=batch,
            clock_ms=lambda: self.now,
            put_patched=self._put_patched,
        )
        # the listener: the class's, or a given core's bound to the service
        listener = on_dispatch and types.MethodType(on_dispatch, self.sched)
        self.store.dispatchers.append(listener or self.sched.on_dispatch)
        self.drain = types.MethodType(drain, self.sched)
        self.put_patched = put_patched  # a given core's MessageStore.put_patched

    def _put_patched(self, *args: Any) -> PutResult:
        if self.fail > 0:
            self.fail -= 1
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected")
        if self.put_patched is not None:
            return self.put_patched(self.store, *args)  # type: ignore[no-any-return]
        return self.store.put_patched(*args)

    def _delivered(self, done: list[Any]) -> None:
        for target, result, level, off, deliver_ts, now, wall_s in done:
            assert isinstance(wall_s, float)
            t = (target.topic, target.queue_id, target.properties, target.reconsume_times)
            self.delivered.append((t, result, level, off, deliver_ts, now))

    def schedule(self, i: int, level: int, delay_ms: int, bad_qid: bool) -> None:
        msg = MessageInner(topic="Real", queue_id=i % 2, body=b"b%d" % i, born_timestamp=NOW)
        transform_delayed(msg, level, LEVELS, NOW + delay_ms - LEVELS[level - 1])
        if bad_qid:
            msg.properties[REAL_QID] = "x1"
        r = self.store.put(msg)
        assert r.status is PutStatus.PUT_OK
        self.write_out()

    def write_out(self) -> None:
        self.store.write_out()
        self.store._write_scheduled = True  # no loop here: written out by hand

    def state(self) -> tuple[Any, ...]:
        s = self.store
        self.write_out()
        log = s.commitlog.read_many([(0, s.commitlog.max_offset)])
        undo = s.commitlog.written_offset, list(self.sched.reputs.undo._entries)
        marks = sorted(self.recalled_phy)
        return dict(self.sched.progress), self.sched.skipped, log, self.delivered, undo, marks

    def close(self) -> None:
        self.store.close()


_item = st.tuples(
    st.integers(1, 3),  # level
    st.integers(-3000, 3000),  # due: ms from now (<= 0: due)
    st.booleans(),  # a bad REAL_QID: skipped
    st.booleans(),  # recalled: passed over
)


@PARITY
@given(
    st.lists(_item, min_size=1, max_size=14),
    st.sampled_from([2, 3, 256]),
    st.integers(0, 2),
    st.sampled_from([None, NOW - 500, NOW + 500]),
    st.booleans(),
)
def test_drains_alike(
    nat: ModuleType,
    tmp_path_factory: pytest.TempPathFactory,
    items: list[tuple[int, int, bool, bool]],
    batch: int,
    fail: int,
    cap: int | None,
    marks: bool,
) -> None:
    root = tmp_path_factory.mktemp("drain")
    rigs = [
        Rig(root / "ref", ref.drain, batch, marks),
        Rig(root / "nat", nat.drain, batch, marks),
    ]
    try:
        runs: list[list[Any]] = [[], []]
        for rig, run in zip(rigs, runs, strict=True):
            for i, (level, delay, bad, recalled) in enumerate(items):
                before = rig.store.commitlog.max_offset
                rig.schedule(i, level, delay, bad)
                if recalled:
                    rig.recalled_phy.add(before)
            rig.fail = fail
            if cap is not None:
                rig.sched._cap[1] = cap  # the wall clock stepped back (level 1)
            for rounds in range(6):
                for level in (1, 2, 3):
                    cq = rig.store.find_queue(SCHEDULE_TOPIC, level - 1)
                    if cq is None:
                        continue
                    with structlog.testing.capture_logs() as logs:
                        got = rig.drain(level, cq)
                    run.append((rounds, level, got, logs, rig.state()))
        assert runs[0] == runs[1]
    finally:
        for rig in rigs:
            rig.close()


@PARITY
@given(
    st.lists(_item, min_size=1, max_size=10),
    st.sampled_from([2, 256]),
    st.lists(st.sampled_from(["1:0", "2:7", "9:1", "x", "1:99999"]), max_size=3),
)
def test_dispatch_is_heard_alike(
    nat: ModuleType,
    tmp_path_factory: pytest.TempPathFactory,
    items: list[tuple[int, int, bool, bool]],
    batch: int,
    strays: list[str],
) -> None:
    """The listener's twin (``on_dispatch``), called by the message-store twin as a C
    function (the store's put and put_patched the twin's): the same progress, undo,
    logs and bytes as the reference's listener fed by the reference's store. Strays:
    records a client stored with an origin of its own (not a re-put being made: the
    twin hands them to the reference, which logs them ignored)."""
    from kairosmq.server.store import message_store

    ms_ref, ms_nat = message_store.reference, twin("server.store.message_store")
    root = tmp_path_factory.mktemp("dispatch")
    rigs = [
        Rig(
            root / "ref",
            ref.drain,
            batch,
            on_dispatch=ref.on_dispatch,
            put_patched=ms_ref.put_patched,
        ),
        Rig(
            root / "nat",
            nat.drain,
            batch,
            on_dispatch=nat.on_dispatch,
            put_patched=ms_nat.put_patched,
        ),
    ]
    try:
        runs: list[list[Any]] = [[], []]
        for rig, run, put in zip(rigs, runs, (ms_ref.put, ms_nat.put), strict=True):
            for i, (level, delay, bad, _recalled) in enumerate(items):
                rig.schedule(i, level, delay, bad)
            for origin in strays:
                m = MessageInner("Real", 0, b"s", {SCHEDULE_ORIGIN: origin})
                with structlog.testing.capture_logs() as logs:
                    put(rig.store, m)
                run.append((origin, logs))
            for level in (1, 2, 3):
                cq = rig.store.find_queue(SCHEDULE_TOPIC, level - 1)
                if cq is not None:
                    with structlog.testing.capture_logs() as logs:
                        got = rig.drain(level, cq)
                    run.append((level, got, logs, rig.state()))
        assert runs[0] == runs[1]
    finally:
        for rig in rigs:
            rig.close()


def test_the_broker_hears_through_the_twin(nat: ModuleType, tmp_path: Path) -> None:
    """On the native core the service's listener is the twin's, with the reference's
    declared interest, and the message-store twin calls it as a C function."""
    from kairosmq.protocol import native

    if native.core() != "native":
        pytest.skip(f"the pure core runs: {native.reason()}")
    assert nat.on_dispatch.dispatch_interest == ref.on_dispatch.dispatch_interest
    assert ScheduleService.on_dispatch is nat.on_dispatch
    rig = Rig(tmp_path, nat.drain, 256)
    try:
        rig.schedule(0, 1, -1, False)
        rig.drain(1, rig.store.find_queue(SCHEDULE_TOPIC, 0))
        assert rig.sched.progress[1] == 1
        assert "ScheduleService.on_dispatch" in twin("server.store.message_store").C_CALLS
    finally:
        rig.close()


def test_the_broker_drains_through_the_twin(nat: ModuleType) -> None:
    """On the native core the service's drain is the twin's."""
    from kairosmq.protocol import native

    if native.core() != "native":
        pytest.skip(f"the pure core runs: {native.reason()}")
    assert ScheduleService._drain is nat.drain
