"""Raw-protocol tests of the admin codes answered with the consumers' help or changing the
broker's tables (run everywhere, no Java): GET_CONSUMER_RUNNING_INFO (307),
INVOKE_BROKER_TO_RESET_OFFSET (222) -> RESET_CONSUMER_CLIENT_OFFSET (220),
subscription groups (200, 201, 207) and their effect on pulls and send-back,
UPDATE_BROKER_CONFIG (25), VIEW_BROKER_STATS_DATA (315); the bundled PushConsumer answering
307 and 220 for real.
"""

from __future__ import annotations

import asyncio
import re

import orjson
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.client.consumer.callbacks import decode_reset_body
from kairosmq.client.message import MessageQueue
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    MessageQueueData,
    SubscriptionData,
    decode_mq_table,
)
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import LanguageCode, ResponseCode
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.handlers.admin.callbacks import encode_reset_body
from kairosmq.server.remoting import client_calls
from kairosmq.server.tables.settings import SETTABLE

from tests.helpers import Collector, pull, send, wait_until
from tests.wire import RawPeer


async def _consumer_peer(
    broker, client_id: str, group: str, topic: str, model: str = "CLUSTERING"
) -> RawPeer:
    peer = await RawPeer.connect(broker.address)
    hb = HeartbeatData(
        client_id,
        [],
        [ConsumerData(group, [SubscriptionData.build(topic, "*", 1)], message_model=model)],
    )
    r = await peer.call(R.HEART_BEAT, body=hb.to_json())
    assert r.code == ResponseCode.SUCCESS, r.remark
    return peer


async def _next_request(peer: RawPeer, code: int, timeout: float = 5.0) -> RemotingCommand:
    while True:
        cmd = await asyncio.wait_for(peer.requests.get(), timeout)
        if cmd.code == code:
            return cmd


def test_reset_bodies_round_trip_between_broker_and_client() -> None:
    table = [(MessageQueueData("T", "broker-a", q), 10 * q) for q in range(3)]
    want = {MessageQueue("T", "broker-a", q): 10 * q for q in range(3)}
    assert decode_reset_body(encode_reset_body(table)) == want
    assert decode_reset_body(encode_reset_body(table, for_c=True)) == want


async def test_running_info_is_relayed_to_the_client_and_back(broker) -> None:
    client = await _consumer_peer(broker, "ri@1", "RiCG", "RiTopic")
    admin = await RawPeer.connect(broker.address)
    ext = {"consumerGroup": "RiCG", "clientId": "ri@1", "jstackEnable": "false"}
    call = asyncio.ensure_future(admin.call(R.GET_CONSUMER_RUNNING_INFO, ext))
    req = await _next_request(client, R.GET_CONSUMER_RUNNING_INFO)
    assert req.ext_fields == ext and not req.is_oneway
    client.send_raw(encode_command(req.response(body=b'{"properties":{"a":"1"}}')))
    r = await call
    assert r.code == ResponseCode.SUCCESS and r.body == b'{"properties":{"a":"1"}}'
    # an error answer of the client is relayed as is
    call = asyncio.ensure_future(admin.call(R.GET_CONSUMER_RUNNING_INFO, ext))
    req = await _next_request(client, R.GET_CONSUMER_RUNNING_INFO)
    client.send_raw(encode_command(req.error(ResponseCode.SYSTEM_ERROR, "not mine")))
    r = await call
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "not mine")
    r = await admin.call(R.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "nobody@1"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "The Consumer <RiCG> <nobody@1> not online"
    await client.close()
    await admin.close()


async def test_running_info_timeout_and_lost_connection(broker, monkeypatch) -> None:
    monkeypatch.setattr(client_calls, "CALL_TIMEOUT", 0.3)
    client = await _consumer_peer(broker, "to@1", "ToCG", "ToTopic")
    admin = await RawPeer.connect(broker.address)
    ext = {"consumerGroup": "ToCG", "clientId": "to@1"}
    r = await admin.call(R.GET_CONSUMER_RUNNING_INFO, ext)  # the client never answers
    assert r.code == ResponseCode.CONSUME_MSG_TIMEOUT and "Timeout" in r.remark
    monkeypatch.setattr(client_calls, "CALL_TIMEOUT", 5.0)
    call = asyncio.ensure_future(admin.call(R.GET_CONSUMER_RUNNING_INFO, ext))
    await _next_request(client, R.GET_CONSUMER_RUNNING_INFO)
    await client.close()  # gone while the broker waits: answered at once, not after 5 s
    r = await asyncio.wait_for(call, 2.0)
    assert r.code in (ResponseCode.SYSTEM_ERROR,)
    assert "closed" in r.remark or "not online" in r.remark
    assert not any(c.calls for c in broker.server.connections)
    await admin.close()


async def test_reset_offset_of_an_online_group_asks_its_consumers(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for i in range(6):
        assert (await send(peer, "RoTopic", f"m{i}".encode(), queue_id=i % 2)).code == 0
    for q in range(4):
        r = await peer.call(
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "RoCG", "topic": "RoTopic", "queueId": q, "commitOffset": 2},
        )
        assert r.code == 0
    c1 = await _consumer_peer(broker, "ro@1", "RoCG", "RoTopic")
    c2 = await _consumer_peer(broker, "ro@2", "RoCG", "RoTopic")
    ext = {"topic": "RoTopic", "group": "RoCG", "timestamp": 0, "isForce": "true"}
    r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.SUCCESS, r.remark
    table, _ = decode_mq_table(r.body, "offsetTable")
    assert {mq.queue_id: off for mq, off in table.items()} == {0: 0, 1: 0, 2: 0, 3: 0}
    for c in (c1, c2):  # every consumer of the group gets the one-way request
        req = await _next_request(c, R.RESET_CONSUMER_CLIENT_OFFSET)
        assert req.is_oneway and req.ext_fields["topic"] == "RoTopic"
        assert req.ext_fields["group"] == "RoCG"
        assert set(decode_reset_body(req.body).values()) == {0}
    # the consumers commit; the broker's table is theirs to move
    assert broker.offsets.query("RoCG", "RoTopic", 0) == 2
    # not forced (to the end: -1): only a target behind the group's offset is taken
    # (queues 0 and 1 end at 3 > 2: kept; 2 and 3 are empty: 0 < 2)
    r = await peer.call(
        R.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "timestamp": -1, "isForce": "false"}
    )
    table, _ = decode_mq_table(r.body, "offsetTable")
    assert {mq.queue_id: off for mq, off in table.items()} == {0: 2, 1: 2, 2: 0, 3: 0}
    for c in (c1, c2):
        req = await _next_request(c, R.RESET_CONSUMER_CLIENT_OFFSET)
        assert set(decode_reset_body(req.body).values()) == {0, 2}
    # a C++ client asks: the consumers get ResetOffsetBodyForC
    cpp = RemotingCommand(
        code=R.INVOKE_BROKER_TO_RESET_OFFSET,
        opaque=999,
        language=LanguageCode.CPP,
        ext_fields={k: str(v) for k, v in ext.items()},
    )
    fut = asyncio.get_running_loop().create_future()
    peer.pending[999] = fut
    peer.send_raw(encode_command(cpp))
    assert (await asyncio.wait_for(fut, 5)).code == ResponseCode.SUCCESS
    for c in (c1, c2):
        req = await _next_request(c, R.RESET_CONSUMER_CLIENT_OFFSET)
        assert orjson.loads(req.body)["offsetTable"][0]["offset"] == 0
    for p in (peer, c1, c2):
        await p.close()


async def test_subscription_groups_over_the_wire(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    assert (await send(peer, "SgTopic", b"x")).code == 0
    online = await _consumer_peer(broker, "sg@1", "OnlineCG", "SgTopic")  # auto-created
    r = await peer.call(
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "OffsetCG", "topic": "SgTopic", "queueId": 0, "commitOffset": 1},
    )
    # an offset is stored only for a group that exists: the commit auto-creates it, as a
    # pull would (RocketMQ 4.9.8 stores offsets of any name without a group, unbounded)
    assert r.code == 0 and broker.offsets.query("OffsetCG", "SgTopic", 0) == 1
    r = await peer.call(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    body = orjson.loads(r.body)
    assert sorted(body["subscriptionGroupTable"]) == ["OffsetCG", "OnlineCG"]
    cfg = body["subscriptionGroupTable"]["OnlineCG"]
    assert cfg["retryMaxTimes"] == broker.config.max_reconsume_times and cfg["consumeEnable"]
    counter = body["dataVersion"]["counter"]
    r = await peer.call(
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=orjson.dumps({"groupName": "StoppedCG", "consumeEnable": False, "retryMaxTimes": 0}),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await peer.call(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    body = orjson.loads(r.body)
    assert body["dataVersion"]["counter"] == counter + 1
    assert body["subscriptionGroupTable"]["StoppedCG"]["consumeEnable"] is False
    # consumeEnable=false: pulls answer NO_PERMISSION with RocketMQ's remark
    r = await pull(peer, "SgTopic", group="StoppedCG")
    assert (r.code, r.remark) == (
        ResponseCode.NO_PERMISSION,
        "subscription group no permission, StoppedCG",
    )
    assert (await pull(peer, "SgTopic", group="OnlineCG")).code == ResponseCode.SUCCESS
    # retryMaxTimes=0: a send-back without the client's own limit goes to the DLQ at once
    stored = await send(peer, "SgTopic", b"y")
    offset = int(stored.ext_fields["msgId"][-16:], 16)
    r = await peer.call(
        R.CONSUMER_SEND_MSG_BACK,
        {"offset": offset, "group": "StoppedCG", "delayLevel": 0, "originTopic": "SgTopic"},
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert broker.store.max_offset("%DLQ%StoppedCG", 0) == 1
    # deleted: the group's pulls auto-create it again with the defaults
    r = await peer.call(
        R.DELETE_SUBSCRIPTIONGROUP, {"groupName": "StoppedCG", "removeOffset": "true"}
    )
    assert r.code == ResponseCode.SUCCESS
    assert (await pull(peer, "SgTopic", group="StoppedCG")).code == ResponseCode.SUCCESS
    assert broker.subscriptions.get("StoppedCG").consume_enable
    r = await peer.call(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"x y"}')
    assert r.code == ResponseCode.SYSTEM_ERROR and "x y" in r.remark
    for p in (peer, online):
        await p.close()


async def test_groups_and_settings_survive_a_restart(broker_factory) -> None:
    broker = await broker_factory(auto_create_subscription_group=True)
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=orjson.dumps(
            {"groupName": "KeptCG", "retryMaxTimes": 3, "consumeBroadcastEnable": False}
        ),
    )
    assert r.code == ResponseCode.SUCCESS
    r = await peer.call(
        R.UPDATE_BROKER_CONFIG, body=b"autoCreateSubscriptionGroup=false\nmaxPullHoldMs=700\n"
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert broker.config.max_pull_hold_ms == 700
    r = await peer.call(R.GET_BROKER_CONFIG)
    props = dict(line.split("=", 1) for line in r.body.decode().splitlines() if line)
    assert props["autoCreateSubscriptionGroup"] == "false" and props["maxPullHoldMs"] == "700"
    # effective at once: an unknown group's pull is refused now
    r = await pull(peer, "AnyTopic", group="NewCG")
    assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, r.remark
    assert set(SETTABLE) <= set(props)  # every settable name is one getBrokerConfig shows
    r = await peer.call(R.UPDATE_BROKER_CONFIG, body=b"flushIntervalCommitLog=250\n")
    assert r.code == ResponseCode.SUCCESS and broker.config.flush_interval == 0.25
    r = await peer.call(R.GET_BROKER_CONFIG)
    assert b"flushIntervalCommitLog=250\n" in r.body
    r = await peer.call(R.UPDATE_BROKER_CONFIG, body=b"brokerName=other\n")
    assert r.code == ResponseCode.NO_PERMISSION and "brokerName" in r.remark
    await peer.close()
    await broker.stop("restart")
    again = await broker_factory()
    assert again.subscriptions.get("KeptCG").retry_max_times == 3
    assert not again.subscriptions.get("KeptCG").consume_broadcast_enable
    assert again.config.auto_create_subscription_group is False
    assert again.config.max_pull_hold_ms == 700


async def test_broadcast_refused_when_the_group_forbids_it(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    assert (await send(peer, "BcTopic", b"x")).code == 0
    r = await peer.call(
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=orjson.dumps({"groupName": "BcCG", "consumeBroadcastEnable": False}),
    )
    assert r.code == ResponseCode.SUCCESS
    c = await _consumer_peer(broker, "bc@1", "BcCG", "BcTopic", model="BROADCASTING")
    r = await pull(c, "BcTopic", group="BcCG")
    assert r.code == ResponseCode.NO_PERMISSION and "broadcast" in r.remark
    await c.close()
    await peer.close()


async def test_view_broker_stats_counts_puts_and_group_gets(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for _ in range(5):
        assert (await send(peer, "StTopic", b"x")).code == 0
    assert (await pull(peer, "StTopic", group="StCG")).code == ResponseCode.SUCCESS
    r = await peer.call(
        R.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "StTopic"}
    )
    data = orjson.loads(r.body)
    assert data["statsMinute"]["sum"] == 5 and data["statsDay"]["sum"] == 5
    assert data["statsMinute"]["tps"] > 0
    r = await peer.call(
        R.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "StTopic@StCG"}
    )
    assert orjson.loads(r.body)["statsHour"]["sum"] == 5
    r = await peer.call(
        R.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "StTopic@Other"}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "not exist" in r.remark
    await peer.close()


async def test_bundled_consumer_answers_running_info_and_reset(broker) -> None:
    ns = broker.namesrv_address
    producer = Producer("CbPG", namesrv=ns)
    await producer.start()
    for i in range(8):
        await producer.send(Message("CbTopic", f"m{i}".encode()))
    got = Collector()
    consumer = PushConsumer(
        "CbCG",
        ns,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        persist_consumer_offset_interval=0.2,
    )
    consumer.subscribe("CbTopic", "*")
    consumer.register_listener(got)
    await consumer.start()
    try:
        await got.wait_for(8)
        await wait_until(
            lambda: sum(broker.offsets.query("CbCG", "CbTopic", q) or 0 for q in range(4)) == 8, 10
        )
        admin = await RawPeer.connect(broker.address)
        r = await admin.call(
            R.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "CbCG", "clientId": consumer.client_id}
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        mq_table, info = decode_mq_table(r.body, "mqTable")
        assert {(mq.topic, mq.queue_id) for mq in mq_table} >= {("CbTopic", q) for q in range(4)}
        assert sum(v["commitOffset"] for mq, v in mq_table.items() if mq.topic == "CbTopic") == 8
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert info["properties"]["consumerGroup"] == "CbCG"
        assert not any(
            "secret" in k.lower() or "access" in k.lower() for k in info["properties"]
        )  # credentials never leave the client
        assert int(info["properties"]["PROP_CONSUMER_START_TIMESTAMP"]) > 0
        assert {s["topic"] for s in info["subscriptionSet"]} == {"CbTopic", "%RETRY%CbCG"}
        assert set(info["statusTable"]) == {"CbTopic", "%RETRY%CbCG"}
        r = await admin.call(
            R.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "OtherCG", "clientId": consumer.client_id},
        )
        assert r.code == ResponseCode.SYSTEM_ERROR  # not online in OtherCG
        # reset to the beginning: the consumer drops its queues and consumes all 8 again
        r = await admin.call(
            R.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": "CbTopic", "group": "CbCG", "timestamp": 0, "isForce": "true"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        await got.wait_for(16, timeout=15)
        assert sorted(got.bodies[8:]) == sorted(got.bodies[:8])
        await wait_until(
            lambda: sum(broker.offsets.query("CbCG", "CbTopic", q) or 0 for q in range(4)) == 8, 10
        )
        await admin.close()
    finally:
        await consumer.shutdown()
        await producer.shutdown()


async def test_connections_show_the_client_language_and_consume_tps(broker) -> None:
    peer = await _consumer_peer(broker, "lang@1", "LangCG", "LangTopic")  # a PYTHON request
    for _ in range(3):
        assert (await send(peer, "LangTopic", b"x")).code == 0
    assert (await pull(peer, "LangTopic", group="LangCG")).code == ResponseCode.SUCCESS
    r = await peer.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "LangCG"})
    (conn,) = orjson.loads(r.body)["connectionSet"]
    assert conn["language"] == "PYTHON" and conn["clientId"] == "lang@1"
    r = await peer.call(R.GET_CONSUME_STATS, {"consumerGroup": "LangCG", "topic": "LangTopic"})
    _, rest = decode_mq_table(r.body, "offsetTable")
    assert rest["consumeTps"] > 0  # 3 pulled messages since boot, seconds ago
    r = await peer.call(
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "LangCG", "topic": "LangTopic", "queueId": 0, "commitOffset": 3},
    )
    assert r.code == 0
    r = await peer.call(R.GET_BROKER_CONSUME_STATS)
    m = re.search(rb'"LangCG":\[\{"consumeTps":([0-9.]+),', r.body)
    assert m is not None and float(m.group(1)) > 0, r.body
    await peer.close()


async def test_kairosmq_admin_groups_shows_subscription_groups(broker, admin) -> None:
    import json

    peer = await RawPeer.connect(broker.address)
    r = await peer.call(
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=orjson.dumps({"groupName": "AdmCG", "consumeEnable": False, "retryMaxTimes": 4}),
    )
    assert r.code == ResponseCode.SUCCESS
    online = await _consumer_peer(broker, "adm@1", "AdmOnlineCG", "AdmTopic")
    code, out, err = await admin(broker)("groups", json_out=True)
    assert code == 0, err
    groups = {g["group"]: g for g in json.loads(out)}
    assert groups["AdmCG"]["subscriptionGroup"]["consumeEnable"] is False
    assert groups["AdmCG"]["online"] == 0
    assert groups["AdmOnlineCG"]["online"] == 1
    assert groups["AdmOnlineCG"]["subscriptionGroup"]["retryMaxTimes"] == 16
    code, out, err = await admin(broker)("groups")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("AdmCG ")]
    assert line.split()[-3:] == ["off", "4", "1"], out
    await online.close()
    await peer.close()
