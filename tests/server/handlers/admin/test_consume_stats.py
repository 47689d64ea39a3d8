"""Unit tests of ConsumerAdminProcessor (server/handlers/admin/consume_stats.py):
brokerConsumeStats and queryCq, on the real store and tables."""

from __future__ import annotations

from typing import Any

import orjson
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.handlers.admin.consume_stats import ConsumerAdminProcessor

from tests.server.handlers.rig import Services, req


def _call(s: Services, name: str, code: int, **ext: Any) -> RemotingCommand:
    proc = ConsumerAdminProcessor(
        reads=s.store,
        topics=s.topics,
        offsets=s.offsets,
        clients=s.clients,
        endpoints=s.broker.endpoints,
        broker_name=s.config.broker_name,
    )
    return s.guarded(getattr(proc, name))(s.conn(), req(code, ext))


async def test_consume_stats(services: Services) -> None:
    """(Moved here with GET_CONSUME_STATS from test_broker.py's topic and consume stats.)"""
    for _ in range(3):
        services.store_message("T", b"x")
    services.offsets.commit("G", "T", 0, 1)
    consume = _call(
        services, "handle_consume_stats", RequestCode.GET_CONSUME_STATS, consumerGroup="G"
    )
    assert b'"brokerOffset":3,"consumerOffset":1' in consume.body


async def test_broker_consume_stats_total_diff(services: Services) -> None:
    for _ in range(4):
        services.store_message("T", b"x")
    services.offsets.commit("G", "T", 0, 1)
    body = _call(
        services, "handle_broker_consume_stats", RequestCode.GET_BROKER_CONSUME_STATS
    ).body  # fastjson: object map keys
    assert body.startswith(b'{"brokerAddr":"' + services.broker.address.encode())
    assert body.endswith(b'"totalDiff":3}') and b'"brokerOffset":4,"consumerOffset":1' in body


async def test_query_consume_queue_units(services: Services) -> None:
    first = services.store_message("T", b"a", props={"TAGS": "A"})
    services.store_message("T", b"b")
    resp = _call(
        services,
        "handle_query_consume_queue",
        RequestCode.QUERY_CONSUME_QUEUE,
        topic="T",
        queueId=0,
        index=0,
        count=10,
        consumerGroup="G",
    )
    body = orjson.loads(resp.body)
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 2)
    assert body["queueData"][0]["physicOffset"] == first.phy_offset
    assert body["queueData"][0]["tagsCode"] == first.tags_code
    assert body["filterData"] == "G@T is not online!"
    past = _call(
        services,
        "handle_query_consume_queue",
        RequestCode.QUERY_CONSUME_QUEUE,
        topic="T",
        queueId=0,
        index=5,
        count=1,
    )
    assert "not exist" in (past.remark or "")
