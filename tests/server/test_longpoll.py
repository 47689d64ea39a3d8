"""The long-poll arrival notifier (server/remoting/longpoll.py): wakes, timeouts, close and
cancellation."""

from __future__ import annotations

import asyncio

import pytest
from kairosmq.server.remoting.longpoll import ArrivalNotifier


async def test_notifier_wakes_waiter() -> None:
    n = ArrivalNotifier()
    task = asyncio.create_task(n.wait("T", 0, 5.0))
    other = asyncio.create_task(n.wait("T", 1, 5.0))
    await asyncio.sleep(0)
    assert n.held == 2
    n.notify("T", 0)
    assert await asyncio.wait_for(task, 1.0) is True
    assert n.held == 1 and not other.done()
    n.notify("T", 1)
    assert await other is True
    assert n.held == 0
    n.notify("T", 0)  # nobody waits: nothing happens


async def test_notifier_wakes_every_waiter_on_the_key_once() -> None:
    n = ArrivalNotifier()
    tasks = [asyncio.create_task(n.wait("T", 0, None)) for _ in range(3)]
    await asyncio.sleep(0)
    n.notify("T", 0)
    assert await asyncio.gather(*tasks) == [True, True, True]
    later = asyncio.create_task(n.wait("T", 0, 0.02))
    assert await later is False  # an earlier notify does not count for a later waiter


async def test_notifier_timeout() -> None:
    n = ArrivalNotifier()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await n.wait("T", 0, 0.02) is False
    assert loop.time() - t0 >= 0.015
    assert n.held == 0


async def test_notifier_close_wakes_and_refuses() -> None:
    n = ArrivalNotifier()
    tasks = [asyncio.create_task(n.wait("T", q, None)) for q in range(2)]
    await asyncio.sleep(0)
    n.close()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 1.0) == [False, False]
    assert n.held == 0
    assert await n.wait("T", 0, None) is False  # returns at once after close


async def test_notifier_cancelled_waiter_is_removed() -> None:
    n = ArrivalNotifier()
    task = asyncio.create_task(n.wait("T", 0, None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert n.held == 0


async def test_held_pull_callbacks_arrival_timeout_close_each_once() -> None:
    """``hold``: answered once, True after an arrival (in a later loop callback, every
    hold of the key together), False at its deadline or at close; no leftovers."""
    n = ArrivalNotifier()
    got: list[tuple[str, bool]] = []
    n.hold("T", 0, lambda ok: got.append(("a", ok)), 5.0)
    n.hold("T", 0, lambda ok: got.append(("b", ok)), 5.0)
    n.hold("T", 1, lambda ok: got.append(("short", ok)), 0.02)
    n.hold("T", 2, lambda ok: got.append(("closed", ok)), 5.0)
    assert n.held == 4 and n.is_waiting("T", 0)
    n.notify("T", 0)
    assert got == []  # not inside the put that notified
    n.notify("T", 0)  # a second arrival in the same turn: no second answer
    await asyncio.sleep(0)
    assert got == [("a", True), ("b", True)] and not n.is_waiting("T", 0)
    await asyncio.sleep(0.05)
    assert got[2:] == [("short", False)] and not n.is_waiting("T", 1)
    n.close()
    assert got[3:] == [("closed", False)] and n.held == 0
    n.hold("T", 3, lambda ok: got.append(("after close", ok)), 5.0)
    assert got[4:] == [("after close", False)] and n.held == 0  # answered at once
    await asyncio.sleep(0.05)
    assert len(got) == 5  # every hold answered exactly once (no late timer)


async def test_a_failing_held_answer_does_not_keep_the_others() -> None:
    n = ArrivalNotifier()
    got: list[bool] = []
    errors: list[BaseException] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _l, ctx: errors.append(ctx["exception"]))
    try:

        def broken(_ok: bool) -> None:
            raise RuntimeError("boom")

        n.hold("T", 0, broken, 5.0)
        n.hold("T", 0, got.append, 5.0)
        n.notify("T", 0)
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert got == [True] and [str(e) for e in errors] == ["boom"] and n.held == 0
