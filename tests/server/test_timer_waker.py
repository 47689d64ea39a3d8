"""PreciseWaker (server/schedule/waker.py): a wall-clock instant, never early, re-armable."""

from __future__ import annotations

import asyncio
import time

import pytest
from kairosmq.server.clock import wall_ms
from kairosmq.server.schedule.waker import PreciseWaker


async def test_wakes_at_the_instant_never_before_and_rearms() -> None:
    loop = asyncio.get_running_loop()
    waker = PreciseWaker.create(loop)
    if waker is None:
        pytest.skip("no timerfd here (not Linux)")
    try:
        late = []
        for _ in range(20):
            at = wall_ms() + 3
            fut = loop.create_future()
            waker.arm(at, fut)
            await asyncio.wait_for(fut, 2.0)
            now = time.time() * 1000
            assert now >= at  # never early
            late.append(now - at)
        assert min(late) < 1.0  # sub-millisecond when the machine lets it
        # re-armed before it expired: the first instant never resolves the new future
        first = loop.create_future()
        waker.arm(wall_ms() + 5, first)
        second = loop.create_future()
        far = wall_ms() + 200
        waker.arm(far, second)
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        await asyncio.wait_for(second, 2.0)
        assert time.time() * 1000 >= far
        past = loop.create_future()
        waker.arm(wall_ms() - 1000, past)  # already due: at once
        await asyncio.wait_for(past, 1.0)
    finally:
        waker.close()
