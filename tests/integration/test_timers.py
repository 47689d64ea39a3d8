"""Timer messages and RECALL_MESSAGE against a real in-process broker, with raw frames.

A send with RocketMQ 5's timer properties is stored, answered with a recallHandle, and
appears in its topic at its due millisecond (never before); RECALL_MESSAGE (370) cancels
it, or a level-delayed message, for good; recalling what already fired, an unknown
message or a bad handle is refused with ILLEGAL_OPERATION and a remark; a recall racing
the fire gets exactly one outcome.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.timer import TIMER_OUT_MS, RecallHandle, decode_recall_handle

from tests.helpers import pull_all, send, wait_until
from tests.wire import RawPeer

ILLEGAL = ResponseCode.ILLEGAL_OPERATION


def now_ms() -> int:
    return int(time.time() * 1000)


async def timer_send(
    peer: RawPeer, topic: str, body: bytes, props: dict[str, str]
) -> tuple[Any, str]:
    key = uuid.uuid4().hex.upper()
    r = await send(peer, topic, body, {"UNIQ_KEY": key, **props}, queue_id=0)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r, key


async def recall(peer: RawPeer, topic: str, handle: str) -> Any:
    return await peer.call(
        RequestCode.RECALL_MESSAGE, {"producerGroup": "PG", "topic": topic, "recallHandle": handle}
    )


async def test_timer_fires_at_its_millisecond_with_a_recall_handle(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    sent = now_ms()
    r, key = await timer_send(peer, "T1", b"hello", {"TIMER_DELAY_MS": "400"})
    handle = decode_recall_handle(r.ext_fields["recallHandle"])
    assert (handle.topic, handle.broker_name, handle.uniq_key) == ("T1", "broker-a", key)
    assert sent + 400 <= handle.deliver_ms <= now_ms() + 401
    assert await pull_all(peer, "T1") == []  # not before its instant
    await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
    (m,) = await pull_all(peer, "T1")
    assert m.body == b"hello" and m.properties["UNIQ_KEY"] == key
    assert "TIMER_DELAY_MS" not in m.properties
    assert int(m.properties[TIMER_OUT_MS]) == handle.deliver_ms
    assert m.store_timestamp >= handle.deliver_ms  # never early
    await peer.close()


async def test_absolute_deliver_ms_and_ons_start_deliver_time(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    due = now_ms() + 300
    await timer_send(peer, "T2", b"a", {"TIMER_DELIVER_MS": str(due)})
    await timer_send(peer, "T2", b"b", {"__STARTDELIVERTIME": str(due + 50)})
    await timer_send(peer, "T2", b"now", {"TIMER_DELIVER_MS": str(now_ms() - 5)})  # due: now
    first = await pull_all(peer, "T2")
    assert [m.body for m in first] == [b"now"]
    await wait_until(lambda: broker.stats.timers_fired == 2, timeout=5)
    got = {m.body: m for m in await pull_all(peer, "T2")}
    assert got[b"a"].store_timestamp >= due and got[b"b"].store_timestamp >= due + 50
    await peer.close()


@pytest.mark.slow  # waits for timers to fire, about 1 s
async def test_recall_before_fire_is_final_and_idempotent(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r, key = await timer_send(peer, "T3", b"cancel-me", {"TIMER_DELAY_MS": "500"})
    await timer_send(peer, "T3", b"keep", {"TIMER_DELAY_MS": "500"})
    handle = r.ext_fields["recallHandle"]
    first = await recall(peer, "T3", handle)
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert first.ext_fields["msgId"] == key
    again = await recall(peer, "T3", handle)
    assert again.code == ResponseCode.SUCCESS and again.remark == "already recalled"
    await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
    await asyncio.sleep(0.3)
    assert [m.body for m in await pull_all(peer, "T3")] == [b"keep"]
    await peer.close()


async def test_recall_after_fire_and_bad_handles_are_refused(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r, key = await timer_send(peer, "T4", b"x", {"TIMER_DELAY_MS": "50"})
    handle = r.ext_fields["recallHandle"]
    await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
    late = await recall(peer, "T4", handle)
    assert late.code == ILLEGAL and "already delivered" in late.remark, late.remark
    h = decode_recall_handle(handle)
    cases = [
        (
            "T4",
            RecallHandle("T4", "broker-a", h.deliver_ms, "F" * 32).encode(),
            ILLEGAL,
            "no delayed or timer message",
        ),
        ("T4", "not-a-handle", ILLEGAL, "recall handle is invalid"),
        (
            "T4",
            RecallHandle("Other", "broker-a", h.deliver_ms, key).encode(),
            ILLEGAL,
            "topic not match",
        ),
        (
            "T4",
            RecallHandle("T4", "broker-z", h.deliver_ms, key).encode(),
            ILLEGAL,
            "broker service not available",
        ),
        (
            "Nope",
            RecallHandle("Nope", "broker-a", h.deliver_ms, key).encode(),
            ResponseCode.TOPIC_NOT_EXIST,
            "not exist",
        ),
    ]
    for topic, bad, code, words in cases:
        resp = await recall(peer, topic, bad)
        assert resp.code == code and words in (resp.remark or ""), (bad, resp.remark)
    assert len(await pull_all(peer, "T4")) == 1
    await peer.close()


async def test_level_delayed_message_recall(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r, _key = await timer_send(peer, "T5", b"level-cancel", {"DELAY": "6"})  # 300 ms
    await timer_send(peer, "T5", b"level-keep", {"DELAY": "6"})
    handle = r.ext_fields["recallHandle"]
    assert decode_recall_handle(handle).topic == "T5"
    resp = await recall(peer, "T5", handle)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await wait_until(lambda: sum(broker.stats.delivered.values()) >= 1, timeout=5)
    await asyncio.sleep(0.3)
    assert [m.body for m in await pull_all(peer, "T5")] == [b"level-keep"]
    late = await recall(peer, "T5", handle)
    assert late.code == ResponseCode.SUCCESS and late.remark == "already recalled"
    await peer.close()


@pytest.mark.slow  # waits for timers to fire, about 1 s
async def test_recall_racing_the_fire_has_exactly_one_outcome(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    outcomes: dict[bytes, int] = {}
    for i in range(30):
        body = f"race-{i}".encode()
        r, _ = await timer_send(peer, "T6", body, {"TIMER_DELAY_MS": str(20 + i % 7)})
        await asyncio.sleep(0.015 + (i % 5) * 0.003)
        resp = await recall(peer, "T6", r.ext_fields["recallHandle"])
        assert resp.code in (ResponseCode.SUCCESS, ILLEGAL), resp.remark
        outcomes[body] = resp.code
    await asyncio.sleep(0.2)
    got = [m.body for m in await pull_all(peer, "T6")]
    assert len(got) == len(set(got))
    for body, code in outcomes.items():
        assert (body in got) == (code == ILLEGAL), (body, code)
    await peer.close()


@pytest.mark.slow  # timers due in 1.5 s
async def test_pending_timers_survive_a_restart(broker_factory, tmp_path) -> None:
    b = await broker_factory(data_dir=tmp_path / "d")
    peer = await RawPeer.connect(b.address)
    due = now_ms() + 1500
    for i in range(5):
        await timer_send(peer, "T7", f"m{i}".encode(), {"TIMER_DELIVER_MS": str(due + i)})
    await peer.close()
    await b.stop()
    b2 = await broker_factory(data_dir=tmp_path / "d")
    peer = await RawPeer.connect(b2.address)
    await wait_until(lambda: b2.stats.timers_fired == 5, timeout=5)
    msgs = await pull_all(peer, "T7")
    assert sorted(m.body for m in msgs) == [f"m{i}".encode() for i in range(5)]
    assert all(m.store_timestamp >= due for m in msgs)
    await peer.close()


async def test_timer_status_reports_pending_per_hour(broker) -> None:
    import orjson

    peer = await RawPeer.connect(broker.address)
    base = now_ms()
    dues = [base + 3_600_000, base + 3_600_500, base + 3 * 3_600_000]
    for i, due in enumerate(dues):
        await timer_send(peer, "T8", f"s{i}".encode(), {"TIMER_DELIVER_MS": str(due)})
    r = await peer.call(RequestCode.KAIROS_GET_TIMER_STATUS, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    st = orjson.loads(r.body)
    assert st["scheduled"] == 3 and st["fired"] == 0 and st["nextDueMs"] == dues[0]
    assert sum(h["entries"] for h in st["entriesPerHour"]) == 3
    assert {h["hourMs"] for h in st["entriesPerHour"]} == {d // 3_600_000 * 3_600_000 for d in dues}
    await peer.close()


async def test_clients_cannot_write_the_timer_topic(broker) -> None:
    """A forged timer or recall record would fire or cancel anything: the topic is a
    system topic, and a forged origin property is stripped."""
    peer = await RawPeer.connect(broker.address)
    r = await send(
        peer,
        "rmq_sys_wheel_timer",
        b"forged",
        {"TIMER_OUT_MS": "1", "REAL_TOPIC": "Victim", "REAL_QID": "0"},
    )
    assert r.code != ResponseCode.SUCCESS and "system topic" in (r.remark or ""), r.remark
    r, _ = await timer_send(
        peer, "T9", b"x", {"KAIROS_TIMER_ORIGIN": "1:0", "KAIROS_RECALL_TARGET": "1:0"}
    )
    (m,) = await pull_all(peer, "T9")
    assert "KAIROS_TIMER_ORIGIN" not in m.properties
    assert broker.timer.cursor == (0, -1)
    await peer.close()


async def test_malformed_recall_requests_are_refused_and_the_broker_serves(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r, _ = await timer_send(peer, "T10", b"x", {"TIMER_DELAY_SEC": "60"})
    good = r.ext_fields["recallHandle"]
    bad = [
        {"producerGroup": "PG", "topic": "T10"},  # no recallHandle
        {"producerGroup": "/../x", "topic": "T10", "recallHandle": good},
        {"producerGroup": "PG", "topic": "T10", "recallHandle": "QUJD" * 4000},
        {"producerGroup": "PG", "topic": "T10\x00", "recallHandle": good},
        {
            "producerGroup": "PG",
            "topic": "T10",
            "recallHandle": RecallHandle("T10", "broker-a", 2**63 - 1, "Z" * 300).encode(),
        },
    ]
    for ext in bad:
        resp = await peer.call(RequestCode.RECALL_MESSAGE, ext)
        assert resp.code != ResponseCode.SUCCESS and resp.remark, (ext, resp)
    st = await peer.call(RequestCode.KAIROS_GET_TIMER_STATUS, {"junk": "\x00" * 10})
    assert st.code == ResponseCode.SUCCESS  # extra fields are ignored
    # still pending, still recallable, and the broker serves
    assert broker.stats.timers_fired == 0
    resp = await recall(peer, "T10", good)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert (await send(peer, "T10b", b"ok")).code == ResponseCode.SUCCESS
    await peer.close()
