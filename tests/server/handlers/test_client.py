"""Unit tests of ClientManageProcessor (server/handlers/client.py) on a real client
registry, lock manager and topic table: heartbeats register and create %RETRY% topics
(persisted before the answer), locks lock only existing queues, an unregistering
consumer frees its locks at once, and CHECK_CLIENT_CONFIG compiles SQL92."""

from __future__ import annotations

import inspect
import json

import orjson
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueData,
    SubscriptionData,
)
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import retry_topic
from kairosmq.server.handlers.client import ClientManageProcessor
from kairosmq.server.remoting.transport import Connection

from tests.server.handlers.rig import Services, req


def _processor(s: Services) -> ClientManageProcessor:
    return ClientManageProcessor(
        clients=s.clients, locks=s.locks, topics=s.topics, config=s.config, log=s.log
    )


async def _heartbeat(
    s: Services, conn: Connection, client_id: str, model: str = "CLUSTERING"
) -> RemotingCommand:
    """A heartbeat, answered as the broker answers it (after the retry topic's write)."""
    data = HeartbeatData(
        client_id,
        ["PG"],
        [ConsumerData("G", [SubscriptionData.build("T", "A || B", 0)], message_model=model)],
    )
    answer = s.guarded(_processor(s).handle_heartbeat)(
        conn, req(RequestCode.HEART_BEAT, body=data.to_json())
    )
    return await answer if inspect.isawaitable(answer) else answer


def _lock(s: Services, code: int, client_id: str, queues: list[int]) -> RemotingCommand:
    body = LockBatchRequest("G", client_id, [MessageQueueData("T", "b", q) for q in queues])
    proc = _processor(s)
    handler = proc.handle_lock if code == RequestCode.LOCK_BATCH_MQ else proc.handle_unlock
    return s.guarded(handler)(s.conn(), req(code, body=body.to_json()))


def _locked(resp: RemotingCommand) -> list[int]:
    return sorted(m["queueId"] for m in orjson.loads(resp.body)["lockOKMQSet"])


async def test_heartbeat_registers_and_persists_the_retry_topic(services: Services) -> None:
    services.topics.create("T", 4)
    resp = await _heartbeat(services, services.conn(), "cid-1")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert services.clients.consumer_ids("G") == ["cid-1"]
    sub = services.clients.subscription("G", "T")
    assert sub is not None and sub.tags_set == ["A", "B"]
    on_disk = json.loads(services.topics.path.read_text())
    assert retry_topic("G") in json.dumps(on_disk)  # written before the answer
    list_resp = services.guarded(_processor(services).handle_consumer_list)(
        services.conn(), req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
    )
    assert orjson.loads(list_resp.body) == {"consumerIdList": ["cid-1"]}


async def test_broadcasting_heartbeat_creates_no_retry_topic(services: Services) -> None:
    services.topics.create("T", 4)
    assert (await _heartbeat(services, services.conn(), "c", "BROADCASTING")).code == 0
    assert services.topics.get(retry_topic("G")) is None


async def test_locks_exclusive_and_freed_by_unregister(services: Services) -> None:
    services.topics.create("T", 2)
    assert _locked(_lock(services, RequestCode.LOCK_BATCH_MQ, "a", [0, 1, 7])) == [0, 1]
    assert _locked(_lock(services, RequestCode.LOCK_BATCH_MQ, "b", [0, 1])) == []
    _lock(services, RequestCode.UNLOCK_BATCH_MQ, "a", [1])
    assert _locked(_lock(services, RequestCode.LOCK_BATCH_MQ, "b", [0, 1])) == [1]
    bye = services.guarded(_processor(services).handle_unregister)(
        services.conn(), req(RequestCode.UNREGISTER_CLIENT, {"clientID": "a", "consumerGroup": "G"})
    )
    assert bye.code == ResponseCode.SUCCESS
    assert _locked(_lock(services, RequestCode.LOCK_BATCH_MQ, "b", [0])) == [0]


async def test_check_client_config(services: Services) -> None:
    check = services.guarded(_processor(services).handle_check_client_config)

    def ask(expression_type: str, expression: str) -> RemotingCommand:
        body = orjson.dumps(
            {"subscriptionData": {"expressionType": expression_type, "subString": expression}}
        )
        return check(services.conn(), req(RequestCode.CHECK_CLIENT_CONFIG, body=body))

    assert ask("TAG", "A").code == ResponseCode.SUCCESS
    assert ask("SQL92", "a > 5").code == ResponseCode.SUCCESS
    bad = ask("SQL92", "a > > 5")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and bad.remark
    assert services.stats.rejected == 1
