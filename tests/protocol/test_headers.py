"""Typed headers from/to extFields, checked against the real clients' captured requests.

Expected field values are read from each capture's index.json entry.
"""

from __future__ import annotations

from typing import Any

import pytest
from kairosmq.protocol.codec import decode_frame
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)

from .captures import entries_with_code, entry, frame_bytes

ALIONS_SEND = ("ali-ons-3.12.0", "flow-09-broker-310-SEND_MESSAGE_V2.hex")
CPP210_SEND = ("cpp-client-2.1.0", "flow-09-broker-310-SEND_MESSAGE_V2.hex")
CPP1X_SEND = ("cpp-client-1.x", "flow-09-broker-10-SEND_MESSAGE.hex")


def _ext(folder: str, file: str) -> dict[str, str]:
    return decode_frame(frame_bytes(folder, file)).ext_fields


def _raw(folder: str, file: str) -> dict[str, Any]:
    return dict(entry(folder, file)["header"]["extFields"])


def _bool(v: Any) -> bool:
    return v is True or v in ("true", "1")


@pytest.mark.parametrize(("folder", "file"), [ALIONS_SEND, CPP210_SEND], ids=["ali-ons", "cpp210"])
def test_send_v2_short_names_from_captures(folder: str, file: str) -> None:
    raw = _raw(folder, file)
    h = SendMessageRequestHeader.from_ext_fields(_ext(folder, file), v2=True)
    assert h.producer_group == raw["a"]
    assert h.topic == raw["b"] == "TopicTest"
    assert h.default_topic == raw["c"] == "TBW102"
    assert h.default_topic_queue_nums == int(raw["d"]) == 4
    assert h.queue_id == int(raw["e"])
    assert h.sys_flag == int(raw["f"])
    assert h.born_timestamp == int(raw["g"])
    assert h.flag == int(raw["h"])
    assert h.properties == raw["i"]
    assert "DELAY\x012" in h.properties
    assert h.reconsume_times == int(raw["j"])
    assert h.unit_mode is _bool(raw["k"]) is False
    if "l" in raw:
        assert h.max_reconsume_times == int(raw["l"]) == 16
        assert h.batch is _bool(raw["m"]) is False
    else:
        assert h.max_reconsume_times is None and h.batch is None
    assert h.broker_name is None


def test_send_v1_long_names_from_cpp_1x_capture() -> None:
    raw = _raw(*CPP1X_SEND)
    assert decode_frame(frame_bytes(*CPP1X_SEND)).code == 10
    h = SendMessageRequestHeader.from_ext_fields(_ext(*CPP1X_SEND))
    assert h.producer_group == raw["producerGroup"] == "PID_CPP_TEST"
    assert h.topic == raw["topic"]
    assert h.default_topic == raw["defaultTopic"]
    assert h.default_topic_queue_nums == raw["defaultTopicQueueNums"]
    assert h.queue_id == raw["queueId"]
    assert h.sys_flag == raw["sysFlag"]
    assert h.born_timestamp == int(raw["bornTimestamp"])
    assert h.flag == raw["flag"]
    assert h.properties == raw["properties"]
    assert h.reconsume_times == int(raw["reconsumeTimes"]) == 0
    assert h.unit_mode is False  # "0"
    assert h.batch is False  # "0"
    assert h.max_reconsume_times is None


def test_send_v2_keys_do_not_parse_as_v1() -> None:
    with pytest.raises(HeaderError, match="producerGroup"):
        SendMessageRequestHeader.from_ext_fields(_ext(*ALIONS_SEND))


@pytest.mark.parametrize(
    ("key", "v2"), [("a", True), ("b", True), ("producerGroup", False), ("topic", False)]
)
def test_missing_required_field_names_it(key: str, v2: bool) -> None:
    ext = dict(_ext(*(ALIONS_SEND if v2 else CPP1X_SEND)))
    del ext[key]
    with pytest.raises(HeaderError, match=repr(key)) as info:
        SendMessageRequestHeader.from_ext_fields(ext, v2=v2)
    assert not info.value.close_connection


def test_missing_required_int_and_empty_int() -> None:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "0"}
    with pytest.raises(HeaderError, match="'queueOffset'"):
        PullMessageRequestHeader.from_ext_fields(ext)
    with pytest.raises(HeaderError, match="'queueOffset'"):
        PullMessageRequestHeader.from_ext_fields({**ext, "queueOffset": ""})


@pytest.mark.parametrize("bad", ["x", "1.5", "", " ", "0x10", "true"])
def test_non_integer_raises_header_error(bad: str) -> None:
    ext = dict(_ext(*ALIONS_SEND))
    ext["e"] = bad
    if bad == "":  # an optional int sent empty counts as absent
        assert SendMessageRequestHeader.from_ext_fields(ext, v2=True).queue_id == -1
        return
    with pytest.raises(HeaderError, match="'e'"):
        SendMessageRequestHeader.from_ext_fields(ext, v2=True)


def test_required_int_non_numeric() -> None:
    with pytest.raises(HeaderError, match="'offset'"):
        ConsumerSendMsgBackRequestHeader.from_ext_fields({"offset": "abc", "group": "G"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("1", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("0", False),
        ("no", False),
    ],
)
def test_boolean_parsing(raw: str, expected: bool) -> None:
    ext = dict(_ext(*ALIONS_SEND))
    ext["k"] = raw
    ext["m"] = raw
    h = SendMessageRequestHeader.from_ext_fields(ext, v2=True)
    assert h.unit_mode is expected
    assert h.batch is expected


def test_to_ext_fields_omits_none_and_writes_strings() -> None:
    h = SendMessageRequestHeader(
        producer_group="PG",
        topic="T",
        queue_id=2,
        sys_flag=0,
        born_timestamp=1795314771937,
        unit_mode=True,
        batch=False,
    )
    v2 = h.to_ext_fields(v2=True)
    assert v2 == {
        "a": "PG",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "0",
        "g": "1795314771937",
        "h": "0",
        "k": "true",
        "m": "false",
    }
    assert all(type(v) is str for v in v2.values())
    v1 = h.to_ext_fields()
    assert v1["producerGroup"] == "PG" and v1["unitMode"] == "true" and v1["batch"] == "false"
    assert "properties" not in v1 and "reconsumeTimes" not in v1 and "brokerName" not in v1
    assert SendMessageRequestHeader.from_ext_fields(v2, v2=True) == h
    assert SendMessageRequestHeader.from_ext_fields(v1) == h


def test_response_headers_to_ext_fields() -> None:
    assert SendMessageResponseHeader("ID", 3, 99).to_ext_fields() == {
        "msgId": "ID",
        "queueId": "3",
        "queueOffset": "99",
    }
    assert PullMessageResponseHeader(0, 10, 0, 12).to_ext_fields() == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "10",
        "minOffset": "0",
        "maxOffset": "12",
    }
    assert CreateTopicRequestHeader("T").to_ext_fields()["order"] == "false"
    u = UnregisterClientRequestHeader("cid", consumer_group="CG").to_ext_fields()
    assert u == {"clientID": "cid", "consumerGroup": "CG"}


def test_unknown_keys_are_ignored() -> None:
    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "1",
        "queueOffset": "5",
        "bname": "broker-a",
        "Signature": "x",
        "AccessKey": "",
        "lo": "true",
    }
    h = PullMessageRequestHeader.from_ext_fields(ext)
    assert (h.consumer_group, h.topic, h.queue_id, h.queue_offset) == ("G", "T", 1, 5)


PULLS = entries_with_code(11)


@pytest.mark.parametrize(("client", "e"), PULLS, ids=[f"{c}/{e['file']}" for c, e in PULLS])
def test_pull_header_from_captures(client: str, e: dict[str, Any]) -> None:
    raw = e["header"]["extFields"]
    h = PullMessageRequestHeader.from_ext_fields(_ext(client, e["file"]))
    assert h.consumer_group == raw["consumerGroup"]
    assert h.topic == raw["topic"]
    assert h.queue_id == int(raw["queueId"])
    assert h.queue_offset == int(raw["queueOffset"])
    assert h.max_msg_nums == int(raw["maxMsgNums"]) == 32
    assert h.sys_flag == int(raw["sysFlag"]) == 6
    assert h.commit_offset == int(raw["commitOffset"])
    assert h.suspend_timeout_millis == int(raw["suspendTimeoutMillis"]) == 15000
    assert h.subscription == raw["subscription"] == "*"
    assert h.sub_version == int(raw["subVersion"])
    assert h.expression_type is None


def test_pull_captures_cover_every_client() -> None:
    assert {c for c, _ in PULLS} == {"ali-ons-3.12.0", "cpp-client-1.x", "cpp-client-2.1.0"}
    assert len(PULLS) == 6


SEND_BACKS = entries_with_code(36)


@pytest.mark.parametrize(
    ("client", "e"), SEND_BACKS, ids=[f"{c}/{e['file']}" for c, e in SEND_BACKS]
)
def test_send_back_header_from_captures(client: str, e: dict[str, Any]) -> None:
    raw = e["header"]["extFields"]
    h = ConsumerSendMsgBackRequestHeader.from_ext_fields(_ext(client, e["file"]))
    assert h.offset == int(raw["offset"])
    assert h.group == raw["group"]
    assert h.delay_level == int(raw["delayLevel"]) == 0
    assert h.origin_msg_id == raw.get("originMsgId")
    assert h.origin_topic == raw.get("originTopic")
    assert h.unit_mode is _bool(raw.get("unitMode", False))
    mrt = raw.get("maxReconsumeTimes")
    assert h.max_reconsume_times == (None if mrt is None else int(mrt))


def test_send_back_captures_cover_every_client() -> None:
    assert len(SEND_BACKS) == 6
    cpp1x = [e for c, e in SEND_BACKS if c == "cpp-client-1.x"]
    # C++ 0.4.4 sends only offset, group and delayLevel
    h = ConsumerSendMsgBackRequestHeader.from_ext_fields(_ext("cpp-client-1.x", cpp1x[-1]["file"]))
    assert (h.offset, h.origin_msg_id, h.max_reconsume_times, h.unit_mode) == (
        1652,
        None,
        None,
        False,
    )
