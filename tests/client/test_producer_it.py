"""Producer against a real in-process broker: every send mode, batches, errors."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from kairosmq.client import (
    ConnectionClosed,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    RequestTimeout,
    SendResult,
    SendStatus,
    hash_selector,
)
from kairosmq.client.errors import MessageIllegal
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.server.broker import Broker

from tests.helpers import Collector


def consumer_for(
    broker: Broker, group: str, topic: str, listener: Collector, expr: str = "*", **kw: object
) -> PushConsumer:
    c = PushConsumer(
        group, broker.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **kw
    )  # type: ignore[arg-type]
    c.subscribe(topic, expr)
    c.register_listener(listener)
    return c


async def test_every_send_mode_is_delivered(kbroker: Broker) -> None:
    ok: list[SendResult] = []
    async with Producer("PG", kbroker.namesrv_address) as p:
        r = await p.send(
            Message("Modes", b"sync", tags="A", keys=["k1", "k2"], properties={"color": "red"})
        )
        assert r.status is SendStatus.SEND_OK and r.message_queue.topic == "Modes"
        assert len(r.msg_id) == 32 and r.msg_id != r.offset_msg_id
        _ip, port, _off = decode_offset_msg_id(r.offset_msg_id)
        assert port == int(kbroker.address.rsplit(":", 1)[1])
        task = p.send_async(Message("Modes", b"async"), on_success=ok.append)
        await p.send_oneway(Message("Modes", b"oneway"))
        batch = await p.send_batch([Message("Modes", b"batch%d" % i, tags="B") for i in range(3)])
        assert len(batch.msg_id.split(",")) == 3 and len(batch.offset_msg_id.split(",")) == 3
        await task
        assert len(ok) == 1 and ok[0].status is SendStatus.SEND_OK

        got = Collector()
        c = consumer_for(kbroker, "CG-modes", "Modes", got)
        await c.start()
        try:
            await got.wait_for(6)
        finally:
            await c.shutdown()
    assert sorted(got.bodies) == sorted(
        [b"sync", b"async", b"oneway", b"batch0", b"batch1", b"batch2"]
    )
    by_body = {m.body: m for m in got.msgs}
    m = by_body[b"sync"]
    assert (m.msg_id, m.tags, m.keys, m.properties["color"]) == (r.msg_id, "A", "k1 k2", "red")
    assert (m.queue_id, m.queue_offset) == (r.message_queue.queue_id, r.queue_offset)
    assert m.offset_msg_id == r.offset_msg_id and m.born_timestamp <= m.store_timestamp
    assert [by_body[b"batch%d" % i].msg_id for i in range(3)] == batch.msg_id.split(",")
    assert {by_body[b"batch%d" % i].queue_offset for i in range(3)} == {
        batch.queue_offset + i for i in range(3)
    }


async def test_round_robin_over_queues_and_explicit_queue(kbroker: Broker) -> None:
    async with Producer("PG", kbroker.namesrv_address) as p:
        results = [await p.send(Message("RR", b"x")) for _ in range(8)]
        assert {r.message_queue.queue_id for r in results} == {0, 1, 2, 3}
        mq = MessageQueue("RR", results[0].message_queue.broker_name, 2)
        assert (await p.send(Message("RR", b"y"), queue=mq)).message_queue == mq


async def test_send_async_reports_failure_to_on_exception(kbroker: Broker) -> None:
    errors: list[Exception] = []
    async with Producer("PG", kbroker.namesrv_address) as p:
        bad = Message("Sys", b"x", properties={"p": "v" * 40000})  # properties > 32767 bytes
        await p.send_async(bad, on_exception=errors.append)
    assert len(errors) == 1 and isinstance(errors[0], MessageIllegal)


async def test_delayed_message_arrives_after_its_level(kbroker: Broker) -> None:
    got = Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        await p.send(Message("Delay", b"warm-up"))
        c = consumer_for(kbroker, "CG-delay", "Delay", got)
        await c.start()
        try:
            await got.wait_for(1)
            t0 = time.time()
            await p.send(Message("Delay", b"later", delay_level=4))  # 200 ms in tests
            await got.wait_for(2)
        finally:
            await c.shutdown()
    late = got.msgs[1]
    assert late.body == b"later" and time.time() - t0 >= 0.2
    assert late.store_timestamp - late.born_timestamp >= 190


async def test_ordered_send_keeps_each_order_on_one_queue(kbroker: Broker) -> None:
    async with Producer("PG", kbroker.namesrv_address) as p:
        queues: dict[str, set[int]] = {}
        for i in range(40):
            order = f"order-{i % 5}"
            r = await p.send(Message("Ordered", b"%d" % i), selector=hash_selector, arg=order)
            queues.setdefault(order, set()).add(r.message_queue.queue_id)
    assert all(len(q) == 1 for q in queues.values())


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_dead_name_server_fails_within_timeout() -> None:
    async with Producer("PG", f"127.0.0.1:{_free_port()}", send_msg_timeout=3.0) as p:
        t0 = time.monotonic()
        with pytest.raises(ConnectionClosed):
            await p.send(Message("T", b"x"))
        assert time.monotonic() - t0 < 1.5  # refused: fails at once, long before 3 s


@pytest.mark.slow  # a 1 s send timeout
async def test_unresponsive_broker_times_out_within_send_msg_timeout() -> None:
    async def swallow(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read()
        w.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Producer("PG", f"127.0.0.1:{port}", send_msg_timeout=1.0) as p:
            t0 = time.monotonic()
            with pytest.raises(RequestTimeout):
                await p.send(Message("T", b"x"))
            # the whole send (retries included) is bounded by send_msg_timeout: generous
            # slack, but a timeout per retry (3 x 1 s) would exceed it
            assert 0.9 <= time.monotonic() - t0 < 1.0 + 1.0
    finally:
        server.close()
        await server.wait_closed()


async def test_retries_go_to_a_restarted_broker(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = await broker_factory(log_messages=False)
    port, ns_port = b.port, b.namesrv_port
    async with Producer("PG", b.namesrv_address, send_msg_timeout=3.0) as p:
        await p.send(Message("Restart", b"before"))
        await b.stop()
        b2 = await broker_factory(log_messages=False, port=port, namesrv_port=ns_port)
        r = await p.send(Message("Restart", b"after"))
        assert r.status is SendStatus.SEND_OK
    assert b2.address == b.address
