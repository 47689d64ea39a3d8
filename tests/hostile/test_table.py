"""Issue 10's table, row by row, against a real broker process.

Each test interleaves the hostile request with acked ordinary and delayed sends, then
``verify_after_kill9`` (tests/hostile/harness.py) kills the broker with SIGKILL, restarts
it on the same data and checks that every acked message is served exactly once (delayed
ones not early), that new sends work and that a bystander group's offsets survived.

What each hostile request must get (the target of issue 10):
* (a) sysFlag host bits 0x10/0x20 from an IPv4 client: handled harmlessly - acked, the
  client's host bits dropped on ingress and the store deciding the host format from the
  real addresses (the record decodes and carries no IPv6 bits).
* (b) CONSUMER_SEND_MSG_BACK with a group that is a path or holds NUL: refused.
* (c) broker-internal properties (KAIROS_*, REAL_TOPIC/REAL_QID) on a send: handled
  harmlessly - acked with those properties stripped on ingress (the served message never
  carries the client's value; a delayed one is still delivered at its level's delay).
* (d) commitOffset beyond int64 (UPDATE_CONSUMER_OFFSET, or a pull's commit offset):
  refused (never stored, never stops the offset file).
* (e) RocketMQ 5 timer properties: a bad value refused naming the property; a good one
  fires at its instant, exactly once across kill -9; a delay level wins over them.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.ids import decode_offset_msg_id

from tests.helpers import send
from tests.hostile.harness import (
    BYSTANDER_TOPIC,
    LEVEL_MS,
    describe,
    drain,
    is_error,
    now_ms,
    verify_after_kill9,
)

pytestmark = pytest.mark.slow

HUGE = "99999999999999999999"


async def _hostile_send(hb, peer, topic, tag, props, *, delay_level=0, queue_id=1, **extra):
    """One hostile send, booked in the ledger by its answer; returns the answer."""
    key = f"EVIL-{tag}"
    body = f"hostile-{tag}".encode()
    p = {"UNIQ_KEY": key, **props}
    if delay_level:
        p["DELAY"] = str(delay_level)
    sent = now_ms()
    r = await send(peer, topic, body, p, queue_id=queue_id, **extra)
    hb.record_outcome(r, topic, body, key, queue_id, LEVEL_MS.get(delay_level, 0), sent)
    return r


async def test_a_ipv6_host_sysflag_from_ipv4_client(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.good_sends(peer, "RowA", 3)
    await hb.good_sends(peer, "RowA", 2, delay_level=3)
    answers = {}
    for flag in (0x10, 0x20, 0x30):
        answers[flag] = await _hostile_send(hb, peer, "RowA", f"sysflag-{flag}", {}, f=flag)
        await hb.good_sends(peer, "RowA", 3)

    async def delayed(p) -> None:
        for flag in (0x10, 0x20):
            answers[-flag] = await _hostile_send(
                hb, p, "RowA", f"sysflag-delayed-{flag}", {}, delay_level=17, f=flag
            )
            await hb.good_sends(p, "RowA", 2, delay_level=16)
            await hb.good_sends(p, "RowA", 2)

    peer = await verify_after_kill9(hb, before_kill=delayed)
    for m in await drain(peer, "RowA"):
        assert not m.sys_flag & 0x30, f"an IPv4 record stored with IPv6 bits: {m.sys_flag:#x}"
    for flag, r in answers.items():
        assert r.code == ResponseCode.SUCCESS, (f"sysFlag {abs(flag):#x}", describe(r))


async def test_b_send_back_with_path_or_nul_group(hostile, tmp_path) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    target = await hb.good_send(peer, "RowB", queue_id=0)
    await hb.good_sends(peer, "RowB", 2, delay_level=4)
    offset = decode_offset_msg_id(target.msg_id)[2]
    for group in ("/../RowB", "x\x00y", "../../../../tmp/kairos-evil", "a/b"):
        r = await peer.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": offset,
                "group": group,
                "delayLevel": 0,
                "originMsgId": target.msg_id,
                "originTopic": "RowB",
            },
        )
        assert is_error(r), f"send-back with group {group!r} was accepted: {describe(r)}"
        await hb.good_sends(peer, "RowB", 2)
        await hb.good_sends(peer, "RowB", 1, delay_level=3)
    peer = await verify_after_kill9(hb)
    r = await peer.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert r.code == ResponseCode.SUCCESS
    topics = orjson.loads(r.body)["topicConfigTable"]
    bad = [t for t in topics if not all(c.isascii() and c.isalnum() or c in "%|_-" for c in t)]
    assert not bad, f"hostile groups became topics: {bad}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"], "a file escaped the data dir"
    assert not any("\x00" in p.name or ".." in p.name for p in (tmp_path / "d").rglob("*")), (
        "a hostile name reached the disk"
    )


async def test_c_broker_internal_properties_on_send(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    variants = {
        "origin-x": {"KAIROS_SCHEDULE_ORIGIN": "x"},
        "origin-20": {"KAIROS_SCHEDULE_ORIGIN": HUGE},
        "origin-lvl-20": {"KAIROS_SCHEDULE_ORIGIN": f"3:{HUGE}"},
        "origin-lvl-neg": {"KAIROS_SCHEDULE_ORIGIN": "2:-7"},
        "deliver-ms": {"KAIROS_DELIVER_MS": "1"},
        "real-topic": {"REAL_TOPIC": "SCHEDULE_TOPIC_XXXX", "REAL_QID": "9"},
    }
    answers = {}
    for tag, props in variants.items():
        answers[tag] = await _hostile_send(hb, peer, "RowC", tag, props)
        await hb.good_sends(peer, "RowC", 2)
        await hb.good_sends(peer, "RowC", 1, delay_level=2)

    async def delayed(p) -> None:
        for tag, props in variants.items():
            answers[f"{tag}+delay"] = await _hostile_send(
                hb, p, "RowC", f"{tag}-delayed", props, delay_level=18
            )
            await hb.good_sends(p, "RowC", 1, delay_level=15)

    peer = await verify_after_kill9(hb, before_kill=delayed)
    for tag, r in answers.items():
        assert r.code == ResponseCode.SUCCESS, (tag, describe(r))
    served = await drain(peer, "RowC")
    for m in served:
        key = m.properties.get("UNIQ_KEY", "")
        if not key.startswith("EVIL-"):
            continue
        if "delayed" in key:  # the scheduler's own origin, "level:offset"
            level, _, off = m.properties["KAIROS_SCHEDULE_ORIGIN"].partition(":")
            assert level == "18" and off.isdigit() and int(off) < 1000, m.properties
            # the scheduler's own REAL_TOPIC/REAL_QID (as RocketMQ's), not the client's
            assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == ("RowC", "1")
        else:
            assert not any(k.startswith("KAIROS_") for k in m.properties), m.properties
            assert "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties, m.properties
    # a level whose task died would leave later delayed sends undelivered
    after = await hb.good_send(peer, "RowC", delay_level=3, tag="after")
    await asyncio.sleep(LEVEL_MS[3] / 1000 + 0.4)
    got = [m for m in await drain(peer, "RowC") if m.body == after.body]
    assert len(got) == 1, "the delay level stopped delivering after the restart"


async def test_d_commit_offset_beyond_int64(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.wait_bystander_persisted()
    await hb.good_sends(peer, "RowD", 4)
    await hb.good_sends(peer, "RowD", 2, delay_level=5)
    answers = {}
    for value in (HUGE, str(1 << 63), "-99999999999999999999"):
        answers[value] = await peer.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": "Evil",
                "topic": BYSTANDER_TOPIC,
                "queueId": 0,
                "commitOffset": value,
            },
        )
    # the same through a pull's commit-offset bit (PullSysFlag.COMMIT_OFFSET)
    answers["pull"] = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "EvilPull",
            "topic": BYSTANDER_TOPIC,
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 1,
            "sysFlag": 1,
            "commitOffset": HUGE,
            "suspendTimeoutMillis": 0,
            "subVersion": 0,
        },
    )
    for value, r in answers.items():
        assert is_error(r), f"commitOffset {value} was accepted: {describe(r)}"
    await hb.good_sends(peer, "RowD", 2)
    # offsets committed after the hostile one must still reach the disk
    hb.bystander_offsets = {0: 2, 1: 3, 2: 1, 3: 3}
    await hb.commit_bystander(peer)
    peer = await verify_after_kill9(hb)
    for group in ("Evil", "EvilPull"):
        r = await peer.call(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": BYSTANDER_TOPIC, "queueId": 0},
        )
        off = r.ext_fields.get("offset")
        assert off is None or 0 <= int(off) < 1 << 63, f"{group} stored offset {off}"


async def test_e_timer_properties(hostile) -> None:
    """Timer properties: a bad value is refused naming it; a good one is a timer (served
    at its instant, not early, exactly once across kill -9); with a delay level the level
    wins, as in RocketMQ."""
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)

    async def timer_send(
        p, tag: str, prop: str, ahead_ms: int, delay_level: int = 0
    ) -> RemotingCommand:
        """A send with ``prop`` set to fall due ``ahead_ms`` after ``sent`` (relative
        properties count from the broker's receipt, which is later still)."""
        key, body, sent = f"EVIL-{tag}", f"hostile-{tag}".encode(), now_ms()
        value = {"TIMER_DELAY_SEC": str(ahead_ms // 1000), "TIMER_DELAY_MS": str(ahead_ms)}.get(
            prop, str(sent + ahead_ms)
        )
        extra = {"DELAY": str(delay_level)} if delay_level else {}
        r = await send(p, "RowE", body, {"UNIQ_KEY": key, prop: value, **extra}, queue_id=1)
        hb.record_outcome(
            r, "RowE", body, key, 1, LEVEL_MS[delay_level] if delay_level else ahead_ms, sent
        )
        return r

    await hb.good_sends(peer, "RowE", 2)
    for prop, bad in (
        ("TIMER_DELIVER_MS", "soon"),
        ("TIMER_DELAY_SEC", "-5"),
        ("TIMER_DELAY_MS", "9" * 25),
        ("__STARTDELIVERTIME", "0x10"),
    ):
        r = await _hostile_send(hb, peer, "RowE", f"{prop}-bad", {prop: bad})
        assert is_error(r) and prop in (r.remark or ""), (
            f"{prop}={bad} was not refused with a clear error: {describe(r)}"
        )
        await hb.good_sends(peer, "RowE", 2)

    async def pending(p) -> None:
        for prop, ahead in (
            ("TIMER_DELAY_MS", 900),
            ("TIMER_DELAY_SEC", 1000),
            ("TIMER_DELIVER_MS", 1100),
            ("__STARTDELIVERTIME", 1200),
        ):
            r = await timer_send(p, f"{prop}-ok", prop, ahead)
            assert r.code == ResponseCode.SUCCESS, describe(r)
            assert r.ext_fields.get("recallHandle"), "a timer send answers its recall handle"
            r = await timer_send(p, f"{prop}-with-level", prop, 600_000, delay_level=18)
            assert r.code == ResponseCode.SUCCESS, describe(r)  # the level wins
            await hb.good_sends(p, "RowE", 1, delay_level=17)

    await verify_after_kill9(hb, before_kill=pending)
