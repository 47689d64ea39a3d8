"""ConcurrentConsumeService settlement: send-back failures are retried locally, offsets wait."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable

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


class AcceptingSendBack:
    """The broker takes every message back (records which)."""

    def __init__(self) -> None:
        self.offsets: list[int] = []

    async def __call__(self, msg: MessageExt, mq: MessageQueue, delay_level: int = 0) -> bool:
        self.offsets.append(msg.queue_offset)
        return True


def _queue(topic: str, n: int) -> tuple[ProcessQueue, list[MessageExt]]:
    pq = ProcessQueue(MessageQueue(topic, "b", 0), 0)
    msgs = [MessageExt(topic, b"x", queue_offset=i) for i in range(n)]
    pq.put(msgs, n)
    return pq, msgs


@contextlib.asynccontextmanager
async def chained(
    listener: Callable[[list[MessageExt], ConsumeContext], ConsumeStatus],
    threads: int,
    timeout: float,
    on_offset: Callable[[ProcessQueue, int], None],
    send_back: AcceptingSendBack | None = None,
    batch_size: int = 1,
) -> AsyncIterator[ConcurrentConsumeService]:
    """A clustering concurrent service over a sync ``listener`` (its batches in chains),
    drained and its pool closed at the end."""
    runner = ListenerRunner(listener, threads, timeout=timeout)
    svc = ConcurrentConsumeService(
        runner,
        send_back or AcceptingSendBack(),
        on_offset,
        clustering=True,
        batch_size=batch_size,
        max_concurrency=threads,
    )
    try:
        yield svc
    finally:
        await svc.drain(1)
        runner.close()


async def test_a_sync_listener_consumes_a_backlog_in_chains_each_message_once() -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        with lock:
            calls.extend(m.queue_offset for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    offsets: list[int] = []
    async with chained(listener, 3, 60, lambda pq, off: offsets.append(off), batch_size=2) as svc:
        pq, msgs = _queue("T", 1_000)
        svc.submit(pq, msgs)
        await wait_until(lambda: offsets and offsets[-1] == 1_000, timeout=10)
    assert sorted(calls) == list(range(1_000))  # each message once
    assert offsets == sorted(offsets)  # the commit offset only moves forward


async def test_a_chain_cut_by_consume_timeout_settles_what_ran_and_requeues_the_rest() -> None:
    calls: list[int] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        off = msgs[0].queue_offset
        calls.append(off)
        if off == 1 and calls.count(1) == 1:
            time.sleep(0.6)  # over the 0.2 s timeout, once
        return ConsumeStatus.CONSUME_SUCCESS

    offsets: list[int] = []
    send_back = AcceptingSendBack()
    async with chained(listener, 1, 0.2, lambda pq, off: offsets.append(off), send_back) as svc:
        pq, msgs = _queue("T", 5)
        svc.submit(pq, msgs)  # one chain of all five batches
        await wait_until(lambda: offsets and offsets[-1] == 5, timeout=10)
    # 0 ran; 1 ran over the timeout (sent back, its late answer ignored); 2-4 did not
    # start in that chain and ran once each afterwards
    assert calls == [0, 1, 2, 3, 4]
    assert send_back.offsets == [1]


async def test_a_chain_skips_the_batches_of_a_queue_dropped_meanwhile() -> None:
    calls: list[str] = []
    started, go = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        m = msgs[0]
        calls.append(f"{m.topic}{m.queue_offset}")
        if m.topic == "A" and m.queue_offset == 0:
            started.set()
            go.wait(5)
        return ConsumeStatus.CONSUME_SUCCESS

    offsets: list[tuple[str, int]] = []
    async with chained(listener, 1, 60, lambda pq, off: offsets.append((pq.mq.topic, off))) as svc:
        a, a_msgs = _queue("A", 2)
        b, b_msgs = _queue("B", 2)
        svc.submit(a, a_msgs[:1])
        svc.submit(b, b_msgs)
        svc.submit(a, a_msgs[1:])
        await wait_until(started.is_set, timeout=5)  # the chain runs A0; B0, B1, A1 wait
        b.drop()  # rebalanced away: its batches must not reach the listener
        go.set()
        await wait_until(lambda: ("A", 2) in offsets, timeout=5)
    assert calls == ["A0", "A1"]
    assert all(topic == "A" for topic, _ in offsets)


async def test_a_slow_sync_listener_spreads_its_backlog_over_the_threads() -> None:
    threads: set[int] = set()

    def slow(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        threads.add(threading.get_ident())
        time.sleep(0.05)  # ten times CHAIN_BUDGET: chains of the fair share only
        return ConsumeStatus.CONSUME_SUCCESS

    offsets: list[int] = []
    async with chained(slow, 4, 60, lambda pq, off: offsets.append(off)) as svc:
        pq, msgs = _queue("T", 8)
        svc.submit(pq, msgs)
        await wait_until(lambda: offsets and offsets[-1] == 8, timeout=10)
    assert len(threads) >= 3  # not one thread behind a chain of all eight
