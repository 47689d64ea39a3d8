"""The standalone name server over real TCP (in-process, port 0): registration from several
brokers aggregates routes; UNREGISTER, expiry and connection loss drop a broker; the
admin and KV requests; and every hostile request gets a code and a remark while the server
keeps serving. With ``acl_file`` the file is reloaded like a broker's (the real-process ACL
and TLS cases are in test_namesrv_acl.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.registration import (
    ClusterInfo,
    DataVersion,
    TopicConfigData,
    build_query_data_version,
    build_register_broker,
    build_unregister_broker,
    decode_register_response,
    decode_topic_list,
)
from kairosmq.server.namesrv import NameServer

from tests.helpers import wait_until
from tests.wire import RawPeer

FIXTURES = Path(__file__).parent / "fixtures"
V1 = DataVersion(1, 1)


async def _send(peer: RawPeer, cmd: RemotingCommand) -> RemotingCommand:
    """Send a prebuilt command through the raw peer (its own opaque)."""
    return await peer.call(cmd.code, cmd.ext_fields, cmd.body)


async def register(
    ns: NameServer,
    name: str,
    addr: str,
    topics: list[TopicConfigData],
    *,
    version: DataVersion = V1,
    broker_id: int = 0,
    cluster: str = "C1",
    compressed: bool = False,
    peer: RawPeer | None = None,
) -> tuple[RawPeer, RemotingCommand]:
    peer = peer or await RawPeer.connect(ns.address)
    cmd = build_register_broker(
        cluster_name=cluster,
        broker_name=name,
        broker_addr=addr,
        ha_server_addr=addr.replace(":", ":1"),
        topic_configs=topics,
        data_version=version,
        broker_id=broker_id,
        compressed=compressed,
    )
    return peer, await _send(peer, cmd)


async def route(peer: RawPeer, topic: str) -> TopicRouteData | None:
    r = await peer.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        assert topic in (r.remark or "")
        return None
    assert r.code == 0, r.remark
    return TopicRouteData.from_json(r.body)


async def cluster(peer: RawPeer) -> ClusterInfo:
    r = await peer.call(R.GET_BROKER_CLUSTER_INFO)
    assert r.code == 0, r.remark
    return ClusterInfo.from_json(r.body)


def _queues(rd: TopicRouteData | None) -> dict[str, tuple[int, int, int]]:
    assert rd is not None
    return {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm) for q in rd.queue_datas}


async def test_two_brokers_aggregate_routes(namesrv: NameServer) -> None:
    p1, r1 = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4), TopicConfigData("B", 2, 2)]
    )
    p2, r2 = await register(
        namesrv,
        "b2",
        "127.0.0.1:10921",
        [TopicConfigData("A", 8, 8), TopicConfigData("C", 1, 1, 4)],
        compressed=True,
    )
    for r in (r1, r2):
        assert r.code == 0, r.remark
        res = decode_register_response(r)
        assert res.master_addr is None and res.ha_server_addr is None and res.kv_table == {}
    a = await route(p1, "A")
    assert _queues(a) == {"b1": (4, 4, 6), "b2": (8, 8, 6)}
    assert a is not None and {b.broker_name: b.broker_addrs for b in a.broker_datas} == {
        "b1": {0: "127.0.0.1:10911"},
        "b2": {0: "127.0.0.1:10921"},
    }
    assert _queues(await route(p1, "C")) == {"b2": (1, 1, 4)}
    assert await route(p1, "Nope") is None
    info = await cluster(p1)
    assert info.cluster_addr_table == {"C1": ["b1", "b2"]}
    assert info.broker_addr_table["b2"].cluster == "C1"
    r = await p1.call(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert decode_topic_list(r.body) == ["A", "B", "C"]
    r = await p1.call(R.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"})
    assert decode_topic_list(r.body) == ["A", "B", "C"]
    r = await p1.call(R.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"})
    assert r.code == 0 and decode_topic_list(r.body) == []
    r = await p1.call(R.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert set(decode_topic_list(r.body)) == {"C1", "b1", "b2"}
    await p1.close()
    await p2.close()


async def test_unregister_removes_the_broker_and_its_queues(namesrv: NameServer) -> None:
    p1, _ = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4), TopicConfigData("B", 4, 4)]
    )
    p2, _ = await register(namesrv, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)])
    r = await _send(
        p1,
        build_unregister_broker(cluster_name="C1", broker_name="b1", broker_addr="127.0.0.1:10911"),
    )
    assert r.code == 0, r.remark
    assert _queues(await route(p2, "A")) == {"b2": (4, 4, 6)}
    assert await route(p2, "B") is None
    assert (await cluster(p2)).cluster_addr_table == {"C1": ["b2"]}
    # unregistering again (or an unknown broker) is harmless, as in RocketMQ
    r = await _send(
        p1,
        build_unregister_broker(cluster_name="C1", broker_name="b1", broker_addr="127.0.0.1:10911"),
    )
    assert r.code == 0
    await _send(
        p2,
        build_unregister_broker(cluster_name="C1", broker_name="b2", broker_addr="127.0.0.1:10921"),
    )
    assert (await cluster(p2)).cluster_addr_table == {}
    assert await route(p2, "A") is None
    await p1.close()
    await p2.close()


@pytest.mark.slow  # waits out an expiry, about 1.5 s
async def test_silent_broker_expires_after_the_scan(
    namesrv_factory: Callable[..., Awaitable[NameServer]],
) -> None:
    ns = await namesrv_factory(scan_interval_s=0.1, broker_expiry_s=0.6)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    silent, _ = await register(ns, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    alive, _ = await register(ns, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)])

    async def heartbeat() -> None:
        while True:  # b2 registers again (same version) every 0.15 s, as brokers do every 30 s
            await register(ns, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)], peer=alive)
            await asyncio.sleep(0.15)

    beating = loop.create_task(heartbeat())
    try:
        await wait_until(lambda: "127.0.0.1:10911" not in ns.routes.broker_live_table, 5.0)
        assert loop.time() - t0 >= 0.6
        assert _queues(await route(alive, "A")) == {"b2": (4, 4, 6)}
        assert (await cluster(alive)).cluster_addr_table == {"C1": ["b2"]}
        assert await silent.closed(2.0), "the expired broker's connection stays open"
        await asyncio.sleep(0.8)  # b2 keeps registering: never expires
        assert "127.0.0.1:10921" in ns.routes.broker_live_table
    finally:
        beating.cancel()
    await alive.close()


async def test_closing_the_registration_connection_drops_the_broker(namesrv: NameServer) -> None:
    p1, _ = await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    p2, _ = await register(namesrv, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)])
    # a client connection (no registration) closing changes nothing
    client = await RawPeer.connect(namesrv.address)
    assert await route(client, "A") is not None
    await client.close()
    await p1.close()
    await wait_until(lambda: "b1" not in namesrv.routes.broker_addr_table, 5.0)
    assert _queues(await route(p2, "A")) == {"b2": (4, 4, 6)}
    # re-registering on a new connection, then closing the old one, keeps the broker
    p3, _ = await register(namesrv, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)])
    await p2.close()
    await asyncio.sleep(0.2)
    assert await route(p3, "A") is not None
    await p3.close()


async def test_topic_table_follows_the_data_version(namesrv: NameServer) -> None:
    p, _ = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4), TopicConfigData("B", 4, 4)]
    )
    r = await p.call(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b1"})
    assert r.code == 0 and r.ext_fields["wipeTopicCount"] == "2"
    assert _queues(await route(p, "A")) == {"b1": (4, 4, 4)}
    # same DataVersion: the queue data stay as they are (RocketMQ)
    await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)], peer=p)
    assert _queues(await route(p, "A")) == {"b1": (4, 4, 4)}
    assert await route(p, "B") is not None
    # a new DataVersion rewrites the topics it lists; a topic missing from it keeps its
    # route (RocketMQ: an Apache broker registers a new topic alone; see
    # test_namesrv_settings.py for deleteTopicWithBrokerRegistration)
    await register(
        namesrv,
        "b1",
        "127.0.0.1:10911",
        [TopicConfigData("A", 8, 8)],
        version=DataVersion(2, 2),
        peer=p,
    )
    assert _queues(await route(p, "A")) == {"b1": (8, 8, 6)}
    assert _queues(await route(p, "B")) == {"b1": (4, 4, 4)}
    r = await p.call(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b1"})
    r = await p.call(R.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "b1"})
    assert r.code == 0 and r.ext_fields["addTopicCount"] == "2"
    assert _queues(await route(p, "A")) == {"b1": (8, 8, 6)}
    await p.close()


async def test_query_data_version(namesrv: NameServer) -> None:
    p, _ = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)], version=DataVersion(5, 3)
    )
    live = namesrv.routes.broker_live_table["127.0.0.1:10911"]
    live.last_update_ms -= 50_000
    before = live.last_update_ms
    kw: dict[str, Any] = {
        "cluster_name": "C1",
        "broker_name": "b1",
        "broker_addr": "127.0.0.1:10911",
    }
    r = await _send(p, build_query_data_version(data_version=DataVersion(5, 3), **kw))
    assert r.code == 0 and r.ext_fields["changed"] == "false"
    assert DataVersion.from_json(r.body) == DataVersion(5, 3)
    assert live.last_update_ms > before  # unchanged: counts as a heartbeat
    r = await _send(p, build_query_data_version(data_version=DataVersion(6, 4), **kw))
    assert r.ext_fields["changed"] == "true"
    r = await _send(
        p,
        build_query_data_version(
            data_version=DataVersion(1, 1), **{**kw, "broker_addr": "127.0.0.1:1"}
        ),
    )
    assert r.ext_fields["changed"] == "true" and r.body == b""
    await p.close()


async def test_slave_learns_its_master(namesrv: NameServer) -> None:
    p, _ = await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    _, r = await register(
        namesrv, "b1", "127.0.0.1:10931", [TopicConfigData("A", 4, 4)], broker_id=1, peer=p
    )
    res = decode_register_response(r)
    assert res.master_addr == "127.0.0.1:10911" and res.ha_server_addr == "127.0.0.1:110911"
    rd = await route(p, "A")
    assert rd is not None and rd.broker_datas[0].broker_addrs == {
        0: "127.0.0.1:10911",
        1: "127.0.0.1:10931",
    }
    await p.close()


async def test_kv_config_and_order_topic_config(namesrv: NameServer, namesrv_factory: Any) -> None:
    p = await RawPeer.connect(namesrv.address)
    r = await p.call(
        R.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "A", "value": "b1:4"}
    )
    assert r.code == 0, r.remark
    r = await p.call(R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "A"})
    assert r.ext_fields["value"] == "b1:4"
    _, r = await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)], peer=p)
    assert decode_register_response(r).kv_table == {"A": "b1:4"}
    r = await p.call(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
    assert orjson.loads(r.body) == {"table": {"A": "b1:4"}}
    r = await p.call(R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Z"})
    assert r.code == ResponseCode.QUERY_NOT_FOUND and "Z" in (r.remark or "")
    saved = orjson.loads((namesrv.data_dir / "kvConfig.json").read_bytes())
    assert saved == {"configTable": {"ORDER_TOPIC_CONFIG": {"A": "b1:4"}}}
    # a second name server on the same data dir reads it back, and with
    # order_message_enable routes carry orderTopicConf
    ns2 = await namesrv_factory(data_dir=namesrv.data_dir, order_message_enable=True)
    p2, _ = await register(ns2, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    rd = await route(p2, "A")
    assert rd is not None and rd.order_topic_conf == "b1:4"
    await p.close()
    await p2.close()


async def test_namesrv_config_and_delete_topic(namesrv: NameServer) -> None:
    p, _ = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4), TopicConfigData("B", 4, 4)]
    )
    await register(
        namesrv,
        "b2",
        "127.0.0.1:10921",
        [TopicConfigData("A", 4, 4), TopicConfigData("B", 4, 4)],
        cluster="C2",
        peer=p,
    )
    r = await p.call(R.GET_NAMESRV_CONFIG)
    props = dict(line.split("=", 1) for line in r.body.decode().splitlines())
    assert props["listenPort"] == str(namesrv.port)
    assert props["brokerChannelExpiredTime"] == "120000"
    r = await p.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "A", "clusterName": "C2"})
    assert r.code == 0
    assert _queues(await route(p, "A")) == {"b1": (4, 4, 6)}
    r = await p.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "B"})
    assert r.code == 0 and await route(p, "B") is None
    await p.close()


def _ext(**over: Any) -> dict[str, str]:
    ext = {
        "brokerName": "b9",
        "brokerAddr": "127.0.0.1:10999",
        "clusterName": "C1",
        "haServerAddr": "127.0.0.1:11000",
        "brokerId": "0",
        "compressed": "false",
    }
    ext.update({k: str(v) for k, v in over.items()})
    return {k: v for k, v in ext.items() if v != "DROP"}


HOSTILE: list[tuple[int, dict[str, str], bytes, str]] = [
    (R.REGISTER_BROKER, _ext(), b"{not json", "Failed to decode RegisterBrokerBody (JSON)"),
    (R.REGISTER_BROKER, _ext(), b"[1,2]", "not a JSON object"),
    (
        R.REGISTER_BROKER,
        _ext(compressed="true"),
        b"\x78\x9cgarbage",
        "Failed to decode RegisterBrokerBody (compressed)",
    ),
    (R.REGISTER_BROKER, _ext(compressed="true"), b'{"filterServerList":[]}', "inflate"),
    (R.REGISTER_BROKER, _ext(haServerAddr="DROP"), b"", "haServerAddr"),
    (R.REGISTER_BROKER, _ext(brokerName="DROP"), b"", "brokerName"),
    (R.REGISTER_BROKER, _ext(brokerId="x"), b"", "brokerId"),
    (R.REGISTER_BROKER, _ext(brokerId="-1"), b"", "brokerId must be >= 0"),
    (R.REGISTER_BROKER, _ext(brokerAddr="no-port"), b"", "brokerAddr"),
    (R.REGISTER_BROKER, _ext(brokerAddr="h:99999"), b"", "brokerAddr"),
    (R.REGISTER_BROKER, _ext(brokerName="has space"), b"", "brokerName"),
    (R.REGISTER_BROKER, _ext(bodyCrc32="12345"), b'{"filterServerList":[]}', "crc32 not match"),
    (
        R.REGISTER_BROKER,
        _ext(),
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"a b":{"topicName":"a b"}}}}',
        "topicName",
    ),
    (R.UNREGISTER_BROKER, {"brokerName": "b1"}, b"", "brokerAddr"),
    (R.QUERY_DATA_VERSION, _ext(), b"nope", "DataVersion"),
    (R.GET_ROUTEINFO_BY_TOPIC, {}, b"", "topic"),
    (R.GET_TOPICS_BY_CLUSTER, {}, b"", "cluster"),
    (R.WIPE_WRITE_PERM_OF_BROKER, {}, b"", "brokerName"),
    (R.DELETE_TOPIC_IN_NAMESRV, {"topic": ""}, b"", "topic"),
    (R.PUT_KV_CONFIG, {"namespace": "n", "key": "k"}, b"", "value"),
    (9999, {}, b"", "not supported"),
]


async def test_hostile_requests_get_a_code_and_remark(namesrv: NameServer) -> None:
    good, _ = await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    before = (namesrv.routes.cluster_info(), dict(namesrv.routes.topic_queue_table))
    for code, ext, body, remark in HOSTILE:
        r = await good.call(code, ext, body)
        assert r.code != 0 and remark in (r.remark or ""), (code, ext, body, r.remark)
        assert (namesrv.routes.cluster_info(), dict(namesrv.routes.topic_queue_table)) == before, (
            code,
            ext,
            body,
        )
    assert namesrv.stats.rejected >= len(HOSTILE) - 2  # KV and unknown code: not guarded
    # a garbage frame closes only that connection; the server keeps serving
    bad = await RawPeer.connect(namesrv.address)
    bad.send_raw(b"\x00\x00\x00\x08\x00\x00\x00\xff\xff\xff\xff\xff")
    assert await bad.closed(3.0)
    assert _queues(await route(good, "A")) == {"b1": (4, 4, 6)}
    _, r = await register(namesrv, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)], peer=good)
    assert r.code == 0 and len(_queues(await route(good, "A"))) == 2
    await good.close()


@pytest.mark.parametrize("kind", ["plain", "compressed"])
async def test_frames_of_a_real_apache_broker_register(namesrv: NameServer, kind: str) -> None:
    """The exact bytes Apache RocketMQ 4.9.8's broker sent (fixtures/) register it."""
    peer = await RawPeer.connect(namesrv.address)
    peer.send_raw((FIXTURES / f"register-broker-4.9.8-{kind}.bin").read_bytes())
    answer = await asyncio.wait_for(peer.requests.get(), 5.0)
    assert answer.is_response and answer.code == 0, answer.remark
    rd = await route(peer, "TBW102")
    assert rd is not None and rd.broker_datas[0].broker_addrs == {0: "127.0.0.1:29921"}
    assert _queues(rd) == {"broker-a": (8, 8, 7)}
    info = await cluster(peer)
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    await peer.close()


async def test_bundled_producer_routes_through_the_name_server(
    namesrv: NameServer, broker: Any
) -> None:
    """A kairosmq broker's address registered here: the bundled Producer finds it by route."""
    from kairosmq.client import Message, Producer

    p, r = await register(
        namesrv,
        broker.config.broker_name,
        broker.address,
        [TopicConfigData("NsRouted", 4, 4), TopicConfigData("TBW102", 8, 8, 7)],
        cluster=broker.config.cluster_name,
    )
    assert r.code == 0
    async with Producer("NsPG", namesrv=namesrv.address) as producer:
        sent = await producer.send(Message("NsRouted", b"through the name server"))
    assert sent.message_queue.broker_name == broker.config.broker_name
    assert broker.store.max_offset("NsRouted", sent.message_queue.queue_id) == 1
    await p.close()


async def test_oneway_register_is_applied_without_an_answer(namesrv: NameServer) -> None:
    peer = await RawPeer.connect(namesrv.address)
    cmd = build_register_broker(
        cluster_name="C1",
        broker_name="b1",
        broker_addr="127.0.0.1:10911",
        ha_server_addr="h:1",
        topic_configs=[TopicConfigData("A", 4, 4)],
        data_version=DataVersion(1, 1),
        oneway=True,
    )
    peer.send_raw(encode_command(cmd))
    await wait_until(lambda: "A" in namesrv.routes.topic_queue_table, 5.0)
    await asyncio.sleep(0.1)
    assert peer.requests.empty()
    await peer.close()


async def test_broker_count_is_bounded(
    namesrv_factory: Callable[..., Awaitable[NameServer]],
) -> None:
    ns = await namesrv_factory(max_brokers=2)
    p, r1 = await register(ns, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
    _, r2 = await register(ns, "b2", "127.0.0.1:10921", [TopicConfigData("A", 4, 4)], peer=p)
    _, r3 = await register(ns, "b3", "127.0.0.1:10931", [TopicConfigData("A", 4, 4)], peer=p)
    assert (r1.code, r2.code) == (0, 0)
    assert r3.code == ResponseCode.SYSTEM_ERROR and "max_brokers 2" in (r3.remark or "")
    _, again = await register(ns, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)], peer=p)
    assert again.code == 0  # a known broker keeps registering
    assert sorted(ns.routes.broker_addr_table) == ["b1", "b2"]
    await p.close()


async def test_acl_reloads_and_an_open_name_server_warns(
    namesrv_factory: Callable[..., Awaitable[NameServer]], tmp_path: Path
) -> None:
    """The name server's ACL file is watched like a broker's (its own Supervisor): a change
    applies at once; stopping ends the watcher. Bound beyond loopback without --acl, it
    warns at start (``acl.disabled``)."""
    import structlog

    from tests.security.acl_setup import ACL_FILE, PRODUCER, signed_client

    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    ns = await namesrv_factory(acl_file=path, acl_reload_interval=0.05)
    assert ns.acl is not None and ns.server.auth == ns.acl.check
    client = signed_client(ns.address, PRODUCER)
    try:
        wipe = await client.invoke(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b1"}, timeout=5.0)
        assert wipe.code == ResponseCode.NO_PERMISSION and "Need admin" in (wipe.remark or "")
        path.write_text(
            ACL_FILE.replace(
                "secretKey: producer_sk\n", "secretKey: producer_sk\n    admin: true\n"
            )
        )
        await wait_until(lambda: ns.acl is not None and ns.acl.reloads == 1, 5.0)
        wipe = await client.invoke(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b1"}, timeout=5.0)
        assert wipe.code == ResponseCode.SUCCESS, wipe.remark
    finally:
        client.close()
    assert [(s["name"], s["state"]) for s in ns.supervisor.status()] == [("acl", "running")]
    await ns.stop()
    assert ns.supervisor.tasks == {}
    assert [s["state"] for s in ns.supervisor.status()] == ["stopped"]

    with structlog.testing.capture_logs() as logs:
        await namesrv_factory(host="0.0.0.0", data_dir=tmp_path / "open")
        await namesrv_factory(host="127.0.0.1", data_dir=tmp_path / "local")
    (warning,) = [e for e in logs if e["event"] == "acl.disabled"]
    assert warning["host"] == "0.0.0.0" and "the name server is bound" in warning["reason"]
