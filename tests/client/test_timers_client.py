"""The bundled client's timer messages: Message(deliver_at=, delay=), SendResult.recall_handle
and Producer.recall, against a real in-process broker and a push consumer."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from kairosmq.client import (
    ConsumeFromWhere,
    Message,
    MessageError,
    Producer,
    PushConsumer,
    RecallFailed,
)
from kairosmq.client.message import wire_properties
from kairosmq.protocol.properties import decode_properties
from kairosmq.protocol.timer import decode_recall_handle
from kairosmq.server.broker import Broker

from tests.helpers import Collector, wait_until


def test_message_timer_fields_go_on_the_wire_as_rocketmq5_properties() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    props = decode_properties(wire_properties(Message("T", b"x", deliver_at=at), None))
    assert props["TIMER_DELIVER_MS"] == str(int(at.timestamp() * 1000))
    props = decode_properties(
        wire_properties(Message("T", b"x", deliver_at=1_900_000_000_123), None)
    )
    assert props["TIMER_DELIVER_MS"] == "1900000000123"
    props = decode_properties(
        wire_properties(Message("T", b"x", delay=timedelta(seconds=2, milliseconds=5)), None)
    )
    assert props["TIMER_DELAY_MS"] == "2005"


@pytest.mark.parametrize(
    "kw",
    [
        {"delay_level": 3, "delay": timedelta(seconds=1)},
        {"deliver_at": 1, "delay": timedelta(seconds=1)},
        {"deliver_at": datetime(2030, 1, 1)},  # naive: ambiguous
        {"delay": timedelta(seconds=-1)},
    ],
)
def test_message_timer_misuse_is_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        Message("T", b"x", **kw)


@pytest.mark.slow  # timers due in up to 1 s
async def test_deliver_at_delay_and_recall_end_to_end(kbroker: Broker) -> None:
    got = Collector()
    c = PushConsumer(
        "CG-timers", kbroker.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    c.subscribe("Timers", "*")
    c.register_listener(got)
    await c.start()
    try:
        async with Producer("PG-timers", kbroker.namesrv_address) as p:
            at_ms = int(time.time() * 1000) + 600
            r1 = await p.send(Message("Timers", b"at", deliver_at=at_ms))
            r2 = await p.send(Message("Timers", b"delay", delay=timedelta(milliseconds=700)))
            r3 = await p.send(Message("Timers", b"recalled", delay=timedelta(seconds=1)))
            r4 = await p.send(Message("Timers", b"level", delay_level=4))  # 200 ms levels
            assert all(r.recall_handle for r in (r1, r2, r3, r4))
            assert decode_recall_handle(r1.recall_handle).deliver_ms == at_ms
            assert await p.recall("Timers", r3.recall_handle) == r3.msg_id
            assert await p.recall("Timers", r3.recall_handle) == r3.msg_id  # idempotent
            with pytest.raises(MessageError):
                await p.recall("Other", r3.recall_handle)
            await got.wait_for(3, timeout=10)
            with pytest.raises(RecallFailed, match="already delivered"):
                await p.recall("Timers", r1.recall_handle)
        await asyncio.sleep(0.6)
        bodies = sorted(got.bodies)
        assert bodies == [b"at", b"delay", b"level"]
        at_msg = next(m for m in got.msgs if m.body == b"at")
        assert at_msg.store_timestamp >= at_ms
    finally:
        await c.shutdown()
    await wait_until(lambda: kbroker.stats.timers_fired == 2)
