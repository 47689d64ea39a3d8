"""ConcurrentConsumeService settlement: send-back failures are retried locally, offsets wait."""

from __future__ import annotations

import asyncio
import time

from kairosmq.client import ConsumeContext, ConsumeStatus, MessageExt, MessageQueue
from kairosmq.client.consumer.consume_service import ConcurrentConsumeService, ListenerRunner
from kairosmq.client.consumer.process_queue import ProcessQueue

from tests.helpers import wait_until


class RefusingSendBack:
    """The broker cannot take messages back (e.g. it is unreachable)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, msg: MessageExt, mq: MessageQueue, delay_level: int = 0) -> bool:
        self.calls += 1
        return False


async def test_failed_send_back_is_consumed_again_locally_and_blocks_the_offset() -> None:
    calls: list[tuple[int, int]] = []
    release = asyncio.Event()  # holds the local retry until the test has looked

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        m = msgs[0]
        calls.append((m.queue_offset, m.reconsume_times))
        if m.queue_offset == 0 and m.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        if m.queue_offset == 0:
            await release.wait()
        return ConsumeStatus.CONSUME_SUCCESS

    offsets: list[int] = []
    send_back = RefusingSendBack()
    svc = ConcurrentConsumeService(
        ListenerRunner(listener, 4),
        send_back,
        lambda pq, off: offsets.append(off),  # type: ignore[arg-type]
        clustering=True,
        batch_size=1,
        max_concurrency=4,
        local_retry_delay=0.05,
    )
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    msgs = [MessageExt("T", b"x", queue_offset=i) for i in range(3)]
    pq.put(msgs, 3)
    svc.submit(pq, msgs)
    # event-driven: the retry of offset 0 is running (and held), 1 and 2 are done
    await wait_until(lambda: len(calls) >= 4 and len(offsets) >= 2, timeout=5)
    assert len(calls) == 4
    assert sorted(calls[:3]) == [(0, 0), (1, 0), (2, 0)]
    assert calls[3] == (0, 1)  # the same message again, reconsume_times bumped
    assert send_back.calls == 1
    assert max(offsets) == 0  # offsets 1 and 2 finished, but 0 is still in flight
    release.set()
    await wait_until(lambda: offsets[-1] == 3, timeout=5)
    assert len(calls) == 4  # consumed again once, locally
    await svc.drain(1)


async def test_broadcasting_does_not_retry_and_advances() -> None:
    async def fail(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        raise RuntimeError("listener bug")

    offsets: list[int] = []
    send_back = RefusingSendBack()
    svc = ConcurrentConsumeService(
        ListenerRunner(fail, 1),
        send_back,
        lambda pq, off: offsets.append(off),  # type: ignore[arg-type]
        clustering=False,
        batch_size=2,
        max_concurrency=1,
    )
    pq = ProcessQueue(MessageQueue("T", "b", 0), 5)
    msgs = [MessageExt("T", b"x", queue_offset=i) for i in (5, 6, 7)]
    pq.put(msgs, 8)
    svc.submit(pq, msgs)
    await wait_until(lambda: offsets and offsets[-1] == 8)
    assert send_back.calls == 0
    await asyncio.sleep(0)
    await svc.drain(1)


async def test_a_listener_call_over_consume_timeout_counts_as_reconsume_later() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ConsumeStatus.CONSUME_SUCCESS

    def slow_sync(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        time.sleep(0.3)
        return ConsumeStatus.CONSUME_SUCCESS

    ctx = ConsumeContext(MessageQueue("T", "b", 0))
    msgs = [MessageExt("T", b"x")]
    t0 = time.monotonic()
    assert await ListenerRunner(stuck, 1, timeout=0.05)(msgs, ctx) is ConsumeStatus.RECONSUME_LATER
    assert started.is_set() and cancelled.is_set()  # the async call was cancelled
    assert time.monotonic() - t0 < 5.0
    runner = ListenerRunner(slow_sync, 1, timeout=0.05)
    try:
        assert await runner(msgs, ctx) is ConsumeStatus.RECONSUME_LATER
    finally:
        runner.close()
    # without a timeout (orderly) the same slow call is waited for
    runner = ListenerRunner(slow_sync, 1, timeout=None)
    try:
        assert await runner(msgs, ctx) is ConsumeStatus.CONSUME_SUCCESS
    finally:
        runner.close()
