"""TimerService + TimerBuckets on a real store and a virtual clock.

Wake instants (the task sleeps to the head's due millisecond, not on a period), never
early, order across buckets, far-future timers (40 days, on the virtual clock), recall
(before, after and instead of the fire), a failed re-put retried in order, and restart:
the checkpointed cursor plus replay of the log after it fires every timer exactly once,
with and without the bucket files having been flushed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.message import RecordView, decode_record, decode_records
from kairosmq.protocol.naming import TIMER_TOPIC
from kairosmq.protocol.properties import (
    REAL_QID,
    REAL_TOPIC,
    RECALL_TARGET,
    TIMER_DELIVER_MS,
    TIMER_ORIGIN,
)
from kairosmq.protocol.timer import TIMER_OUT_MS
from kairosmq.server.schedule.reput import restore_timer
from kairosmq.server.schedule.timer import RecallOutcome, TimerBuckets, TimerService
from kairosmq.server.schedule.timer.buckets import ENTRY, KIND_CANCEL, KIND_TIMER, live_entries
from kairosmq.server.schedule.timer.topic import RECALL_QUEUE, format_pair
from kairosmq.server.store import MessageInner, MessageStore, PutResult, PutStatus

from tests.helpers import VirtualLoop, run_virtual

BASE_MS = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a bucket boundary
HOST = (b"\x7f\x00\x00\x01", 10911)
DAY = 86_400_000


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


class Rig:
    """A real store with a TimerService wired as the broker wires it (clock = virtual)."""

    def __init__(self, root: Path, loop: VirtualLoop) -> None:
        self.root = root
        self.loop = loop
        self.fail_next = 0
        self.fired: list[tuple[bytes, int, int]] = []  # (body, due, loop-clock ms)
        self._open()

    def _open(self) -> None:
        self.store = MessageStore(
            self.root / "store",
            store_host=HOST,
            segment_size=1 << 20,
            units_per_file=1000,
            clock_ms=self.now,
        )
        self.buckets = TimerBuckets(self.root / "store" / "timer")
        self.timer = TimerService(
            self.store,
            self.buckets,
            clock_ms=self.now,
            run_blocking=inline,
            put_patched=self.put_patched,
        )
        self.store.providers.append(self.timer)
        self.store.dispatchers.append(self.timer.on_dispatch)
        self.store.open()

    def now(self) -> int:
        return BASE_MS + round(self.loop.time() * 1000)

    def put_patched(
        self, record: bytes, view: RecordView, topic: str, queue_id: int, props: dict[str, str]
    ) -> PutResult:
        """The store write of the timer service's re-put (schedule/reput.py): the real
        store, failing ``fail_next`` times first."""
        if self.fail_next:
            self.fail_next -= 1
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected")
        result = self.store.put_patched(record, view, topic, queue_id, props)
        self.fired.append(
            (record[view.body_start : view.body_end], int(props[TIMER_OUT_MS]), self.now())
        )
        return result

    def schedule(self, body: bytes, due: int) -> int:
        """Store a timer record as the put path does; return its phy offset."""
        msg = MessageInner(
            topic=TIMER_TOPIC,
            queue_id=0,
            body=body,
            born_timestamp=BASE_MS,
            properties={
                TIMER_DELIVER_MS: str(due),
                REAL_TOPIC: "Real",
                REAL_QID: "0",
                TIMER_OUT_MS: str(self.timer.admit(due)),
            },
        )
        res = self.store.put(msg)
        assert res.status is PutStatus.PUT_OK
        return res.phy_offset

    def recall_record(self, due: int, phy: int) -> None:
        msg = MessageInner(
            topic=TIMER_TOPIC,
            queue_id=RECALL_QUEUE,
            body=b"0",
            properties={RECALL_TARGET: format_pair(due, phy)},
        )
        assert self.store.put(msg).status is PutStatus.PUT_OK

    def checkpoint(self) -> None:
        snap = self.store.checkpoint_snapshot()
        self.buckets.flush(self.timer.take_dirty())
        self.store.persist_checkpoint(snap)

    async def restart(self, *, clean: bool) -> None:
        """Stop (``clean``: checkpoint first) and open everything again, as after kill -9
        when not clean (the store's files stay as they are)."""
        await self.timer.stop()
        if clean:
            self.checkpoint()
        self.store.close()
        self._open()
        self.timer.start()

    def real(self) -> list[tuple[bytes, dict[str, str]]]:
        res = self.store.get("Real", 0, 0, 100_000, max_bytes=1 << 30)
        return [(m.body, m.properties) for m in decode_records(b"".join(res.chunks))]


def run(tmp_path: Path, body: Any) -> Any:
    async def main(loop: VirtualLoop) -> Any:
        rig = Rig(tmp_path, loop)
        rig.timer.start()
        try:
            return await body(rig)
        finally:
            await rig.timer.stop()
            rig.store.close()

    return run_virtual(main)


def test_fires_at_each_due_millisecond_in_order(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        dues = [BASE_MS + d for d in (5, 1, 61_000, 3, 59_999, 60_000, 1_000, 1_000)]
        for i, due in enumerate(dues):
            rig.schedule(f"m{i}".encode(), due)
        await asyncio.sleep(62)
        assert [f[1] for f in rig.fired] == sorted(dues)
        assert all(at == due for _b, due, at in rig.fired)  # exactly on time, never early
        got = rig.real()
        assert len(got) == len(dues)
        for _body, props in got:
            assert TIMER_DELIVER_MS not in props and REAL_TOPIC not in props
            assert props[TIMER_ORIGIN].startswith(props[TIMER_OUT_MS] + ":")

    run(tmp_path, body)


def test_sleeps_to_the_due_instant_not_on_a_period(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.schedule(b"a", BASE_MS + 30_000)
        await asyncio.sleep(40)
        waits = [t for t in rig.loop.timers_of("timer") if t.delay > 0]
        # one sleep straight to the due instant (no 10 ms / 250 ms / 1 s ticks before it)
        assert len(waits) <= 2, waits
        assert rig.fired and rig.fired[0][2] == BASE_MS + 30_000

    run(tmp_path, body)


def test_an_earlier_timer_wakes_a_sleeping_task(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.schedule(b"late", BASE_MS + 50_000)
        await asyncio.sleep(1)
        rig.schedule(b"early", BASE_MS + 1_500)
        await asyncio.sleep(60)
        assert [(b, at - BASE_MS) for b, _d, at in rig.fired] == [
            (b"early", 1_500),
            (b"late", 50_000),
        ]

    run(tmp_path, body)


def test_far_future_timer_stays_on_disk_until_its_bucket(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        due = BASE_MS + 40 * DAY - 7
        rig.schedule(b"far", due)
        for d in (2, 3):
            rig.schedule(b"nearer", BASE_MS + d * DAY)
        await asyncio.sleep(3)
        # only the next bucket is in memory: memory is flat in the number of pending timers
        assert rig.timer.pending_in_memory == 1
        assert rig.timer.next_due() == BASE_MS + 2 * DAY
        rig.checkpoint()
        assert rig.buckets.path(rig.buckets.bucket_of(due)).stat().st_size == ENTRY.size
        await asyncio.sleep(40 * 86_400)
        assert [(b, at) for b, _d, at in rig.fired][-1] == (b"far", due)
        assert len(rig.fired) == 3

    run(tmp_path, body)


def test_recall_before_fire_wins_and_is_final(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        due = BASE_MS + 10_000
        phy = rig.schedule(b"x", due)
        keep = rig.schedule(b"keep", due)
        assert await rig.timer.recall_state(due, phy) is None
        rig.recall_record(due, phy)
        assert await rig.timer.recall_state(due, phy) is RecallOutcome.ALREADY_RECALLED
        await asyncio.sleep(11)
        assert [b for b, _d, _a in rig.fired] == [b"keep"]
        assert await rig.timer.recall_state(due, keep) is RecallOutcome.ALREADY_FIRED

    run(tmp_path, body)


def test_recall_of_a_far_timer_in_an_unloaded_bucket(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        due = BASE_MS + 3 * DAY
        phy = rig.schedule(b"x", due)
        rig.checkpoint()  # half on disk, half buffered
        other = rig.schedule(b"y", due + 1)
        assert await rig.timer.recall_state(due, phy) is None
        rig.recall_record(due, phy)
        assert await rig.timer.recall_state(due, phy) is RecallOutcome.ALREADY_RECALLED
        await rig.restart(clean=False)  # kill -9: the recall record is replayed
        assert await rig.timer.recall_state(due, phy) is RecallOutcome.ALREADY_RECALLED
        await asyncio.sleep(3 * 86_400 + 5)
        assert [b for b, _d, _a in rig.fired] == [b"y"]
        assert await rig.timer.recall_state(due + 1, other) is RecallOutcome.ALREADY_FIRED

    run(tmp_path, body)


def test_failed_reput_is_retried_and_nothing_overtakes_it(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.schedule(b"first", BASE_MS + 1_000)
        rig.schedule(b"second", BASE_MS + 1_001)
        rig.fail_next = 3
        await asyncio.sleep(5)
        assert [b for b, _d, _a in rig.fired] == [b"first", b"second"]
        assert rig.fired[0][2] > BASE_MS + 1_000  # retried after the pauses

    run(tmp_path, body)


@pytest.mark.parametrize("clean", [True, False])
def test_restart_fires_each_timer_exactly_once(tmp_path: Path, clean: bool) -> None:
    async def body(rig: Rig) -> None:
        for i in range(40):
            rig.schedule(f"m{i}".encode(), BASE_MS + 500 + i * 100)
        if clean:
            rig.checkpoint()
        await asyncio.sleep(2.55)  # 21 fired (500..2500 ms)
        assert len(rig.fired) == 21
        await rig.restart(clean=clean)
        await asyncio.sleep(10)
        bodies = [b for b, _p in rig.real()]
        assert bodies == [f"m{i}".encode() for i in range(40)]  # once each, in due order

    run(tmp_path, body)


def test_a_loaded_bucket_joins_the_heap_slice_by_slice(tmp_path: Path) -> None:
    """A bucket read from its file is kept as sorted slices: the heap and the run only ever
    hold the slices about to fall due (no heapify of a whole bucket on the loop), every timer still
    fires at its millisecond in (due, phy) order, and a recall inside a slice not yet in
    the heap wins."""
    from kairosmq.server.schedule.timer.window import PROMOTE_AHEAD_MS, SLICE_MS

    async def body(rig: Rig) -> None:
        await rig.timer.stop()
        dues = [BASE_MS + 60_000 + (i * 7919) % 30_000 for i in range(600)]  # next bucket
        phys = [rig.schedule(f"m{i}".encode(), due) for i, due in enumerate(dues)]
        rig.checkpoint()
        await rig.restart(clean=True)
        await asyncio.sleep(59.5)  # the bucket is loaded (lookahead 2 s), nothing due yet
        assert rig.timer.pending_in_memory == 600
        window = rig.timer.window
        assert len(window.heap) + len(window.run) == 0 and len(window.slices) == 300
        victim = 5  # due in the bucket's 2nd half: still in a slice
        assert dues[victim] - BASE_MS > 62_000
        assert await rig.timer.recall_state(dues[victim], phys[victim]) is None
        rig.recall_record(dues[victim], phys[victim])
        peak = 0
        for _ in range(400):
            await asyncio.sleep(0.1)
            peak = max(peak, len(window.heap) + len(window.run))
        per_slice = 600 // 300
        assert peak <= per_slice * (1 + (PROMOTE_AHEAD_MS + 100) // SLICE_MS + 1), peak
        expect = sorted(
            (d, p) for i, (d, p) in enumerate(zip(dues, phys, strict=True)) if i != victim
        )
        assert [f[1] for f in rig.fired] == [d for d, _p in expect]
        assert all(at == due for _b, due, at in rig.fired)
        assert rig.timer.pending_in_memory == 0

    run(tmp_path, body)


def test_retention_keeps_the_segment_of_a_pending_timer_and_asks_only_when_expired(
    tmp_path: Path,
) -> None:
    """Expired segments go, except the one holding a pending timer's record and those
    after it; the timers' floor is asked only once a segment has expired; once the timer
    fired, its segment goes too."""
    import os
    import time

    async def body(rig: Rig) -> None:
        asked: list[int | None] = []

        def floor() -> int | None:
            asked.append(rig.timer.retention_floor())
            return asked[-1]

        first = rig.schedule(b"soon", BASE_MS + 1_000)
        pending = rig.schedule(b"later", BASE_MS + 30_000)
        filler = MessageInner(topic="Fill", queue_id=0, body=b"f" * 4000)
        for _ in range(800):  # ~3 segments of 1 MiB after the timers'
            assert rig.store.put(filler).status is PutStatus.PUT_OK
        rig.store.write_out()
        assert rig.store.delete_expired(3600, floor).segments == 0 and asked == []
        old = time.time() - 10 * 3600
        for f in (rig.root / "store" / "commitlog").iterdir():
            os.utime(f, (old, old))
        await asyncio.sleep(2)  # "soon" fired; "later" pending, in segment 0
        assert [b for b, _d, _a in rig.fired] == [b"soon"] and first < pending < 1 << 20
        assert rig.store.delete_expired(0, floor).segments == 0 and asked == [pending]
        await asyncio.sleep(30)
        assert [b for b, _d, _a in rig.fired] == [b"soon", b"later"]
        rig.store.write_out()
        for f in (rig.root / "store" / "commitlog").iterdir():
            os.utime(f, (old, old))
        assert rig.store.delete_expired(3600, floor).segments >= 3 and asked[-1] is None

    run(tmp_path, body)


def test_due_during_downtime_fires_at_start_in_due_order(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        await rig.timer.stop()
        for i, d in enumerate((300_000, 100_000, 200_000)):  # three buckets
            rig.schedule(f"m{i}".encode(), BASE_MS + d)
        rig.checkpoint()
        await asyncio.sleep(400)  # "down": nothing runs
        assert rig.fired == []
        rig.timer.start()
        await asyncio.sleep(0.1)
        assert [b for b, _d, _a in rig.fired] == [b"m1", b"m2", b"m0"]

    run(tmp_path, body)


def test_browse_lists_the_previous_bucket_once_the_next_loads_before_any_fire(
    tmp_path: Path,
) -> None:
    """Nothing has fired yet (the cursor is unset) and the next bucket loads 2 s ahead
    while the loaded one still holds a pending timer: the browse (the operator's pages,
    over ``pending_buckets``) lists both until they fire (the span's low end was the last
    loaded bucket, so the earlier timer was left out of pages and the histogram)."""
    from kairosmq.server.schedule.pending.browse import PendingView

    async def body(rig: Rig) -> None:
        view = PendingView(
            rig.store,
            rig.buckets,
            timer_cursor=lambda: rig.timer.cursor,
            pending_buckets=rig.timer.pending_buckets,
            level_progress=dict,
            level_recalls=rig.timer.level_recalls,
            run_blocking=inline,
        )

        async def listed() -> list[int]:
            page = await view.page(
                (0, -1),
                limit=10,
                from_ms=None,
                to_ms=None,
                topic=None,
                kind="timer",
                max_scan=100,
            )
            return [r["dueMs"] for r in page["rows"]]

        dues = [BASE_MS + 59_500, BASE_MS + 61_000]  # the last second of a bucket; the next
        for i, due in enumerate(dues):
            rig.schedule(f"m{i}".encode(), due)
        await asyncio.sleep(1)
        assert await listed() == dues
        await asyncio.sleep(58.5 - 1)  # the next bucket loaded (2 s ahead), nothing fired
        assert rig.timer.cursor[1] < 0 and rig.timer.pending_in_memory == 2
        assert await listed() == dues
        await asyncio.sleep(1.2)
        assert await listed() == dues[1:]
        await asyncio.sleep(2)
        assert await listed() == [] and len(rig.fired) == 2

    run(tmp_path, body)


def test_admit_never_puts_a_timer_behind_the_cursor(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.schedule(b"a", BASE_MS + 2_000)
        await asyncio.sleep(3)
        assert rig.timer.admit(BASE_MS + 1_000) == BASE_MS + 2_000  # clock stepped back
        rig.schedule(b"b", BASE_MS + 1_000)
        await asyncio.sleep(1)
        assert [b for b, _d, _a in rig.fired] == [b"a", b"b"]

    run(tmp_path, body)


def test_live_entries_dedupe_and_cancel_in_any_order() -> None:
    a, b, c = (10, 100, 5), (5, 200, 5), (10, 50, 5)
    t = [ENTRY.pack(*e, KIND_TIMER) for e in (a, b, c)]
    cancel_b = ENTRY.pack(5, 200, 0, KIND_CANCEL)
    assert sorted(live_entries([t[0] + t[1] + t[0], t[2] + t[1]])) == [b, c, a]
    assert sorted(live_entries([cancel_b + t[0], t[1] + t[2]])) == [c, a]  # cancel first


def test_torn_tail_entry_is_dropped(tmp_path: Path) -> None:
    bk = TimerBuckets(tmp_path)
    bk.add(BASE_MS + 5, 1, 10)
    bk.flush(bk.take_dirty())
    with bk.path(bk.bucket_of(BASE_MS)).open("ab") as f:
        f.write(b"\x01\x02\x03")
    assert bk.load(bk.bucket_of(BASE_MS)) == [(BASE_MS + 5, 1, 10)]
    assert bk.entry_counts() == {bk.bucket_of(BASE_MS): 1}


def test_restore_timer_keeps_body_and_client_properties(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        due = BASE_MS + 1
        phy = rig.schedule(b"payload", due)
        rec = rig.store.read_at(phy)
        assert rec is not None
        msg = restore_timer(rec, due, phy)
        assert (msg.topic, msg.queue_id, msg.body) == ("Real", 0, b"payload")
        assert msg.properties[TIMER_ORIGIN] == format_pair(due, phy)
        assert decode_record(rec).properties[TIMER_OUT_MS] == str(due)

    run(tmp_path, body)


def test_firing_goes_on_while_the_next_bucket_loads(tmp_path: Path) -> None:
    """A bucket loads as its own task: timers of the loaded bucket fire on time while
    the next bucket's read is held; the held bucket's timers fire once it is in."""

    async def body(rig: Rig) -> None:
        gate = asyncio.Event()
        loads: list[int] = []

        async def held(fn: Any, *args: Any) -> Any:
            if fn == rig.timer._load_sliced and args[0] > rig.buckets.bucket_of(BASE_MS):
                loads.append(args[0])
                await gate.wait()  # the next bucket's file read takes "long"
            return fn(*args)

        rig.timer.run_blocking = held
        first = [BASE_MS + 58_000 + 100 * i for i in range(20)]  # 58.0 .. 59.9 s
        second = [BASE_MS + 60_000 + 5, BASE_MS + 60_500]
        for i, due in enumerate(first + second):
            rig.schedule(f"m{i}".encode(), due)
        await asyncio.sleep(59.95)  # the next bucket's load started 2 s ahead, still held
        assert loads == [rig.buckets.bucket_of(BASE_MS + 60_000)]
        assert [(d, at) for _b, d, at in rig.fired] == [(d, d) for d in first]
        assert rig.timer.next_due() == second[0]  # counted while it loads
        gate.set()
        await asyncio.sleep(1)
        assert [(d, at) for _b, d, at in rig.fired[len(first) :]] == [(d, d) for d in second]

    run(tmp_path, body)


def test_slice_live_filters_dedupes_and_cuts_sorted_slices() -> None:
    from kairosmq.server.schedule.timer.window import SLICE_MS, slice_live

    def e(due: int, phy: int, kind: int = KIND_TIMER) -> bytes:
        return ENTRY.pack(due, phy, 10, kind)

    data = b"".join(
        [
            e(250, 5),
            e(30, 1),
            e(120, 3),
            e(30, 1),
            e(110, 2),
            e(40, 9),
            e(0, 2, KIND_CANCEL),
            e(5, 0),
        ]
    )
    paced: list[float] = []
    parts = slice_live((data, e(260, 7)), (30, 1), paced.append)
    assert parts == [[(40, 9, 10)], [(120, 3, 10)], [(250, 5, 10), (260, 7, 10)]]
    assert all(p[0][0] // SLICE_MS == p[-1][0] // SLICE_MS for p in parts)
    assert len(paced) == 2 and all(w >= 0 for w in paced)  # one step per part here
    assert slice_live((b"",)) == []


def test_a_batch_fires_in_order_around_a_skip_and_a_retry(tmp_path: Path) -> None:
    """Twelve timers due at one instant fire as one batch (``Reputs.put_many``): one
    that can never be re-put (REAL_QID ``x``) is skipped in its place, a store failure
    at the sixth put stops the batch there and the rest follow after the pause, in
    ``(due, phy)`` order, each once; every fired copy's own dispatch moved the cursor
    (its undo entry), and a client copy of an origin moves nothing."""

    async def body(rig: Rig) -> None:
        due = BASE_MS + 1_000
        phys = [rig.schedule(f"m{i}".encode(), due) for i in range(12)]
        bad = MessageInner(
            topic=TIMER_TOPIC,
            queue_id=0,
            body=b"bad",
            born_timestamp=BASE_MS,
            properties={REAL_TOPIC: "Real", REAL_QID: "x", TIMER_OUT_MS: str(due)},
        )
        bad_phy = rig.store.put(bad).phy_offset  # after m0..m11 (phy order)
        calls = 0
        real_put = rig.timer.reputs.put_patched

        def failing(*args: Any) -> PutResult:
            nonlocal calls
            calls += 1
            if calls == 6:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected")
            return real_put(*args)

        rig.timer.reputs.put_patched = failing
        await asyncio.sleep(0.9)
        forged = MessageInner(  # a client's message naming the last timer as its origin
            topic="Real",
            queue_id=0,
            body=b"forged",
            properties={TIMER_ORIGIN: format_pair(due, phys[-1])},
        )
        assert rig.store.put(forged).status is PutStatus.PUT_OK
        assert rig.timer.cursor < (due, phys[0])
        await asyncio.sleep(0.15)  # due; the sixth put fails: five fired, the rest wait
        assert [b for b, _d, _a in rig.fired] == [f"m{i}".encode() for i in range(5)]
        assert rig.timer.cursor == (due, phys[4])
        await asyncio.sleep(2)
        assert [b for b, _p in rig.real()] == [b"forged"] + [f"m{i}".encode() for i in range(12)]
        assert rig.timer.skipped == 1 and rig.timer.cursor == (due, bad_phy)
        assert len(rig.timer.reputs.undo) == 12  # each fire moved the cursor on dispatch
        assert calls == 13  # m0..m11 once, m5 twice; the bad one never reached the store

    run(tmp_path, body)


@pytest.mark.parametrize("seed", range(20))
def test_the_window_answers_as_one_heap_would(seed: int) -> None:
    """A promoted slice is consumed as a run (its end first), later slices and online adds
    go to the heap: the head, the wake instant, the next live due, ``push``'s "new head"
    and every pop are those of one heap holding every promoted entry."""
    import heapq
    import random

    from kairosmq.server.schedule.timer.window import PROMOTE_AHEAD_MS, TimerWindow

    rnd = random.Random(seed)
    w = TimerWindow()
    one: list[tuple[int, int, int]] = []
    slices = []
    for k in range(4):
        part = sorted(
            (k * 100 + rnd.randrange(100), rnd.randrange(50), rnd.randrange(3))
            for _ in range(rnd.randrange(1, 30))
        )
        slices.append(part)
    w.add_slices([list(p) for p in slices])
    cursor, cancelled = (0, -1), set()
    now = 0
    while now < 500:
        w.promote(now)
        while slices and slices[0][0][0] <= now + PROMOTE_AHEAD_MS:
            for e in slices.pop(0):
                heapq.heappush(one, e)
        for _ in range(rnd.randrange(3)):
            e = (now + rnd.randrange(-5, 60), rnd.randrange(50), 0)
            heapq.heappush(one, e)
            assert w.push(e) is (one[0] == e)
        assert w.head_due() == (one[0][0] if one else None)
        live = [d for d, p, _s in heapq.nsmallest(64, one) if (d, p) > cursor][:1]
        firsts = [d for part in slices for d, p, _s in part if (d, p) > cursor][:1]
        want_live = min(live + firsts) if live + firsts else None
        assert w.next_live(cursor, cancelled) == want_live
        limit = rnd.randrange(1, 8)
        got = w.take_due(now, limit, cursor, cancelled)
        want = []
        while one and one[0][0] <= now and len(want) < limit:
            e = heapq.heappop(one)
            if (e[0], e[1]) > cursor:
                want.append(e)
        assert got == want
        if got:
            cursor = (got[-1][0], got[-1][1])
        assert len(w) == len(one) + sum(len(p) for p in slices)
        now += rnd.randrange(1, 15)
