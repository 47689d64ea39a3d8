"""The ingress layer against a real in-process broker, with raw frames: every entry that
takes a name, an integer or a size refuses a bad one with a RocketMQ code and a remark
naming the field, stores and creates nothing for it, and the broker keeps serving."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueData,
    SubscriptionData,
)
from kairosmq.protocol.codes import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.message import BatchItem, decode_records, encode_batch
from kairosmq.server.handlers.client import heartbeat_parts

from tests.helpers import pull, send, send_ext
from tests.wire import RawPeer

R = RequestCode
SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR


async def _serving(broker: Any) -> None:
    """The broker still stores and serves (a fresh connection, a send and its pull)."""
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "Healthy", b"ok")
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await pull(peer, "Healthy", queue_id=0, offset=0, suspend_ms=0)
    assert r.code == ResponseCode.SUCCESS
    await peer.close()


def _refused(r: Any, code: int, *fragments: str) -> None:
    assert r.code == code, (r.code, r.remark)
    for f in fragments:
        assert f in (r.remark or ""), (f, r.remark)


def _dirs(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


# ---------------------------------------------------------------- sends


async def test_host_format_sys_flag_bits_never_reach_the_store(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for flag in (SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, 0x30 | 0x2, 0x40):
        r = await send(peer, "Flags", b"x", queue_id=0, f=flag)
        assert r.code == ResponseCode.SUCCESS, r.remark
    r = await send(peer, "Flags", b"x", queue_id=0, f=0x4)  # PREPARED without TRAN_MSG
    _refused(r, ResponseCode.NO_PERMISSION, "sysFlag 0x4", "TRAN_MSG")
    r = await pull(peer, "Flags", suspend_ms=0)
    msgs = decode_records(r.body)
    assert len(msgs) == 4
    assert all(m.sys_flag & 0x30 == 0 for m in msgs), [hex(m.sys_flag) for m in msgs]
    assert msgs[2].sys_flag & 0x2  # MULTI_TAGS is the producer's to set
    assert all(m.born_host[0] == b"\x7f\x00\x00\x01" for m in msgs)
    await peer.close()


async def test_broker_internal_properties_are_stripped(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(
        peer,
        "Props",
        b"x",
        {
            "KAIROS_SCHEDULE_ORIGIN": "x",
            "KAIROS_DELIVER_MS": "9" * 20,
            "REAL_TOPIC": "Other",
            "REAL_QID": "7",
            "TAGS": "a",
            "KEYS": "k1",
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    m = decode_records((await pull(peer, "Props", suspend_ms=0)).body)[0]
    assert m.topic == "Props" and m.properties.get("TAGS") == "a"
    assert not any(k.startswith("KAIROS_") or k.startswith("REAL_") for k in m.properties)
    await peer.close()
    await _serving(broker)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("TIMER_DELIVER_MS", "soon"),
        ("TIMER_DELAY_SEC", "-1"),
        ("TIMER_DELAY_MS", "1e3"),
        ("__STARTDELIVERTIME", "99999999999999999999"),
        ("TIMER_DELAY_SEC", str(41 * 86_400)),
    ],
)
async def test_bad_timer_properties_are_refused_and_store_nothing(broker, key, value) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "Timer", b"x", {key: value})
    _refused(r, ResponseCode.MESSAGE_ILLEGAL, "timer message illegal")
    assert broker.store.commitlog.max_offset == 0
    assert broker.topics.get("Timer") is None, "a refused send creates no topic"
    await peer.close()


async def test_batch_checks_and_no_count_limit(broker_factory) -> None:
    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    ext = send_ext("Batch", batch="true", i="WAIT\x01true")

    async def batch(n: int, props: str = "", last: str = "") -> Any:
        items = [BatchItem(b"m", 0, props) for _ in range(n - 1)] + [BatchItem(b"m", 0, last)]
        return await peer.call(R.SEND_BATCH_MESSAGE, ext, encode_batch(items))

    _refused(
        await batch(2, "TIMER_DELAY_SEC\x0110"), ResponseCode.MESSAGE_ILLEGAL, "TIMER_DELAY_SEC"
    )
    # a refusal in the last item of a batch validated over several loop turns: nothing
    # of it is stored either
    _refused(await batch(5000, last="DELAY\x013"), ResponseCode.MESSAGE_ILLEGAL, "delay")
    assert b.store.commitlog.max_offset == 0
    assert b.topics.get("Batch") is None, "a refused batch creates no topic"
    r = await batch(8, "KAIROS_SCHEDULE_ORIGIN\x011:1")
    assert r.code == ResponseCode.SUCCESS, r.remark
    msgs = decode_records((await pull(peer, "Batch", suspend_ms=0)).body)
    assert len(msgs) == 8 and all("KAIROS_SCHEDULE_ORIGIN" not in m.properties for m in msgs)
    await peer.close()


async def test_send_names_and_integers(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    cases = [
        (dict(b="abc\n"), SYSTEM_ERROR, "topic", "outside"),
        (dict(a="P/G"), SYSTEM_ERROR, "producerGroup", "outside"),
        (dict(e=4), SYSTEM_ERROR, "queueId 4"),
        (dict(e=99999), SYSTEM_ERROR, "queueId 99999"),
        (dict(h=1 << 40), SYSTEM_ERROR, "flag"),
        (dict(g="9" * 25), SYSTEM_ERROR, "'g'", "int64"),
    ]
    await send(peer, "Known", b"x")  # four queues
    for fields, code, *fragments in cases:
        topic = fields.pop("b", "Known")
        r = await peer.call(R.SEND_MESSAGE_V2, send_ext(topic, **fields), b"x")
        _refused(r, code, *fragments)
    assert broker.topics.get("abc\n") is None
    await peer.close()
    await _serving(broker)


# ---------------------------------------------------------------- send-back


@pytest.mark.parametrize("group", ["/../Victim", "x\x00y", "..", "a.b", "G\n"])
async def test_send_back_group_never_becomes_a_path(broker, group) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Victim", b"x")
    m = decode_records((await pull(peer, "Victim", suspend_ms=0)).body)[0]
    cq_root = broker.store.cq_dir
    dirs_before, end = _dirs(broker.store.data_dir), broker.store.commitlog.max_offset
    r = await peer.call(
        R.CONSUMER_SEND_MSG_BACK,
        {
            "offset": m.commit_log_offset,
            "group": group,
            "delayLevel": 0,
            "originTopic": "Victim",
            "maxReconsumeTimes": 0,
        },
    )
    _refused(r, SYSTEM_ERROR, "group", "outside")
    assert broker.store.commitlog.max_offset == end, "nothing stored"
    assert _dirs(broker.store.data_dir) == dirs_before, "no directory created"
    assert all("%" not in p or p.startswith("%RETRY%G") for p in _dirs(cq_root))
    assert not any(t.endswith(group) for t in broker.topics.topics if t != "Victim")
    await peer.close()
    await _serving(broker)


async def test_send_back_origin_topic_and_offset(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    base = {"offset": 0, "group": "G", "delayLevel": 0}
    r = await peer.call(R.CONSUMER_SEND_MSG_BACK, {**base, "originTopic": "a/b"})
    _refused(r, SYSTEM_ERROR, "originTopic")
    r = await peer.call(R.CONSUMER_SEND_MSG_BACK, {**base, "offset": -8})
    _refused(r, SYSTEM_ERROR, "offset -8")
    await peer.close()


# ---------------------------------------------------------------- offsets


async def test_update_consumer_offset_out_of_range_keeps_offsets_durable(
    broker_factory, tmp_path
) -> None:
    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    await send(peer, "Off", b"x")
    ext = {"consumerGroup": "G", "topic": "Off", "queueId": 0}
    r = await peer.call(R.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "9" * 20})
    _refused(r, SYSTEM_ERROR, "commitOffset", "int64")
    r = await peer.call(R.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": -1})
    assert r.code == ResponseCode.SUCCESS  # "no offset" (ali-ons sends it): not stored
    assert b.offsets.query("G", "Off", 0) is None
    r = await peer.call(R.UPDATE_CONSUMER_OFFSET, {**ext, "queueId": 4, "commitOffset": 1})
    _refused(r, SYSTEM_ERROR, "queueId 4", "has 4 queues")
    r = await peer.call(R.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": 1})
    assert r.code == ResponseCode.SUCCESS
    await peer.close()
    await b.stop("restart")
    saved = json.loads((tmp_path / "broker" / "config" / "consumerOffset.json").read_text())
    assert saved == {"G": {"Off": {"0": 1}}}
    again = await broker_factory()
    assert again.offsets.query("G", "Off", 0) == 1


async def test_offset_and_queue_requests_check_names_and_queue_ids(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Q", b"x")
    cases: list[tuple[int, dict[str, Any], str]] = [
        (
            R.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "G/x", "topic": "Q", "queueId": 0},
            "consumerGroup",
        ),
        (R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Q", "queueId": 9}, "queueId 9"),
        (
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": "..", "queueId": 0, "commitOffset": 0},
            "topic",
        ),
        (R.GET_MAX_OFFSET, {"topic": "Q", "queueId": -1}, "queueId -1"),
        (R.GET_MIN_OFFSET, {"topic": "a\x00b", "queueId": 0}, "topic"),
        (R.GET_EARLIEST_MSG_STORETIME, {"topic": "Q", "queueId": 4}, "queueId 4"),
        (
            R.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": "Unknown", "queueId": 70000, "timestamp": 0},
            "0..65534",
        ),
    ]
    for code, ext, fragment in cases:
        _refused(await peer.call(code, ext), SYSTEM_ERROR, fragment)
    r = await peer.call(R.GET_MAX_OFFSET, {"topic": "Q", "queueId": 0})
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "1"
    await peer.close()


async def test_pull_checks(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "P", b"x")
    _refused(await pull(peer, "P", offset=-1), SYSTEM_ERROR, "queueOffset -1")
    _refused(await pull(peer, "P", queue_id=4), SYSTEM_ERROR, "queueId 4")
    _refused(await pull(peer, "P", group="G\n"), SYSTEM_ERROR, "consumerGroup")
    _refused(await pull(peer, "P/..", group="G"), SYSTEM_ERROR, "topic")
    _refused(await pull(peer, "Nope"), ResponseCode.TOPIC_NOT_EXIST, "Nope")
    r = await pull(peer, "P", max_n=1_000_000, suspend_ms=0)  # clamped, not refused
    assert r.code == ResponseCode.SUCCESS and len(decode_records(r.body)) == 1
    await peer.close()


# ---------------------------------------------------------------- heartbeat, locks, clients


def _hb(consumers: list[ConsumerData], producers: list[str] | None = None) -> bytes:
    return HeartbeatData("c1@test", producers or [], consumers).to_json()


async def test_heartbeat_limits_and_names(broker_factory) -> None:
    b = await broker_factory(max_groups_per_heartbeat=4, max_subscriptions_per_heartbeat=6)
    peer = await RawPeer.connect(b.address)
    many = [ConsumerData(f"CG{i}", []) for i in range(5)]
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb(many)),
        SYSTEM_ERROR,
        "5 consumer groups",
        "max_groups_per_heartbeat",
    )
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb([], [f"P{i}" for i in range(5)])),
        SYSTEM_ERROR,
        "5 producer groups",
    )
    subs = [SubscriptionData.build(f"T{i}", "*", 0) for i in range(7)]
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb([ConsumerData("CG", subs)])),
        SYSTEM_ERROR,
        "7 subscriptions",
        "max_subscriptions_per_heartbeat",
    )
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb([ConsumerData("/../x", [])])),
        SYSTEM_ERROR,
        "consumerDataSet.groupName",
    )
    bad_sub = [SubscriptionData.build("t\n", "*", 0)]
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb([ConsumerData("CG", bad_sub)])),
        SYSTEM_ERROR,
        "subscriptionDataSet.topic",
    )
    _refused(
        await peer.call(R.HEART_BEAT, {}, _hb([], ["P G"])),
        SYSTEM_ERROR,
        "producerDataSet.groupName",
    )
    assert not b.clients.consumers and not b.clients.producers, "nothing registered"
    assert not any(t.startswith("%RETRY%") for t in b.topics.topics), "nothing created"
    await peer.close()


async def test_one_heartbeat_creating_many_retry_topics_writes_topics_json_once(
    broker_factory, tmp_path
) -> None:
    b = await broker_factory(max_groups_per_heartbeat=256)
    written = b.topics.file.writes
    peer = await RawPeer.connect(b.address)
    consumers = [ConsumerData(f"CG{i}", [SubscriptionData.build("T", "*", 0)]) for i in range(256)]
    r = await peer.call(R.HEART_BEAT, {}, _hb(consumers))
    assert r.code == ResponseCode.SUCCESS, r.remark
    # registered HEARTBEAT_SLICE groups per loop turn: at most one (coalesced) topics.json
    # write per slice, not one per topic
    slices = len(heartbeat_parts(HeartbeatData.from_json(_hb(consumers))))
    assert written < b.topics.file.writes <= written + slices, "coalesced topics.json writes"
    saved = json.loads((tmp_path / "broker" / "config" / "topics.json").read_text())
    assert {f"%RETRY%CG{i}" for i in range(256)} <= {d["topic_name"] for d in saved}
    # the same heartbeat again creates nothing and writes nothing
    after = b.topics.file.writes
    assert (await peer.call(R.HEART_BEAT, {}, _hb(consumers))).code == ResponseCode.SUCCESS
    assert b.topics.file.writes == after
    await peer.close()


async def test_lock_unlock_consumer_list_unregister(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "L", b"x")
    req = LockBatchRequest(
        "G",
        "c1",
        [
            MessageQueueData("L", "b", 0),
            MessageQueueData("L", "b", 77),
            MessageQueueData("Missing", "b", 0),
        ],
    )
    r = await peer.call(R.LOCK_BATCH_MQ, {}, req.to_json())
    assert r.code == ResponseCode.SUCCESS
    assert json.loads(r.body)["lockOKMQSet"] == [{"brokerName": "b", "queueId": 0, "topic": "L"}]
    bad = LockBatchRequest("G/..", "c1", [MessageQueueData("L", "b", 0)])
    _refused(await peer.call(R.LOCK_BATCH_MQ, {}, bad.to_json()), SYSTEM_ERROR, "consumerGroup")
    bad = LockBatchRequest("G", "c1", [MessageQueueData("L\x00", "b", 0)])
    _refused(await peer.call(R.UNLOCK_BATCH_MQ, {}, bad.to_json()), SYSTEM_ERROR, "mqSet.topic")
    _refused(
        await peer.call(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "a b"}),
        SYSTEM_ERROR,
        "consumerGroup",
    )
    _refused(
        await peer.call(R.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "G\n"}),
        SYSTEM_ERROR,
        "consumerGroup",
    )
    _refused(
        await peer.call(R.UNREGISTER_CLIENT, {"clientID": "c1", "producerGroup": "/"}),
        SYSTEM_ERROR,
        "producerGroup",
    )
    await peer.close()
    await _serving(broker)


# ---------------------------------------------------------------- name server and admin


async def test_route_lookup_checks_the_name(broker) -> None:
    ns = await RawPeer.connect(broker.namesrv_address)
    _refused(await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "abc\n"}), SYSTEM_ERROR, "topic")
    _refused(
        await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%/../x"}), SYSTEM_ERROR, "topic"
    )
    assert not any("/" in t for t in broker.topics.topics)
    _refused(
        await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "NotYet"}), ResponseCode.TOPIC_NOT_EXIST
    )
    long_retry = "%RETRY%" + "g" * 200  # a valid group's retry topic (over 127 chars)
    r = await ns.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": long_retry})
    # a valid name, not created by the lookup (RocketMQ's name server creates nothing)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and broker.topics.get(long_retry) is None
    await ns.close()


async def test_admin_requests_check_names_and_integers(broker, tmp_path) -> None:
    peer = await RawPeer.connect(broker.address)
    cases: list[tuple[int, dict[str, Any], int, str]] = [
        (R.UPDATE_AND_CREATE_TOPIC, {"topic": "a/b"}, SYSTEM_ERROR, "topic"),
        (
            R.UPDATE_AND_CREATE_TOPIC,
            {"topic": "SCHEDULE_TOPIC_XXXX"},
            ResponseCode.NO_PERMISSION,
            "system topic",
        ),
        (R.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "perm": 64}, SYSTEM_ERROR, "perm 64"),
        (
            R.UPDATE_AND_CREATE_TOPIC,
            {"topic": "T", "readQueueNums": 70000},
            SYSTEM_ERROR,
            "readQueueNums 70000",
        ),
        (R.DELETE_TOPIC_IN_BROKER, {"topic": "x\x00"}, SYSTEM_ERROR, "topic"),
        (R.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}, ResponseCode.NO_PERMISSION, "system topic"),
        (R.VIEW_MESSAGE_BY_ID, {"offset": -1}, SYSTEM_ERROR, "offset -1"),
        (R.QUERY_MESSAGE, {"key": "k", "topic": "../x"}, SYSTEM_ERROR, "topic"),
        (R.KAIROS_GET_CONSUMER_LAG, {"consumerGroup": "/../x"}, SYSTEM_ERROR, "consumerGroup"),
        (R.KAIROS_RESEND_DLQ, {"consumerGroup": "x\x00y"}, SYSTEM_ERROR, "consumerGroup"),
    ]
    for code, ext, want, fragment in cases:
        _refused(await peer.call(code, ext), want, fragment)
    assert broker.topics.get("T") is None
    # an explicit creation is on disk when it is acknowledged
    r = await peer.call(
        R.UPDATE_AND_CREATE_TOPIC, {"topic": "Made", "readQueueNums": 2, "writeQueueNums": 2}
    )
    assert r.code == ResponseCode.SUCCESS
    saved = json.loads((tmp_path / "broker" / "config" / "topics.json").read_text())
    assert {"topic_name": "Made", "read_queue_nums": 2}.items() <= next(
        d for d in saved if d["topic_name"] == "Made"
    ).items()
    await peer.close()
    await _serving(broker)


async def test_rejections_are_counted_and_the_connection_stays_open(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    before = broker.stats.rejected
    for _ in range(50):
        _refused(await peer.call(R.GET_MAX_OFFSET, {"topic": "a/b", "queueId": 0}), SYSTEM_ERROR)
    assert broker.stats.rejected == before + 50
    assert (await send(peer, "Same", b"x")).code == ResponseCode.SUCCESS
    await peer.close()


# ---------------------------------------------------------------- client


async def test_producer_refuses_an_invalid_topic_at_once(broker) -> None:
    from kairosmq.client import InvalidName, Message, Producer

    before = broker.stats.rejected
    async with Producer("PG", broker.namesrv_address, send_msg_timeout=10.0) as p:
        started = asyncio.get_running_loop().time()
        for topic in ("abc\n", "a/b", "x" * 128):
            with pytest.raises(InvalidName) as info:
                await p.send(Message(topic, b"x"))
            assert not info.value.retriable
        assert asyncio.get_running_loop().time() - started < 1.0, "no retry loop"
        assert (await p.send(Message("Fine", b"x"))).msg_id
    assert broker.stats.rejected == before, "nothing reached the broker"
    with pytest.raises(InvalidName, match="group"):
        Producer("bad group", broker.namesrv_address)
