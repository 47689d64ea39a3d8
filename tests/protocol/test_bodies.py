"""JSON bodies: round trips, the tolerant decoding the reference asks for, tag parsing."""

from __future__ import annotations

import orjson
import pytest
from kairosmq.protocol.bodies import (
    BrokerData,
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueData,
    QueueData,
    SubscriptionData,
    TopicRouteData,
    decode_consumer_list,
    decode_lock_response,
    encode_consumer_list,
    encode_lock_response,
    parse_tag_expression,
)
from kairosmq.protocol.message import java_string_hash


def test_route_round_trip_uses_quoted_keys() -> None:
    route = TopicRouteData(
        [QueueData("broker-a", 4, 4, 6, 0)], [BrokerData("broker-a", {0: "10.0.0.5:10911"})]
    )
    raw = route.to_json()
    assert b'"brokerAddrs":{"0":"10.0.0.5:10911"}' in raw
    assert TopicRouteData.from_json(raw) == route
    assert TopicRouteData.from_json(raw).broker_datas[0].master_addr == "10.0.0.5:10911"


def test_route_accepts_unquoted_numeric_keys_of_old_name_servers() -> None:
    raw = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"1.2.3.4:10911",1:"1.2.3.5:10911"},'
        b'"brokerName":"b","cluster":"C"}],"queueDatas":[{"brokerName":"b","perm":6,'
        b'"readQueueNums":8,"writeQueueNums":8,"topicSysFlag":0}]}'
    )
    route = TopicRouteData.from_json(raw)
    assert route.broker_datas[0].broker_addrs == {0: "1.2.3.4:10911", 1: "1.2.3.5:10911"}
    assert route.queue_datas[0].read_queue_nums == 8


@pytest.mark.parametrize("raw", [b"[]", b"not json", b'{"brokerDatas":[{"x":1}]}'])
def test_route_rejects_malformed(raw: bytes) -> None:
    with pytest.raises(ValueError):
        TopicRouteData.from_json(raw)


def test_heartbeat_round_trip_java_style() -> None:
    sub = SubscriptionData.build("T", "TagA || TagB", 1700000000000)
    hb = HeartbeatData(
        "10.0.0.9@1",
        ["PG", "CLIENT_INNER_PRODUCER"],
        [ConsumerData("CG", [sub, SubscriptionData.build("%RETRY%CG", "*", 1)])],
    )
    d = orjson.loads(hb.to_json())
    assert d["producerDataSet"] == [{"groupName": "PG"}, {"groupName": "CLIENT_INNER_PRODUCER"}]
    s = d["consumerDataSet"][0]["subscriptionDataSet"][0]
    assert s["tagsSet"] == ["TagA", "TagB"]
    assert s["codeSet"] == [java_string_hash("TagA"), java_string_hash("TagB")]
    assert d["consumerDataSet"][0]["consumeType"] == "CONSUME_PASSIVELY"
    assert HeartbeatData.from_json(hb.to_json()) == hb


def test_heartbeat_accepts_cpp_ordinals_and_string_sub_version() -> None:
    raw = orjson.dumps(
        {
            "clientID": "c@1",
            "consumerDataSet": [
                {
                    "groupName": "CG",
                    "consumeType": 1,
                    "messageModel": 0,
                    "consumeFromWhere": 4,
                    "subscriptionDataSet": [
                        {"topic": "T", "subString": "A||B", "subVersion": "42"}
                    ],
                }
            ],
        }
    )
    hb = HeartbeatData.from_json(raw)
    c = hb.consumers[0]
    assert (c.consume_type, c.message_model, c.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "BROADCASTING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    assert c.subscriptions[0].sub_version == 42
    assert c.subscriptions[0].tags_set == ["A", "B"]
    assert hb.producer_groups == []


def test_heartbeat_rejects_unknown_enum() -> None:
    raw = orjson.dumps(
        {"clientID": "c", "consumerDataSet": [{"groupName": "G", "messageModel": "SOMETIMES"}]}
    )
    with pytest.raises(ValueError):
        HeartbeatData.from_json(raw)


@pytest.mark.parametrize(
    ("expr", "tags"),
    [("*", []), ("", []), (None, []), (" TagA ", ["TagA"]), ("A || B||A ||  ", ["A", "B"])],
)
def test_parse_tag_expression(expr: str | None, tags: list[str]) -> None:
    got_tags, codes = parse_tag_expression(expr)
    assert got_tags == tags
    assert codes == [java_string_hash(t) for t in tags]


def test_consumer_list_and_lock_bodies() -> None:
    assert decode_consumer_list(encode_consumer_list(["a@1", "b@2"])) == ["a@1", "b@2"]
    mqs = [MessageQueueData("T", "broker-a", 0), MessageQueueData("T", "broker-a", 3)]
    req = LockBatchRequest("CG", "a@1", mqs)
    assert LockBatchRequest.from_json(req.to_json()) == req
    assert orjson.loads(req.to_json())["mqSet"][1] == {
        "brokerName": "broker-a",
        "queueId": 3,
        "topic": "T",
    }
    assert decode_lock_response(encode_lock_response(mqs[:1])) == mqs[:1]
    assert decode_lock_response(b"{}") == []


def test_properties_text_parses_like_java() -> None:
    """Moved here with the codec (from tests/ops/test_subscription_groups.py)."""
    from kairosmq.protocol.bodies import string_to_properties

    assert string_to_properties("# c\n a = 1\n\nb:2\n!x\nc=\n") == {"a": "1", "b": "2", "c": ""}


def test_properties_text_round_trips() -> None:
    from kairosmq.protocol.bodies import properties_to_string, string_to_properties

    props = {"b": "2", "a": "x=y", "c": ""}
    text = properties_to_string(props)
    assert text == "a=x=y\nb=2\nc=\n"
    assert string_to_properties(text) == props
