"""``kill -9`` of one of two brokers under load, with the bundled clients: a real kairosmq
name server and broker-a in-process, broker-b a real process (tests/integration/procs.py)
registered with ``--namesrv``. Producers keep succeeding on broker-a within the send
timeout, the consumer keeps consuming broker-a, and after broker-b restarts on its data
every acknowledged message is consumed. Also: a pull loop against a dead address retries
quietly (no hot loop, no log storm) and resumes when a broker listens there again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer, SendResult
from kairosmq.client.consumer.process_queue import ProcessQueue
from kairosmq.client.consumer.pull import PullSettings, Subscription, pull_loop
from kairosmq.client.message import MessageQueue
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.message import MessageExt

from tests.client.multibroker import Cluster, wait_async
from tests.helpers import Collector, fast_config, wait_until
from tests.integration.procs import BrokerProcess, free_port

pytestmark = pytest.mark.slow  # broker processes, kill -9

SEND_TIMEOUT = 3.0


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    await c.start("broker-a")
    try:
        yield c
    finally:
        await c.close()


async def test_kill_9_one_broker_under_load_then_restart_loses_nothing_acked(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kairosmq.client")
    topic, group = "Crash", "CG-crash"
    b = BrokerProcess(
        tmp_path / "broker-b",
        "--namesrv",
        cluster.namesrv,
        "--broker-name",
        "broker-b",
        "--register-period",
        "1",
    )
    await b.start()
    try:
        await wait_until(lambda: "broker-b" in cluster.cluster_brokers(), 20.0)
        await cluster.create_topic(topic, queues=4)  # on both brokers

        got = Collector()
        c = PushConsumer(
            group,
            cluster.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            poll_name_server_interval=0.5,
            rebalance_interval=1.0,
            persist_consumer_offset_interval=0.5,
            pull_time_delay_millis_when_exception=500,
        )
        c.subscribe(topic, "*")
        c.register_listener(got)
        acked: list[SendResult] = []
        latencies: list[tuple[str, float]] = []  # (phase, seconds)
        phase = "before"

        async def load(p: Producer, stop: asyncio.Event) -> None:
            i = 0
            while not stop.is_set():
                t0 = time.monotonic()
                r = await p.send(Message(topic, b"m%d" % i))  # any failure fails the test
                latencies.append((phase, time.monotonic() - t0))
                acked.append(r)
                i += 1
                await asyncio.sleep(0.005)

        await c.start()
        async with Producer(
            "PG", cluster.namesrv, send_msg_timeout=SEND_TIMEOUT, poll_name_server_interval=0.5
        ) as p:
            stop = asyncio.Event()
            sender = asyncio.create_task(load(p, stop))
            await wait_until(
                lambda: (
                    {r.message_queue.broker_name for r in acked} == {"broker-a", "broker-b"}
                    and len(got.msgs) > 50
                ),
                20.0,
            )
            phase = "down"
            b.kill()  # kill -9 under load
            killed_at, n_at_kill, got_at_kill = time.monotonic(), len(acked), len(got.msgs)
            assert {q.broker_name for q in c.assigned_queues} == {"broker-a", "broker-b"}
            await asyncio.sleep(3.0)
            assert not sender.done(), sender  # no send failed
            after_kill = acked[n_at_kill:]
            assert len(after_kill) > 50
            # the name server dropped broker-b; the consumer's route refresh followed and
            # its queues were rebalanced away (pulls to it stopped)
            await wait_until(
                lambda: {q.broker_name for q in c.assigned_queues} == {"broker-a"},
                10.0,
                what="broker-b's queues dropped",
            )
            # the consumer keeps consuming broker-a's queues
            await wait_until(
                lambda: any(
                    m.queue_id >= 0 and m.msg_id in {r.msg_id for r in after_kill}
                    for m in got.msgs[got_at_kill:]
                ),
                10.0,
                what="consuming after the kill",
            )

            phase = "restarted"
            down_for = time.monotonic() - killed_at
            await b.start()  # same port, same data dir
            n_at_restart = len(acked)

            async def b_used_again() -> bool:
                return any(r.message_queue.broker_name == "broker-b" for r in acked[n_at_restart:])

            await wait_async(b_used_again, 20.0)
            await wait_until(
                lambda: {q.broker_name for q in c.assigned_queues} == {"broker-a", "broker-b"},
                10.0,
                what="broker-b's queues back",
            )
            await asyncio.sleep(1.0)
            stop.set()
            await sender
        consumed = {m.msg_id for m in got.msgs}
        try:
            await wait_until(
                lambda: {r.msg_id for r in acked} <= {m.msg_id for m in got.msgs},
                30.0,
                what="every acknowledged message consumed",
            )
        finally:
            consumed = {m.msg_id for m in got.msgs}
            await c.shutdown()
        assert {r.msg_id for r in acked} <= consumed
        down = [s for ph, s in latencies if ph == "down"]
        # a refused connect fails fast and moves on: far below the send timeout
        assert max(down) < min(1.5, SEND_TIMEOUT), max(down)
        print(
            f"\nkill -9 of broker-b: {len(acked)} sends acked, 0 failed; "
            f"{len(down)} sends while it was down, max latency {max(down) * 1000:.0f} ms; "
            f"{len(got.msgs) - len(consumed)} redelivered; down {down_for:.1f} s"
        )
        pulls = [r for r in caplog.records if r.name == "kairosmq.client.pull"]
        assert len(pulls) < 40, [r.getMessage() for r in pulls]  # no log storm
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.terminate()


async def test_a_dead_brokers_queue_is_pulled_with_backoff_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No hot loop, no log storm while nothing listens; messages flow once a broker does."""
    caplog.set_level(logging.INFO, logger="kairosmq.client.pull")
    port = free_port()
    addr = f"127.0.0.1:{port}"
    pool = RemotingPool()
    pq = ProcessQueue(MessageQueue("Dead", "broker-x", 0), 0, 1000)
    got: list[MessageExt] = []
    cfg = PullSettings(
        "CG-dead",
        "%RETRY%CG-dead",
        pull_time_delay_millis_when_exception=100,
        broker_suspend_max_time_millis=200,
    )
    sub = Subscription("Dead", "*", 1, None)
    calls = 0

    def addr_of(_name: str, _broker_id: int) -> tuple[str, int]:
        nonlocal calls
        calls += 1
        return addr, 0

    task = asyncio.create_task(
        pull_loop(
            pq,
            sub,
            cfg,
            pool,
            addr_of,
            lambda _pq: -1,
            lambda _pq, msgs: got.extend(msgs),
            lambda _pq, _off: None,
        )
    )
    try:
        await asyncio.sleep(2.0)
        assert 5 <= calls <= 25, calls  # one attempt per ~100 ms delay, not a spin
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) <= 2, lines  # the first failure (and every 20th) only
        from kairosmq.server.broker import Broker

        broker = Broker(
            fast_config(tmp_path / "x", port=port, broker_name="broker-x", log_messages=False)
        )
        await broker.start()
        try:
            broker.topics.ensure("Dead", 1)
            async with Producer("PG", broker.namesrv_address) as p:
                await p.send(Message("Dead", b"after"), queue=MessageQueue("Dead", "broker-x", 0))
            await wait_until(lambda: len(got) == 1, 10.0, what="pulled after restart")
            assert got[0].body == b"after"
            assert any("answered again" in r.getMessage() for r in caplog.records)
        finally:
            pq.drop()
            task.cancel()
            await broker.stop("test")
    finally:
        task.cancel()
        pool.close()
