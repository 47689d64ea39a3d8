"""Issue 10's verified code-read findings, against a real broker process.

Each test ends with ``verify_after_kill9`` (tests/hostile/harness.py): SIGKILL, restart,
every acked message served exactly once, new sends work, a bystander group's offsets kept.

Targets:
* A record forged inside a message body, addressed by CONSUMER_SEND_MSG_BACK or
  VIEW_MESSAGE_BY_ID: refused (error + remark), nothing re-put. Both a naive fake and
  one that forges its own physical offset and a valid CRC.
* A huge size word at a client-given offset: refused quickly, no allocation of it.
* A dead letter whose RETRY_TOPIC names SCHEDULE_TOPIC_XXXX: never resent there (the
  resend reports an error, or the dead letter was refused on the way in).
* A heartbeat naming thousands of groups: accepted as RocketMQ accepts it (no count
  limit), registered over several loop turns so that other clients are answered
  meanwhile; deeply nested JSON as a body gets an error, as a header closes only that
  connection.
* The client and topic ``abc\\n``: a non-retriable error at once, not a retry loop.
"""

from __future__ import annotations

import asyncio
import struct
import time

import orjson
import pytest
from kairosmq.client import Message, Producer
from kairosmq.client.errors import ClientError
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import decode_record, encode_record
from kairosmq.protocol.properties import encode_properties

from tests.helpers import send
from tests.hostile.harness import Acked, describe, is_error, now_ms, verify_after_kill9
from tests.wire import RawPeer

pytestmark = pytest.mark.slow

BODY_POS = 88  # a record's body starts 88 bytes in (IPv4 hosts)
BODY_LEN = 400


def _fake_record(body: bytes, phy: int, topic: bytes = b"FindingVictim") -> bytes:
    return encode_record(
        topic=topic,
        body=body,
        properties=encode_properties({"UNIQ_KEY": body.decode()}).encode(),
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=phy,
        sys_flag=0,
        born_timestamp=now_ms(),
        born_host=(b"\x7f\x00\x00\x01", 1),
        store_timestamp=now_ms(),
        store_host=(b"\x7f\x00\x00\x01", 10911),
        reconsume_times=0,
    )


def _carrier(inner: bytes) -> bytes:
    assert len(inner) <= BODY_LEN
    return inner + b"." * (BODY_LEN - len(inner))


async def _offset_of(peer, topic: str, body: bytes, key: str, hb) -> tuple[int, int]:
    """Send ``body`` (acked, in the ledger); return its commit-log offset and size."""
    r = await send(peer, topic, body, {"UNIQ_KEY": key}, queue_id=0)
    assert r.code == ResponseCode.SUCCESS, describe(r)
    hb.record_outcome(r, topic, body, key, 0, 0, now_ms())
    offset = decode_offset_msg_id(r.ext_fields["msgId"])[2]
    view = await peer.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert view.code == ResponseCode.SUCCESS, f"a real record is not viewable: {describe(view)}"
    return offset, decode_record(view.body).store_size


async def test_forged_record_in_a_body_is_never_reput_or_served(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.good_sends(peer, "Finding", 2)
    await asyncio.sleep(0.1)  # nothing else may be appended between the next sends
    # 1) learn where the next record will start: same size, same properties
    o1, size = await _offset_of(peer, "Finding", _carrier(b""), "CARRIER-1", hb)
    o2 = o1 + size
    naive = _fake_record(b"FAKE-NAIVE", 0)
    forged = _fake_record(b"FAKE-FORGED", o2 + BODY_POS)  # its own offset, a valid CRC
    got, _ = await _offset_of(peer, "Finding", _carrier(forged), "CARRIER-2", hb)
    assert got == o2, "the offset prediction failed (something else was appended)"
    o3, _ = await _offset_of(peer, "Finding", _carrier(naive), "CARRIER-3", hb)
    hb.ledger.refused_bodies |= {b"FAKE-NAIVE", b"FAKE-FORGED"}
    hb.ledger.watch |= {"FindingVictim", "%RETRY%FindingGroup", "%DLQ%FindingGroup"}
    for fake_at in (o2 + BODY_POS, o3 + BODY_POS):
        for level in (0, -1):  # to %RETRY% and straight to %DLQ%
            r = await peer.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": fake_at, "group": "FindingGroup", "delayLevel": level},
            )
            assert is_error(r), f"send-back at a forged record {fake_at}: {describe(r)}"
        r = await peer.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": fake_at})
        assert is_error(r), f"VIEW_MESSAGE_BY_ID served a forged record: {describe(r)}"
        await hb.good_sends(peer, "Finding", 2)
        await hb.good_sends(peer, "Finding", 1, delay_level=3)
    await verify_after_kill9(hb)


async def test_huge_size_word_at_a_client_offset(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    # a body that, read from its first byte, claims a 2 GiB record with the right magic
    evil = (0x7FFFFFF0).to_bytes(4, "big") + (0xDAA320A7).to_bytes(4, "big")
    o, size = await _offset_of(peer, "Huge", _carrier(evil * 4), "HUGE-1", hb)
    # and one whose size fits inside the log: 2000 bytes of whatever follows, not a record
    plausible = (2000).to_bytes(4, "big") + (0xDAA320A7).to_bytes(4, "big")
    o2, _ = await _offset_of(peer, "Huge", _carrier(plausible * 4), "HUGE-2", hb)
    await hb.good_sends(peer, "Huge", 12)
    await hb.good_sends(peer, "Huge", 2, delay_level=2)
    for offset in (
        o + BODY_POS,
        o + BODY_POS + 8,
        o2 + BODY_POS,
        o2 + BODY_POS + 8,
        o + size + 10**12,
        -1,
        -(1 << 63),
    ):
        for code, ext in (
            (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}),
            (
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": offset, "group": "HugeGroup", "delayLevel": 0},
            ),
        ):
            t0 = time.monotonic()
            r = await peer.call(code, ext, timeout=5)
            assert is_error(r), f"{code.name} at {offset}: {describe(r)}"
            assert time.monotonic() - t0 < 2.0, f"{code.name} at {offset} took long"
        await hb.good_sends(peer, "Huge", 1)
    hb.ledger.watch |= {"%RETRY%HugeGroup", "%DLQ%HugeGroup"}
    await verify_after_kill9(hb)


async def test_dead_letter_naming_the_schedule_topic_is_not_resent_there(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.good_sends(peer, "DlqOrigin", 3)
    # route 1: a %RETRY% send past max reconsume times lands in the DLQ with the
    # client's own RETRY_TOPIC
    body = b"dead-letter-route-1"
    r = await send(
        peer,
        "%RETRY%DlqGroup",
        body,
        {"UNIQ_KEY": "DLQ-1", "RETRY_TOPIC": "SCHEDULE_TOPIC_XXXX"},
        queue_id=0,
        j=20,
        l=16,
    )
    hb.record_outcome(r, "%DLQ%DlqGroup", body, "DLQ-1", 0, 0, now_ms())
    # route 2: a consumer's send-back to the DLQ naming the schedule topic as its origin.
    # (Its source topic is left out of the ledger: a resend rightly copies it back there.)
    src = await send(peer, "DlqSource", b"dead-letter-route-2", {"UNIQ_KEY": "DLQ-2"})
    assert src.code == ResponseCode.SUCCESS, describe(src)
    r2 = await peer.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "offset": decode_offset_msg_id(src.ext_fields["msgId"])[2],
            "group": "DlqGroup",
            "delayLevel": -1,
            "originTopic": "SCHEDULE_TOPIC_XXXX",
        },
    )
    assert r2.code == ResponseCode.SUCCESS or is_error(r2), describe(r2)
    await hb.good_sends(peer, "DlqOrigin", 2, delay_level=3)
    status0 = await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})
    r = await peer.call(RequestCode.KAIROS_RESEND_DLQ, {"consumerGroup": "DlqGroup", "maxNum": 100})
    if r.code == ResponseCode.SUCCESS:
        out = orjson.loads(r.body)
        sent_to = [x["topic"] for x in out["resent"]]
        assert set(sent_to) <= {"DlqSource"}, f"resent outside the source topic: {out}"
        assert out["resent"] == [] or out["error"] is None, out
    else:
        assert is_error(r), describe(r)
    # nothing loops: the commit log stops growing once the delayed sends are delivered
    await asyncio.sleep(0.5)
    s1 = orjson.loads((await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})).body)
    await asyncio.sleep(0.6)
    s2 = orjson.loads((await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})).body)
    assert s1["commitLogMaxOffset"] == s2["commitLogMaxOffset"], "the broker keeps appending"
    assert status0.code == ResponseCode.SUCCESS
    await hb.good_sends(peer, "DlqOrigin", 2)
    await verify_after_kill9(hb)


async def test_heartbeat_with_thousands_of_groups_is_bounded(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    before = orjson.loads((await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})).body)
    groups = 5000
    body = orjson.dumps(
        {
            "clientID": "127.0.0.1@hostile",
            "producerDataSet": [{"groupName": f"P{i}"} for i in range(groups)],
            "consumerDataSet": [
                {
                    "groupName": f"Flood{i}",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": f"FloodTopic{i}",
                            "subString": "*",
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": 1,
                            "expressionType": "TAG",
                            "classFilterMode": False,
                        }
                    ],
                }
                for i in range(groups)
            ],
        }
    )
    bystander = await hb.connect()
    hb_task = asyncio.ensure_future(peer.call(RequestCode.HEART_BEAT, {}, body, timeout=10))
    t0 = time.monotonic()
    await hb.good_send(bystander, "Flooded", queue_id=0)  # answered meanwhile
    assert time.monotonic() - t0 < 2.0, "a heartbeat flood stalled another client's send"
    r = await hb_task
    after = orjson.loads((await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})).body)
    created = after["topics"] - before["topics"]
    # RocketMQ 4.9.8 has no count limit (one client instance heartbeats for every group
    # of its JVM): accepted whole, one %RETRY% topic per clustering group, registered
    # over several loop turns (the bystander's send above was answered meanwhile)
    assert r.code == ResponseCode.SUCCESS, describe(r)
    assert created == groups + 1, (  # + Flooded, the bystander's topic
        f"one heartbeat of {groups} groups created {created - 1} topics"
    )
    # deeply nested JSON (orjson < 3.9.15 crashed on it: CVE-2024-27454), as a body and
    # as a header: an error answer, resp. only that connection closed
    deep = b"[" * 100_000 + b"]" * 100_000
    r = await peer.call(RequestCode.HEART_BEAT, {}, deep)
    assert is_error(r), describe(r)
    nested = await RawPeer.connect(hb.address)
    header = b"[" * 30_000 + b"]" * 30_000  # under the header limit
    nested.send_raw(struct.pack(">II", 4 + len(header), len(header)) + header)
    try:
        assert await nested.closed(), "a nested JSON header should close its connection"
    except ConnectionResetError:
        pass  # closed with our bytes unread: a reset is a close too
    await hb.good_sends(bystander, "Flooded", 3)
    await hb.good_sends(bystander, "Flooded", 2, delay_level=2)
    await verify_after_kill9(hb)


async def test_client_refuses_topic_with_newline_at_once(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.good_sends(peer, "Newline", 2)
    r = await send(peer, "abc\n", b"raw-newline", {"UNIQ_KEY": "NL-raw"})
    hb.record_outcome(r, "abc\n", b"raw-newline", "NL-raw", 0, 0, now_ms())
    assert is_error(r), f"the broker took topic 'abc\\n': {describe(r)}"
    producer = Producer("NewlineGroup", f"127.0.0.1:{hb.proc.namesrv_port}", send_msg_timeout=5.0)
    await producer.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(ClientError) as info:
            await producer.send(Message("abc\n", b"client-newline"))
        assert not info.value.retriable, f"a retriable error for a bad name: {info.value!r}"
        assert time.monotonic() - t0 < 2.0, "the producer retried a name it cannot fix"
        sent = now_ms()
        ok = await producer.send(Message("Newline", b"client-ok"))
        hb.ledger.acked[ok.msg_id] = Acked(ok.msg_id, "Newline", 0, b"client-ok", 0, sent)
    finally:
        await producer.shutdown()
    await hb.good_sends(peer, "Newline", 2, delay_level=2)
    await verify_after_kill9(hb)
