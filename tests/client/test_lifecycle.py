"""client/lifecycle.py through Producer and PushConsumer: ServiceState transitions, a failed
start, heartbeats and UNREGISTER_CLIENT from the shared base; client/producer/producer.py's
SendRequest: attempts per send mode and the typed V2 send header on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kairosmq.client import (
    ClientStateError,
    ConsumeFromWhere,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
    hash_selector,
)
from kairosmq.client.errors import SubscriptionError, SystemBusy
from kairosmq.client.lifecycle import ServiceState
from kairosmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import SendMessageRequestHeader
from kairosmq.server.broker import Broker

from tests.helpers import Collector, wait_until
from tests.wire import ServerPeer


def _consumer(
    broker: Broker, group: str, topic: str, expr: str | MessageSelector = "*"
) -> PushConsumer:
    c = PushConsumer(
        group, broker.namesrv_address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    c.subscribe(topic, expr)
    c.register_listener(Collector())
    return c


async def test_producer_states_and_registration(kbroker: Broker) -> None:
    p = Producer("PG-life", kbroker.namesrv_address)
    assert p.state is ServiceState.CREATE_JUST
    with pytest.raises(ClientStateError, match="CREATE_JUST"):
        await p.send(Message("Life", b"x"))
    await p.start()
    assert p.state is ServiceState.RUNNING
    await p.send(Message("Life", b"x"))
    # the first route to a broker sends it a heartbeat (in the background)
    await wait_until(lambda: p.client_id in kbroker.clients.producers.get("PG-life", {}))
    with pytest.raises(ClientStateError, match="start\\(\\) runs once"):
        await p.start()
    await p.shutdown()
    assert p.state is ServiceState.SHUTDOWN_ALREADY
    assert p.client_id not in kbroker.clients.producers.get("PG-life", {})  # unregistered
    with pytest.raises(ClientStateError, match="SHUTDOWN_ALREADY"):
        await p.send(Message("Life", b"x"))
    await p.shutdown()  # a second shutdown does nothing
    assert p.state is ServiceState.SHUTDOWN_ALREADY


async def test_consumer_heartbeats_and_unregisters(kbroker: Broker) -> None:
    async with Producer("PG-life", kbroker.namesrv_address) as p:
        await p.send(Message("LifeC", b"x"))
    c = _consumer(kbroker, "CG-life", "LifeC")
    async with c:
        assert c.state is ServiceState.RUNNING
        assert kbroker.clients.consumer_ids("CG-life") == [c.client_id]
    assert c.state is ServiceState.SHUTDOWN_ALREADY
    assert kbroker.clients.consumer_ids("CG-life") == []
    never = _consumer(kbroker, "CG-never", "LifeC")
    await never.shutdown()
    assert never.state is ServiceState.SHUTDOWN_ALREADY
    with pytest.raises(ClientStateError):
        await never.start()


async def test_a_refused_start_leaves_start_failed(kbroker: Broker) -> None:
    async with Producer("PG-life", kbroker.namesrv_address) as p:
        await p.send(Message("LifeSql", b"x"))
    c = _consumer(kbroker, "CG-sql", "LifeSql", MessageSelector.sql("a >> 5"))
    with pytest.raises(SubscriptionError):
        await c.start()
    assert c.state is ServiceState.START_FAILED
    assert kbroker.clients.consumer_ids("CG-sql") == []  # it never heartbeated
    with pytest.raises(ClientStateError, match="START_FAILED"):
        await c.start()
    await c.shutdown()
    assert c.state is ServiceState.START_FAILED


class BusyBroker:
    """A name server and broker in one fake peer: routes topic -> 4 queues on itself,
    answers every send with SYSTEM_BUSY (retriable) and keeps the send headers."""

    def __init__(self, peer: ServerPeer) -> None:
        self.peer = peer
        self.sends: list[SendMessageRequestHeader] = []
        peer.on_cmd = self.answer

    def answer(self, cmd: RemotingCommand, w: asyncio.StreamWriter) -> None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = TopicRouteData(
                [QueueData("busy", 4, 4)], [BrokerData("busy", {0: self.peer.address})]
            )
            out = cmd.response(body=route.to_json())
        elif cmd.code == RequestCode.SEND_MESSAGE_V2:
            self.sends.append(SendMessageRequestHeader.from_ext_fields(cmd.ext_fields, v2=True))
            out = cmd.response(ResponseCode.SYSTEM_BUSY, remark="busy")
        else:
            out = cmd.response()
        if not cmd.is_oneway:
            w.write(encode_command(out))


@pytest_asyncio.fixture
async def busy() -> AsyncIterator[BusyBroker]:
    peer = ServerPeer()
    await peer.start()
    yield BusyBroker(peer)
    await peer.stop()


async def test_attempts_per_send_mode(busy: BusyBroker) -> None:
    async with Producer(
        "PG-busy",
        busy.peer.address,
        retry_times_when_send_failed=1,
        retry_times_when_send_async_failed=3,
        create_topic_key="MyKey",
        default_topic_queue_nums=8,
    ) as p:
        with pytest.raises(SystemBusy):
            await p.send(Message("Busy", b"sync"))
        assert len(busy.sends) == 2  # 1 + retry_times_when_send_failed
        failed: list[Exception] = []
        await p.send_async(Message("Busy", b"async"), on_exception=failed.append)
        assert len(busy.sends) == 2 + 4 and isinstance(failed[0], SystemBusy)
        with pytest.raises(SystemBusy):
            await p.send(Message("Busy", b"ordered"), selector=hash_selector, arg="o-1")
        assert len(busy.sends) == 7  # a selector pins the queue: one attempt
    h = busy.sends[0]
    assert (h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums) == (
        "PG-busy",
        "Busy",
        "MyKey",
        8,
    )
    assert (h.broker_name, h.batch, h.reconsume_times, h.unit_mode) == ("busy", False, 0, False)
    assert h.born_timestamp > 0 and "UNIQ_KEY\x01" in (h.properties or "")
    # retries of one send carry the same UNIQ_KEY
    assert busy.sends[0].properties == busy.sends[1].properties
    assert busy.sends[6].queue_id == hash_selector(list(range(4)), None, "o-1")  # type: ignore[arg-type]
