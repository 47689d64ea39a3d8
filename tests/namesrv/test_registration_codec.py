"""protocol/registration.py against RocketMQ 4.9.8: round trips of every form, and the
REGISTER_BROKER frames a real Apache RocketMQ 4.9.8 broker sent (captured in
``fixtures/``: its default JSON body and its ``compressedRegister=true`` body)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import orjson
import pytest
from kairosmq.protocol.bodies import BrokerData
from kairosmq.protocol.codec import FrameReader
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.registration import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicConfigData,
    TopicConfigSerializeWrapper,
    body_crc32,
    build_query_data_version,
    build_register_broker,
    build_unregister_broker,
    decode_kv_table,
    decode_query_data_version,
    decode_register_response,
    decode_topic_list,
    encode_topic_list,
)

FIXTURES = Path(__file__).parent / "fixtures"
APACHE_TOPICS = [
    "BenchmarkTest",
    "DefaultCluster",
    "DefaultCluster_REPLY_TOPIC",
    "OFFSET_MOVED_EVENT",
    "SCHEDULE_TOPIC_XXXX",
    "SELF_TEST_TOPIC",
    "TBW102",
    "broker-a",
]
CONFIGS = [
    TopicConfigData("TopicA", 4, 4),
    TopicConfigData("TopicB", 8, 2, 4, "MULTI_TAG"),
    TopicConfigData("%RETRY%G1", 1, 1, 6, topic_sys_flag=0),
]


def _frame(name: str) -> RemotingCommand:
    reader = FrameReader()
    reader.feed((FIXTURES / name).read_bytes())
    (cmd,) = list(reader)
    return cmd


@pytest.mark.parametrize("compressed", [False, True])
def test_real_apache_broker_register_frame_decodes(compressed: bool) -> None:
    kind = "compressed" if compressed else "plain"
    cmd = _frame(f"register-broker-4.9.8-{kind}.bin")
    assert cmd.code == RequestCode.REGISTER_BROKER
    h = RegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
    assert (h.broker_name, h.cluster_name, h.broker_id) == ("broker-a", "DefaultCluster", 0)
    assert h.broker_addr == "127.0.0.1:29921" and h.compressed is compressed
    assert h.body_crc32 == body_crc32(cmd.body) != 0
    body = RegisterBrokerBody.decode(cmd.body, compressed)
    table = body.topic_config_wrapper.topic_config_table
    assert sorted(table) == APACHE_TOPICS
    assert table["SCHEDULE_TOPIC_XXXX"] == TopicConfigData("SCHEDULE_TOPIC_XXXX", 18, 18, 6)
    assert table["TBW102"].perm == 7 and table["TBW102"].read_queue_nums == 8
    assert body.topic_config_wrapper.data_version.counter == 0
    assert body.topic_config_wrapper.data_version.timestamp > 1_700_000_000_000
    assert body.filter_server_list == []
    # byte-level: re-encoding what Java sent gives Java's exact bytes (fastjson field order,
    # Deflater BEST_COMPRESSION framing)
    assert body.encode(compressed) == cmd.body


def test_round_trip_both_forms_and_the_compressed_layout() -> None:
    version = DataVersion(1_795_000_000_123, 7)
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({c.topic_name: c for c in CONFIGS}, version), ["127.0.0.1:1234"]
    )
    assert RegisterBrokerBody.decode(body.encode(False), False) == body
    packed = body.encode(True)
    back = RegisterBrokerBody.decode(packed, True)
    assert back.filter_server_list == ["127.0.0.1:1234"]
    assert back.topic_config_wrapper.data_version == version
    assert back.topic_config_wrapper.topic_config_table == {c.topic_name: c for c in CONFIGS}
    raw = zlib.decompress(packed)
    (n,) = struct.unpack(">i", raw[:4])
    assert orjson.loads(raw[4 : 4 + n]) == {"counter": 7, "timestamp": 1_795_000_000_123}
    assert struct.unpack(">i", raw[4 + n : 8 + n]) == (3,)
    assert b"TopicB 8 2 4 MULTI_TAG" in raw
    # the JSON form: RocketMQ's field names
    doc = orjson.loads(body.encode(False))
    assert doc["topicConfigSerializeWrapper"]["topicConfigTable"]["TopicB"] == {
        "order": False,
        "perm": 4,
        "readQueueNums": 8,
        "topicFilterType": "MULTI_TAG",
        "topicName": "TopicB",
        "topicSysFlag": 0,
        "writeQueueNums": 2,
    }


def test_compressed_form_drops_sys_flag_and_order_like_java() -> None:
    cfg = TopicConfigData("T", 2, 2, 6, "SINGLE_TAG", topic_sys_flag=1, order=True)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": cfg}))
    back = RegisterBrokerBody.decode(body.encode(True), True)
    assert back.topic_config_wrapper.topic_config_table["T"] == TopicConfigData("T", 2, 2, 6)


def test_build_register_broker_sets_header_and_crc() -> None:
    for compressed in (False, True):
        cmd = build_register_broker(
            cluster_name="C1",
            broker_name="b1",
            broker_addr="10.0.0.1:10911",
            ha_server_addr="10.0.0.1:10912",
            topic_configs=CONFIGS,
            data_version=DataVersion(5, 1),
            compressed=compressed,
        )
        assert cmd.code == 103 and not cmd.is_oneway
        assert cmd.ext_fields == {
            "brokerName": "b1",
            "brokerAddr": "10.0.0.1:10911",
            "clusterName": "C1",
            "haServerAddr": "10.0.0.1:10912",
            "brokerId": "0",
            "compressed": "true" if compressed else "false",
            "bodyCrc32": str(zlib.crc32(cmd.body) & 0x7FFFFFFF),
        }
        wrapper = RegisterBrokerBody.decode(cmd.body, compressed).topic_config_wrapper
        assert sorted(wrapper.topic_config_table) == sorted(c.topic_name for c in CONFIGS)
    un = build_unregister_broker(
        cluster_name="C1", broker_name="b1", broker_addr="10.0.0.1:10911", broker_id=1
    )
    assert un.code == 104 and un.ext_fields == {
        "brokerName": "b1",
        "clusterName": "C1",
        "brokerAddr": "10.0.0.1:10911",
        "brokerId": "1",
    }


def test_register_response_and_query_data_version_decoding() -> None:
    req = request(RequestCode.REGISTER_BROKER)
    ok = req.response(
        ext_fields={"masterAddr": "m:1", "haServerAddr": "m:2"}, body=b'{"table":{"TopicA":"b1:4"}}'
    )
    result = decode_register_response(ok)
    assert (result.master_addr, result.ha_server_addr) == ("m:1", "m:2")
    assert result.kv_table == {"TopicA": "b1:4"}
    assert decode_register_response(req.response()).kv_table == {}
    with pytest.raises(ValueError, match="crc32 not match"):
        decode_register_response(req.error(ResponseCode.SYSTEM_ERROR, "crc32 not match"))
    mine = DataVersion(10, 2)
    q = build_query_data_version(
        cluster_name="C", broker_name="b", broker_addr="h:1", data_version=mine
    )
    assert q.code == 322 and DataVersion.from_json(q.body) == mine
    assert not decode_query_data_version(
        q.response(ext_fields={"changed": "false"}, body=mine.to_json()), mine
    )
    assert decode_query_data_version(
        q.response(ext_fields={"changed": "false"}, body=DataVersion(10, 3).to_json()), mine
    )
    assert decode_query_data_version(q.response(ext_fields={"changed": "true"}), mine)
    assert decode_query_data_version(q.error(3, "not supported"), mine)


def test_cluster_info_and_topic_list_bodies() -> None:
    info = ClusterInfo({"b1": BrokerData("b1", {0: "h:1", 1: "h:2"}, "C")}, {"C": ["b1"]})
    assert ClusterInfo.from_json(info.to_json()) == info
    # what Apache's name server writes (fastjson, unquoted Long keys)
    java = (
        b'{"brokerAddrTable":{"b1":{"brokerAddrs":{0:"h:1"},"brokerName":"b1",'
        b'"cluster":"C"}},"clusterAddrTable":{"C":["b1"]}}'
    )
    assert ClusterInfo.from_json(java).broker_addr_table["b1"].broker_addrs == {0: "h:1"}
    assert decode_topic_list(encode_topic_list(["b", "a"])) == ["a", "b"]
    assert orjson.loads(encode_topic_list(["x"], "h:1")) == {
        "topicList": ["x"],
        "brokerAddr": "h:1",
    }
    assert decode_kv_table(b"") == {}


@pytest.mark.parametrize(
    "raw, match",
    [
        (b"not zlib at all", "does not inflate"),
        (zlib.compress(b"\x00\x00"), "dataVersion length needs 4 bytes"),
        (zlib.compress(struct.pack(">i", 1000) + b"{}"), "dataVersion needs 1000 bytes"),
        (
            zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", -5)),
            "negative topic count",
        ),
        (
            zlib.compress(
                struct.pack(">i", 2)
                + b"{}"
                + struct.pack(">i", 1)
                + struct.pack(">i", 5)
                + b"T 1 1"
            ),
            "bad compressed topic config",
        ),
        (
            zlib.compress(
                struct.pack(">i", 2)
                + b"{}"
                + struct.pack(">i", 1)
                + struct.pack(">i", 16)
                + b"T x 1 6 SINGLE_T"
            ),
            "bad compressed topic",
        ),
        (zlib.compress(struct.pack(">i", 2) + b"[]"), "not a JSON object"),
        (zlib.compress(b"\x00" * (65 * 1024 * 1024)), "inflates beyond"),
    ],
)
def test_hostile_compressed_bodies_raise_value_error(raw: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RegisterBrokerBody.decode(raw, True)


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"[]",
        b'{"filterServerList":{}}',
        b'{"topicConfigSerializeWrapper":[]}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicFilterType":"NO"}}}}',
        b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":[1]}}}',
    ],
)
def test_hostile_json_bodies_raise_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        RegisterBrokerBody.decode(raw, False)


def test_missing_header_field_is_a_header_error() -> None:
    ext = {"brokerName": "b", "brokerAddr": "h:1", "clusterName": "C", "brokerId": "0"}
    with pytest.raises(HeaderError, match="haServerAddr"):
        RegisterBrokerRequestHeader.from_ext_fields(ext)
    with pytest.raises(HeaderError, match="brokerId"):
        RegisterBrokerRequestHeader.from_ext_fields(
            {**ext, "haServerAddr": "h:2", "brokerId": "zero"}
        )
