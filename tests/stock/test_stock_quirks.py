"""Stock-client quirks beyond the captured frames: the VIP channel (broker port - 2), the
C++ batch form (SEND_MESSAGE_V2 with ``m``), JSON header oddities, and pulls that carry
no subscription (Java's default) relying on the heartbeat's.
"""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.bodies import java_string_hash
from kairosmq.protocol.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.message import BatchItem, encode_batch

from tests.helpers import free_port, pull, send
from tests.wire import RawPeer

from .golden import RawConn, check_reply_envelope, parse_ipv4_records


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


# ---------------------------------------------------------------------- VIP channel


async def test_vip_channel_answers_on_port_minus_two(broker_factory: Any, tmp_path: Path) -> None:
    port = free_port(below=2)  # P - 2: the VIP channel
    b = await broker_factory(port=port, vip_channel=True, data_dir=tmp_path / "vip")
    assert b.port == port
    vip = await RawPeer.connect(f"127.0.0.1:{port - 2}")
    # What Java 4.0-4.5 sends there: sends, offsets, consumer list, send-back ...
    r = await send(vip, "VipTopic", b"via vip")
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await vip.call(RequestCode.GET_MAX_OFFSET, {"topic": "VipTopic", "queueId": 0})
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "1"})
    await vip.close()
    # ... and the same store is behind both ports.
    main = await RawPeer.connect(b.address)
    r = await pull(main, "VipTopic")
    assert r.code == ResponseCode.SUCCESS
    assert parse_ipv4_records(r.body)[0].body == b"via vip"
    await main.close()


async def test_vip_channel_off_leaves_port_minus_two_closed(
    broker_factory: Any, tmp_path: Path
) -> None:
    port = free_port(below=2)  # P - 2: the VIP channel
    b = await broker_factory(port=port, vip_channel=False, data_dir=tmp_path / "novip")
    assert b.port == port
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port - 2)


# ---------------------------------------------------------------------- JSON quirks, batch


async def test_cpp_style_v2_batch_with_json_quirks(broker: Any) -> None:
    """SEND_MESSAGE_V2 with m="1" (C++'s batch form), JSON numbers and strings mixed in
    extFields, a boolean, unknown keys, remark "", and a newline after the JSON."""
    items = [
        BatchItem(b"first", 0, "KEYS\x01k1\x02TAGS\x01T\x02"),
        BatchItem(b"second", 3, "KEYS\x01k2\x02TAGS\x01T\x02"),
    ]
    header = (
        json.dumps(
            {
                "code": 310,
                "extFields": {
                    "AccessKey": "",
                    "OnsChannel": "ALIYUN",
                    "Signature": "x=",
                    "zzFuture": 1.5,
                    "a": "PG",
                    "b": "BatchTopic",
                    "c": "TBW102",
                    "d": 4,
                    "e": 0,
                    "f": 0,
                    "g": "1795314786893",
                    "h": 0,
                    "i": "WAIT\x01true\x02",
                    "j": "0",
                    "k": False,
                    "l": 16,
                    "m": "1",
                },
                "flag": 0,
                "language": "CPP",
                "opaque": 7,
                "remark": "",
                "version": 333,
            }
        ).encode()
        + b"\n"
    )
    conn = await RawConn.connect(broker.address)
    reply = await conn.call(_json_frame(header, encode_batch(items)))
    check_reply_envelope(reply, {"opaque": 7})
    assert reply.code == ResponseCode.SUCCESS, reply.header
    assert len(reply.ext["msgId"].split(",")) == 2 and reply.ext["queueOffset"] == "0"
    await conn.close()
    peer = await RawPeer.connect(broker.address)
    recs = parse_ipv4_records((await pull(peer, "BatchTopic")).body)
    assert [(r.body, r.properties["KEYS"]) for r in recs] == [(b"first", "k1"), (b"second", "k2")]
    assert all("WAIT" not in r.properties for r in recs)
    await peer.close()


# ---------------------------------------------------------------------- subscriptions


async def test_pull_without_subscription_uses_the_heartbeat_one(broker: Any) -> None:
    """Java pulls carry no subscription (postSubscriptionWhenPull=false): the broker
    filters with the heartbeat's, sent here the C++ way (ordinals, string subVersion).
    COMMIT_OFFSET in the same pull stores the consumer's offset."""
    peer = await RawPeer.connect(broker.address)
    hb = {
        "clientID": "10.0.0.9@42#DEFAULT",
        "consumerDataSet": [
            {
                "groupName": "CG_SUB",
                "consumeType": 1,
                "messageModel": 1,
                "consumeFromWhere": 0,
                "subscriptionDataSet": [
                    {
                        "topic": "SubTopic",
                        "subString": "TagA",
                        "tagsSet": ["TagA"],
                        "codeSet": [java_string_hash("TagA")],
                        "subVersion": "1795314782893",
                    }
                ],
            }
        ],
    }
    r = await peer.call(RequestCode.HEART_BEAT, body=json.dumps(hb).encode() + b"\n")
    assert r.code == ResponseCode.SUCCESS, r.remark
    for tag in ("TagA", "TagB", "TagA"):
        await send(peer, "SubTopic", tag.encode(), {"TAGS": tag})
    r = await pull(peer, "SubTopic", group="CG_SUB", sys_flag=PULL_SUSPEND)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in parse_ipv4_records(r.body)] == [b"TagA", b"TagA"]
    # The request's own subscription wins when it sends one (C++/ali-ons).
    r = await pull(
        peer, "SubTopic", group="CG_SUB", sys_flag=PULL_SUBSCRIPTION, subscription="TagB"
    )
    assert [m.body for m in parse_ipv4_records(r.body)] == [b"TagB"]
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CG_SUB",
            "topic": "SubTopic",
            "queueId": 0,
            "queueOffset": 3,
            "maxMsgNums": 32,
            "sysFlag": PULL_COMMIT_OFFSET | PULL_SUSPEND,
            "commitOffset": 3,
            "suspendTimeoutMillis": 50,
            "subVersion": 0,
        },
    )
    assert r.code == ResponseCode.PULL_NOT_FOUND
    assert broker.offsets.query("CG_SUB", "SubTopic", 0) == 3
    await peer.close()


# ---------------------------------------------------------------------- unsupported


async def test_transactional_half_message_is_stored_not_delivered(broker: Any) -> None:
    """A half message (TRAN_MSG=true, sysFlag PREPARED) is stored in the half topic, not
    in its topic, until END_TRANSACTION commits it (tests/transaction/ covers the rest)."""
    peer = await RawPeer.connect(broker.address)
    r = await send(
        peer, "TxTopic", b"half", {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "U1"}, f=4
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["transactionId"] == "U1"
    assert broker.store.max_offset("TxTopic", 0) == 0
    assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
    r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=b"{}")
    assert r.code == ResponseCode.SUCCESS  # no subscriptionData: nothing to check (RocketMQ)
    await peer.close()
