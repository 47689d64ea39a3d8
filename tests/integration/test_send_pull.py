from __future__ import annotations

import asyncio
import time
from typing import Any

from kairosmq.protocol.codes import PULL_SUBSCRIPTION, PULL_SUSPEND, RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.helpers import pull, send, wait_until
from tests.wire import RawPeer


def _parked(broker: Any, topic: str, queue_id: int) -> bool:
    """A pull is held on the queue (waiting on the broker's arrival notifier)."""
    return bool(broker.notifier.is_waiting(topic, queue_id))


async def test_binary_and_json_headers_are_answered_in_kind(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for binary in (False, True):
        r = await peer.call(
            RequestCode.GET_MAX_OFFSET, {"topic": "Nope", "queueId": 0}, binary=binary
        )
        assert r.code == ResponseCode.SUCCESS
        assert r.ext_fields == {"offset": "0"}
        assert r.serialize_type == (1 if binary else 0)
    await peer.close()


async def test_pull_status_table(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    # unknown topic
    r = await pull(peer, "Missing")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    for i in range(3):
        assert (await send(peer, "PT", f"m{i}".encode())).code == ResponseCode.SUCCESS
    r = await pull(peer, "PT", offset=0, max_n=2)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(r.body)] == [b"m0", b"m1"]
    assert r.ext_fields["nextBeginOffset"] == "2"
    assert r.ext_fields["maxOffset"] == "3" and r.ext_fields["minOffset"] == "0"
    r = await pull(peer, "PT", offset=3)  # caught up, no suspend flag
    assert (r.code, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "3")
    r = await pull(peer, "PT", offset=9)  # beyond the end
    assert (r.code, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "3")
    r = await pull(peer, "PT", queue_id=1, offset=5)  # empty queue, offset > 0
    assert (r.code, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")
    r = await pull(peer, "PT", queue_id=99)
    assert r.code == ResponseCode.SYSTEM_ERROR and "out of range" in (r.remark or "")
    await peer.close()


async def test_tag_filter_on_the_broker(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    for tag in ("A", "B", "A", "C"):
        await send(peer, "TT", tag.encode(), {"TAGS": tag})
    r = await pull(peer, "TT", sys_flag=PULL_SUBSCRIPTION, subscription="A || C")
    assert [m.body for m in decode_records(r.body)] == [b"A", b"A", b"C"]
    r = await pull(peer, "TT", sys_flag=PULL_SUBSCRIPTION, subscription="Z")
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert r.ext_fields["nextBeginOffset"] == "4"
    await peer.close()


async def test_long_poll_wakes_on_arrival_and_others_proceed(broker) -> None:
    consumer = await RawPeer.connect(broker.address)
    producer = await RawPeer.connect(broker.address)
    await send(producer, "LP", b"first")
    started = time.monotonic()
    held = asyncio.ensure_future(
        pull(consumer, "LP", offset=1, sys_flag=PULL_SUSPEND, suspend_ms=10_000)
    )
    await wait_until(lambda: _parked(broker, "LP", 0), 5.0, what="the pull parked")
    assert not held.done()
    # the held pull does not block other requests on the same connection
    r = await consumer.call(RequestCode.GET_MAX_OFFSET, {"topic": "LP", "queueId": 0})
    assert r.ext_fields["offset"] == "1"
    await send(producer, "LP", b"second")
    r = await asyncio.wait_for(held, 2)
    assert time.monotonic() - started < 2
    assert [m.body for m in decode_records(r.body)] == [b"second"]
    await consumer.close()
    await producer.close()


async def test_long_poll_times_out_with_not_found(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "LT", b"x")
    started = time.monotonic()
    r = await pull(peer, "LT", offset=1, sys_flag=PULL_SUSPEND, suspend_ms=300)
    elapsed = time.monotonic() - started
    assert r.code == ResponseCode.PULL_NOT_FOUND
    assert 0.25 <= elapsed < 2
    await peer.close()


async def test_held_pull_is_answered_when_the_broker_stops(broker_factory) -> None:
    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    await send(peer, "ST", b"x")
    held = asyncio.ensure_future(
        pull(peer, "ST", offset=1, sys_flag=PULL_SUSPEND, suspend_ms=15_000)
    )
    await wait_until(lambda: _parked(b, "ST", 0), 5.0, what="the pull parked")
    await b.stop("test")
    r = await asyncio.wait_for(held, 3)
    assert r.code == ResponseCode.PULL_NOT_FOUND


async def test_batch_send_stores_each_item(broker) -> None:
    from kairosmq.protocol.message import BatchItem, encode_batch

    peer = await RawPeer.connect(broker.address)
    body = encode_batch(
        [BatchItem(b"b1", 0, "UNIQ_KEY\x01U1"), BatchItem(b"b2", 0, "UNIQ_KEY\x01U2")]
    )
    r = await peer.call(
        RequestCode.SEND_BATCH_MESSAGE,
        {"a": "PG", "b": "BT", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0, "i": ""},
        body,
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(r.ext_fields["msgId"].split(",")) == 2
    msgs = decode_records((await pull(peer, "BT")).body)
    assert [(m.body, m.msg_id) for m in msgs] == [(b"b1", "U1"), (b"b2", "U2")]
    await peer.close()


async def test_view_message_and_search_by_time(broker) -> None:
    from kairosmq.protocol.ids import decode_offset_msg_id

    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "VT", b"look me up")
    _ip, port, offset = decode_offset_msg_id(r.ext_fields["msgId"])
    assert port == broker.port
    v = await peer.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert decode_records(v.body)[0].body == b"look me up"
    s = await peer.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        {"topic": "VT", "queueId": 0, "timestamp": int(time.time() * 1000) + 10_000},
    )
    assert s.ext_fields["offset"] == "0"
    await peer.close()


async def test_search_by_timestamp_over_many_messages(broker) -> None:
    """60 messages in bursts with gaps: every probe lands on the first offset stored at or
    after the timestamp (the last offset past the end, the first before the start)."""
    peer = await RawPeer.connect(broker.address)
    for burst in range(12):
        for i in range(5):
            assert (await send(peer, "ST60", b"%d-%d" % (burst, i))).code == 0
        await asyncio.sleep(0.004)  # distinct store milliseconds between bursts
    stamps: list[int] = []
    while len(stamps) < 60:
        r = await pull(peer, "ST60", offset=len(stamps), max_n=32)
        assert r.code == ResponseCode.SUCCESS
        stamps += [m.store_timestamp for m in decode_records(r.body)]
    assert stamps == sorted(stamps) and len(set(stamps)) >= 6

    async def search(ts: int) -> int:
        s = await peer.call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "ST60", "queueId": 0, "timestamp": ts}
        )
        assert s.code == ResponseCode.SUCCESS, s.remark
        return int(s.ext_fields["offset"])

    for ts in sorted(set(stamps)):
        for probe in (ts - 1, ts, ts + 1):
            expected = next((i for i, t in enumerate(stamps) if t >= probe), 59)
            assert await search(probe) == expected, (probe, stamps)
    assert await search(0) == 0
    assert await search(stamps[-1] + 3_600_000) == 59
    await peer.close()
