"""The admin role's writes against a real broker (in-process, port 0): create and
delete a topic, reset a consumer group's offsets by time. A viewer and an operator are
refused (403) and nothing reaches the broker; each write is logged as
``console.action``; the effect is read back from the broker."""

from __future__ import annotations

import asyncio
import time

from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

from tests.console.harness import Http
from tests.helpers import send
from tests.wire import RawPeer


async def test_viewer_and_operator_are_refused_admin_writes(console) -> None:
    broker, port, log = console
    vera, otto = Http(port), Http(port)
    await vera.login("vera", "view-pw")
    await otto.login("otto", "op-pw")
    writes = [
        ("/api/topics/create", {"topic": "Nope", "queues": 2}),
        ("/api/topics/delete", {"topic": "Nope"}),
        ("/api/groups/reset-offset", {"consumerGroup": "G", "topic": "Nope", "timestamp": 0}),
    ]
    for path, body in writes:
        for who in (vera, otto):
            status, out = await who.call("POST", path, body)
            assert status == 403 and "admin role" in out["error"], (path, status, out)
    assert broker.topics.get("Nope") is None
    assert not [e for e, _kw in log.lines if e == "console.action"]


async def test_admin_creates_and_deletes_a_topic(console) -> None:
    broker, port, log = console
    ada = Http(port)
    assert (await ada.login("ada", "admin-pw"))[1]["role"] == "admin"
    status, out = await ada.call("POST", "/api/topics/create", {"topic": "AdmT", "queues": 3})
    assert status == 200 and out["created"] is True, out
    cfg = broker.topics.get("AdmT")
    assert cfg is not None and (cfg.read_queue_nums, cfg.write_queue_nums) == (3, 3)
    status, page = await ada.call("GET", "/api/topics?contains=AdmT")
    assert [(r["topic"], len(r["queues"])) for r in page["rows"]] == [("AdmT", 3)]
    # the broker's refusal of a bad name comes back with its remark
    status, out = await ada.call("POST", "/api/topics/create", {"topic": "bad name!"})
    assert status == 422 and "bad name!" in out["error"], out
    assert (await ada.call("POST", "/api/topics/create", {"topic": "X", "queues": "4"}))[0] == 400
    # without the CSRF token: refused
    assert (await ada.call("POST", "/api/topics/delete", {"topic": "AdmT"}, csrf=False))[0] == 403
    assert broker.topics.get("AdmT") is not None
    status, out = await ada.call("POST", "/api/topics/delete", {"topic": "AdmT"})
    assert status == 200 and out["deleted"] is True, out
    assert broker.topics.get("AdmT") is None
    acts = [(kw["user"], kw["route"], kw["code"]) for e, kw in log.lines if e == "console.action"]
    assert acts[0] == ("ada", "/api/topics/create", 0)
    assert acts[1][1] == "/api/topics/create" and acts[1][2] != 0
    assert acts[-1] == ("ada", "/api/topics/delete", 0)


async def _committed(peer: RawPeer, group: str, topic: str, qid: int) -> int:
    h = QueryConsumerOffsetRequestHeader(group, topic, qid)
    resp = await peer.call(R.QUERY_CONSUMER_OFFSET, h.to_ext_fields())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset


async def test_admin_resets_an_offline_groups_offsets_by_time(console) -> None:
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    for _ in range(2):
        assert (await send(peer, "ResetT", queue_id=0)).code == ResponseCode.SUCCESS
    await asyncio.sleep(0.05)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    for _ in range(3):
        assert (await send(peer, "ResetT", queue_id=0)).code == ResponseCode.SUCCESS
    for qid in range(4):  # the group consumed everything
        off = 5 if qid == 0 else 0
        h = UpdateConsumerOffsetRequestHeader("ResetCG", "ResetT", qid, off)
        assert (await peer.call(R.UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).code == 0
    ada = Http(port)
    await ada.login("ada", "admin-pw")
    body = {"consumerGroup": "ResetCG", "topic": "ResetT", "timestamp": middle}
    status, out = await ada.call("POST", "/api/groups/reset-offset", body)
    assert status == 200 and out["online"] is False, out
    assert {q["queueId"]: q["offset"] for q in out["queues"]}[0] == 2
    assert await _committed(peer, "ResetCG", "ResetT", 0) == 2  # on the broker
    status, detail = await ada.call("GET", "/api/groups/detail?consumerGroup=ResetCG")
    assert detail["lag"] == 3
    # to the end (-1)
    body["timestamp"] = -1
    status, out = await ada.call("POST", "/api/groups/reset-offset", body)
    assert status == 200 and await _committed(peer, "ResetCG", "ResetT", 0) == 5
    # a group without offsets there: the broker's refusal, logged with its code
    body["consumerGroup"] = "NoSuchCG"
    status, out = await ada.call("POST", "/api/groups/reset-offset", body)
    assert status == 422, out
    assert (await ada.call("POST", "/api/groups/reset-offset", {"topic": "ResetT"}))[0] == 400
    acts = [(kw["route"], kw["code"]) for e, kw in log.lines if e == "console.action"]
    assert acts[:2] == [("/api/groups/reset-offset", 0)] * 2 and acts[2][1] != 0
    await peer.close()
