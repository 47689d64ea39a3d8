"""Unit tests of the naming rules (protocol/naming.py) and the ingress checks
(server/remoting/ingress.py), against a real TopicConfigManager and BrokerConfig."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from kairosmq.protocol import naming
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueData,
    SubscriptionData,
)
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.config import BrokerConfig
from kairosmq.server.remoting import ingress
from kairosmq.server.remoting.ingress import Rejected
from kairosmq.server.tables.topics import TopicConfigManager

# ---------------------------------------------------------------- naming


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("TopicTest", None),
        ("a|b-c_d%09", None),
        ("x" * 127, None),
        ("", "blank"),
        ("x" * 128, "128 characters"),
        ("abc\n", "outside"),
        ("a/b", "outside"),
        ("..", "outside"),
        ("a.b", "outside"),
        ("x\x00y", "outside"),
        ("caf\u00e9", "outside"),
        (5, "must be a string"),
    ],
)
def test_validate_topic(name: object, fragment: str | None) -> None:
    reason = naming.validate_topic(name)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("CID_1", None),
        ("g" * 248, None),  # %RETRY% + 248 = 255 bytes: one file name
        ("g" * 249, "limit is 248"),
        ("g" * 256, "the limit is 255"),
        ("/../x", "outside"),
        ("x\x00y", "outside"),
        ("G\n", "outside"),
        ("", "blank"),
    ],
)
def test_validate_group(name: str, fragment: str | None) -> None:
    reason = naming.validate_group(name)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason


def test_valid_names_are_single_safe_file_name_components() -> None:
    for bad in ("/", ".", "\x00", " ", "\\"):
        assert naming.validate_topic(f"a{bad}b") is not None
        assert naming.validate_group(f"a{bad}b") is not None
    assert len(naming.retry_topic("g" * naming.MAX_GROUP_LENGTH_WITH_RETRY)) == 255


def test_derived_topic_names() -> None:
    assert naming.retry_topic("G") == "%RETRY%G" and naming.dlq_topic("G") == "%DLQ%G"
    assert naming.is_retry_topic("%RETRY%G") and not naming.is_retry_topic("%DLQ%G")
    assert naming.is_dlq_topic("%DLQ%G") and not naming.is_dlq_topic("T")
    assert naming.group_of_retry_topic("%RETRY%G") == "G"
    assert naming.group_of_retry_topic("T") is None
    assert naming.group_of_dlq_topic("%DLQ%G") == "G"
    for t in (naming.SCHEDULE_TOPIC, naming.AUTO_CREATE_TOPIC_KEY, "RMQ_SYS_TRACE"):
        assert naming.is_system_topic(t)
    assert not naming.is_system_topic("%RETRY%G")
    # a retry topic of a long valid group is a valid queue topic, not a valid send topic
    long_retry = naming.retry_topic("g" * 200)
    assert naming.validate_topic(long_retry) is not None
    assert naming.validate_queue_topic(long_retry) is None
    assert naming.validate_queue_topic("%RETRY%/../x") is not None


def test_registered_names_are_wider_than_topic_names() -> None:
    """A RocketMQ broker registers a topic named after its broker name (a host name by
    default): the name server keeps it, spaces and long names are refused."""
    assert naming.validate_topic("host-1.example") is not None
    assert naming.validate_registered_name("host-1.example", "topicName") is None
    assert "brokerName" in (naming.validate_registered_name("has space", "brokerName") or "")
    assert naming.validate_registered_name("c" * 256, "clusterName") is not None
    assert naming.validate_registered_name("c" * 255, "clusterName") is None


def test_server_and_client_share_the_rules() -> None:
    from kairosmq.client.common import check_topic
    from kairosmq.client.consumer import push_consumer
    from kairosmq.client.errors import InvalidName

    assert ingress.validate_topic is naming.validate_topic  # what the broker checks
    assert push_consumer.retry_topic is naming.retry_topic  # what the consumer subscribes
    with pytest.raises(InvalidName):
        check_topic("abc\n")


# ---------------------------------------------------------------- ingress


@pytest.fixture
def broker(tmp_path: Path) -> SimpleNamespace:
    """What the checks read: the topic table and the config (both real)."""
    topics = TopicConfigManager(tmp_path, default_queue_nums=4, delay_levels=18)
    topics.create("T", 4)
    return SimpleNamespace(topics=topics, config=BrokerConfig(data_dir=tmp_path))


def _send_header(**fields: object) -> SendMessageRequestHeader:
    ext = {"a": "PG", "b": "T", "e": "0", "f": "0"}
    ext.update({k: str(v) for k, v in fields.items()})
    return SendMessageRequestHeader.from_ext_fields(ext, v2=True)


def _rejected(fn, *args: object) -> Rejected:  # noqa: ANN001
    with pytest.raises(Rejected) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize(
    ("flag", "kept"),
    [
        (0x0, 0x0),
        (0x1, 0x1),
        (0x2, 0x2),
        (0x3, 0x3),
        (0x8, 0x8),
        (0x10, 0x0),
        (0x20, 0x0),
        (0x30 | 0x1, 0x1),
        (0x40, 0x0),
        (0x301, 0x301),
        (0x300, 0x0),
        (-1 & ~0xC, 0x703),
        (0x7FFFFFFF & ~0x4, 0x70B),
        (1 << 40, 0),
        (0x4, 0x0),
        (0x4 | 0x1, 0x1),  # PREPARED: cleared (TRAN_MSG=true tells a half message)
    ],
)
def test_sys_flag_masks_bits_a_producer_may_not_set(flag: int, kept: int) -> None:
    assert ingress.producer_sys_flag(flag) == kept


@pytest.mark.parametrize("flag", [0xC, 0xC | 0x1])
def test_sys_flag_refuses_rollback_type(flag: int) -> None:
    r = _rejected(ingress.producer_sys_flag, flag)
    assert r.code == ResponseCode.NO_PERMISSION and "transaction" in r.remark


def test_send_header_checks(broker: SimpleNamespace) -> None:
    h = _send_header(f=0x31)
    assert ingress.check_send_header(broker.topics, h) is broker.topics.get("T")
    assert h.sys_flag == 0x1
    cases = [
        (dict(b="abc\n"), ResponseCode.SYSTEM_ERROR, "topic: the topic 'abc\\n'"),
        (dict(b="SCHEDULE_TOPIC_XXXX"), ResponseCode.NO_PERMISSION, "system topic"),
        (dict(a="P/G"), ResponseCode.SYSTEM_ERROR, "producerGroup"),
        (dict(e=4), ResponseCode.SYSTEM_ERROR, "queueId 4 is out of range"),
        (dict(h=1 << 31), ResponseCode.SYSTEM_ERROR, "flag"),
        (dict(j=-1), ResponseCode.SYSTEM_ERROR, "reconsumeTimes"),
        (dict(l=1 << 40), ResponseCode.SYSTEM_ERROR, "maxReconsumeTimes"),
    ]
    for fields, code, fragment in cases:
        r = _rejected(ingress.check_send_header, broker.topics, _send_header(**fields))
        assert r.code == code and fragment in r.remark, (fields, r.remark)
    # an unknown but valid topic: no config yet, explicit queue ids within 0..65534
    assert ingress.check_send_header(broker.topics, _send_header(b="New", e=7)) is None
    r = _rejected(ingress.check_send_header, broker.topics, _send_header(b="New", e=65535))
    assert "0..65534" in r.remark


def test_int64_is_checked_while_decoding() -> None:
    with pytest.raises(HeaderError, match="int64"):
        UpdateConsumerOffsetRequestHeader.from_ext_fields(
            {
                "consumerGroup": "G",
                "topic": "T",
                "queueId": "0",
                "commitOffset": "99999999999999999999",
            }
        )
    h = UpdateConsumerOffsetRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": str((1 << 63) - 1)}
    )
    assert h.commit_offset == (1 << 63) - 1
    with pytest.raises(HeaderError) as info:
        PullMessageRequestHeader.from_ext_fields(
            {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "9" * 5000}
        )
    assert len(str(info.value)) < 200, "a huge value is truncated in the remark"


@pytest.mark.parametrize(
    ("props", "kept"),
    [
        ({"TAGS": "a", "KAIROS_SCHEDULE_ORIGIN": "x"}, {"TAGS": "a"}),
        ({"KAIROS_DELIVER_MS": "1", "KAIROS_ANYTHING": "2", "K": "v"}, {"K": "v"}),
        ({"REAL_TOPIC": "SCHEDULE_TOPIC_XXXX", "REAL_QID": "3", "K": "v"}, {"K": "v"}),
        ({"DELAY": "3", "UNIQ_KEY": "U"}, {"DELAY": "3", "UNIQ_KEY": "U"}),
        ({"MY_REAL_KEY": "v"}, {"MY_REAL_KEY": "v"}),
    ],
)
def test_message_properties_strips_broker_internal(
    props: dict[str, str], kept: dict[str, str]
) -> None:
    assert ingress.message_properties(encode_properties(props)) == kept


@pytest.mark.parametrize(
    "key", ["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME"]
)
def test_timer_properties_pass_ingress_for_the_send_path(key: str) -> None:
    # checked by server/schedule/timer/admission.py (tests/integration/test_timers.py)
    props = {key: "1700000000000", "K": "v"}
    assert ingress.message_properties(encode_properties(props)) == props


@pytest.mark.parametrize(
    ("props", "code", "fragment"),
    [
        ({"DELAY": "soon"}, ResponseCode.MESSAGE_ILLEGAL, "integer"),
        ({"DELAY": "1.5"}, ResponseCode.MESSAGE_ILLEGAL, "integer"),
    ],
)
def test_message_properties_refusals(props: dict[str, str], code: int, fragment: str) -> None:
    r = _rejected(ingress.message_properties, encode_properties(props))
    assert r.code == code and fragment in r.remark


@pytest.mark.parametrize("level", ["-1", "0", "-2147483648"])
def test_a_delay_level_of_zero_or_below_is_no_delay(level: str) -> None:
    # Java's setDelayTimeLevel(-1) is sent as is; RocketMQ 4.9.8 delays only levels > 0
    props = ingress.message_properties(encode_properties({"DELAY": level}))
    assert ingress.delay_level(props) == int(level) <= 0


def test_batch_items_have_no_upper_count() -> None:
    # RocketMQ has no count limit: a batch is bounded by its bytes (max_message_size)
    ingress.check_batch_items(1)
    ingress.check_batch_items(200_000)
    r = _rejected(ingress.check_batch_items, 0)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "no messages" in r.remark


def test_pull_checks(broker: SimpleNamespace) -> None:
    def header(**f: object) -> PullMessageRequestHeader:
        ext = {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0"}
        ext.update({k: str(v) for k, v in f.items()})
        return PullMessageRequestHeader.from_ext_fields(ext)

    assert ingress.check_pull(broker.topics, header()) is broker.topics.get("T")
    assert ingress.check_pull(broker.topics, header(topic="Unknown")) is None
    for fields, fragment in [
        (dict(queueOffset=-1), "queueOffset -1 is negative"),
        (dict(queueId=4), "queueId 4 is out of range: topic T has 4 queues"),
        (dict(queueId=-1), "queueId -1"),
        (dict(consumerGroup="x\x00y"), "consumerGroup"),
        (dict(topic="a/b"), "topic"),
    ]:
        r = _rejected(ingress.check_pull, broker.topics, header(**fields))
        assert r.code == ResponseCode.SYSTEM_ERROR and fragment in r.remark, r.remark


def test_send_back_checks(broker: SimpleNamespace) -> None:
    def header(**f: object) -> ConsumerSendMsgBackRequestHeader:
        ext = {"offset": "0", "group": "G", "delayLevel": "0", "originTopic": "T"}
        ext.update({k: str(v) for k, v in f.items()})
        return ConsumerSendMsgBackRequestHeader.from_ext_fields(ext)

    ingress.check_send_back(header())
    ingress.check_send_back(header(delayLevel=-1))  # -1: straight to the DLQ
    for fields, fragment in [
        (dict(group="/../x"), "group"),
        (dict(group="x\x00y"), "group"),
        (dict(originTopic="a.b"), "originTopic"),
        (dict(offset=-5), "offset -5"),
    ]:
        r = _rejected(ingress.check_send_back, header(**fields))
        assert r.code == ResponseCode.SYSTEM_ERROR and fragment in r.remark


def _heartbeat(
    producers: int = 1, consumers: int = 1, subs: int = 1, group: str = "CG", topic: str = "T"
) -> HeartbeatData:
    return HeartbeatData(
        "c1",
        [f"PG{i}" for i in range(producers)],
        [
            ConsumerData(
                f"{group}{i}" if consumers > 1 else group,
                [
                    SubscriptionData.build(topic if subs == 1 else f"{topic}{j}", "*", 0)
                    for j in range(subs)
                ],
            )
            for i in range(consumers)
        ],
    )


def test_heartbeat_checks(broker: SimpleNamespace) -> None:
    # no count limit by default (RocketMQ has none): thousands of groups pass the checks
    ingress.check_heartbeat(
        broker.topics, broker.config, _heartbeat(producers=3000, consumers=3000)
    )
    ingress.check_heartbeat(broker.topics, broker.config, _heartbeat(subs=3000))
    cfg = dataclasses.replace(
        broker.config, max_groups_per_heartbeat=256, max_subscriptions_per_heartbeat=1024
    )
    ingress.check_heartbeat(broker.topics, cfg, _heartbeat())
    ingress.check_heartbeat(broker.topics, cfg, _heartbeat(topic=naming.retry_topic("g" * 240)))
    for hb, fragment in [
        (_heartbeat(producers=257), "max_groups_per_heartbeat"),
        (_heartbeat(consumers=257), "max_groups_per_heartbeat"),
        (_heartbeat(subs=1025), "max_subscriptions_per_heartbeat"),
        (_heartbeat(group="/../x"), "consumerDataSet.groupName"),
        (HeartbeatData("c1", ["bad group"]), "producerDataSet.groupName"),
        (_heartbeat(topic="t\n"), "subscriptionDataSet.topic"),
    ]:
        r = _rejected(ingress.check_heartbeat, broker.topics, cfg, hb)
        assert r.code == ResponseCode.SYSTEM_ERROR and fragment in r.remark, r.remark


def test_lock_batch_locks_only_existing_queues(broker: SimpleNamespace) -> None:
    req = LockBatchRequest(
        "G",
        "c1",
        [
            MessageQueueData("T", "b", 0),
            MessageQueueData("T", "b", 9),
            MessageQueueData("Gone", "b", 0),
        ],
    )
    assert ingress.check_lock_batch(broker.topics, req) == [MessageQueueData("T", "b", 0)]
    bad = LockBatchRequest("G", "c1", [MessageQueueData("a/b", "b", 0)])
    assert "mqSet.topic" in _rejected(ingress.check_lock_batch, broker.topics, bad).remark
    bad = LockBatchRequest("G/", "c1", [])
    assert "consumerGroup" in _rejected(ingress.check_lock_batch, broker.topics, bad).remark


def test_create_topic_checks() -> None:
    def header(**f: object) -> CreateTopicRequestHeader:
        ext = {"topic": "T"}
        ext.update({k: str(v) for k, v in f.items()})
        return CreateTopicRequestHeader.from_ext_fields(ext)

    assert ingress.check_create_topic(header(readQueueNums=8, writeQueueNums=2)) == 8
    # mqadmin updateTopic -r 2048 -w 2048: RocketMQ 4.9.8 accepts it (it checks no count)
    assert ingress.check_create_topic(header(readQueueNums=2048, writeQueueNums=2048)) == 2048
    for fields, code, fragment in [
        (dict(topic="TBW102"), ResponseCode.NO_PERMISSION, "system topic"),
        (dict(topic="x" * 128), ResponseCode.SYSTEM_ERROR, "128 characters"),
        (dict(readQueueNums=0, writeQueueNums=0), ResponseCode.SYSTEM_ERROR, "1..65535"),
        (dict(writeQueueNums=65536), ResponseCode.SYSTEM_ERROR, "writeQueueNums 65536"),
        (dict(readQueueNums=-1), ResponseCode.SYSTEM_ERROR, "readQueueNums -1"),
        (dict(perm=0x10), ResponseCode.SYSTEM_ERROR, "perm 16"),
    ]:
        r = _rejected(ingress.check_create_topic, header(**fields))
        assert r.code == code and fragment in r.remark, r.remark


def test_group_cache_is_bounded() -> None:
    cache = ingress._NameCache(naming.validate_group, limit=3)
    for i in range(10):
        cache.check(f"G{i}", "group")
    assert len(cache.ok) == 3
    with pytest.raises(Rejected):
        cache.check("G/", "group")  # a bad name is never cached


# ---------------------------------------------------------------- topic persistence


def test_topics_persist_once_and_load_skips_bad_names(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path, default_queue_nums=4, delay_levels=2)
    for i in range(100):
        topics.ensure(f"%RETRY%G{i}", 1)
    assert topics.dirty and not (tmp_path / "topics.json").exists()
    asyncio.run(topics.flushed())  # the 100 changes: one write
    names = {d["topic_name"] for d in json.loads((tmp_path / "topics.json").read_text())}
    assert {f"%RETRY%G{i}" for i in range(100)} <= names and not topics.dirty
    assert topics.file.writes == 1
    # a file written before names were checked: its bad entries are skipped on load
    raw = json.loads((tmp_path / "topics.json").read_text())
    raw += [
        {"topic_name": "%RETRY%/../x"},
        {"topic_name": "a\x00b"},
        {"topic_name": naming.retry_topic("g" * 200)},
    ]
    (tmp_path / "topics.json").write_text(json.dumps(raw))
    again = TopicConfigManager(tmp_path, default_queue_nums=4, delay_levels=2)
    again.load()
    assert again.skipped_on_load == ["%RETRY%/../x", "a\x00b"]
    assert naming.retry_topic("g" * 200) in again.topics and "%RETRY%G7" in again.topics


def test_an_older_snapshot_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path, default_queue_nums=4, delay_levels=2)
    topics.create("A")
    old = (topics.version, list(topics.json_parts()))
    topics.create("B")
    topics.persist()
    topics.file._write(*old)  # a slow writer of the older snapshot finishes last
    names = {d["topic_name"] for d in json.loads((tmp_path / "topics.json").read_text())}
    assert {"A", "B"} <= names
