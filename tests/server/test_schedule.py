"""ScheduleService unit tests on a virtual clock: a real MessageStore on tmp_path, the
scheduler's public constructor (``clock_ms=``) and a ``VirtualLoop`` that jumps to the next
timer, so the tests assert *when* the scheduler wakes and how long it asks to sleep.

What these catch: a scheduler that polls on a period instead of sleeping to the head's due
instant (it wakes at instants that are no due time, and delivers late), one that trusts a
timer and delivers before the clock says due, one that skips or reorders a message whose
re-put failed, one that sleeps per message in a due backlog, and one that stalls (or spins)
on units whose records retention already deleted.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest
from kairosmq.protocol.message import decode_records
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import SCHEDULE_ORIGIN
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.schedule.delay.service import ScheduleService

from tests.helpers import VirtualDeadlock, VirtualLoop, run_virtual
from tests.server.schedule_rig import BASE_MS, Rig

LEVELS = (1000, 3000, 10_000)


def _ms(loop: VirtualLoop) -> int:
    return round(loop.time() * 1000)


async def _sleep_to(loop: VirtualLoop, t_ms: int) -> None:
    await asyncio.sleep(max(0.0, t_ms / 1000 - loop.time()))


# ---------------------------------------------------------------- wake instants


def test_wakes_at_each_head_due_instant_not_on_a_period(tmp_path: Path) -> None:
    """Level 1 gets messages at t=100, 500 and 2600 ms (due 1100, 1500, 3600): the level
    task must arm exactly one timer per head, each for ``due - now``, and re-put each
    message at its due instant. A poll every 250 ms (or any period) arms other timers and
    re-puts at 1250/1500/3750: both assertions fail. An idle level arms no timer at all."""
    dues: list[int] = []

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            for t_ms, body in ((100, b"a"), (500, b"b"), (2600, b"c")):
                await _sleep_to(loop, t_ms)
                dues.append(rig.schedule(body, 1))
            await _sleep_to(loop, 6000)
            assert [(a.body, a.at_ms) for a in rig.attempts] == [
                (b"a", dues[0]),
                (b"b", dues[1]),
                (b"c", dues[2]),
            ]
            assert rig.real_bodies() == [b"a", b"b", b"c"]
            assert rig.sched.progress[1] == 3
        finally:
            await rig.sched.stop()
            rig.close()
        timers = loop.timers_of("schedule-level-1")
        # one sleep per head, for exactly due - now (the scheduler's ms clock = loop ms)
        assert [(round(t.at * 1000), round(t.delay * 1000)) for t in timers] == [
            (100, 1000),
            (1100, 400),
            (2600, 1000),
        ]
        assert {BASE_MS + round(t.when * 1000) for t in timers} == set(dues)
        # levels 2 and 3 have nothing: they wait on the arrival notifier, never on a timer
        assert loop.timers_of("schedule-level-2") == []
        assert loop.timers_of("schedule-level-3") == []
        # the clock only ever jumped to the test's own instants and to due instants
        wakes = {round(w * 1000) for w in loop.wakes}
        assert wakes <= {100, 500, 2600, 6000} | {d - BASE_MS for d in dues}

    run_virtual(main, max_iterations=200_000)


def test_many_messages_are_each_reput_exactly_when_due_in_fifo_order(tmp_path: Path) -> None:
    """Seeded random arrivals over three levels: every message is re-put at exactly its due
    ms (never earlier, not one ms later), each level in arrival order."""
    rnd = random.Random(20261122)
    sent: dict[bytes, tuple[int, int]] = {}

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            t = 0
            for i in range(120):
                t += rnd.randint(0, 137)
                await _sleep_to(loop, t)
                level = rnd.randint(1, 3)
                body = b"m%03d" % i
                sent[body] = (level, rig.schedule(body, level))
            await _sleep_to(loop, t + 11_000)
            got = {a.body: a for a in rig.attempts}
            assert len(rig.attempts) == len(got) == 120  # each re-put once, none failed
            for body, (_level, due) in sent.items():
                assert got[body].at_ms == due, (body, got[body].at_ms - due)
            for level in (1, 2, 3):
                order = [a.body for a in rig.attempts if sent[a.body][0] == level]
                assert order == sorted(order)
            assert rig.sched.progress == {
                1: sum(lv == 1 for lv, _ in sent.values()),
                2: sum(lv == 2 for lv, _ in sent.values()),
                3: sum(lv == 3 for lv, _ in sent.values()),
            }
        finally:
            await rig.sched.stop()
            rig.close()

    run_virtual(main, max_iterations=500_000)


def test_never_early_when_a_timer_fires_before_the_clock_says_due(tmp_path: Path) -> None:
    """The scheduler's clock runs at half the loop's speed, so every sleep of ``due - now``
    wakes when the clock still reads early. It must re-check and sleep again; a scheduler
    that trusts its timer re-puts at about half the delay (early)."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(
            tmp_path / "s", loop, levels=LEVELS, clock_ms=lambda: BASE_MS + round(loop.time() * 500)
        )
        rig.sched.start()
        try:
            dues = [rig.schedule(b"x%d" % i, 1 + i % 2) for i in range(4)]
            await _sleep_to(loop, 20_000)  # 10 s on the scheduler's clock
            assert len(rig.attempts) == 4
            for a in rig.attempts:
                early = a.deliver_ms - a.at_ms
                assert a.at_ms >= a.deliver_ms, f"{a.body!r} re-put {early} ms early"
                assert a.at_ms - a.deliver_ms <= 1
            assert sorted(a.deliver_ms for a in rig.attempts) == sorted(dues)
        finally:
            await rig.sched.stop()
            rig.close()
        # it did wake early (the test exercises the re-check) and slept again
        assert len(loop.timers_of("schedule-level-1")) > 2

    run_virtual(main, max_iterations=200_000)


def test_due_backlog_drains_in_batches_without_a_sleep_per_message(tmp_path: Path) -> None:
    """600 messages due at the same instant are all re-put at that instant, in order."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS, batch=64)
        rig.sched.start()
        try:
            dues = {rig.schedule(b"%04d" % i, 1) for i in range(600)}
            assert len(dues) == 1
            await _sleep_to(loop, 1500)
            assert [a.at_ms for a in rig.attempts] == [dues.pop()] * 600
            assert rig.real_bodies() == [b"%04d" % i for i in range(600)]
        finally:
            await rig.sched.stop()
            rig.close()
        sleeps = [t for t in loop.timers_of("schedule-level-1") if t.delay > 0]
        assert len(sleeps) == 1  # the one countdown to the due instant

    run_virtual(main, max_iterations=200_000)


# ---------------------------------------------------------------- failed re-puts


def test_failed_reput_is_retried_and_nothing_overtakes_it(tmp_path: Path) -> None:
    """The head's re-put fails 3 times: it is retried (after a pause, not a spin), the
    level's progress stays put meanwhile, the messages behind it (already due) wait, and
    once the store accepts again every message arrives once, in order."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            a_due = rig.schedule(b"a", 1)
            await _sleep_to(loop, 100)
            rig.schedule(b"b", 1)
            rig.schedule(b"c", 1)
            rig.fail_next = 3
            await _sleep_to(loop, a_due - BASE_MS + 1)
            assert [(x.body, x.ok) for x in rig.attempts] == [(b"a", False)]
            assert rig.sched.progress[1] == 0
            await _sleep_to(loop, 8000)
            assert [(x.body, x.ok) for x in rig.attempts] == [
                (b"a", False),
                (b"a", False),
                (b"a", False),
                (b"a", True),
                (b"b", True),
                (b"c", True),
            ]
            assert rig.real_bodies() == [b"a", b"b", b"c"]
            assert rig.sched.progress[1] == 3
            fails = [x.at_ms for x in rig.attempts if not x.ok]
            retried_at = rig.attempts[3].at_ms
            # retried after a pause (no busy loop), and soon (not after a full period)
            gaps = [b - a for a, b in zip(fails, fails[1:] + [retried_at], strict=True)]
            assert all(10 <= g <= 2000 for g in gaps), gaps
        finally:
            await rig.sched.stop()
            rig.close()

    run_virtual(main, max_iterations=200_000)


def test_failed_reput_does_not_advance_progress_across_a_restart(tmp_path: Path) -> None:
    """Progress is saved as a StateProvider snapshot: after failures it still names the
    failed message, so a restarted scheduler re-puts it rather than skipping it."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            rig.schedule(b"a", 1)
            rig.schedule(b"b", 1)
            rig.fail_next = 10**6
            await _sleep_to(loop, 3000)
            assert rig.attempts and all(x.body == b"a" and not x.ok for x in rig.attempts)
            snap = rig.sched.snapshot()
            assert snap["1"] == 0
        finally:
            await rig.sched.stop()
        fresh = ScheduleService(
            rig.store, ArrivalNotifier(), LEVELS, clock_ms=rig.clock_ms, put_patched=rig.put_patched
        )
        fresh.restore(snap)
        rig.sched = fresh
        rig.fail_next = 0
        rig.attempts.clear()
        fresh.start()
        try:
            await _sleep_to(loop, 3100)
            assert [x.body for x in rig.attempts] == [b"a", b"b"]
        finally:
            await fresh.stop()
            rig.close()

    run_virtual(main, max_iterations=400_000)


# ---------------------------------------------------------------- retention


def test_retention_skips_units_whose_records_were_deleted(tmp_path: Path) -> None:
    """150 delayed 1000-byte messages span 3 commit-log segments of 64 KiB; retention deletes
    the two oldest while the level sleeps. At the due instant the scheduler skips the queue
    files that went with them and the units still indexed below the log's min offset, and
    re-puts exactly the survivors, in order; it neither stalls nor spins."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS, upf=7)
        rig.sched.start()
        try:
            phys = []
            for i in range(150):
                rig.schedule(b"%03d" % i + b"." * 1000, 1)
                cq = rig.store.find_queue(SCHEDULE_TOPIC, 0)
                assert cq is not None
                phys.append(cq.get(i)[0])  # type: ignore[index]
            rig.store.write_out()
            await _sleep_to(loop, 200)
            old = time.time() - 10 * 3600
            for p in (rig.store.data_dir / "commitlog").iterdir():
                os.utime(p, (old, old))
            segs, files, _, _ = rig.store.delete_expired(3600)
            floor = rig.store.commitlog.min_offset
            survivors = [i for i, p in enumerate(phys) if p >= floor]
            assert segs == 2 and files > 0
            cq = rig.store.find_queue(SCHEDULE_TOPIC, 0)
            assert cq is not None and 0 < cq.min_offset < survivors[0]  # both skip paths
            await _sleep_to(loop, 2000)
            assert [x.body[:3] for x in rig.attempts] == [b"%03d" % i for i in survivors]
            assert all(x.ok and x.at_ms == x.deliver_ms for x in rig.attempts)
            assert rig.sched.progress[1] == 150
            assert rig.sched.backlog()[1] == (0, None)
        finally:
            await rig.sched.stop()
            rig.close()

    run_virtual(main, max_iterations=200_000)


# ---------------------------------------------------------------- bookkeeping


def test_reput_carries_its_origin_and_progress_follows_dispatch(tmp_path: Path) -> None:
    """The re-put record names ``level:offset`` and dispatching it is what moves progress."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            rig.schedule(b"a", 2)
            rig.schedule(b"b", 2)
            await _sleep_to(loop, 3500)
            res = rig.store.get("Real", 0, 0, 10)
            records = decode_records(b"".join(res.chunks))
            origins = [m.properties[SCHEDULE_ORIGIN] for m in records]
            assert origins == ["2:0", "2:1"]
            assert rig.sched.snapshot() == {"1": 0, "2": 2, "3": 0}
        finally:
            await rig.sched.stop()
            rig.close()

    run_virtual(main, max_iterations=200_000)


def test_virtual_loop_reports_a_deadlock_instead_of_hanging() -> None:
    """The harness itself: a test that waits forever fails at once."""

    async def main(loop: VirtualLoop) -> None:
        await loop.create_future()

    with pytest.raises(VirtualDeadlock):
        run_virtual(main)
