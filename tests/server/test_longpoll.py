"""The long-poll arrival notifier (server/longpoll.py): wakes, timeouts, close and cancellation."""

from __future__ import annotations

import asyncio

import pytest
from kairosmq.server.longpoll import ArrivalNotifier


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
