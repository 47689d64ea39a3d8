"""Unchanged bundled clients against ``kairosmq cluster --brokers 2`` (real processes).

Produce and consume across both brokers through the cluster's name server; ``kill -9`` one
broker under load (producers keep succeeding on the other within the send timeout, the
consumer keeps consuming the other's queues, and once the supervisor has restarted it every
acknowledged message is received); delayed messages (delay levels, timer messages) stored
on each broker fire on time; a killed name server is restarted while producers keep sending
on their cached routes, and it routes both brokers again after their next registration.
One cluster serves the module (each test its own topic and groups; the supervisor restarts
whatever a test kills before the test ends).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    SendStatus,
)

from tests.cluster.procs import ClusterProcess, create_topic, wait_route

pytestmark = pytest.mark.slow

BROKERS = {"broker-a", "broker-b"}


class Received:
    """Listener: body -> (receive time, the storing broker's port, the message)."""

    def __init__(self) -> None:
        self.at: dict[bytes, float] = {}
        self.port: dict[bytes, int] = {}
        self.msgs: dict[bytes, MessageExt] = {}
        self.log: list[tuple[float, int]] = []  # (when, store port) of every delivery

    async def __call__(self, msgs: list[MessageExt], _ctx: ConsumeContext) -> ConsumeStatus:
        now = time.time()
        for m in msgs:
            self.at.setdefault(m.body, now)
            self.port[m.body] = m.store_host[1]
            self.msgs[m.body] = m
            self.log.append((now, m.store_host[1]))
        return ConsumeStatus.CONSUME_SUCCESS


def consumer(
    c: ClusterProcess, group: str, topic: str, listener: Received, **kw: object
) -> PushConsumer:
    pc = PushConsumer(group, c.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **kw)  # type: ignore[arg-type]
    pc.subscribe(topic, "*")
    pc.register_listener(listener)
    return pc


# delay levels for the delay test, registration every 3 s (30 s by default: a restarted name
# server knows the brokers again at their next one) and a 4 s restart backoff (a window to
# observe a dead child)
SHARED = (
    "--delay-levels",
    "1s 2s 3s",
    "--broker-args",
    "--register-period 3",
    "--restart-backoff",
    "4",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """One cluster for the module: each test has its own topic and groups, and a test that
    kills a child waits until the supervisor has restarted it."""
    c = ClusterProcess(tmp_path_factory.mktemp("cluster") / "data", 2, *SHARED)
    asyncio.run(c.start())
    try:
        yield c
    finally:
        c.stop()


async def _cluster(c: ClusterProcess, topic: str) -> ClusterProcess:
    await create_topic(c.broker_addresses, topic)
    await wait_route(c.namesrv, topic, BROKERS)
    return c


async def test_bundled_clients_produce_and_consume_across_both_brokers(
    cluster: ClusterProcess,
) -> None:
    topic = "ClusterSpread"
    c = await _cluster(cluster, topic)
    ports = {c.base_port: "broker-a", c.base_port + 10: "broker-b"}
    got = Received()
    pc = consumer(c, "CG-spread", topic, got)
    await pc.start()
    try:
        async with Producer("PG-spread", c.namesrv) as p:
            results = [await p.send(Message(topic, b"m-%d" % i)) for i in range(80)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        by_broker = {r.message_queue.broker_name for r in results}
        assert by_broker == BROKERS
        # round robin over the 8 queues of both brokers
        assert len({(r.message_queue.broker_name, r.message_queue.queue_id) for r in results}) == 8
        want = {b"m-%d" % i for i in range(80)}
        await _wait(lambda: want <= got.at.keys(), 60, "every message consumed")
    finally:
        await pc.shutdown()
    assert {ports[got.port[b]] for b in want} == BROKERS
    for r in results:  # each message came from the broker that acknowledged it
        body = b"m-%d" % results.index(r)
        assert ports[got.port[body]] == r.message_queue.broker_name
        assert got.msgs[body].queue_id == r.message_queue.queue_id


@dataclass
class Sent:
    body: bytes
    start: float
    end: float
    broker: str | None  # None: failed
    error: str | None = None


async def test_kill9_one_broker_under_load_loses_nothing_acked(cluster: ClusterProcess) -> None:
    topic = "ClusterLoad"
    # the supervisor waits 4 s before restarting a dead broker: a window to observe
    c = await _cluster(cluster, topic)
    ports = {c.base_port: "broker-a", c.base_port + 10: "broker-b"}
    got = Received()
    pc = consumer(c, "CG-load", topic, got)
    await pc.start()
    sent: list[Sent] = []
    stop = asyncio.Event()
    seq = iter(range(10**9))

    async def sender(p: Producer) -> None:
        while not stop.is_set():
            body = b"load-%d" % next(seq)
            t0 = time.time()
            try:
                r = await p.send(Message(topic, body))
                ok = r.message_queue.broker_name if r.status is SendStatus.SEND_OK else None
                sent.append(Sent(body, t0, time.time(), ok, None if ok else r.status.name))
            except Exception as err:  # noqa: BLE001 - recorded and asserted below
                sent.append(Sent(body, t0, time.time(), None, repr(err)))
            await asyncio.sleep(0.01)

    producer = Producer("PG-load", c.namesrv)
    await producer.start()
    senders = [asyncio.create_task(sender(producer)) for _ in range(4)]
    try:

        def acked_on(b: str) -> int:
            return sum(1 for s in sent if s.broker == b)

        await _wait(lambda: min(acked_on(b) for b in BROKERS) >= 30, 60, "load on both")
        killed = c.kill9("broker-a")
        t_kill = time.time()
        await c.wait_restarted("broker-a", killed)
        t_back = time.time()
        assert t_back - t_kill >= 4.0
        await asyncio.sleep(3.0)
    finally:
        stop.set()
        await asyncio.gather(*senders)
        await producer.shutdown()
    try:
        failed = [s for s in sent if s.broker is None]
        assert failed == [], f"{len(failed)} of {len(sent)} sends failed: {failed[:5]}"
        timeout = producer.send_msg_timeout
        slow = [s for s in sent if s.end - s.start > timeout + 0.5]
        assert slow == [], f"sends slower than the {timeout} s send timeout: {slow[:5]}"
        # while broker-a was down the producer kept going on broker-b
        during = [s for s in sent if t_kill + 0.5 < s.start and s.end < t_back]
        assert len(during) >= 20 and {s.broker for s in during} == {"broker-b"}
        acked = {s.body: s.broker for s in sent}
        await _wait(
            lambda: acked.keys() <= got.at.keys(), 120, "every acknowledged message consumed"
        )
        # the consumer kept consuming broker-b's queues while broker-a was down
        b_port = c.base_port + 10
        assert any(t_kill + 0.5 < t < t_back and p == b_port for t, p in got.log)
        assert all(ports[got.port[b]] == broker for b, broker in acked.items())
        # messages broker-a acknowledged before the kill survived it
        assert sum(1 for s in sent if s.broker == "broker-a" and s.end < t_kill) >= 30
    finally:
        await pc.shutdown()


async def test_delayed_and_timer_messages_fire_on_time_on_both_brokers(
    cluster: ClusterProcess,
) -> None:
    topic = "ClusterDelay"
    c = await _cluster(cluster, topic)
    ports = {"broker-a": c.base_port, "broker-b": c.base_port + 10}
    got = Received()
    pc = consumer(c, "CG-delay", topic, got)
    await pc.start()
    due: dict[bytes, tuple[float, float, str]] = {}  # body -> (earliest, latest, broker)
    try:
        async with Producer("PG-delay", c.namesrv) as p:
            for broker in sorted(BROKERS):
                mq = MessageQueue(topic, broker, 1)
                for level, secs in ((1, 1.0), (2, 2.0), (3, 3.0)):
                    body = f"{broker}-level-{level}".encode()
                    t0 = time.time()
                    r = await p.send(Message(topic, body, delay_level=level), queue=mq)
                    due[body] = (t0 + secs, time.time() + secs, broker)
                    assert r.message_queue.broker_name == broker
                body = f"{broker}-timer-delay".encode()
                t0 = time.time()
                await p.send(Message(topic, body, delay=timedelta(seconds=1.5)), queue=mq)
                due[body] = (t0 + 1.5, time.time() + 1.5, broker)
                at = time.time() + 2.5
                body = f"{broker}-timer-at".encode()
                await p.send(Message(topic, body, deliver_at=int(at * 1000)), queue=mq)
                due[body] = (at, at, broker)
        await _wait(lambda: due.keys() <= got.at.keys(), 60, "every delayed message")
    finally:
        await pc.shutdown()
    late = 2.0  # a shared, loaded 2-core machine: scheduling + long-poll wake-up
    for body, (earliest, latest, broker) in due.items():
        at = got.at[body]
        assert got.port[body] == ports[broker], body
        assert at >= earliest - 0.01, (body, "early by", earliest - at)
        assert at <= latest + late, (body, "late by", at - latest)


async def _wait(pred: object, timeout: float, what: str) -> None:
    assert callable(pred)
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.05)


async def test_killed_name_server_is_restarted_and_clients_keep_sending(
    cluster: ClusterProcess,
) -> None:
    """Routes live in the name server's memory only (as in RocketMQ): a restarted one knows
    the brokers again at their next registration (``--register-period``, 3 s here, 30 s by
    default); running clients keep their cached routes and keep sending meanwhile."""
    topic = "ClusterNsKill"
    c = await _cluster(cluster, topic)
    async with Producer("PG-nskill", c.namesrv) as p:
        await p.send(Message(topic, b"warm"))
        old = c.kill9("namesrv")
        t_kill = time.time()
        results = [await p.send(Message(topic, b"during-%d" % i)) for i in range(16)]
        # the supervisor restarts it 4 s after its death at the earliest: these sends
        # all went while no name server was running
        assert time.time() - t_kill < 3.0
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert {r.message_queue.broker_name for r in results} == BROKERS
        await c.wait_restarted("namesrv", old)
        assert c.status()["namesrv"]["starts"] == 2
        await wait_route(c.namesrv, topic, BROKERS, timeout=20)
