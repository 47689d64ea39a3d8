"""Client bytes cannot hurt the broker: each bad input gets a code and a remark, or closes
only its own connection, and the broker keeps serving everyone else."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.helpers import pull, send, wait_until
from tests.wire import RawPeer


async def _still_serving(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "Healthy", b"ok")
    assert r.code == ResponseCode.SUCCESS
    await peer.close()


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">I", 64 * 1024 * 1024),  # declared length over 16 MiB
        struct.pack(">I", 2),  # length below the minimum
        struct.pack(">II", 8, 0x00000100) + b"xxxx",  # header length beyond the frame
        struct.pack(">II", 8, 0x07000004) + b"{}  ",  # unknown serialize type
        struct.pack(">II", 9, 5) + b"notjs",  # JSON header that is not JSON
        struct.pack(">II", 7, 3) + b"[1]",  # JSON array header
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # a gRPC (5.x) client
    ],
    ids=["oversized", "too-short", "hlen-overrun", "bad-type", "bad-json", "json-array", "http2"],
)
async def test_malformed_frame_closes_only_that_connection(broker, garbage) -> None:
    bystander = await RawPeer.connect(broker.address)
    bad = await RawPeer.connect(broker.address)
    bad.send_raw(garbage)
    assert await bad.closed(), "the broker should close a connection sending garbage"
    r = await send(bystander, "Bystander", b"fine")
    assert r.code == ResponseCode.SUCCESS
    await bystander.close()
    await _still_serving(broker)


async def test_unknown_request_code(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(9999, {})
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in (r.remark or "")
    # the name-server port does not serve broker codes either, and vice versa
    ns = await RawPeer.connect(broker.namesrv_address)
    r = await ns.call(RequestCode.SEND_MESSAGE_V2, {})
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    await peer.close()
    await ns.close()


@pytest.mark.parametrize(
    "topic,code,fragment",
    [
        ("", ResponseCode.SYSTEM_ERROR, "blank"),
        ("x" * 128, ResponseCode.SYSTEM_ERROR, "128 characters"),
        ("bad topic!", ResponseCode.SYSTEM_ERROR, "outside"),
        ("SCHEDULE_TOPIC_XXXX", ResponseCode.NO_PERMISSION, "system topic"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", ResponseCode.NO_PERMISSION, "system topic"),
        ("TBW102", ResponseCode.NO_PERMISSION, "system topic"),
        ("abc\n", ResponseCode.SYSTEM_ERROR, "outside"),  # fullmatch, not match + $
        ("%RETRY%/../x", ResponseCode.SYSTEM_ERROR, "outside"),  # never a path
        ("x\x00y", ResponseCode.SYSTEM_ERROR, "outside"),
    ],
)
async def test_bad_topics_are_rejected(broker, topic, code, fragment) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, topic, b"x")
    assert r.code == code
    assert fragment in (r.remark or "")
    await peer.close()
    assert broker.store.commitlog.max_offset == 0, "nothing is stored for a rejected send"


async def test_oversized_body_and_properties(broker_factory) -> None:
    b = await broker_factory(max_message_size=1024)
    peer = await RawPeer.connect(b.address)
    r = await send(peer, "Big", b"x" * 1025)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "1025 bytes" in (r.remark or "")
    r = await send(peer, "Big", b"x", {"k": "v" * 40000})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in (r.remark or "")
    assert (await send(peer, "Big", b"x" * 1024)).code == ResponseCode.SUCCESS
    await peer.close()


async def test_bad_delay_levels(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    # a level of 0 or below is no delay, as RocketMQ 4.9.8 (getDelayTimeLevel() > 0):
    # stored in its topic at once, without the DELAY property
    r = await send(peer, "D", b"neg", {"DELAY": "-1"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    got = decode_records((await pull(peer, "D", suspend_ms=0)).body)
    assert [m.body for m in got] == [b"neg"] and "DELAY" not in got[0].properties
    r = await send(peer, "D", b"x", {"DELAY": "soon"})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "integer" in (r.remark or "")
    await peer.close()


async def test_missing_and_malformed_header_fields(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(RequestCode.SEND_MESSAGE_V2, {"b": "T"}, b"x")  # no producer group
    assert r.code == ResponseCode.SYSTEM_ERROR and "'a'" in (r.remark or "")
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {"consumerGroup": "G", "topic": "T", "queueId": "zero", "queueOffset": 0},
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in (r.remark or "")
    r = await peer.call(RequestCode.HEART_BEAT, {}, b"{not json")
    assert r.code == ResponseCode.SYSTEM_ERROR and "JSON" in (r.remark or "")
    r = await peer.call(RequestCode.HEART_BEAT, {}, b'{"consumerDataSet": 5}')
    assert r.code == ResponseCode.SYSTEM_ERROR
    r = await peer.call(
        RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 123456789, "group": "G", "delayLevel": 0}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "123456789" in (r.remark or "")
    r = await peer.call(
        RequestCode.SEND_BATCH_MESSAGE,
        {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0},
        b"\x00\x00\x00\x05garbage",
    )
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "batch" in (r.remark or "")
    await peer.close()
    await _still_serving(broker)


async def test_oneway_requests_get_no_answer(broker) -> None:
    from kairosmq.protocol.codec import encode_command
    from kairosmq.protocol.commands import request

    peer = await RawPeer.connect(broker.address)
    # refused one-way (an offset for a topic that does not exist): no answer either
    peer.send_raw(
        encode_command(
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "5"},
                opaque=76,
                oneway=True,
            )
        )
    )
    r = await peer.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    peer.send_raw(
        encode_command(
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "7"},
                opaque=77,
                oneway=True,
            )
        )
    )
    r = await peer.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0}
    )
    assert r.ext_fields["offset"] == "7"
    assert peer.requests.empty() and 77 not in peer.pending and 76 not in peer.pending
    await peer.close()


async def test_pull_with_unsupported_filter(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "F", b"x")
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "F",
            "queueId": 0,
            "queueOffset": 0,
            "sysFlag": 4,
            "subscription": "a > 1",
            "expressionType": "XPATH",
            "subVersion": 0,
        },
    )
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {  # SQL92 that does not parse
            "consumerGroup": "G",
            "topic": "F",
            "queueId": 0,
            "queueOffset": 0,
            "sysFlag": 4,
            "subscription": "a >",
            "expressionType": "SQL92",
            "subVersion": 0,
        },
    )
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 4" in r.remark
    r = await pull(peer, "F")
    assert r.code == ResponseCode.SUCCESS
    await peer.close()


async def test_a_peer_that_never_reads_its_answers_is_bounded(broker) -> None:
    """Requests keep coming but answers are never read: the broker stops reading that
    connection (write backpressure) instead of buffering answers without limit."""
    import asyncio

    from kairosmq.protocol.codec import encode_command
    from kairosmq.protocol.commands import request

    producer = await RawPeer.connect(broker.address)
    for i in range(64):
        await send(producer, "Hoard", b"x" * 1024, {"UNIQ_KEY": f"H{i}"})
    pull_frame = encode_command(
        request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "G",
                "topic": "Hoard",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": "0",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subVersion": "0",
            },
        )
    )
    reader, writer = await asyncio.open_connection(*broker.address.rsplit(":", 1))
    writer.transport.set_write_buffer_limits(high=1 << 24)  # our side: never block
    for _ in range(3000):  # ~3000 answers of ~33 KiB = ~100 MB if the broker buffered them
        writer.write(pull_frame)

    def hoarder_of() -> Any:
        return max(broker.server.connections, key=lambda c: c.transport.get_write_buffer_size())

    # event-driven: wait until the broker has stopped both writing and reading that peer
    await wait_until(
        lambda: hoarder_of()._write_paused and hoarder_of()._reading_paused,
        timeout=20,
        what="write backpressure on the hoarding connection",
    )
    hoarder = hoarder_of()
    buffered = hoarder.transport.get_write_buffer_size()
    assert buffered < 8 * 1024 * 1024, f"{buffered} bytes of unread answers held by the broker"
    assert hoarder._reading_paused
    # everyone else is still served
    r = await pull(producer, "Hoard", max_n=1)
    assert r.code == ResponseCode.SUCCESS
    writer.close()
    await producer.close()
