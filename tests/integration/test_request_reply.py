"""Request-reply (SEND_REPLY_MESSAGE 324 / _V2 325, PUSH_REPLY_MESSAGE_TO_CLIENT 326) and
the message-trace topic at a real in-process broker: raw frames first (what the broker
answers, pushes and stores), then the bundled Producer.request <-> a PushConsumer that
replies with create_reply. The stock Java 4.9.8 examples are in tests/stock/test_java_rpc.py.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest
from kairosmq.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    ReplyTimeout,
    create_reply,
    get_reply_to_client,
)
from kairosmq.protocol.bodies import HeartbeatData
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import decode_records
from kairosmq.protocol.naming import TRACE_TOPIC
from kairosmq.protocol.properties import (
    CLUSTER,
    CORRELATION_ID,
    MESSAGE_TTL,
    MESSAGE_TYPE,
    PUSH_REPLY_TIME,
    REPLY_TO_CLIENT,
    decode_properties,
)
from kairosmq.server.broker import Broker
from kairosmq.server.cli import _broker_parser, build_config

from tests.helpers import pull, send, send_ext, wait_until
from tests.wire import RawPeer

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"
REQUESTER = "127.0.0.1@req-1"


def reply_props(client: str | None = REQUESTER, cid: str = "c-1") -> dict[str, str]:
    props = {MESSAGE_TYPE: "reply", CORRELATION_ID: cid, MESSAGE_TTL: "3000"}
    if client is not None:
        props[REPLY_TO_CLIENT] = client
    return props


async def requester(broker: Broker, client_id: str = REQUESTER) -> RawPeer:
    """A raw peer registered as a producer (HEART_BEAT), as a requesting client is."""
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(R.HEART_BEAT, {}, HeartbeatData(client_id, ["ReqPG"]).to_json())
    assert r.code == ResponseCode.SUCCESS, r.remark
    return peer


async def answer_push(peer: RawPeer, code: int = ResponseCode.SUCCESS) -> RemotingCommand:
    """Take the broker's next request on ``peer`` (the 326 push) and answer it."""
    push = await asyncio.wait_for(peer.requests.get(), 5)
    peer.writer.write(
        encode_command(push.response(code, remark=None if code == 0 else "no waiter"))
    )
    return push


async def send_reply(
    peer: RawPeer, props: dict[str, str], body: bytes = b"pong", *, v2: bool = True
) -> RemotingCommand:
    ext = send_ext(REPLY_TOPIC, props, queue_id=0, a="RespPG")
    if not v2:
        names = {
            "a": "producerGroup",
            "b": "topic",
            "c": "defaultTopic",
            "d": "defaultTopicQueueNums",
            "e": "queueId",
            "f": "sysFlag",
            "g": "bornTimestamp",
            "h": "flag",
            "i": "properties",
        }
        ext = {names[k]: v for k, v in ext.items()}
    return await peer.call(R.SEND_REPLY_MESSAGE_V2 if v2 else R.SEND_REPLY_MESSAGE, ext, body)


async def stored_replies(peer: RawPeer) -> list[Any]:
    r = await pull(peer, REPLY_TOPIC, 0, 0, suspend_ms=0)
    return decode_records(r.body) if r.code == ResponseCode.SUCCESS else []


@pytest.mark.parametrize("v2", [True, False], ids=["325", "324"])
async def test_reply_is_pushed_to_the_requester_and_stored(broker: Broker, v2: bool) -> None:
    req = await requester(broker)
    resp = await RawPeer.connect(broker.address)
    try:
        call = asyncio.ensure_future(send_reply(resp, reply_props(), v2=v2))
        push = await answer_push(req)
        r = await call
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert push.code == R.PUSH_REPLY_MESSAGE_TO_CLIENT and not push.is_oneway
        assert push.body == b"pong"
        ext = push.ext_fields
        assert ext["topic"] == REPLY_TOPIC and ext["producerGroup"] == "RespPG"
        assert ext["storeHost"] == broker.address and int(ext["storeTimestamp"]) > 0
        assert ext["bornHost"].startswith("127.0.0.1:")
        props = decode_properties(ext["properties"])
        assert props[CORRELATION_ID] == "c-1" and props[REPLY_TO_CLIENT] == REQUESTER
        assert int(props[PUSH_REPLY_TIME]) > 0
        # storeReplyMessageEnable: the reply is also in the reply topic, msgId is its own
        (rec,) = await stored_replies(resp)
        assert rec.body == b"pong" and rec.properties[CORRELATION_ID] == "c-1"
        assert r.ext_fields["msgId"] == rec.offset_msg_id and r.ext_fields["queueOffset"] == "0"
    finally:
        await req.close()
        await resp.close()


async def test_reply_refusals_name_the_client(broker: Broker) -> None:
    req = await requester(broker)
    resp = await RawPeer.connect(broker.address)
    try:
        r = await send_reply(resp, reply_props(client="127.0.0.1@nobody"))
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert "channel of <127.0.0.1@nobody> not found" in (r.remark or "")
        r = await send_reply(resp, reply_props(client=None))
        assert r.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT" in (r.remark or "")
        call = asyncio.ensure_future(send_reply(resp, reply_props()))
        await answer_push(req, ResponseCode.SYSTEM_ERROR)
        r = await call
        assert r.code == ResponseCode.SYSTEM_ERROR and REQUESTER in (r.remark or "")
        # RocketMQ stores a reply even when the push failed (the answer says it failed)
        assert len(await stored_replies(resp)) == 3
        # an unknown topic is refused before anything is pushed or stored
        ext = send_ext("NoSuchReplyTopic", reply_props(), queue_id=0)
        r = await resp.call(R.SEND_REPLY_MESSAGE_V2, ext, b"x")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert req.requests.empty()
    finally:
        await req.close()
        await resp.close()


async def test_requester_gone_fails_the_push(broker: Broker) -> None:
    req = await requester(broker)
    await req.close()
    resp = await RawPeer.connect(broker.address)
    try:
        await wait_until(lambda: not broker.clients.producers.get("ReqPG"))
        r = await send_reply(resp, reply_props())
        assert r.code == ResponseCode.SYSTEM_ERROR and "not found" in (r.remark or "")
    finally:
        await resp.close()


async def test_store_reply_off_pushes_only(broker_factory: Any) -> None:
    broker = await broker_factory(store_reply_message_enable=False)
    req = await requester(broker)
    resp = await RawPeer.connect(broker.address)
    try:
        call = asyncio.ensure_future(send_reply(resp, reply_props()))
        await answer_push(req)
        r = await call
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["msgId"] == "0"
        assert await stored_replies(resp) == []
    finally:
        await req.close()
        await resp.close()


# ---------------------------------------------------------------- message trace topic


async def test_trace_topic_accepts_sends_when_enabled(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    try:
        assert broker.topics.get(TRACE_TOPIC) is not None
        r = await send(peer, TRACE_TOPIC, b"Pub\x01...", {"KEYS": "MSGID1 k1"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await peer.call(
            R.QUERY_MESSAGE,
            {
                "topic": TRACE_TOPIC,
                "key": "MSGID1",
                "maxNum": 32,
                "beginTimestamp": 0,
                "endTimestamp": 2**62,
            },
        )
        assert r.code == ResponseCode.SUCCESS and len(decode_records(r.body)) == 1
        # other system topics stay closed
        r = await send(peer, "RMQ_SYS_TRANS_OP_HALF_TOPIC")
        assert r.code == ResponseCode.NO_PERMISSION
    finally:
        await peer.close()


async def test_trace_topic_refused_when_disabled(broker_factory: Any) -> None:
    broker = await broker_factory(trace_topic_enable=False)
    peer = await RawPeer.connect(broker.address)
    try:
        assert broker.topics.get(TRACE_TOPIC) is None
        r = await send(peer, TRACE_TOPIC)
        assert r.code == ResponseCode.NO_PERMISSION and "system topic" in (r.remark or "")
    finally:
        await peer.close()


def test_cli_flags_for_trace_topic_and_stored_replies() -> None:
    ap = argparse.ArgumentParser()
    _broker_parser(ap.add_subparsers())
    on = build_config(ap.parse_args(["broker"]))
    assert on.trace_topic_enable is True and on.store_reply_message_enable is True
    off = build_config(
        ap.parse_args(["broker", "--no-trace-topic-enable", "--no-store-reply-message-enable"])
    )
    assert off.trace_topic_enable is False and off.store_reply_message_enable is False


# ---------------------------------------------------------------- bundled client


@pytest.mark.slow  # a 0.8 s reply timeout, rebalances
async def test_producer_request_gets_the_consumers_reply(broker: Broker) -> None:
    ns = broker.namesrv_address
    async with Producer("ReqPG", ns) as requester_p, Producer("RespPG", ns) as responder:
        seen: list[Any] = []

        async def listener(msgs: list[Any], _ctx: Any) -> Any:
            for m in msgs:
                seen.append(m)
                await responder.send(create_reply(m, b"re:" + m.body))
            return ConsumeStatus.CONSUME_SUCCESS

        await requester_p.send(Message("RpcT", b"warm-up"))  # creates the topic
        c = PushConsumer(
            "RespCG", ns, rebalance_interval=0.5, consume_from_where=ConsumeFromWhere.LAST_OFFSET
        )
        c.subscribe("RpcT", "*")
        c.register_listener(listener)
        await c.start()
        try:
            replies = await asyncio.gather(
                *(requester_p.request(Message("RpcT", b"q%d" % i), timeout=10) for i in range(5))
            )
            assert sorted(r.body for r in replies) == [b"re:q%d" % i for i in range(5)]
            for r in replies:
                assert r.topic == REPLY_TOPIC and r.properties[MESSAGE_TYPE] == "reply"
                assert r.properties[REPLY_TO_CLIENT] == requester_p.client_id
            asked = [m for m in seen if m.body.startswith(b"q")]
            assert {get_reply_to_client(m) for m in asked} == {requester_p.client_id}
            assert all(
                m.properties[CLUSTER] == "DefaultCluster" and m.properties[MESSAGE_TTL] == "10000"
                for m in asked
            )
            assert len(requester_p._replies) == 0  # no waiter left behind
            # nobody answers -> ReplyTimeout, and the waiter is removed
            with pytest.raises(ReplyTimeout):
                await requester_p.request(Message("RpcNoAnswerT", b"lonely"), timeout=0.8)
            assert len(requester_p._replies) == 0
        finally:
            await c.shutdown()


def test_create_reply_needs_a_delivered_request() -> None:
    from kairosmq.client.errors import MessageError

    with pytest.raises(MessageError, match="CLUSTER"):
        create_reply(Message("T", b"x"), b"y")
    m = create_reply(
        Message(
            "T",
            b"x",
            properties={
                CLUSTER: "C1",
                CORRELATION_ID: "id",
                REPLY_TO_CLIENT: "cl",
                MESSAGE_TTL: "5",
            },
        ),
        "ok",
    )
    assert m.topic == "C1_REPLY_TOPIC" and m.body == b"ok"
    assert m.properties == {
        MESSAGE_TYPE: "reply",
        CORRELATION_ID: "id",
        REPLY_TO_CLIENT: "cl",
        MESSAGE_TTL: "5",
    }


async def test_acl_checks_pub_on_the_reply_topic(broker_factory: Any, tmp_path: Any) -> None:
    """With plain ACL a reply needs PUB on the reply topic (RocketMQ checks nothing for 325):
    producer_ak (default DENY) is refused before anything is pushed; an admin gets through
    to the push (no such requester here)."""
    from tests.security.acl_setup import ACL_FILE, ADMIN, PRODUCER, signed_client

    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    broker = await broker_factory(acl_file=path)
    for creds, code in ((PRODUCER, ResponseCode.NO_PERMISSION), (ADMIN, ResponseCode.SYSTEM_ERROR)):
        client = signed_client(broker.address, creds)
        try:
            for rc, ext in (
                (R.SEND_REPLY_MESSAGE_V2, send_ext(REPLY_TOPIC, reply_props())),
                (
                    R.SEND_REPLY_MESSAGE,
                    {
                        "producerGroup": "RespPG",
                        "topic": REPLY_TOPIC,
                        "defaultTopic": "TBW102",
                        "defaultTopicQueueNums": "4",
                        "queueId": "0",
                        "sysFlag": "0",
                        "bornTimestamp": "1",
                        "flag": "0",
                        "properties": send_ext("x", reply_props())["i"],
                    },
                ),
            ):
                r = await client.invoke(rc, {k: str(v) for k, v in ext.items()}, b"x", timeout=5)
                assert r.code == code, (creds.access_key, rc, r.code, r.remark)
                if code == ResponseCode.SYSTEM_ERROR:
                    assert "not found" in (r.remark or "")
        finally:
            client.close()
