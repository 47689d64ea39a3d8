"""Rebalance driven by NOTIFY_CONSUMER_IDS_CHANGED (code 40), not by the periodic timer.

Every consumer here rebalances periodically only every 60 s, so a takeover within 2 s can
only come from the broker's notification. What these catch: a broker that stops sending
code 40 when a member registers, unregisters or drops its socket, a client that ignores it,
and a consumer death (socket dropped, no UNREGISTER_CLIENT) that leaves queues orphaned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap

import pytest
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from kairosmq.server.broker import Broker

from tests.helpers import Collector, wait_until
from tests.wire import RawPeer

SLOW = dict(
    rebalance_interval=60.0,
    pull_time_delay_millis_when_exception=50,
    persist_consumer_offset_interval=0.2,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
)
TAKEOVER_S = 2.0


def _consumer(broker: Broker, group: str, topic: str, listener: Collector) -> PushConsumer:
    c = PushConsumer(group, broker.namesrv_address, **SLOW)  # type: ignore[arg-type]
    c.subscribe(topic, "*")
    c.register_listener(listener)
    return c


def _qids(c: PushConsumer, topic: str) -> set[int]:
    return {mq.queue_id for mq in c.assigned_queues if mq.topic == topic}


async def _make_topic(p: Producer, topic: str) -> None:
    await p.send(Message(topic, b"first"))  # auto-creates the topic with 4 queues


async def _send_to_every_queue(p: Producer, topic: str, tag: str, n: int = 16) -> set[bytes]:
    bodies = {f"{tag}-{i}".encode() for i in range(n)}
    for b in sorted(bodies):
        await p.send(Message(topic, b))  # round-robin over the 4 queues
    return bodies


# ---------------------------------------------------------------- the broker sends 40


def _heartbeat(client_id: str, group: str, topic: str) -> bytes:
    sub = SubscriptionData.build(topic, "*", 1)
    return HeartbeatData(client_id, [], [ConsumerData(group, [sub])]).to_json()


def _group(notify: RemotingCommand) -> str:
    """The group a NOTIFY_CONSUMER_IDS_CHANGED names."""
    return ConsumerGroupRequestHeader.from_ext_fields(notify.ext_fields).consumer_group


async def _next_request(peer: RawPeer, timeout: float = 2.0) -> RemotingCommand:
    return await asyncio.wait_for(peer.requests.get(), timeout)


async def test_broker_sends_code_40_when_a_member_joins_leaves_or_drops(broker: Broker) -> None:
    a = await RawPeer.connect(broker.address)
    b = await RawPeer.connect(broker.address)
    try:
        r = await a.call(RequestCode.HEART_BEAT, body=_heartbeat("10.0.0.1@a", "NG", "NT"))
        assert r.code == ResponseCode.SUCCESS, r.remark
        first = await _next_request(a)  # the group changed: it now has a
        assert (first.code, _group(first)) == (40, "NG")
        assert first.is_oneway
        # a repeated heartbeat on the same connection changes nothing: no notification
        r = await a.call(RequestCode.HEART_BEAT, body=_heartbeat("10.0.0.1@a", "NG", "NT"))
        assert r.code == ResponseCode.SUCCESS
        # b joins: a hears about it
        r = await b.call(RequestCode.HEART_BEAT, body=_heartbeat("10.0.0.2@b", "NG", "NT"))
        assert r.code == ResponseCode.SUCCESS
        joined = await _next_request(a)
        assert (joined.code, _group(joined)) == (40, "NG")
        assert a.requests.empty()  # exactly one notification per change
        # b unregisters: a hears about it
        r = await b.call(
            RequestCode.UNREGISTER_CLIENT,
            UnregisterClientRequestHeader("10.0.0.2@b", consumer_group="NG").to_ext_fields(),
        )
        assert r.code == ResponseCode.SUCCESS
        left = await _next_request(a)
        assert (left.code, _group(left)) == (40, "NG")
        # b joins again, then its socket drops without a word: a hears about it
        await b.call(RequestCode.HEART_BEAT, body=_heartbeat("10.0.0.2@b", "NG", "NT"))
        assert (await _next_request(a)).code == 40
        b.writer.transport.abort()
        dropped = await _next_request(a)
        assert (dropped.code, _group(dropped)) == (40, "NG")
        assert broker.clients.consumer_ids("NG") == ["10.0.0.1@a"]
        # a member of another group is not told
        c = await RawPeer.connect(broker.address)
        try:
            await c.call(RequestCode.HEART_BEAT, body=_heartbeat("10.0.0.3@c", "OTHER", "NT"))
            assert _group(await _next_request(c)) == "OTHER"
            await asyncio.sleep(0.2)
            assert a.requests.empty()
        finally:
            await c.close()
    finally:
        await a.close()
        await b.close()


# ---------------------------------------------------------------- clients act on it


async def test_join_and_leave_rebalance_within_2s_with_a_60s_period(kbroker: Broker) -> None:
    got_a, got_b = Collector(), Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        await _make_topic(p, "NTopic")
        ca = _consumer(kbroker, "CG-notify", "NTopic", got_a)
        cb = _consumer(kbroker, "CG-notify", "NTopic", got_b)
        await ca.start()
        try:
            assert _qids(ca, "NTopic") == {0, 1, 2, 3}
            await cb.start()
            try:
                # a gives up two queues only because the broker told it b joined
                await wait_until(
                    lambda: len(_qids(ca, "NTopic")) == 2,
                    TAKEOVER_S,
                    what="a rebalanced after b joined",
                )
                assert _qids(ca, "NTopic").isdisjoint(_qids(cb, "NTopic"))
                assert _qids(ca, "NTopic") | _qids(cb, "NTopic") == {0, 1, 2, 3}
            finally:
                await cb.shutdown()  # unregisters
            await wait_until(
                lambda: _qids(ca, "NTopic") == {0, 1, 2, 3},
                TAKEOVER_S,
                what="a took over b's queues after b left",
            )
            bodies = await _send_to_every_queue(p, "NTopic", "after")
            await wait_until(
                lambda: bodies <= set(got_a.bodies),
                5.0,
                what="a consumed every queue after the takeover",
            )
        finally:
            await ca.shutdown()
    # between them, nothing was lost
    assert bodies | {b"first"} <= set(got_a.bodies) | set(got_b.bodies)


_CHILD = textwrap.dedent("""
    import asyncio, sys
    from kairosmq.client import ConsumeFromWhere, ConsumeStatus, PushConsumer

    async def listener(msgs, ctx):
        return ConsumeStatus.CONSUME_SUCCESS

    async def main():
        c = PushConsumer("CG-drop", sys.argv[1], rebalance_interval=60.0,
                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         instance_name="child")
        c.subscribe(sys.argv[2], "*")
        c.register_listener(listener)
        await c.start()
        last = None
        while True:
            q = sorted(mq.queue_id for mq in c.assigned_queues if mq.topic == sys.argv[2])
            if q != last:
                print("queues", *q, flush=True)
                last = q
            await asyncio.sleep(0.02)

    asyncio.run(main())
""")


@pytest.mark.slow  # a consumer process, kill -9
async def test_a_consumer_killed_without_unregistering_is_taken_over(kbroker: Broker) -> None:
    """A member in another process is SIGKILLed: no UNREGISTER_CLIENT, the kernel closes
    its socket; the broker drops it on connection loss and notifies the survivor, which
    takes its queues within 2 s (not at the 60 s rebalance, not at the 120 s expiry)."""
    got = Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        await _make_topic(p, "DTopic")
        ca = _consumer(kbroker, "CG-drop", "DTopic", got)
        await ca.start()
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            kbroker.namesrv_address,
            "DTopic",
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert child.stdout is not None
            child_queues: set[int] = set()
            while len(child_queues) != 2:  # the child owns half once it has rebalanced
                line = await asyncio.wait_for(child.stdout.readline(), 30.0)
                assert line, "the child consumer exited"
                child_queues = {int(x) for x in line.split()[1:]}
            await wait_until(
                lambda: _qids(ca, "DTopic") == {0, 1, 2, 3} - child_queues,
                TAKEOVER_S,
                what="a gave the child its half",
            )
            assert len(kbroker.clients.consumer_ids("CG-drop")) == 2
            child.send_signal(signal.SIGKILL)
            await child.wait()
            await wait_until(
                lambda: _qids(ca, "DTopic") == {0, 1, 2, 3},
                TAKEOVER_S,
                what="a took over the killed member's queues",
            )
            assert kbroker.clients.consumer_ids("CG-drop") == [ca.client_id]
            bodies = await _send_to_every_queue(p, "DTopic", "after")
            await wait_until(
                lambda: bodies <= set(got.bodies), 5.0, what="the survivor consumed every queue"
            )
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
            await ca.shutdown()
