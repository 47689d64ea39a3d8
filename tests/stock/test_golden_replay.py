"""Golden replay: every request frame captured from a real client (ali-ons 3.12.0, C++
0.4.4-era 1.x, C++ 2.1.0) is written as raw bytes to a real in-process broker, and each
reply is checked the way that client reads it.

Per client folder (captures in tests/fixtures/real-client-frames, see its README):
* ``silent_*`` frames (the first route lookups) go to a fresh broker: an unknown topic
  answers TOPIC_NOT_EXIST, ``TBW102`` a route; ``%RETRY%<group>`` answers TOPIC_NOT_EXIST
  until the group's heartbeat created it (RocketMQ's name server creates nothing on a
  lookup; the clients look it up again at their next route poll).
* The captured send, on a fresh broker with no topic, auto-creates ``TopicTest`` through
  ``TBW102``.
* ``flow-*`` frames replay in their capture order (flow-request-order.txt) after an admin
  created ``TopicTest``: route, heartbeat, consumer list, offset query (QUERY_NOT_FOUND,
  then the client's ``notfound-*`` GET_MAX_OFFSET), two long-polled pulls held on the
  consumer connection while other requests on it are answered, the delayed send (the held
  pull answers once the level delay passed), unregister, the first send-back (the held
  %RETRY% pull answers after level 3), offset commits and the send-back of a retried
  message. The only change to any frame: a send-back's commit-log ``offset`` is set to
  the offset of the record that client just pulled from this broker (the captured value
  pointed into the capture stand-in's log); ``patch_ext`` keeps everything else verbatim.
* Reply shapes are compared field by field with ``mock-replies-accepted`` (replies the
  three clients accepted).
* The gRPC client's HTTP/2 preface closes only its own connection.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from typing import Any

import pytest
from kairosmq.protocol.codec import FrameReader
from kairosmq.protocol.codes import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    LanguageCode,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.server.schedule.delay.levels import parse_delay_levels

from tests.helpers import FAST_LEVELS, FIXTURES
from tests.protocol.captures import MOCK_REPLIES, REQUEST_CLIENTS, expected_ext, index
from tests.wire import RawPeer

from .golden import (
    MESSAGE_MAGIC,
    RawConn,
    Reply,
    check_reply_envelope,
    loads_route,
    parse_ipv4_records,
    patch_ext,
)

LEVELS_MS = parse_delay_levels(FAST_LEVELS)
TOPIC = "TopicTest"
SLACK_MS = 5  # clock rounding between the loop clock and the store's ms timestamps


def _frames(client: str, prefix: str) -> list[tuple[dict[str, Any], bytes]]:
    out = []
    for e in sorted(index(client), key=lambda e: e["file"]):
        if e["file"].startswith(prefix):
            out.append((e, bytes.fromhex((FIXTURES / client / e["file"]).read_text().strip())))
    return out


def _mock(name: str) -> tuple[dict[str, Any], bytes]:
    e = next(e for e in index(MOCK_REPLIES) if e["file"] == name)
    raw = bytes.fromhex((FIXTURES / MOCK_REPLIES / name).read_text().strip())
    (hlen,) = struct.unpack_from(">I", raw, 4)
    return e, raw[8 + hlen :]


def _decodes_as_documented(e: dict[str, Any], frame: bytes) -> None:
    """The broker's codec turns the captured frame into the header in index.json."""
    reader = FrameReader()
    reader.feed(frame)
    cmds = list(reader)
    assert len(cmds) == 1
    cmd, h = cmds[0], e["header"]
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (
        h["code"],
        h["opaque"],
        h["flag"],
        h["version"],
    )
    assert cmd.language is LanguageCode[h["language"]]
    assert cmd.ext_fields == expected_ext(h)


def _route_ok(broker: Any, reply: Reply, topic: str) -> dict[str, Any]:
    assert reply.code == ResponseCode.SUCCESS, reply.header
    raw = reply.body
    assert b'"brokerAddrs":{"0":' in raw, raw  # quoted key "0" = master
    route = json.loads(raw)  # standard JSON: jsoncpp, fastjson and JSON2 all parse it
    (bd,) = route["brokerDatas"]
    assert bd["brokerAddrs"] == {"0": broker.address}
    assert bd["brokerName"] == broker.config.broker_name
    (qd,) = route["queueDatas"]
    assert qd["brokerName"] == bd["brokerName"] and qd["perm"] & 6 == 6
    assert qd["readQueueNums"] >= 1 and qd["writeQueueNums"] >= 1
    # Field by field against the route body all three clients accepted.
    mock = loads_route(_mock("reply-route-to-105.hex")[1])
    assert set(route) >= set(mock)
    assert set(bd) >= set(mock["brokerDatas"][0])
    assert set(qd) >= set(mock["queueDatas"][0])
    assert all(type(qd[k]) is type(v) for k, v in mock["queueDatas"][0].items())
    cfg = broker.topics.get(topic)
    assert cfg is not None and qd["readQueueNums"] == cfg.read_queue_nums
    return route


def _same_ext_keys(reply: Reply, mock_file: str) -> None:
    mock_ext = _mock(mock_file)[0]["header"].get("extFields") or {}
    assert set(reply.ext) >= set(mock_ext), (reply.ext, mock_ext)


def _one_record(broker: Any, reply: Reply, topic: str) -> Any:
    assert reply.code == ResponseCode.SUCCESS, reply.header
    _same_ext_keys(reply, "reply-pull-found-to-11.hex")
    assert set(reply.ext) == {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"}
    assert reply.ext["suggestWhichBrokerId"] == "0"
    (rec,) = parse_ipv4_records(reply.body)
    assert rec.magic == MESSAGE_MAGIC
    assert rec.sys_flag & 0x30 == 0, "hosts must be IPv4 (C++/ali-ons read 4 bytes)"
    assert rec.store_host == broker.address
    assert rec.born_host.startswith("127.0.0.1:")
    assert rec.topic == topic
    assert int(reply.ext["nextBeginOffset"]) == rec.queue_offset + 1
    return rec


async def _create_topic(broker: Any, topic: str, queues: int = 4) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": queues,
            "writeQueueNums": queues,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "false",
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    await peer.close()


# ---------------------------------------------------------------------- captures cover all


def test_every_captured_request_is_replayed_here() -> None:
    """The tests below pick frames by prefix: make sure none is left out."""
    for client in REQUEST_CLIENTS:
        files = {e["file"] for e in index(client)}
        assert files, client
        assert all(f.startswith(("silent_", "flow-", "notfound-")) for f in files), files
        codes_in_order = {
            int(line.split()[2])
            for line in (FIXTURES / client / "flow-request-order.txt").read_text().splitlines()
            if line.strip()
        }
        flow_codes = {e["code"] for e in index(client) if e["file"].startswith("flow-")}
        assert codes_in_order == flow_codes, (client, codes_in_order ^ flow_codes)


# ---------------------------------------------------------------------- first lookups


@pytest.mark.parametrize("client", REQUEST_CLIENTS)
async def test_silent_route_lookups_on_a_fresh_broker(broker: Any, client: str) -> None:
    ns = await RawConn.connect(broker.namesrv_address)
    for e, frame in _frames(client, "silent_"):
        _decodes_as_documented(e, frame)
        reply = await ns.call(frame)
        check_reply_envelope(reply, e["header"])
        topic = e["header"]["extFields"]["topic"]
        if topic == TOPIC or topic.startswith("%RETRY%"):
            # Unknown topic: 17, so producers fall back to TBW102 (RocketMQ name server);
            # a lookup creates nothing, %RETRY% included (a heartbeat creates that one).
            assert reply.code == ResponseCode.TOPIC_NOT_EXIST, reply.header
            assert reply.body == b"" and reply.header.get("remark")
            assert broker.topics.get(topic) is None
        else:
            assert topic == "TBW102", topic
            _route_ok(broker, reply, topic)
    await ns.close()


@pytest.mark.parametrize("client", REQUEST_CLIENTS)
async def test_captured_send_auto_creates_the_topic_through_tbw102(
    broker: Any, client: str
) -> None:
    ns = await RawConn.connect(broker.namesrv_address)
    producer = await RawConn.connect(broker.address)
    assert broker.topics.get(TOPIC) is None
    ((e, frame),) = [
        (e, f)
        for e, f in _frames(client, "flow-")
        if e["code"] in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
    ]
    reply = await producer.call(frame)
    check_reply_envelope(reply, e["header"])
    assert reply.code == ResponseCode.SUCCESS, reply.header
    cfg = broker.topics.get(TOPIC)
    assert cfg is not None and cfg.write_queue_nums == 4  # min(d=4, default 4)
    route_frame = next(
        f
        for e2, f in _frames(client, "flow-")
        if e2["code"] == RequestCode.GET_ROUTEINFO_BY_TOPIC
        and e2["header"]["extFields"]["topic"] == TOPIC
    )
    _route_ok(broker, await ns.call(route_frame), TOPIC)
    await ns.close()
    await producer.close()


# ---------------------------------------------------------------------- the full flow


class Flow:
    """State of one client's replayed flow against one broker."""

    def __init__(self, broker: Any, client: str) -> None:
        self.broker, self.client = broker, client
        self.client_id = ""
        self.group = ""
        self.held: dict[str, tuple[asyncio.Future[Reply], float]] = {}  # topic -> pull
        self.pulled: dict[str, Any] = {}  # topic -> last record pulled
        self.answered_while_held = 0
        self.send_started = 0.0
        self.send_body = b""
        self.seen_codes: set[int] = set()

    async def run(self) -> None:
        b = self.broker
        await _create_topic(b, TOPIC)
        self.ns = await RawConn.connect(b.namesrv_address)
        self.consumer = await RawConn.connect(b.address)
        self.producer = await RawConn.connect(b.address)
        notfound = dict((e["code"], (e, f)) for e, f in _frames(self.client, "notfound-"))
        for e, frame in _frames(self.client, "flow-"):
            _decodes_as_documented(e, frame)
            self.seen_codes.add(e["code"])
            await self.step(e, frame, notfound)
        for c in (self.ns, self.consumer, self.producer):
            assert c.unsolicited == [] or all(r.header["flag"] & 2 for r in c.unsolicited)
            await c.close()

    async def step(
        self, e: dict[str, Any], frame: bytes, notfound: dict[int, tuple[dict[str, Any], bytes]]
    ) -> None:
        code, h = e["code"], e["header"]
        ext = h.get("extFields") or {}
        b = self.broker
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            exists = b.topics.get(ext["topic"]) is not None
            reply = await self.ns.call(frame)
            check_reply_envelope(reply, h)
            if not exists:  # %RETRY% before the group's heartbeat: 17, as RocketMQ answers
                assert ext["topic"].startswith("%RETRY%"), ext["topic"]
                assert reply.code == ResponseCode.TOPIC_NOT_EXIST and reply.header.get("remark")
                assert b.topics.get(ext["topic"]) is None, "a route lookup created a topic"
                return
            _route_ok(b, reply, ext["topic"])
            if ext["topic"].startswith("%RETRY%"):
                assert b.topics.get(ext["topic"]).read_queue_nums == b.config.retry_queue_nums
        elif code == RequestCode.HEART_BEAT:
            body = json.loads(e["body"]["utf8"])
            self.client_id = body["clientID"]
            (cd,) = body["consumerDataSet"]
            self.group = cd["groupName"]
            reply = await self._consumer_call(frame, h)
            assert reply.code == ResponseCode.SUCCESS and reply.body == b""
            info = b.clients.group_info(self.group)
            assert info is not None and self.client_id in info.clients
            # Enum names (ali-ons) or ordinals (C++) end up as the Java names.
            assert info.consume_type == "CONSUME_PASSIVELY"
            assert info.message_model == "CLUSTERING"
            for sub in cd["subscriptionDataSet"]:
                kept = b.clients.subscription(self.group, sub["topic"])
                assert kept is not None and kept.sub_string == sub["subString"]
                assert kept.sub_version == int(sub["subVersion"])
            assert b.topics.get(f"%RETRY%{self.group}") is not None
            mock = _mock("reply-heartbeat-to-34.hex")[0]
            assert reply.code == mock["header"]["code"] and not reply.ext
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            reply = await self._consumer_call(frame, h)
            assert reply.code == ResponseCode.SUCCESS, reply.header
            ids = json.loads(reply.body)["consumerIdList"]
            assert self.client_id in ids
            assert set(json.loads(reply.body)) == set(
                json.loads(_mock("reply-consumer-list-to-38.hex")[1])
            )
        elif code == RequestCode.QUERY_CONSUMER_OFFSET:
            reply = await self._consumer_call(frame, h)
            # Nothing stored yet and no committed offset: 22, as a RocketMQ broker answers...
            assert reply.code == ResponseCode.QUERY_NOT_FOUND, reply.header
            # ...and the client falls back to GET_MAX_OFFSET (its notfound-* capture).
            ne, nf = notfound[RequestCode.GET_MAX_OFFSET]
            _decodes_as_documented(ne, nf)
            self.seen_codes.add(RequestCode.GET_MAX_OFFSET)
            r2 = await self._consumer_call(nf, ne["header"])
            assert r2.code == ResponseCode.SUCCESS and r2.ext == {"offset": "0"}
            _same_ext_keys(r2, "reply-query-offset-to-14.hex")
        elif code == RequestCode.PULL_MESSAGE:
            assert int(ext["sysFlag"]) & (PULL_SUSPEND | PULL_SUBSCRIPTION) == 6
            assert int(ext["queueOffset"]) == 0 and int(ext["suspendTimeoutMillis"]) == 15000
            fut = self.consumer.start(frame)
            await asyncio.sleep(0.05)
            assert not fut.done(), "an empty queue's pull must be held (long polling)"
            self.held[ext["topic"]] = (fut, asyncio.get_running_loop().time())
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            before = b.offsets.query(self.group, ext["topic"], int(ext["queueId"]))
            reply = await self._consumer_call(frame, h)
            assert reply.code == ResponseCode.SUCCESS and not reply.ext, reply.header
            _same_ext_keys(reply, "reply-update-offset-to-15.hex")
            after = b.offsets.query(self.group, ext["topic"], int(ext["queueId"]))
            commit = int(ext["commitOffset"])
            assert after == (before if commit < 0 else commit)
        elif code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            await self.send(e, frame)
        elif code == RequestCode.UNREGISTER_CLIENT:
            reply = await self.producer.call(frame)
            check_reply_envelope(reply, h)
            assert reply.code == ResponseCode.SUCCESS, reply.header
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            await self.send_back(e, frame)
        else:  # pragma: no cover - a new capture code needs a step here
            raise AssertionError(f"no replay step for request code {code}")

    async def _consumer_call(self, frame: bytes, h: dict[str, Any]) -> Reply:
        reply = await self.consumer.call(frame)
        check_reply_envelope(reply, h)
        if any(not fut.done() for fut, _ in self.held.values()):
            self.answered_while_held += 1
        return reply

    async def send(self, e: dict[str, Any], frame: bytes) -> None:
        h = e["header"]
        ext = h["extFields"]
        props = ext.get("i", ext.get("properties"))
        assert "DELAY\x012\x02" in props
        self.send_body = e["body"]["utf8"].encode()
        loop = asyncio.get_running_loop()
        self.send_started = loop.time()
        reply = await self.producer.call(frame)
        check_reply_envelope(reply, h)
        assert reply.code == ResponseCode.SUCCESS, reply.header
        _same_ext_keys(reply, "reply-send-to-310.hex")
        assert reply.ext["queueId"] == "0" and reply.ext["queueOffset"] == "0"
        ip, port, _phy = decode_offset_msg_id(reply.ext["msgId"])
        assert f"{socket.inet_ntoa(ip)}:{port}" == self.broker.address
        # The consumer's held pull on the topic answers once the level-2 delay passed.
        fut, _ = self.held.pop(TOPIC)
        pulled = await asyncio.wait_for(fut, 5)
        check_reply_envelope(pulled, {"opaque": pulled.opaque})
        assert (pulled.received_at - self.send_started) * 1000 >= LEVELS_MS[1] - SLACK_MS
        rec = _one_record(self.broker, pulled, TOPIC)
        assert rec.body == self.send_body and rec.reconsume_times == 0
        assert rec.properties["TAGS"] == "TagA" and rec.properties["KEYS"] == "key-0"
        assert "DELAY" not in rec.properties and "WAIT" not in rec.properties
        self.pulled[TOPIC] = rec

    async def send_back(self, e: dict[str, Any], frame: bytes) -> None:
        h = e["header"]
        ext = h["extFields"]
        assert int(ext["delayLevel"]) == 0
        retry = f"%RETRY%{self.group}"
        first = e["file"].endswith("-first.hex")
        source = self.pulled[TOPIC if first else retry]
        frame = patch_ext(frame, "offset", source.commit_log_offset)
        # Before the request: the delay runs from the broker's receipt, and taking the time
        # after the reply would shorten the measured delay by the reply's latency.
        t0 = asyncio.get_running_loop().time()
        reply = await self._consumer_call(frame, h)
        assert reply.code == ResponseCode.SUCCESS and not reply.ext, reply.header
        _same_ext_keys(reply, "reply-send-back-to-36.hex")
        expected_rt = source.reconsume_times + 1
        level = 3 + source.reconsume_times
        if first:
            # The %RETRY% pull held since the start answers after level 3.
            fut, _ = self.held.pop(retry)
            pulled = await asyncio.wait_for(fut, 5)
            assert (pulled.received_at - t0) * 1000 >= LEVELS_MS[level - 1] - SLACK_MS
            rec = _one_record(self.broker, pulled, retry)
            self.pulled[retry] = rec
        else:
            deadline = time.monotonic() + 5
            while self.broker.store.max_offset(retry, 0) < 2:
                assert time.monotonic() < deadline, "second retry never reached %RETRY%"
                await asyncio.sleep(0.02)
            rec = _retry_record(self.broker, retry, 1)
        assert rec.reconsume_times == expected_rt
        assert rec.body == self.send_body
        assert rec.properties["RETRY_TOPIC"] == TOPIC
        assert rec.properties["ORIGIN_MESSAGE_ID"]
        assert rec.properties["KEYS"] == "key-0"
        assert "DELAY" not in rec.properties


def _retry_record(broker: Any, topic: str, offset: int) -> Any:
    res = broker.store.get(topic, 0, offset, 1)
    (rec,) = parse_ipv4_records(b"".join(res.chunks))
    return rec


@pytest.mark.parametrize("client", REQUEST_CLIENTS)
async def test_flow_replay(broker: Any, client: str) -> None:
    flow = Flow(broker, client)
    await flow.run()
    captured = {e["code"] for e in index(client)}
    assert flow.seen_codes == captured, captured ^ flow.seen_codes
    # A held pull never blocked the other requests on the same connection.
    assert flow.answered_while_held >= 1
    assert flow.held == {}
    # The retry ladder: original -> %RETRY% (rt 1) -> %RETRY% (rt 2).
    retry = f"%RETRY%{flow.group}"
    assert broker.store.max_offset(retry, 0) == 2
    first, second = (_retry_record(broker, retry, i) for i in range(2))
    assert first.properties["ORIGIN_MESSAGE_ID"] == second.properties["ORIGIN_MESSAGE_ID"]


async def test_grpc_client_preface_closes_only_its_connection(broker: Any) -> None:
    """The 5.x gRPC client speaks HTTP/2, not remoting: its captured first bytes get the
    connection closed (a 1.3 GB declared frame length), and the broker keeps serving."""
    (e,) = index("grpc-5.x-client")
    raw = bytes.fromhex((FIXTURES / "grpc-5.x-client" / e["file"]).read_text().strip())
    assert raw.startswith(b"PRI * HTTP/2.0")
    bystander = await RawPeer.connect(broker.address)
    bad = await RawPeer.connect(broker.address)
    bad.send_raw(raw)
    assert await bad.closed()
    r = await bystander.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
    assert r.code == ResponseCode.SUCCESS
    await bystander.close()


def test_record_parser_reads_the_pull_body_the_clients_accepted() -> None:
    """The hand-written IPv4 record reader used above agrees with the pull body that all
    three clients decoded (mock-replies-accepted/reply-pull-found-to-11.hex)."""
    _e, body = _mock("reply-pull-found-to-11.hex")
    recs = parse_ipv4_records(body)
    assert [r.magic for r in recs] == [MESSAGE_MAGIC] * 2
    assert [r.queue_offset for r in recs] == [0, 1]
    assert all(r.topic == TOPIC and r.store_host == "127.0.0.1:10911" for r in recs)
    assert [r.properties["KEYS"] for r in recs] == ["key-0", "key-1"]
