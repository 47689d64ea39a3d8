"""Raw-protocol tests of the RocketMQ admin codes mqadmin uses (server/handlers/admin/broker.py):
28, 26, 202, 203, 204, 208, 300 on the broker port and 319 on the name-server port.

They run everywhere (no Java): a RawPeer sends what ``MQClientAPIImpl`` sends and the test
decodes the RocketMQ bodies (fastjson object-key maps via ``bodies.decode_mq_table``).
"""

from __future__ import annotations

import time

import orjson
from kairosmq.protocol import native
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    MessageQueueData,
    SubscriptionData,
    decode_mq_table,
    encode_mq_table,
)
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode

from tests.helpers import send
from tests.wire import RawPeer


def _props(body: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in body.decode().splitlines() if line)


async def _heartbeat(peer: RawPeer, client_id: str, group: str, topic: str) -> None:
    hb = HeartbeatData(
        client_id,
        ["RawPG"],
        [
            ConsumerData(
                group,
                [SubscriptionData.build(topic, "TagA || TagB", 7)],
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
        ],
    )
    r = await peer.call(R.HEART_BEAT, body=hb.to_json())
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_mq_table_round_trip_and_fastjson_shape() -> None:
    mq = MessageQueueData("T", "broker-a", 1)
    raw = encode_mq_table("offsetTable", [(mq, {"brokerOffset": 5})], {"consumeTps": 0.0})
    assert raw == (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":1,'
        b'"topic":"T"}:{"brokerOffset":5}}}'
    )
    assert decode_mq_table(raw, "offsetTable") == ({mq: {"brokerOffset": 5}}, {"consumeTps": 0.0})
    assert decode_mq_table(encode_mq_table("offsetTable", []), "offsetTable") == ({}, {})


async def test_runtime_info_counts_puts_gets_and_schedule(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for i in range(3):
        assert (await send(peer, "RtTopic", f"m{i}".encode())).code == 0
    assert (await send(peer, "RtTopic", b"later", props={"DELAY": "2"})).code == 0
    r = await peer.call(R.GET_BROKER_RUNTIME_INFO)
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = orjson.loads(r.body)["table"]
    assert all(isinstance(v, str) for v in table.values())
    assert table["msgPutTotalTodayNow"] == "4" and table["msgGetTotalTodayNow"] == "0"
    assert table["commitLogMaxOffset"] == str(broker.store.commitlog.max_offset)
    assert table["scheduleMessageOffset_2"].endswith(",1")  # one message at level 2
    assert table["brokerVersionDesc"] == "V4_9_8" and table["brokerVersion"] == "409"
    puts = [float(x) for x in table["putTps"].split()]
    assert len(puts) == 3 and puts[0] > 0
    assert 0 <= float(table["commitLogDiskRatio"]) <= 1
    assert abs(int(table["bootTimestamp"]) - (time.time() * 1000 - broker.uptime_ms)) < 2000
    await peer.close()


async def test_broker_config_is_properties_text(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(R.GET_BROKER_CONFIG)
    assert r.code == ResponseCode.SUCCESS, r.remark
    props = _props(r.body)
    assert props["brokerName"] == broker.config.broker_name
    assert props["listenPort"] == str(broker.port)
    assert props["messageDelayLevel"] == broker.config.delay_levels
    assert props["brokerRole"] == "ASYNC_MASTER" and props["autoCreateTopicEnable"] == "true"
    assert props["maxPullHoldMs"] == str(broker.config.max_pull_hold_ms)  # kairosmq's own
    await peer.close()


async def test_topic_stats(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for q in (0, 0, 1):
        assert (await send(peer, "StatTopic", b"x", queue_id=q)).code == 0
    r = await peer.call(R.GET_TOPIC_STATS_INFO, {"topic": "StatTopic"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    table, _ = decode_mq_table(r.body, "offsetTable")
    by_q = {mq.queue_id: v for mq, v in table.items()}
    assert sorted(by_q) == [0, 1, 2, 3]
    assert (by_q[0]["minOffset"], by_q[0]["maxOffset"]) == (0, 2)
    assert by_q[1]["maxOffset"] == 1 and by_q[2]["maxOffset"] == 0
    assert by_q[0]["lastUpdateTimestamp"] == broker.store.store_time_at("StatTopic", 0, 1)
    assert by_q[2]["lastUpdateTimestamp"] == 0
    r = await peer.call(R.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in r.remark
    r = await peer.call(R.GET_TOPIC_STATS_INFO, {})
    assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in r.remark
    assert (await peer.call(R.GET_TOPIC_STATS_INFO, {"topic": "StatTopic"})).code == 0
    await peer.close()


async def test_consume_stats_connections_and_who(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for q in (0, 0, 0, 1):
        assert (await send(peer, "CsTopic", b"x", queue_id=q)).code == 0
    await _heartbeat(peer, "raw@1", "RawCG", "CsTopic")
    r = await peer.call(
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "RawCG", "topic": "CsTopic", "queueId": 0, "commitOffset": 2},
    )
    assert r.code == 0
    r = await peer.call(R.GET_CONSUME_STATS, {"consumerGroup": "RawCG"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    table, rest = decode_mq_table(r.body, "offsetTable")
    assert rest == {"consumeTps": 0.0}
    rows = {(mq.topic, mq.queue_id): v for mq, v in table.items()}
    assert rows[("CsTopic", 0)]["brokerOffset"] == 3
    assert rows[("CsTopic", 0)]["consumerOffset"] == 2
    assert rows[("CsTopic", 0)]["lastTimestamp"] == broker.store.store_time_at("CsTopic", 0, 1)
    assert rows[("CsTopic", 1)] == {"brokerOffset": 1, "consumerOffset": 0, "lastTimestamp": 0}
    # filtered to one topic; a group nobody knows has an empty table (mqadmin says so)
    r = await peer.call(R.GET_CONSUME_STATS, {"consumerGroup": "RawCG", "topic": "CsTopic"})
    assert {mq.topic for mq in decode_mq_table(r.body, "offsetTable")[0]} == {"CsTopic"}
    r = await peer.call(R.GET_CONSUME_STATS, {"consumerGroup": "Nobody"})
    assert r.code == 0 and decode_mq_table(r.body, "offsetTable")[0] == {}
    r = await peer.call(R.GET_CONSUME_STATS, {})
    assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in r.remark

    r = await peer.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "RawCG"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    cc = orjson.loads(r.body)
    assert [c["clientId"] for c in cc["connectionSet"]] == ["raw@1"]
    assert cc["connectionSet"][0]["clientAddr"].startswith("127.0.0.1:")
    assert cc["messageModel"] == "CLUSTERING" and cc["consumeType"] == "CONSUME_PASSIVELY"
    assert cc["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    sub = cc["subscriptionTable"]["CsTopic"]
    assert sub["subString"] == "TagA || TagB" and sub["tagsSet"] == ["TagA", "TagB"]
    r = await peer.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "Offline"})
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE and "Offline" in r.remark

    r = await peer.call(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "RawPG"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert [c["clientId"] for c in orjson.loads(r.body)["connectionSet"]] == ["raw@1"]
    r = await peer.call(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "NoPG"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "NoPG" in r.remark

    r = await peer.call(
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "OffsetOnlyCG", "topic": "CsTopic", "queueId": 1, "commitOffset": 1},
    )
    r = await peer.call(R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "CsTopic"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert orjson.loads(r.body) == {"groupList": ["OffsetOnlyCG", "RawCG"]}
    r = await peer.call(R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "%RETRY%RawCG"})
    assert "RawCG" in orjson.loads(r.body)["groupList"]
    await peer.close()


async def test_namesrv_config_on_the_name_server_port(broker) -> None:
    peer = await RawPeer.connect(broker.namesrv_address)
    r = await peer.call(R.GET_NAMESRV_CONFIG)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert _props(r.body)["listenPort"] == str(broker.namesrv_port)
    # broker-only codes are not served by the name server port
    r = await peer.call(R.GET_BROKER_RUNTIME_INFO)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    await peer.close()


async def test_broker_consume_stats_all_groups(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for q in (0, 1, 1):
        assert (await send(peer, "BcsTopic", b"x", queue_id=q)).code == 0
    for group, off in (("BcsA", 1), ("BcsB", 0)):
        r = await peer.call(
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": "BcsTopic", "queueId": 1, "commitOffset": off},
        )
        assert r.code == 0
    r = await peer.call(R.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    text = r.body.decode()
    assert text.startswith(f'{{"brokerAddr":"{broker.address}","consumeStatsList":[')
    assert text.endswith(',"totalDiff":5}')  # A: q0 1-0 + q1 2-1; B: q0 1-0 + q1 2-0
    # each group's ConsumeStats decodes as GET_CONSUME_STATS's does
    a_part = text[text.index('{"BcsA":[') + 9 : text.index('{"BcsB":[') - 3]  # drop ]},
    table, _ = decode_mq_table(a_part, "offsetTable")
    assert {mq.queue_id: v["consumerOffset"] for mq, v in table.items()} == {0: 0, 1: 1, 2: 0, 3: 0}
    r = await peer.call(R.GET_BROKER_CONSUME_STATS, {"isOrder": "true"})
    assert r.body.decode().endswith(',"totalDiff":0}')  # no order topics
    await peer.close()


async def test_query_consume_queue(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for i in range(3):
        assert (await send(peer, "CqTopic", f"m{i}".encode(), queue_id=2)).code == 0
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE, {"topic": "CqTopic", "queueId": 2, "index": 1, "count": 5}
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    body = orjson.loads(r.body)
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
    cq = broker.store.find_queue("CqTopic", 2)
    assert [(u["physicOffset"], u["physicSize"], u["tagsCode"]) for u in body["queueData"]] == [
        cq.get(1),
        cq.get(2),
    ]
    assert "subscriptionData" not in body
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE,
        {"topic": "CqTopic", "queueId": 2, "index": 0, "count": 1, "consumerGroup": "NotOnline"},
    )
    body = orjson.loads(r.body)
    assert body["filterData"] == "NotOnline@CqTopic is not online!"
    assert len(body["queueData"]) == 1
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE, {"topic": "CqTopic", "queueId": 2, "index": 9, "count": 1}
    )
    assert r.code == ResponseCode.SUCCESS and r.remark == "Index 9 of 2@CqTopic is not exist!"
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE, {"topic": "CqTopic", "queueId": 1, "index": 0, "count": 1}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "1@CqTopic" in r.remark
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE, {"topic": "CqTopic", "queueId": 99, "index": 0, "count": 1}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
    r = await peer.call(
        R.QUERY_CONSUME_QUEUE, {"topic": "CqTopic", "queueId": 2, "index": -1, "count": 1}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "index" in r.remark
    await peer.close()


async def test_delete_topic_in_namesrv_after_the_broker(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    ns = await RawPeer.connect(broker.namesrv_address)
    assert (await send(peer, "DelTopic", b"x")).code == 0
    r = await ns.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "DelTopic"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "DELETE_TOPIC_IN_BROKER" in r.remark
    assert (await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "DelTopic"})).code == 0
    assert (await peer.call(R.DELETE_TOPIC_IN_BROKER, {"topic": "DelTopic"})).code == 0
    r = await ns.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "DelTopic"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "DelTopic"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await ns.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "bad topic!"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    await peer.close()
    await ns.close()


async def test_reset_offset_refusals(broker) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET: the refusals, and the answer that makes mqadmin reset
    an offline group itself (CONSUMER_NOT_ONLINE); no offset moves here."""
    peer = await RawPeer.connect(broker.address)
    assert (await send(peer, "RsTopic", b"x")).code == 0
    ext = {"topic": "RsTopic", "group": "RsCG", "timestamp": 0, "isForce": "true"}
    r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.SYSTEM_ERROR and "RsCG" in r.remark  # no offsets at all
    for q in range(4):
        r = await peer.call(
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "RsCG", "topic": "RsTopic", "queueId": q, "commitOffset": 1},
        )
        assert r.code == 0
    r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE and "RsCG" in r.remark
    # an online group: tests/ops/test_mqadmin_callbacks.py
    r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "topic": "NoTopic"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "no topic" in r.remark
    r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "RsTopic", "group": "RsCG"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "timestamp" in r.remark
    await peer.close()


async def test_kv_config_put_get_list_delete_and_restart(broker_factory) -> None:
    broker = await broker_factory()
    ns = await RawPeer.connect(broker.namesrv_address)
    key = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}
    r = await ns.call(R.GET_KV_CONFIG, key)
    assert r.code == ResponseCode.QUERY_NOT_FOUND and "Orders" in r.remark
    assert (await ns.call(R.PUT_KV_CONFIG, {**key, "value": "broker-a:8"})).code == 0
    assert (await ns.call(R.PUT_KV_CONFIG, {**key, "key": "Other", "value": "x"})).code == 0
    r = await ns.call(R.GET_KV_CONFIG, key)
    assert r.code == 0 and r.ext_fields["value"] == "broker-a:8"
    r = await ns.call(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
    assert orjson.loads(r.body) == {"table": {"Orders": "broker-a:8", "Other": "x"}}
    assert (await ns.call(R.DELETE_KV_CONFIG, {**key, "key": "Other"})).code == 0
    assert (await ns.call(R.DELETE_KV_CONFIG, {**key, "key": "Other"})).code == 0  # idempotent
    # refused, nothing stored
    r = await ns.call(R.PUT_KV_CONFIG, key)
    assert r.code == ResponseCode.SYSTEM_ERROR and "value" in r.remark
    r = await ns.call(R.PUT_KV_CONFIG, {**key, "key": "k" * 300, "value": "v"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "key" in r.remark
    # no value limit, as RocketMQ's KVConfigManager (the table's bytes are bounded)
    r = await ns.call(R.PUT_KV_CONFIG, {**key, "key": "Big", "value": "v" * 20_000})
    assert r.code == 0, r.remark
    assert (await ns.call(R.DELETE_KV_CONFIG, {**key, "key": "Big"})).code == 0
    r = await ns.call(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "Empty"})
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    await ns.close()
    data_dir = broker.config.data_dir
    await broker.stop("restart")
    again = await broker_factory(data_dir=data_dir)
    ns = await RawPeer.connect(again.namesrv_address)
    r = await ns.call(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
    assert orjson.loads(r.body) == {"table": {"Orders": "broker-a:8"}}
    await ns.close()


async def test_kairosmq_admin_status_shows_the_runtime_stats(broker, admin) -> None:
    import json

    peer = await RawPeer.connect(broker.address)
    assert (await send(peer, "StTopic", b"x")).code == 0
    assert (await send(peer, "StTopic", b"later", props={"DELAY": "1"})).code == 0
    code, out, err = await admin(broker)("status", json_out=True)
    assert code == 0, err
    st = json.loads(out)
    assert st["msgPutTotalTodayNow"] == "2" and st["brokerVersionDesc"] == "V4_9_8"
    assert st["scheduleMessageOffset_1"].endswith(",1")
    assert len(st["putTps"].split()) == 3
    assert st["core"] == native.describe()  # which core runs (protocol/native.py)
    code, out, err = await admin(broker)("status")
    assert code == 0 and "msgPutTotalTodayNow: 2" in out, err
    assert f"core: {native.describe()}" in out
    await peer.close()
