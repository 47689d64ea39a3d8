"""Unit tests of the name server's DefaultRequestProcessor (server/handlers/namesrv.py):
routes come from the real topic table and the bound endpoints."""

from __future__ import annotations

import orjson
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.naming import retry_topic
from kairosmq.server.handlers.namesrv import DefaultRequestProcessor

from tests.server.handlers.rig import Services, req


def _processor(s: Services) -> DefaultRequestProcessor:
    return DefaultRequestProcessor(topics=s.topics, endpoints=s.broker.endpoints, config=s.config)


async def test_route_uses_the_bound_port(services: Services) -> None:
    services.broker.endpoints.port = 23456  # as Broker sets it after binding port 0
    services.topics.create("T", 3)
    proc = _processor(services)
    route = services.guarded(proc.handle_route)(
        services.conn(), req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    )
    data = TopicRouteData.from_json(route.body)
    assert data.broker_datas[0].broker_addrs == {0: "127.0.0.1:23456"}
    assert data.queue_datas[0].write_queue_nums == 3
    missing = services.guarded(proc.handle_route)(
        services.conn(), req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    )
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    # a route lookup never creates a topic, %RETRY% ones included (RocketMQ's name server)
    version = services.topics.version
    retry = services.guarded(proc.handle_route)(
        services.conn(), req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": retry_topic("G")})
    )
    assert retry.code == ResponseCode.TOPIC_NOT_EXIST and retry.remark
    assert services.topics.get(retry_topic("G")) is None
    assert services.topics.version == version


async def test_cluster_topic_list_config_and_delete(services: Services) -> None:
    services.broker.endpoints.namesrv_port = 19876
    services.topics.create("T", 1)
    proc, conn = _processor(services), services.conn()
    cluster = orjson.loads(
        proc.handle_cluster_info(conn, req(RequestCode.GET_BROKER_CLUSTER_INFO)).body
    )
    assert cluster["clusterAddrTable"] == {
        services.config.cluster_name: [services.config.broker_name]
    }
    topics = orjson.loads(
        (
            await proc.handle_topic_list(conn, req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        ).body
    )["topicList"]
    assert "T" in topics
    text = proc.handle_namesrv_config(conn, req(RequestCode.GET_NAMESRV_CONFIG)).body.decode()
    assert "listenPort=19876\n" in text
    delete = services.guarded(proc.handle_delete_topic_in_namesrv)
    still = delete(conn, req(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"}))
    assert still.code == ResponseCode.SYSTEM_ERROR and "DELETE_TOPIC_IN_BROKER" in still.remark
    services.topics.delete("T")
    gone = delete(conn, req(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"}))
    assert gone.code == ResponseCode.SUCCESS
