"""PushConsumer against a real in-process broker: rebalance, filters, offsets, retries."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from pathlib import Path

import pytest
from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    Producer,
    PushConsumer,
    hash_selector,
)
from kairosmq.server.broker import Broker

from tests.helpers import Collector, stays_false, wait_until

FAST = dict(
    rebalance_interval=0.5,
    pull_time_delay_millis_when_exception=50,
    persist_consumer_offset_interval=0.2,
)


def make(
    broker: Broker,
    group: str,
    topic: str,
    listener: object,
    expr: str = "*",
    orderly: bool = False,
    **kw: object,
) -> PushConsumer:
    opts = {**FAST, "consume_from_where": ConsumeFromWhere.FIRST_OFFSET, **kw}
    c = PushConsumer(group, broker.namesrv_address, **opts)  # type: ignore[arg-type]
    c.subscribe(topic, expr)
    c.register_listener(listener, orderly=orderly)  # type: ignore[arg-type]
    return c


def owned(c: PushConsumer, topic: str) -> set[int]:
    return {mq.queue_id for mq in c.assigned_queues if mq.topic == topic}


async def start_pair(
    broker: Broker, group: str, topic: str, a: Collector, b: Collector, **kw: object
) -> tuple[PushConsumer, PushConsumer]:
    """Two started members of ``group``, returned once they split the 4 queues 2/2."""
    ca, cb = make(broker, group, topic, a, **kw), make(broker, group, topic, b, **kw)
    try:
        await ca.start()
        await cb.start()
        await wait_until(lambda: len(owned(ca, topic)) == 2 and len(owned(cb, topic)) == 2)
        assert owned(ca, topic).isdisjoint(owned(cb, topic))
    except BaseException:
        await ca.shutdown()
        await cb.shutdown()
        raise
    return ca, cb


async def send_n(p: Producer, topic: str, n: int, start: int = 0, **kw: object) -> None:
    await asyncio.gather(
        *(
            p.send(Message(topic, b"%d" % i, **kw))  # type: ignore[arg-type]
            for i in range(start, start + n)
        )
    )


async def test_tag_filter_delivers_only_matching_tags(kbroker: Broker) -> None:
    got = Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        for i in range(30):
            await p.send(Message("Tags", b"%d" % i, tags=["TagA", "TagB", "TagC"][i % 3]))
        c = make(kbroker, "CG-tags", "Tags", got, "TagA || TagC")
        await c.start()
        try:
            await got.wait_for(20)
            assert await stays_false(lambda: len(got.msgs) > 20, 0.5)  # nothing extra
        finally:
            await c.shutdown()
    assert len(got.msgs) == 20 and {m.tags for m in got.msgs} == {"TagA", "TagC"}


async def test_two_clustering_consumers_split_queues_and_take_over(kbroker: Broker) -> None:
    a, b = Collector(), Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        await send_n(p, "Split", 1)  # creates the topic (4 queues)
        ca, cb = await start_pair(kbroker, "CG-split", "Split", a, b)
        main = lambda c: owned(c, "Split")  # noqa: E731
        try:
            await send_n(p, "Split", 40, start=1)
            await wait_until(lambda: len(a.msgs) + len(b.msgs) >= 41)
            assert a.msgs and b.msgs
            # after the split each queue has one consumer (message 0 was sent before b
            # joined: a may have taken it from a queue b owns now)
            a_queues = {m.queue_id for m in a.msgs if m.body != b"0"}
            assert a_queues.isdisjoint({m.queue_id for m in b.msgs if m.body != b"0"})
            b_queues = main(cb)
            await cb.shutdown()
            # b's consumed offsets reached the broker before it left (the handover point)
            for q in b_queues:
                assert kbroker.offsets.query("CG-split", "Split", q) == kbroker.store.max_offset(
                    "Split", q
                )
            await wait_until(lambda: len(main(ca)) == 4)
            await send_n(p, "Split", 40, start=41)
            await wait_until(lambda: len({m.body for m in a.msgs + b.msgs}) >= 81)
        finally:
            await ca.shutdown()
            await cb.shutdown()
    assert {m.body for m in a.msgs + b.msgs} == {b"%d" % i for i in range(81)}
    # after the split is settled nothing is consumed twice (an orderly handover);
    # message 0 predates b joining and may legitimately be seen by both
    later = [m.body for m in a.msgs + b.msgs if m.body != b"0"]
    assert sorted(later) == sorted(b"%d" % i for i in range(1, 81))


async def test_broadcasting_delivers_everything_to_every_member(
    kbroker: Broker, tmp_path: Path
) -> None:
    got = [Collector(), Collector()]
    async with Producer("PG", kbroker.namesrv_address) as p:
        await send_n(p, "Bcast", 1)
        cs = [
            make(
                kbroker,
                "CG-b",
                "Bcast",
                g,
                message_model=MessageModel.BROADCASTING,
                offset_store_dir=tmp_path / f"m{i}",
            )
            for i, g in enumerate(got)
        ]
        for c in cs:
            await c.start()
        try:
            await send_n(p, "Bcast", 20, start=1)
            for g in got:
                await g.wait_for(21)
        finally:
            for c in cs:
                await c.shutdown()
    for g in got:
        assert sorted(g.bodies) == sorted(b"%d" % i for i in range(21))
    assert (tmp_path / "m0" / "CG-b" / "offsets.json").exists()


async def test_offsets_survive_a_consumer_restart_without_loss(kbroker: Broker) -> None:
    seen: list[bytes] = []

    async def slow(msgs: list[MessageExt], _ctx: ConsumeContext) -> ConsumeStatus:
        await asyncio.sleep(0.002)
        seen.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async with Producer("PG", kbroker.namesrv_address) as p:
        await send_n(p, "Restart", 200)
        c1 = make(kbroker, "CG-r", "Restart", slow, consume_thread_max=4)
        await c1.start()
        await wait_until(lambda: len(seen) >= 50)
        await c1.shutdown()  # mid-stream
        first = len(seen)
        assert first < 200
        await send_n(p, "Restart", 50, start=200)
        c2 = make(kbroker, "CG-r", "Restart", slow, consume_thread_max=4)
        await c2.start()
        try:
            await wait_until(lambda: len(set(seen)) >= 250, timeout=10)
            assert await stays_false(lambda: len(seen) > 250, 0.5)  # no late duplicates
        finally:
            await c2.shutdown()
    assert set(seen) == {b"%d" % i for i in range(250)}
    assert len(seen) == 250, f"{len(seen) - 250} duplicates after a clean restart"


async def test_reconsume_later_redelivers_through_retry_topic(kbroker: Broker) -> None:
    got = Collector(
        lambda m: (
            ConsumeStatus.CONSUME_SUCCESS
            if m.reconsume_times >= 2
            else ConsumeStatus.RECONSUME_LATER
        )
    )
    async with Producer("PG", kbroker.namesrv_address) as p:
        r = await p.send(Message("Retry", b"again", tags="T1"))
        c = make(kbroker, "CG-retry", "Retry", got, "T1")
        await c.start()
        try:
            await got.wait_for(3, timeout=5)
        finally:
            await c.shutdown()
    assert [m.reconsume_times for m in got.msgs] == [0, 1, 2]
    assert all(m.topic == "Retry" and m.msg_id == r.msg_id for m in got.msgs)
    assert got.msgs[1].properties.get("RETRY_TOPIC") == "Retry"


async def test_listener_exception_and_sync_listener(kbroker: Broker) -> None:
    calls: list[int] = []

    def sync_listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        calls.append(msgs[0].reconsume_times)
        if msgs[0].reconsume_times == 0:
            raise RuntimeError("boom")
        return ConsumeStatus.CONSUME_SUCCESS

    async with Producer("PG", kbroker.namesrv_address) as p:
        await p.send(Message("Exc", b"x"))
        c = make(kbroker, "CG-exc", "Exc", sync_listener)
        await c.start()
        try:
            await wait_until(lambda: len(calls) >= 2)
        finally:
            await c.shutdown()
    assert calls == [0, 1]


async def test_orderly_consume_keeps_per_order_sequence(kbroker: Broker) -> None:
    rnd = random.Random(1122)
    per_order: dict[str, list[int]] = defaultdict(list)
    in_queue: set[int] = set()
    overlap: list[int] = []

    async def orderly(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        q = ctx.message_queue.queue_id
        if q in in_queue:
            overlap.append(q)
        in_queue.add(q)
        await asyncio.sleep(rnd.random() / 500)
        in_queue.discard(q)
        if rnd.random() < 0.1 and msgs[0].reconsume_times == 0:
            ctx.suspend_current_queue_time_millis = 10
            return ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        for m in msgs:
            order, seq = m.body.decode().split(":")
            per_order[order].append(int(seq))
        return ConsumeStatus.CONSUME_SUCCESS

    async with Producer("PG", kbroker.namesrv_address) as p:

        async def send_order(o: int) -> None:
            for s in range(30):
                await p.send(
                    Message("Orderly", f"o{o}:{s}".encode()), selector=hash_selector, arg=f"o{o}"
                )

        await asyncio.gather(*(send_order(o) for o in range(6)))
        c = make(
            kbroker,
            "CG-ord",
            "Orderly",
            orderly,
            orderly=True,
            consume_message_batch_max_size=3,
            consume_thread_max=8,
        )
        await c.start()
        try:
            await wait_until(lambda: sum(len(v) for v in per_order.values()) >= 180, 10)
        finally:
            await c.shutdown()
    assert not overlap, "two batches of one queue ran at the same time"
    assert {o: seqs for o, seqs in per_order.items()} == {
        f"o{o}": list(range(30)) for o in range(6)
    }


async def test_orderly_queues_move_to_the_remaining_member(kbroker: Broker) -> None:
    a, b = Collector(), Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        await send_n(p, "OrdSplit", 4)
        ca, cb = await start_pair(kbroker, "CG-os", "OrdSplit", a, b, orderly=True)
        main = lambda c: owned(c, "OrdSplit")  # noqa: E731
        try:
            await wait_until(lambda: len({m.body for m in a.msgs + b.msgs}) >= 4)

            # each member holds the broker's lock on exactly the queues it consumes
            def locks(c: PushConsumer) -> set[int]:
                return {
                    q
                    for (g, t, q), (holder, _ts) in kbroker.locks._locks.items()
                    if g == "CG-os" and t == "OrdSplit" and holder == c.client_id
                }

            await wait_until(lambda: locks(ca) == main(ca) and locks(cb) == main(cb))
            b_queues = main(cb)
            await cb.shutdown()
            assert locks(cb) == set()  # released on the way out, not left to expire
            for q in b_queues:  # and its offsets reached the broker first
                assert kbroker.offsets.query("CG-os", "OrdSplit", q) == kbroker.store.max_offset(
                    "OrdSplit", q
                )
            await wait_until(lambda: len(main(ca)) == 4 and locks(ca) == {0, 1, 2, 3})
            await send_n(p, "OrdSplit", 20, start=4)
            await wait_until(lambda: len({m.body for m in a.msgs + b.msgs}) >= 24)
        finally:
            await ca.shutdown()
            await cb.shutdown()
    assert {m.body for m in a.msgs + b.msgs} == {b"%d" % i for i in range(24)}
    # everything sent after the takeover went to the survivor, once, in queue order
    after = [m for m in a.msgs if int(m.body) >= 4]
    assert sorted(m.body for m in after) == sorted(b"%d" % i for i in range(4, 24))
    for q in range(4):
        offs = [m.queue_offset for m in after if m.queue_id == q]
        assert offs == sorted(offs)


async def test_broker_restart_mid_stream_consumer_continues(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = await broker_factory(log_messages=False)
    port, ns_port = b.port, b.namesrv_port
    got = Collector()
    async with Producer("PG", b.namesrv_address) as p:
        await send_n(p, "Crash", 30)
        c = make(b, "CG-crash", "Crash", got)
        await c.start()
        try:
            await got.wait_for(30)
            await b.stop()
            await broker_factory(log_messages=False, port=port, namesrv_port=ns_port)
            await send_n(p, "Crash", 30, start=30)
            await wait_until(lambda: len({m.body for m in got.msgs}) >= 60, timeout=10)
        finally:
            await c.shutdown()
    assert {m.body for m in got.msgs} == {b"%d" % i for i in range(60)}


async def test_consumer_started_before_the_topic_exists(kbroker: Broker) -> None:
    got = Collector()
    c = make(
        kbroker,
        "CG-early",
        "Early",
        got,
        consume_from_where=ConsumeFromWhere.LAST_OFFSET,
        rebalance_interval=0.1,
    )
    early = lambda: [mq for mq in c.assigned_queues if mq.topic == "Early"]  # noqa: E731
    await c.start()
    try:
        assert not early()
        async with Producer("PG", kbroker.namesrv_address) as p:
            await send_n(p, "Early", 1)
            await wait_until(lambda: len(early()) == 4)
            await send_n(p, "Early", 10, start=1)
            await wait_until(lambda: len({m.body for m in got.msgs}) >= 10)
    finally:
        await c.shutdown()
    # LAST_OFFSET starts at the max offset when the queue is assigned: nothing sent
    # after the assignment is lost
    assert {b"%d" % i for i in range(1, 11)} <= {m.body for m in got.msgs}


@pytest.mark.slow  # pulls 400 ms apart, about 1 s
async def test_pull_interval_spaces_the_pulls_of_a_queue(kbroker: Broker) -> None:
    async with Producer("PG", kbroker.namesrv_address) as p:
        await send_n(p, "Spaced", 1)
        queue = (await p.send(Message("Spaced", b"q"))).message_queue
        for i in range(3):
            await p.send(Message("Spaced", b"s%d" % i), queue=queue)
    seen: dict[bytes, float] = {}

    async def stamp(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for m in msgs:
            seen[m.body] = asyncio.get_running_loop().time()
        return ConsumeStatus.CONSUME_SUCCESS

    c = make(kbroker, "CG-spaced", "Spaced", stamp, pull_batch_size=1, pull_interval=400)
    async with c:
        await wait_until(lambda: {b"s0", b"s1", b"s2"} <= seen.keys(), 10.0)
    # one message per pull, 400 ms between two pulls that found one
    assert seen[b"s2"] - seen[b"s0"] >= 0.8 - 0.01
