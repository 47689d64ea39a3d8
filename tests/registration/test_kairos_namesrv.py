"""A kairosmq broker registered with kairosmq's own standalone name server
(``kairosmq.server.namesrv.NameServer``, in-process on port 0).

Checked at the name server's tables and wire answers: bundled clients routed through it
(plain and delayed messages, the retry topic), periodic re-registration keeping the broker
alive past the name server's expiry, a deleted topic leaving the route, UNREGISTER on stop,
the compressed register body, two name servers of which one stops and comes back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.protocol.naming import retry_topic
from kairosmq.server.broker import Broker

from tests.helpers import Collector, stays_false, wait_until
from tests.registration.conftest import cluster_info, route_is

namesrv = pytest.importorskip("kairosmq.server.namesrv", reason="NAMESRV's name server")
NameServer = namesrv.NameServer
BrokerFactory = Callable[..., Awaitable[Broker]]


@pytest_asyncio.fixture
async def name_servers(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[object]]]:
    started: list[object] = []

    async def make(port: int = 0, **kw: object) -> object:
        kw.setdefault("scan_interval_s", 0.2)
        ns = NameServer(host="127.0.0.1", port=port, data_dir=tmp_path / f"ns{len(started)}", **kw)
        await ns.start()
        started.append(ns)
        return ns

    yield make
    for ns in started:
        await ns.stop()  # type: ignore[attr-defined]


async def test_bundled_clients_route_through_kairos_namesrv(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory
) -> None:
    ns = await name_servers()
    addr = ns.address  # type: ignore[attr-defined]
    broker = await broker_factory(
        namesrv_addr=addr, broker_name="kairos-k", cluster_name="KCluster", register_period=1.0
    )
    broker.topics.create("KTopic", 2)
    await route_is(addr, "KTopic", {"kairos-k": 2})
    assert (await cluster_info(addr)) == {"KCluster/kairos-k": {0: broker.address}}

    producer = Producer("KPG", namesrv=addr)
    consumer = PushConsumer(
        "KCG",
        namesrv=addr,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        rebalance_interval=0.5,
    )
    got = Collector()
    consumer.subscribe("KTopic", "*")
    consumer.register_listener(got)
    await producer.start()
    await consumer.start()
    try:
        for i in range(4):
            await producer.send(Message("KTopic", f"m{i}".encode()))
        await producer.send(Message("KTopic", b"later", delay_level=3))
        # a topic the broker creates on the first send (TBW102's route) is registered too
        await producer.send(Message("KAutoTopic", b"auto"))
        await route_is(addr, "KAutoTopic", {"kairos-k": 4})
        await got.wait_for(5, timeout=30)
        assert sorted(got.bodies) == [b"later", b"m0", b"m1", b"m2", b"m3"]
        (later,) = [m for m in got.msgs if m.body == b"later"]
        assert later.store_timestamp - later.born_timestamp >= 150  # level 3: 150 ms here
        await route_is(addr, retry_topic("KCG"), {"kairos-k": 1})
    finally:
        await consumer.shutdown()
        await producer.shutdown()


@pytest.mark.slow  # waits out a 1.5 s expiry
async def test_periodic_registration_outlives_expiry_then_unregister(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory
) -> None:
    """Expiry 1.5 s at the name server, period 0.5 s: only periodic registrations keep
    the broker listed (each one moves its lastUpdateTimestamp); stop unregisters it."""
    ns = await name_servers(broker_expiry_s=1.5)
    addr = ns.address  # type: ignore[attr-defined]
    live = ns.routes.broker_live_table  # type: ignore[attr-defined]
    broker = await broker_factory(namesrv_addr=addr, broker_name="kairos-p", register_period=0.5)
    await wait_until(lambda: broker.address in live, timeout=5)
    stamps = {live[broker.address].last_update_ms}
    version = live[broker.address].data_version

    def sample() -> bool:
        info = live.get(broker.address)
        if info is not None:
            stamps.add(info.last_update_ms)
        return info is None  # expired

    assert await stays_false(sample, 4.0, interval=0.05)  # > 2 expiry windows
    assert len(stamps) >= 6  # every 0.5 s
    assert live[broker.address].data_version == version  # nothing changed but the time
    await broker.stop("test")
    assert broker.address not in live
    assert await cluster_info(addr) == {}


async def test_deleted_topic_leaves_the_route(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory
) -> None:
    # deleteTopicWithBrokerRegistration (off by default, as in RocketMQ: see
    # tests/namesrv/test_namesrv_settings.py::test_incremental_registration_keeps_other_topics)
    ns = await name_servers(delete_topic_with_broker_registration=True)
    addr = ns.address  # type: ignore[attr-defined]
    broker = await broker_factory(
        namesrv_addr=addr, broker_name="kairos-d", register_period=30.0
    )  # only the change hook registers
    broker.topics.create("DelTopic", 2)
    await route_is(addr, "DelTopic", {"kairos-d": 2})
    broker.topics.create("DelTopic", 5)  # updated queue count
    await route_is(addr, "DelTopic", {"kairos-d": 5})
    assert broker.topics.delete("DelTopic")
    await route_is(addr, "DelTopic", {})


async def test_compressed_register_body(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory
) -> None:
    ns = await name_servers()
    addr = ns.address  # type: ignore[attr-defined]
    broker = await broker_factory(
        namesrv_addr=addr, broker_name="kairos-z", compressed_register=True, register_period=30.0
    )
    assert broker.registration is not None
    cmd = broker.registration.register_request()
    assert cmd.ext_fields["compressed"] == "true" and cmd.body[:1] == b"\x78"  # zlib
    broker.topics.create("ZTopic", 3)
    await route_is(addr, "ZTopic", {"kairos-z": 3})


@pytest.mark.parametrize("compressed", [False, True])
async def test_register_request_built_in_parts_is_the_same(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory, compressed: bool
) -> None:
    """The registration task builds REGISTER_BROKER in parts between requests: the same
    bytes as the one-go builder (whose wire form tests/namesrv checks against 4.9.8)."""
    ns = await name_servers()
    broker = await broker_factory(
        namesrv_addr=ns.address,  # type: ignore[attr-defined]
        broker_name="kairos-p",
        compressed_register=compressed,
        register_period=30.0,
    )
    assert broker.registration is not None
    for i in range(1234):  # several parts of REGISTER_PART_TOPICS
        broker.topics.create(f"PartTopic{i}", 1 + i % 7)
    whole = broker.registration.register_request()
    parts = await broker.registration.register_request_async()
    assert parts.body == whole.body and parts.ext_fields == whole.ext_fields


async def test_two_name_servers_one_restarts(
    name_servers: Callable[..., Awaitable[object]], broker_factory: BrokerFactory
) -> None:
    a = await name_servers()
    b = await name_servers()
    addr_a, addr_b = a.address, b.address  # type: ignore[attr-defined]
    broker = await broker_factory(
        namesrv_addr=f"{addr_a};{addr_b}", broker_name="kairos-2", register_period=1.0
    )
    reg = broker.registration
    assert reg is not None
    await wait_until(lambda: reg.registered_everywhere, timeout=5)
    await b.stop()  # type: ignore[attr-defined]
    broker.topics.create("TwoTopic", 2)  # registered with a at once, b is down
    await route_is(addr_a, "TwoTopic", {"kairos-2": 2})
    await wait_until(lambda: reg.links[1].failures >= 1, timeout=5)
    assert reg.links[0].registered
    port_b = int(addr_b.rsplit(":", 1)[1])
    b2 = await name_servers(port=port_b)  # back on the same port, empty tables
    assert b2.address == addr_b  # type: ignore[attr-defined]
    await route_is(addr_b, "TwoTopic", {"kairos-2": 2}, timeout=5)
    assert reg.registered_everywhere
