"""ScheduleService against bad records and a wall clock that steps back (issue 10).

A real MessageStore on tmp_path and the scheduler's injected ``clock_ms`` on a
``VirtualLoop`` (tests/helpers.py): the loop's clock is "real time", the scheduler's
clock is the wall clock, which the tests step backwards.

What these catch: a level task that waits hours after the wall clock steps back (RocketMQ
caps the due time: ``correctDeliverTimestamp``), one that delivers a message stored after
the step early because of that cap, and a level task that stalls or dies on a schedule
record it cannot restore or re-put (every later message of the level would be lost).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME
from kairosmq.server.put.requeue import resend_target
from kairosmq.server.schedule.delay.levels import transform_delayed
from kairosmq.server.schedule.reput import restore_delayed
from kairosmq.server.store import (
    MessageInner,
    MessageStore,
    PutResult,
)

from tests.helpers import VirtualLoop, run_virtual
from tests.server.schedule_rig import HOST, Rig

LEVELS = (1000, 5000)
HOUR = 3_600_000


async def _until(loop: VirtualLoop, t_ms: int) -> None:
    await asyncio.sleep(max(0.0, t_ms / 1000 - loop.time()))


def test_clock_step_back_caps_the_head_due_time(tmp_path: Path) -> None:
    """Stored at t=0 (due at wall 1 s); at t=500 ms the wall clock steps back one hour.
    RocketMQ's correctDeliverTimestamp: the head is now due beyond now + delay, so it is
    delivered at most one delay after the scheduler sees that (t=1 s wake-up -> 2 s),
    not an hour later. A message stored after the step keeps its own due time (not
    early: the cap applies only to heads beyond now + delay)."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            rig.schedule(b"before-step", 1)
            await _until(loop, 500)
            rig.step_ms = -HOUR
            rig.schedule(b"after-step", 1)  # due at wall(500 ms) + 1 s = loop 1500 ms
            await _until(loop, 10_000)
            got = dict(rig.reputs)
            assert got[b"before-step"] <= 2000, got  # capped, not after an hour
            assert got[b"before-step"] >= 1000  # and never earlier than its first wake
            # the later message waited its own full delay (its due time, not the cap)
            assert got[b"after-step"] >= 1500
            assert rig.real_bodies() == [b"before-step", b"after-step"]
        finally:
            await rig.sched.stop()
            rig.store.close()

    run_virtual(main, max_iterations=200_000)


def test_without_a_step_nothing_is_capped(tmp_path: Path) -> None:
    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            rig.schedule(b"a", 2)  # 5 s
            await _until(loop, 8000)
            assert rig.reputs == [(b"a", 5000)]
            assert rig.sched._cap == {}
        finally:
            await rig.sched.stop()
            rig.store.close()

    run_virtual(main, max_iterations=200_000)


def test_a_record_that_cannot_be_restored_is_skipped_not_fatal(tmp_path: Path) -> None:
    """A schedule record with a bad REAL_QID, one whose re-put the store refuses as illegal
    (a REAL_TOPIC that is no topic), then a good one: the level task logs and skips the
    first two and delivers the third; it neither stalls nor dies."""

    async def main(loop: VirtualLoop) -> None:
        rig = Rig(tmp_path / "s", loop, levels=LEVELS)
        rig.sched.start()
        try:
            rig.schedule(b"bad-qid", 1, REAL_QID="1e9")
            rig.schedule(b"bad-topic", 1, REAL_TOPIC="../../etc")
            rig.schedule(b"good", 1)
            await _until(loop, 3000)
            assert rig.real_bodies() == [b"good"]
            assert rig.sched.skipped == 2
            assert rig.sched.progress[1] == 3
            assert all(not t.done() for t in rig.sched.tasks)  # every level task alive
            assert not (tmp_path / "etc").exists()
        finally:
            await rig.sched.stop()
            rig.store.close()

    run_virtual(main, max_iterations=200_000)


def test_restore_delayed_keeps_only_what_the_delivery_needs(tmp_path: Path) -> None:
    s = MessageStore(tmp_path / "s", store_host=HOST, segment_size=64 * 1024)
    s.open()
    try:
        msg = MessageInner(
            topic="Real",
            queue_id=2,
            body=b"b",
            properties={"UNIQ_KEY": "U1", "RETRY_TOPIC": "Orig"},
        )
        transform_delayed(msg, 1, LEVELS, 1000)

        async def put() -> PutResult:
            return s.put(msg)

        r = asyncio.run(put())
        back = restore_delayed(s.read(r.phy_offset, r.size) or b"", 1, 7)
        assert (back.topic, back.queue_id) == ("Real", 2)
        assert back.properties == {
            "UNIQ_KEY": "U1",
            "RETRY_TOPIC": "Orig",
            "REAL_TOPIC": "Real",
            "REAL_QID": "2",
            DELIVER_TIME: "2000",
            "KAIROS_SCHEDULE_ORIGIN": "1:7",
        }
    finally:
        s.close()


def test_resend_target_refuses_system_and_dlq_topics() -> None:
    assert resend_target("G", "Orders", False) == ("Orders", "")
    assert resend_target("G", None, True) == ("%RETRY%G", "")
    for bad in (SCHEDULE_TOPIC, "%DLQ%G", "RMQ_SYS_TRACE_TOPIC", "TBW102", "a/b", ""):
        topic, reason = resend_target("G", bad, False)
        assert topic is None and reason, bad
