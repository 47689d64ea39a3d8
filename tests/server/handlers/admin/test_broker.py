"""Unit tests of AdminBrokerProcessor (server/handlers/admin/broker.py): the RocketMQ
admin answers mqadmin parses, built from the real store, tables and registry."""

from __future__ import annotations

from typing import Any

import orjson
from kairosmq.protocol.bodies import ConsumerData, SubscriptionData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.properties import DELAY
from kairosmq.server.handlers.admin.broker import AdminBrokerProcessor
from kairosmq.server.put.kind import MessageKind

from tests.server.handlers.rig import Services, req


def _processor(s: Services) -> AdminBrokerProcessor:
    b = s.broker
    return AdminBrokerProcessor(
        reads=s.store,
        guard=s.store.guard,
        topics=s.topics,
        offsets=s.offsets,
        clients=s.clients,
        schedule_progress=lambda: b.schedule.progress,
        stats=s.stats,
        endpoints=b.endpoints,
        uptime_ms=lambda: 5_000.0,
        config=s.config,
    )


def _call(s: Services, name: str, code: int, **ext: Any) -> Any:
    resp = s.guarded(getattr(_processor(s), name))(s.conn(), req(code, ext))
    return resp


async def test_runtime_info_reflects_the_store(services: Services) -> None:
    services.store_message("T", b"x")
    services.store_message("T", b"later", props={DELAY: "2"}, kind=MessageKind.DELAYED)
    services.store.write_out()
    table = orjson.loads(
        _call(services, "handle_runtime_info", RequestCode.GET_BROKER_RUNTIME_INFO).body
    )["table"]
    assert table["commitLogMaxOffset"] == str(services.store.phy_range()[1])
    assert table["msgPutTotalTodayNow"] == "2"
    assert table["scheduleMessageOffset_2"] == "0,1"
    assert table["runtime"] == "[ 0 days, 0 hours, 0 minutes, 5 seconds ]"
    assert int(table["earliestMessageTimeStamp"]) > 0


async def test_broker_config_uses_the_bound_ports(services: Services) -> None:
    services.broker.endpoints.port = 31911
    text = _call(services, "handle_broker_config", RequestCode.GET_BROKER_CONFIG).body.decode()
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["listenPort"] == "31911" and props["brokerName"] == services.config.broker_name
    assert props["messageDelayLevel"] == services.config.delay_levels


async def test_topic_stats_and_consume_by_who(services: Services) -> None:
    for _ in range(3):
        services.store_message("T", b"x")
    services.offsets.commit("G", "T", 0, 1)
    stats = _call(services, "handle_topic_stats", RequestCode.GET_TOPIC_STATS_INFO, topic="T")
    assert stats.code == ResponseCode.SUCCESS and b'"maxOffset":3' in stats.body
    assert (
        _call(services, "handle_topic_stats", RequestCode.GET_TOPIC_STATS_INFO, topic="Nope").code
        == ResponseCode.TOPIC_NOT_EXIST
    )
    who = orjson.loads(
        _call(
            services, "handle_consume_by_who", RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, topic="T"
        ).body
    )
    assert who == {"groupList": ["G"]}


async def test_connections(services: Services) -> None:
    services.topics.create("T", 1)
    conn = services.conn(41234)
    services.clients.register_consumer(
        ConsumerData("G", [SubscriptionData.build("T", "*", 0)]), "cid-1", conn, 373
    )
    services.clients.register_producer("PG", "pid-1", conn)
    consumers = orjson.loads(
        _call(
            services,
            "handle_consumer_connections",
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            consumerGroup="G",
        ).body
    )
    assert [(c["clientId"], c["clientAddr"], c["version"]) for c in consumers["connectionSet"]] == [
        ("cid-1", "127.0.0.1:41234", 373)
    ]
    producers = orjson.loads(
        _call(
            services,
            "handle_producer_connections",
            RequestCode.GET_PRODUCER_CONNECTION_LIST,
            producerGroup="PG",
        ).body
    )
    assert [c["clientId"] for c in producers["connectionSet"]] == ["pid-1"]
    offline = _call(
        services,
        "handle_consumer_connections",
        RequestCode.GET_CONSUMER_CONNECTION_LIST,
        consumerGroup="Nobody",
    )
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
