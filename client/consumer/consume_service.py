"""Consume services: hand pulled messages to the listener and settle the outcome.

Owns: ``ConsumeContext``, listener invocation (``ListenerRunner``: async listeners
awaited on the loop, sync ones in a thread pool; a concurrent consumer's waiting batches
in chains, one pool job running several in turn), ``ConcurrentConsumeService`` (RocketMQ's
ConsumeMessageConcurrentlyService: any order, bounded concurrency, send-back on
RECONSUME_LATER), ``OrderlyConsumeService`` (ConsumeMessageOrderlyService: one batch at a
time per queue, in queue order, local retry after a pause), ``SendBack``
(CONSUMER_SEND_MSG_BACK) and ``retry_message`` (the send-back fallback's message).

Invariants:
* A listener exception or a ``None`` answer counts as RECONSUME_LATER; so does a concurrent
  listener call that runs longer than ``consume_timeout`` (an async listener is cancelled,
  a sync one finishes in its thread and its answer is ignored).
* Concurrent: at most ``consume_thread_max`` listener calls run at once; workers take
  batches FIFO from one backlog. A batch whose queue was dropped meanwhile is skipped and
  its offset not advanced (the queue's next owner consumes it: at-least-once).
* Chains (a sync concurrent listener): a worker takes into one pool job its fair share
  of the backlog, or more while the listener is fast (about ``CHAIN_BUDGET`` of listener
  time at the recent mean call time; at most ``CHAIN_MAX`` batches, at least one). The
  job calls the listener on each batch in turn, as a Java pool thread takes request
  after request; the answers are settled on the loop when the job ends, in the chain's
  order. ``consume_timeout`` holds per batch: the one running over it counts as
  RECONSUME_LATER, the job stops after it, and the batches it had not started go back to
  the front of the backlog. A chain cancelled otherwise (shutdown) settles nothing: its
  messages stay in flight and are consumed again (at-least-once).
* CLUSTERING + RECONSUME_LATER: each message goes back with CONSUMER_SEND_MSG_BACK
  (delayLevel 0: the broker picks 3 + reconsumeTimes). A message whose send-back fails
  stays in flight (the offset does not pass it) and is consumed again locally after
  ``local_retry_delay``. BROADCASTING never retries: the offset advances.
* Orderly: per queue one task hands over ``take(batch)`` strictly after the previous
  batch settled; a non-success answer gives the batch back, waits
  ``suspend_current_queue_time_millis`` and retries it, so order is never broken. In
  CLUSTERING mode nothing is consumed from a queue whose broker lock is not held.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.naming import retry_topic
from kairosmq.protocol.properties import (
    DELAY,
    MAX_RECONSUME_TIMES,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    RETRY_TOPIC,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
)

from ..errors import ClientError
from ..message import ConsumeStatus, Message, MessageQueue
from .process_queue import ProcessQueue

log = logging.getLogger("kairosmq.client.consume")

Listener = Callable[[list[MessageExt], "ConsumeContext"], Any]
# (pq, new commit offset) -> None; Rebalance.record_offset puts it in the offset store
OffsetSink = Callable[[ProcessQueue, int], None]
# one batch waiting in a concurrent consumer's backlog
Batch = tuple[ProcessQueue, list[MessageExt]]

# the most batches one pool job of a sync concurrent listener runs (a chain): a burst
# pays one thread hand-over (~30 us of the loop's and the thread's work) per dozens of
# batches instead of one per batch
CHAIN_MAX = 64
# a chain beyond its fair share of the backlog holds about this much listener time (s), at
# the recent mean call time: a fast listener gets long chains, a slow one (where the
# hand-over costs nothing in comparison) its share, so no thread idles behind another's
CHAIN_BUDGET = 0.005


@dataclass(slots=True)
class ConsumeContext:
    """Passed to the listener with each batch.

    ``suspend_current_queue_time_millis`` (orderly only) may be changed by the listener to
    choose the pause before a suspended batch is retried.
    """

    message_queue: MessageQueue
    orderly: bool = False
    suspend_current_queue_time_millis: int = 1000


class ListenerRunner:
    """Calls the user's listener: awaited if async, in a thread pool if sync.

    With ``timeout`` (seconds) a call still running after it is cancelled and counts as
    RECONSUME_LATER. One watchdog timer serves every call (an ``asyncio.timeout`` per call
    costs ~12 us, as much as the rest of consuming a message): a call is cut between
    ``timeout`` and ``1.25 * timeout`` after it started, like RocketMQ's periodic
    ``cleanExpireMsg``.
    """

    def __init__(self, fn: Listener, max_threads: int, timeout: float | None = None) -> None:
        self.fn = fn
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._max_threads = max_threads
        self._pool: ThreadPoolExecutor | None = None
        self._deadlines: dict[asyncio.Task[Any], float] = {}  # calls in flight
        self._chains: dict[asyncio.Task[Any], _Chain] = {}  # chains in flight (their own)
        self._expired: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.TimerHandle | None = None
        # the recent mean of a sync listener's call time (s), kept by the chains' threads;
        # until calls are timed, a listener is taken as slow (chains of the fair share)
        self.call_s = CHAIN_BUDGET

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        task = asyncio.current_task() if self.timeout is not None else None
        if task is None:
            return await self._call(msgs, ctx)
        loop = asyncio.get_running_loop()
        self._deadlines[task] = loop.time() + self.timeout  # type: ignore[operator]
        if self._watchdog is None:
            self._watchdog = loop.call_later(self.timeout / 4, self._sweep)  # type: ignore[operator]
        try:
            return await self._call(msgs, ctx)
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            log.warning(
                "listener ran over consume_timeout (%.0f s) on %d message(s) of %s",
                self.timeout,
                len(msgs),
                ctx.message_queue,
            )
            return ConsumeStatus.RECONSUME_LATER
        finally:
            del self._deadlines[task]
            if task in self._expired:  # the watchdog's cancel is consumed here
                self._expired.discard(task)
                task.uncancel()

    async def many(self, batches: list[Batch]) -> list[ConsumeStatus | None]:
        """A sync listener's chain: ``batches`` run one after another in one pool job.
        The answers of the batches that ran, in order (None for a batch whose queue was
        dropped before its turn: skipped); shorter than ``batches`` when the chain was
        cut by ``consume_timeout`` (the batch over it answers RECONSUME_LATER, the rest
        did not start)."""
        assert not self.is_async
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_threads, "kairosmq-consume")
        loop = asyncio.get_running_loop()
        chain = _Chain(batches, self)
        task = asyncio.current_task() if self.timeout is not None else None
        if task is not None:
            self._chains[task] = chain
            if self._watchdog is None:
                self._watchdog = loop.call_later(self.timeout / 4, self._sweep)  # type: ignore[operator]
        try:
            await loop.run_in_executor(self._pool, chain.run)
        except asyncio.CancelledError:
            done, overtime = chain.stop()
            if task is None or task not in self._expired:
                raise
            if overtime is not None:
                pq, msgs = batches[overtime]
                log.warning(
                    "listener ran over consume_timeout (%.0f s) on %d message(s) of %s",
                    self.timeout,
                    len(msgs),
                    pq.mq,
                )
                done.append(ConsumeStatus.RECONSUME_LATER)
            return await _settled(done)
        finally:
            if task is not None:
                del self._chains[task]
                if task in self._expired:  # the watchdog's cancel is consumed here
                    self._expired.discard(task)
                    task.uncancel()
        return await _settled(chain.results)

    def _sweep(self) -> None:
        """Cancel the calls past their deadline; run again while calls are in flight."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in self._deadlines.items():
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        mono = time.monotonic()  # a chain's thread reads this clock
        for task, chain in self._chains.items():
            due = chain.deadline
            if due is not None and due <= mono and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        self._watchdog = None
        if self._deadlines or self._chains:
            self._watchdog = loop.call_later(self.timeout / 4, self._sweep)  # type: ignore[operator]

    async def _call(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        try:
            if self.is_async:
                status = await self.fn(msgs, ctx)
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._max_threads, "kairosmq-consume")
                loop = asyncio.get_running_loop()
                status = await loop.run_in_executor(self._pool, self.fn, msgs, ctx)
                if inspect.isawaitable(status):
                    status = await status
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("listener raised on %d message(s) of %s", len(msgs), ctx.message_queue)
            return ConsumeStatus.RECONSUME_LATER
        return _status(status)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _status(answer: Any) -> ConsumeStatus:  # Any: whatever the user's listener returned
    """A listener's answer as a status: anything but a ``ConsumeStatus`` is RECONSUME_LATER."""
    if not isinstance(answer, ConsumeStatus):
        if answer is not None:
            log.warning("listener returned %r, treating it as RECONSUME_LATER", answer)
        return ConsumeStatus.RECONSUME_LATER
    return answer


_SKIPPED = object()  # a chain's batch whose queue was dropped before its turn


async def _settled(answers: list[Any]) -> list[ConsumeStatus | None]:  # Any: listener answers
    """A chain's answers as statuses, in order (an awaitable answer awaited here, on the
    loop, as ``ListenerRunner._call`` does; a skipped batch as None)."""
    out: list[ConsumeStatus | None] = []
    for answer in answers:
        if type(answer) is ConsumeStatus:  # the usual answer, no check to make
            out.append(answer)
            continue
        if answer is _SKIPPED:
            out.append(None)
            continue
        if inspect.isawaitable(answer):
            try:
                answer = await answer
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listener raised")
                answer = ConsumeStatus.RECONSUME_LATER
        out.append(_status(answer))
    return out


class _Chain:
    """One pool job of a sync concurrent listener: its batches, called in turn in the
    pool's thread. ``results`` holds the raw answers of the batches that finished,
    ``deadline`` (``time.monotonic``) the running one's ``consume_timeout``; ``stop``, on
    the loop, ends the chain after the running batch and says which one that is."""

    __slots__ = ("batches", "runner", "results", "deadline", "running", "stopped", "lock")

    def __init__(self, batches: list[Batch], runner: ListenerRunner) -> None:
        self.batches = batches
        self.runner = runner
        self.results: list[Any] = []  # Any: the listener's raw answers
        self.deadline: float | None = None
        self.running: int | None = None
        self.stopped = False
        self.lock = threading.Lock()

    def run(self) -> None:
        """In the pool's thread: each batch in turn until the end or ``stop``."""
        runner, lock, results = self.runner, self.lock, self.results
        fn, timeout = runner.fn, runner.timeout
        for i, (pq, msgs) in enumerate(self.batches):
            with lock:
                if self.stopped:
                    return
                if pq.dropped:
                    results.append(_SKIPPED)
                    continue
                self.running = i
                if timeout is not None:
                    self.deadline = time.monotonic() + timeout
            t0 = time.perf_counter()
            try:
                answer = fn(msgs, ConsumeContext(pq.mq))
            except Exception:
                log.exception("listener raised on %d message(s) of %s", len(msgs), pq.mq)
                answer = ConsumeStatus.RECONSUME_LATER
            # a moving mean (threads may race on it: a lost update only slows the mean)
            runner.call_s += (time.perf_counter() - t0 - runner.call_s) / 8
            with lock:
                if self.stopped:  # this answer came after the cut: it is not counted
                    return
                results.append(answer)
                self.running = self.deadline = None

    def stop(self) -> tuple[list[Any], int | None]:  # Any: the listener's raw answers
        """On the loop: no batch starts after this. The answers counted so far and the
        index of the batch running now (its answer will not count), if any."""
        with self.lock:
            self.stopped = True
            return list(self.results), self.running


class SendBack:
    """CONSUMER_SEND_MSG_BACK for one consumer group, to the broker that stored the message.

    The address is the master of the message's queue's broker, else the message's store
    host. When that broker cannot take it back (unreachable, or an error answer),
    ``fallback(msg, delay_level)`` is tried: Java's ``sendMessageBack`` then re-sends the
    message to ``%RETRY%<group>`` through the client's producer, on any broker.
    """

    def __init__(
        self,
        invoke: Callable[..., Awaitable[Any]],
        addr_of: Callable[[str], str | None],
        group: str,
        max_reconsume_times: int,
        fallback: Callable[[MessageExt, int], Awaitable[bool]] | None = None,
    ) -> None:
        self._invoke = invoke
        self._addr_of = addr_of
        self._group = group
        self._max = max_reconsume_times
        self._fallback = fallback

    async def __call__(self, msg: MessageExt, mq: MessageQueue, delay_level: int = 0) -> bool:
        """True if a broker took the message back (retry topic or DLQ)."""
        if await self._send_back(msg, mq, delay_level):
            return True
        return self._fallback is not None and await self._fallback(msg, delay_level)

    async def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> bool:
        addr = self._addr_of(mq.broker_name) or _store_host(msg)
        if addr is None:
            return False
        ext = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=self._group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            unit_mode=False,
            max_reconsume_times=self._max,
        ).to_ext_fields()
        try:
            resp = await self._invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext, timeout=5.0)
        except ClientError as err:
            log.warning("send-back of %s failed: %s", msg.msg_id, err)
            return False
        if resp.code != ResponseCode.SUCCESS:
            log.warning("send-back of %s answered %d %s", msg.msg_id, resp.code, resp.remark)
            return False
        return True


def retry_message(msg: MessageExt, group: str, max_reconsume_times: int) -> Message:
    """The ``%RETRY%<group>`` message Java's ``sendMessageBack`` fallback sends for ``msg``
    (a consumed message whose storing broker could not take it back): same body, flag,
    properties and msgId, plus RETRY_TOPIC (the original topic), ORIGIN_MESSAGE_ID,
    RECONSUME_TIME + 1, MAX_RECONSUME_TIMES and delay level 3 + reconsume times."""
    props = {
        k: v
        for k, v in msg.properties.items()
        if k not in _NOT_RESENT and not k.startswith("TIMER_")
    }
    props[RETRY_TOPIC] = msg.topic
    props[ORIGIN_MESSAGE_ID] = msg.properties.get(ORIGIN_MESSAGE_ID) or msg.msg_id
    props[RECONSUME_TIME] = str(msg.reconsume_times + 1)
    props[MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props.setdefault(UNIQ_KEY, msg.msg_id)
    return Message(
        retry_topic(group),
        msg.body,
        properties=props,
        flag=msg.flag,
        delay_level=3 + msg.reconsume_times,
    )


_NOT_RESENT = frozenset({DELAY, TRAN_MSG, WAIT})


def _store_host(msg: MessageExt) -> str | None:
    ip, port = msg.store_host
    if len(ip) != 4 or port <= 0:
        return None
    return f"{'.'.join(str(b) for b in ip)}:{port}"


class _ConsumeService:
    """What both consume services hold: the listener, send-back, the offset sink."""

    def __init__(
        self,
        run: ListenerRunner,
        send_back: SendBack,
        on_offset: OffsetSink,
        *,
        clustering: bool,
        batch_size: int,
    ) -> None:
        self._run = run
        self._send_back = send_back
        self._on_offset = on_offset
        self._clustering = clustering
        self._batch = max(1, batch_size)
        self._stopping = False


class ConcurrentConsumeService(_ConsumeService):
    def __init__(
        self,
        run: ListenerRunner,
        send_back: SendBack,
        on_offset: OffsetSink,
        *,
        clustering: bool,
        batch_size: int,
        max_concurrency: int,
        local_retry_delay: float = 5.0,
    ) -> None:
        super().__init__(run, send_back, on_offset, clustering=clustering, batch_size=batch_size)
        self._max = max(1, max_concurrency)
        self._retry_delay = local_retry_delay
        self._backlog: deque[Batch] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        # counted by the workers themselves (not by done-callbacks, which run a loop
        # iteration late), so a worker that just ran dry is never mistaken for a live one
        self._active = 0
        self._starting = 0
        self._timers: set[asyncio.TimerHandle] = set()

    def start_queue(self, pq: ProcessQueue) -> asyncio.Task[None] | None:
        return None

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        b = self._batch
        if b == 1:
            self._backlog.extend((pq, [m]) for m in msgs)
        else:
            self._backlog.extend((pq, msgs[i : i + b]) for i in range(0, len(msgs), b))
        loop = asyncio.get_running_loop()
        while self._active < self._max and len(self._backlog) > self._starting:
            self._active += 1
            self._starting += 1
            task = loop.create_task(self._worker())
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    async def _worker(self) -> None:
        self._starting -= 1
        try:
            await self._work()
        finally:
            self._active -= 1

    async def _work(self) -> None:
        backlog = self._backlog
        run = self._run
        while backlog and not self._stopping:
            if run.is_async:
                pq, msgs = backlog.popleft()
                if pq.dropped:
                    continue
                status = await run(msgs, ConsumeContext(pq.mq))
                await self._settle(pq, msgs, status)
                continue
            chain = self._take_chain()
            if not chain:
                continue
            statuses = await run.many(chain)
            if len(statuses) < len(chain) and not self._stopping:  # cut: the rest waits again
                backlog.extendleft(reversed(chain[len(statuses) :]))
            # the chain's successes settled per queue (one offset update each), then the rest
            done: dict[ProcessQueue, list[MessageExt]] = {}
            later: list[tuple[ProcessQueue, list[MessageExt], ConsumeStatus]] = []
            for (pq, msgs), answer in zip(chain, statuses, strict=False):
                if answer is ConsumeStatus.CONSUME_SUCCESS or (
                    answer is not None and not self._clustering
                ):
                    done.setdefault(pq, []).extend(msgs)
                elif answer is not None:
                    later.append((pq, msgs, answer))
            for pq, msgs in done.items():
                if not pq.dropped:
                    self._on_offset(pq, pq.remove(msgs))
            for pq, msgs, answer in later:
                await self._settle(pq, msgs, answer)

    def _take_chain(self) -> list[Batch]:
        """This worker's chain: its share of the backlog, or what ``CHAIN_BUDGET`` of
        listener time holds (batches of live queues, in order)."""
        backlog = self._backlog
        share = len(backlog) // self._max
        timed = int(CHAIN_BUDGET / max(self._run.call_s, 1e-6))
        n = min(CHAIN_MAX, max(1, share, timed))
        chain: list[Batch] = []
        while backlog and len(chain) < n:
            item = backlog.popleft()
            if not item[0].dropped:
                chain.append(item)
        return chain

    async def _settle(
        self, pq: ProcessQueue, msgs: list[MessageExt], status: ConsumeStatus
    ) -> None:
        """A batch's answer: its offset, or its send-back (and local retry) first."""
        if pq.dropped:
            return
        if status is ConsumeStatus.CONSUME_SUCCESS or not self._clustering:
            self._on_offset(pq, pq.remove(msgs))
            return
        failed = [m for m in msgs if not await self._send_back(m, pq.mq)]
        done = [m for m in msgs if m not in failed] if failed else msgs
        self._on_offset(pq, pq.remove(done))
        if failed:
            for m in failed:
                m.reconsume_times += 1
            loop = asyncio.get_running_loop()
            handle = loop.call_later(self._retry_delay, self._retry, pq, failed)
            self._timers.add(handle)

    def _retry(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        now = asyncio.get_running_loop().time()
        self._timers = {h for h in self._timers if not h.cancelled() and h.when() > now}
        if not pq.dropped and not self._stopping:
            self.submit(pq, msgs)

    async def drain(self, timeout: float) -> None:
        """Stop taking new batches; wait up to ``timeout`` for running listener calls."""
        self._stopping = True
        self._backlog.clear()
        for h in self._timers:
            h.cancel()
        if self._workers:
            await asyncio.wait(list(self._workers), timeout=timeout)


class OrderlyConsumeService(_ConsumeService):
    def __init__(
        self,
        run: ListenerRunner,
        send_back: SendBack,
        on_offset: OffsetSink,
        *,
        clustering: bool,
        batch_size: int,
        max_concurrency: int,
        suspend_millis: int = 1000,
        max_reconsume_times: int | None = None,
    ) -> None:
        super().__init__(run, send_back, on_offset, clustering=clustering, batch_size=batch_size)
        self._sem = asyncio.Semaphore(max(1, max_concurrency))
        self._suspend = suspend_millis
        self._max_reconsume = max_reconsume_times
        self._tasks: dict[asyncio.Task[None], ProcessQueue] = {}

    def start_queue(self, pq: ProcessQueue) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._queue_loop(pq), name=f"orderly {pq.mq}")
        self._tasks[task] = pq
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        pass  # the queue's own task picks messages up from the process queue

    async def _queue_loop(self, pq: ProcessQueue) -> None:
        while not pq.dropped and not self._stopping:
            if not pq.has_pending:
                await pq.wait_arrival()
                continue
            if self._clustering and not pq.lock_valid():
                await asyncio.sleep(0.1)  # RocketMQ tries again 100 ms later
                continue
            async with self._sem:
                if pq.dropped or self._stopping:
                    break
                msgs = pq.take(self._batch)
                ctx = ConsumeContext(pq.mq, True, self._suspend)
                pq.consuming = True
                try:
                    status = await self._run(msgs, ctx)
                finally:
                    pq.consuming = False
            if pq.dropped:
                return
            if status is ConsumeStatus.CONSUME_SUCCESS:
                self._on_offset(pq, pq.remove(msgs))
                continue
            for m in msgs:
                m.reconsume_times += 1
            limit = self._max_reconsume
            if limit is not None and max(m.reconsume_times for m in msgs) > limit:
                # -1 sends the messages straight to the DLQ
                if all([await self._send_back(m, pq.mq, -1) for m in msgs]):
                    self._on_offset(pq, pq.remove(msgs))
                    continue
            pq.give_back(msgs)
            await asyncio.sleep(max(0, ctx.suspend_current_queue_time_millis) / 1000)

    async def drain(self, timeout: float) -> None:
        """Stop handing over batches; wait up to ``timeout`` for running listener calls."""
        self._stopping = True
        busy = []
        for task, pq in list(self._tasks.items()):
            if pq.consuming:
                busy.append(task)
            else:
                task.cancel()
        if busy:
            _, pending = await asyncio.wait(busy, timeout=timeout)
            for t in pending:
                t.cancel()
