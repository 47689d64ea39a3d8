from __future__ import annotations

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.helpers import pull, send
from tests.wire import RawPeer


async def test_messages_topics_and_offsets_survive_a_restart(broker_factory, tmp_path) -> None:
    data = tmp_path / "persist"
    b = await broker_factory(data_dir=data)
    peer = await RawPeer.connect(b.address)
    for i in range(10):
        assert (await send(peer, "Keep", f"{i}".encode())).code == ResponseCode.SUCCESS
    r = await peer.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "G", "topic": "Keep", "queueId": 0, "commitOffset": 6},
    )
    assert r.code == ResponseCode.SUCCESS
    r = await peer.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "Fresh", "topic": "Keep", "queueId": 1}
    )
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    await peer.close()
    await b.stop("restart")

    b2 = await broker_factory(data_dir=data)
    peer = await RawPeer.connect(b2.address)
    r = await peer.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Keep", "queueId": 0}
    )
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "6")
    # a group with no offset on a queue whose first message is at 0 starts at 0 (RocketMQ rule)
    r = await peer.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "New", "topic": "Keep", "queueId": 0}
    )
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    msgs = decode_records((await pull(peer, "Keep", offset=6)).body)
    assert [m.body for m in msgs] == [b"6", b"7", b"8", b"9"]
    assert (await send(peer, "Keep", b"10")).ext_fields["queueOffset"] == "10"
    ns = await RawPeer.connect(b2.namesrv_address)
    route = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Keep"})
    assert route.code == ResponseCode.SUCCESS and b'"0":"' in route.body
    await ns.close()
    await peer.close()


async def test_pull_commit_offset_flag_stores_the_offset(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    await send(peer, "C", b"x")
    await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "C",
            "queueId": 0,
            "queueOffset": 1,
            "maxMsgNums": 32,
            "sysFlag": 1,
            "commitOffset": 1,
            "suspendTimeoutMillis": 0,
            "subVersion": 0,
        },
    )
    r = await peer.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "C", "queueId": 0}
    )
    assert r.ext_fields["offset"] == "1"
    await peer.close()
