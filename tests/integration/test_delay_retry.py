"""Delayed delivery, send-back retries and dead letters over the raw protocol."""

from __future__ import annotations

import time

import pytest
from kairosmq.protocol.codes import PULL_SUSPEND, RequestCode, ResponseCode
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.server.config import BrokerConfig

from tests.helpers import FAST_LEVELS, pull, send, wait_until
from tests.wire import RawPeer

LEVELS_MS = BrokerConfig(delay_levels=FAST_LEVELS).delay_levels_ms


async def _pull_one(peer: RawPeer, topic: str, offset: int, timeout: float = 5.0) -> MessageExt:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = await pull(peer, topic, offset=offset, sys_flag=PULL_SUSPEND, suspend_ms=2000)
        if r.code == ResponseCode.SUCCESS:
            return decode_records(r.body)[0]
    raise AssertionError(f"nothing arrived in {topic} at {offset}")


async def test_delayed_messages_are_never_early(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    sent: dict[str, tuple[int, float]] = {}
    for i in range(20):
        level = 1 + i % 4
        before = time.time() * 1000  # the broker stores it after this instant
        r = await send(
            peer, "Delayed", f"m{i}".encode(), {"DELAY": str(level), "UNIQ_KEY": f"U{i}"}
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        sent[f"U{i}"] = (level, before)
    got: list[MessageExt] = []
    offset = 0
    deadline = time.monotonic() + 5
    while len(got) < 20 and time.monotonic() < deadline:
        r = await pull(peer, "Delayed", offset=offset, sys_flag=PULL_SUSPEND, suspend_ms=1000)
        if r.code == ResponseCode.SUCCESS:
            msgs = decode_records(r.body)
            got += msgs
            offset = int(r.ext_fields["nextBeginOffset"])
    assert sorted(m.msg_id for m in got) == sorted(sent)
    for m in got:
        level, sent_ms = sent[m.msg_id]
        due = int(m.properties["KAIROS_DELIVER_MS"])
        assert m.store_timestamp >= due, "delivered before its due time"
        assert due >= int(sent_ms) + LEVELS_MS[level - 1]
        assert m.store_timestamp - due < 500
        assert "DELAY" not in m.properties
        assert m.properties["REAL_TOPIC"] == "Delayed"
        assert m.topic == "Delayed" and m.queue_id == 0
    await peer.close()


@pytest.mark.slow  # delays of up to 900 ms
async def test_level_above_max_is_clamped_and_zero_is_immediate(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "Clamp", b"far", {"DELAY": "99"})
    assert r.code == ResponseCode.SUCCESS
    r = await send(peer, "Clamp", b"now", {"DELAY": "0"}, queue_id=1)
    assert r.code == ResponseCode.SUCCESS
    r1 = await pull(peer, "Clamp", queue_id=1)  # level 0: stored directly
    assert decode_records(r1.body)[0].body == b"now"
    assert broker.store.max_offset("SCHEDULE_TOPIC_XXXX", len(LEVELS_MS) - 1) == 1
    far = await _pull_one(peer, "Clamp", 0)
    assert far.body == b"far" and far.properties["KAIROS_SCHEDULE_ORIGIN"].startswith("18:")
    await peer.close()


async def _send_back(peer: RawPeer, m: MessageExt, group: str, **extra: object) -> None:
    r = await peer.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "offset": m.commit_log_offset,
            "group": group,
            "delayLevel": 0,
            "originMsgId": m.msg_id,
            "originTopic": m.topic,
            **extra,
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_retry_ladder_then_success(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Orders", b"pay", {"UNIQ_KEY": "ORDER1", "TAGS": "T"})
    first = await _pull_one(peer, "Orders", 0)
    assert first.reconsume_times == 0
    t0 = time.monotonic()
    await _send_back(peer, first, "CG")
    second = await _pull_one(peer, "%RETRY%CG", 0)
    t1 = time.monotonic()
    await _send_back(peer, second, "CG")
    third = await _pull_one(peer, "%RETRY%CG", 1)
    t2 = time.monotonic()
    assert [first.msg_id, second.msg_id, third.msg_id] == ["ORDER1"] * 3
    assert [second.reconsume_times, third.reconsume_times] == [1, 2]
    assert second.properties["RETRY_TOPIC"] == "Orders"
    assert third.properties["ORIGIN_MESSAGE_ID"] == "ORDER1"
    assert second.body == third.body == b"pay"
    # level 3 then level 4 delays (150 ms, 200 ms with the fast levels)
    assert t1 - t0 >= LEVELS_MS[2] / 1000 - 0.01
    assert t2 - t1 >= LEVELS_MS[3] / 1000 - 0.01
    await peer.close()


async def test_max_reconsume_times_dead_letters(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Jobs", b"fail", {"UNIQ_KEY": "JOB1"})
    m = await _pull_one(peer, "Jobs", 0)
    retry_offset = 0
    for _ in range(2):
        await _send_back(peer, m, "JG", maxReconsumeTimes=2)
        m = await _pull_one(peer, "%RETRY%JG", retry_offset)
        retry_offset += 1
    assert m.reconsume_times == 2
    await _send_back(peer, m, "JG", maxReconsumeTimes=2)
    dead = await _pull_one(peer, "%DLQ%JG", 0, timeout=2)
    assert dead.msg_id == "JOB1" and dead.reconsume_times == 3
    assert "DELAY" not in dead.properties
    route = await (await RawPeer.connect(broker.namesrv_address)).call(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%DLQ%JG"}
    )
    assert route.code == ResponseCode.SUCCESS
    await peer.close()


async def test_negative_send_back_level_goes_straight_to_dlq(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Neg", b"x")
    m = await _pull_one(peer, "Neg", 0)
    r = await peer.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": m.commit_log_offset, "group": "NG", "delayLevel": -1},
    )
    assert r.code == ResponseCode.SUCCESS
    assert (await _pull_one(peer, "%DLQ%NG", 0, timeout=1)).body == b"x"
    await peer.close()


@pytest.mark.parametrize("levels", ["", "1s 5x", "0s", "1s -5s"])
def test_bad_delay_level_string_is_a_startup_error(levels) -> None:
    with pytest.raises(ValueError, match="message_delay_level"):
        BrokerConfig(delay_levels=levels)


@pytest.mark.slow  # delays of up to 900 ms
async def test_restart_neither_loses_nor_repeats_delayed_messages(broker_factory, tmp_path) -> None:
    data = tmp_path / "restart"
    b = await broker_factory(data_dir=data)
    peer = await RawPeer.connect(b.address)
    for i in range(30):
        await send(peer, "R", f"{i}".encode(), {"DELAY": str(1 + i % 6), "UNIQ_KEY": f"R{i}"})
    # stop once some are delivered while most are pending (event, not a fixed sleep)
    await wait_until(lambda: b.stats.delivered["R"] >= 1, 5.0, interval=0.002)
    assert b.stats.delivered["R"] < 30
    await peer.close()
    await b.stop("restart")
    b2 = await broker_factory(data_dir=data)
    peer = await RawPeer.connect(b2.address)
    got: list[str] = []
    offset = 0
    deadline = time.monotonic() + 5
    while len(got) < 30 and time.monotonic() < deadline:
        r = await pull(peer, "R", offset=offset, sys_flag=PULL_SUSPEND, suspend_ms=500)
        if r.code == ResponseCode.SUCCESS:
            got += [m.msg_id for m in decode_records(r.body)]
            offset = int(r.ext_fields["nextBeginOffset"])
    # nothing extra: a pull held for 0.6 s (longer than the longest level used) gets nothing
    r = await pull(peer, "R", offset=offset, sys_flag=PULL_SUSPEND, suspend_ms=600)
    assert r.code == ResponseCode.PULL_NOT_FOUND, "a message was re-put twice"
    assert sorted(got) == sorted(f"R{i}" for i in range(30))
    await peer.close()
