from __future__ import annotations

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.wire import RawPeer


async def test_send_then_pull_round_trip(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": "T1",
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": "TAGS\x01A\x02UNIQ_KEY\x01ID1",
        },
        b"hello",
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["queueOffset"] == "0"
    p = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "T1",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 2,
            "commitOffset": 0,
            "suspendTimeoutMillis": 1000,
            "subVersion": 0,
        },
    )
    assert p.code == ResponseCode.SUCCESS, p.remark
    msgs = decode_records(p.body)
    assert [m.body for m in msgs] == [b"hello"]
    assert msgs[0].msg_id == "ID1"
    await peer.close()
