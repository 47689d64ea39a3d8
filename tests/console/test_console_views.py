"""The console's read-only views against a real broker (in-process, port 0): the cluster
and its brokers, topics (server-side pages), consumer groups (lag per queue) and timer
health (per delay level and for timers)."""

from __future__ import annotations

import asyncio
import time
import uuid

from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader

from tests.console.harness import Http
from tests.helpers import send
from tests.wire import RawPeer


async def test_cluster_view_shows_the_broker(console) -> None:
    broker, port, _log = console
    vera = Http(port)
    await vera.login("vera", "view-pw")
    peer = await RawPeer.connect(broker.address)
    for _ in range(3):
        assert (await send(peer, "ViewT")).code == ResponseCode.SUCCESS
    status, out = await vera.call("GET", "/api/cluster")
    assert status == 200, out
    (b,) = out["brokers"]
    assert (b["brokerName"], b["address"], b["role"]) == ("broker", broker.address, "master")
    assert b["kairosmq"] is True and b["version"].startswith("V4_")
    assert isinstance(b["putTps"], float) and 0.0 <= b["diskUsed"] <= 1.0
    assert b["core"] == broker.status()["core"]
    assert b["uptimeMs"] > 0
    await peer.close()


async def test_topics_are_paged_with_their_offsets(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    for i in range(12):
        h = CreateTopicRequestHeader(topic=f"Page{i:02d}", read_queue_nums=2, write_queue_nums=2)
        assert (await peer.call(R.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())).code == 0
    for _ in range(5):
        assert (await send(peer, "Page03", queue_id=1)).code == ResponseCode.SUCCESS
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, page = await vera.call("GET", "/api/topics?contains=page&limit=5")
    assert status == 200, page
    assert page["total"] == 12 and page["nextOffset"] == 5
    assert [r["topic"] for r in page["rows"]] == [f"Page{i:02d}" for i in range(5)]
    p3 = page["rows"][3]
    assert p3["messages"] == 5 and [q["maxOffset"] for q in p3["queues"]] == [0, 5]
    status, last = await vera.call("GET", "/api/topics?contains=page&limit=5&offset=10")
    assert [r["topic"] for r in last["rows"]] == ["Page10", "Page11"] and last["nextOffset"] is None
    status, sysp = await vera.call("GET", "/api/topics?kind=system&limit=500")
    assert status == 200 and sysp["rows"] and all(r["kind"] == "system" for r in sysp["rows"])
    assert (await vera.call("GET", "/api/topics?limit=9999"))[0] == 400
    assert (await vera.call("GET", "/api/topics?offset=x"))[0] == 400
    await peer.close()


async def test_group_lag_per_queue(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    for _ in range(4):
        assert (await send(peer, "LagT", queue_id=0)).code == ResponseCode.SUCCESS
    h = UpdateConsumerOffsetRequestHeader("LagCG", "LagT", 0, 1)
    assert (await peer.call(R.UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).code == 0
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", "/api/groups/detail?consumerGroup=LagCG")
    assert status == 200, out
    q0 = next(q for q in out["queues"] if q["topic"] == "LagT" and q["queueId"] == 0)
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["lag"]) == (4, 1, 3)
    assert out["lag"] == 3 and out["connections"] == []
    status, listed = await vera.call("GET", "/api/groups")
    assert status == 200
    row = next(g for g in listed["groups"] if g["group"] == "LagCG")
    assert row["lag"] == 3 and row["online"] == 0
    assert (await vera.call("GET", "/api/groups/detail"))[0] == 400
    await peer.close()


async def test_timer_health(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    now = int(time.time() * 1000)
    due = now + 3_600_000
    props = {"UNIQ_KEY": uuid.uuid4().hex.upper(), "TIMER_DELIVER_MS": str(due)}
    assert (await send(peer, "HealthT", b"x", props)).code == ResponseCode.SUCCESS
    assert (await send(peer, "HealthT", b"x", {"DELAY": "2"})).code == ResponseCode.SUCCESS
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", "/api/timers")
    assert status == 200, out
    assert out["kairosmq"] is True and out["onTime"] == {
        "fired": 0,
        "within10ms": None,
        "within100ms": None,
    }
    levels = {lv["level"]: lv for lv in out["levels"]}
    assert levels[2]["pending"] == 1 and levels[2]["delayMs"] == 30_000
    assert now + 29_000 <= levels[2]["nextDueMs"] <= now + 31_000 + 5_000
    assert levels[2]["oldestOverdueMs"] == 0
    assert levels[1]["pending"] == 0
    t = out["timers"]
    assert t["pending"] == 1 and t["oldestOverdueMs"] == 0
    assert abs(t["nextDueMs"] - due) < 1_000
    await peer.close()


async def test_ten_thousand_topics_page_fast(console) -> None:
    """10,000 topics: a page costs one topic-table request and ``limit`` offset requests,
    wherever it is in the list."""
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    names = [f"Many{i:05d}" for i in range(10_000)]
    for at in range(0, len(names), 500):
        answers = await asyncio.gather(
            *(
                peer.call(
                    R.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader(
                        topic=t, read_queue_nums=1, write_queue_nums=1
                    ).to_ext_fields(),
                )
                for t in names[at : at + 500]
            )
        )
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
    vera = Http(port)
    await vera.login("vera", "view-pw")
    for query, first in (
        ("contains=Many&limit=50", "Many00000"),
        ("contains=Many&limit=50&offset=9950", "Many09950"),
        ("contains=Many0777", "Many07770"),
    ):
        t0 = time.monotonic()
        status, page = await vera.call("GET", f"/api/topics?{query}")
        took = time.monotonic() - t0
        assert status == 200 and page["rows"][0]["topic"] == first, page
        assert took < 3.0, (query, took)
    assert page["total"] == 10
    await peer.close()
