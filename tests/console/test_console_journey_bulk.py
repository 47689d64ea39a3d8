"""The console's message journey, bulk actions, one-row DLQ resend and on-time shares,
through its HTTP API against a real broker (in-process, port 0) with real messages.

* ``GET /api/journey``: a timer sent, fired (lateness = its store time - due time, the
  broker's own record), consumed by one group and not another, retried through a delay
  level into ``%RETRY%``, then dead-lettered; a still-pending one by key.
* ``POST /api/pending/bulk``: a dry run counts and changes nothing; a run needs the
  count confirmed (409 with the new count when it changed); recall, shift and run now
  on what a filter selects, each message logged (``console.action``) and the whole
  (``console.bulk_action``); a viewer is refused, and so is a request without CSRF.
* ``POST /api/dlq/resend`` with ``queueId``/``queueOffset``: one row.
* ``GET /api/timers``: on-time shares from the brokers' lateness histograms.
* ``GET /api/report`` without ``--spark-report-dir``: 404 naming the option
  (tests/console/test_console_report.py reads a real report).
"""

from __future__ import annotations

import time
import uuid

from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import UpdateConsumerOffsetRequestHeader

from tests.console.harness import Http
from tests.helpers import pull_all, send, wait_until
from tests.wire import RawPeer


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_journey_of_a_timer_fired_consumed_retried_dead_lettered(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    uniq = "JOURNEY-" + uuid.uuid4().hex[:8].upper()
    due = now_ms() + 300
    props = {"UNIQ_KEY": uniq, "KEYS": "order-77", "TIMER_DELIVER_MS": str(due)}
    assert (await send(peer, "JourneyT", b"x", props)).code == ResponseCode.SUCCESS
    await wait_until(lambda: broker.stats.timers_fired >= 1, timeout=5)
    (fired,) = await pull_all(peer, "JourneyT")
    # group JCG consumed it (committed past it); group OtherCG has an offset before it
    for group, off in (("JCG", fired.queue_offset + 1), ("OtherCG", fired.queue_offset)):
        h = UpdateConsumerOffsetRequestHeader(group, "JourneyT", fired.queue_id, off)
        assert (await peer.call(R.UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).code == 0
    # JCG sends it back once (delay level 1: 1 s), then straight to its DLQ
    for level in (1, -1):
        back = await peer.call(
            R.CONSUMER_SEND_MSG_BACK,
            {
                "offset": fired.commit_log_offset,
                "group": "JCG",
                "delayLevel": level,
                "originMsgId": uniq,
                "originTopic": "JourneyT",
            },
        )
        assert back.code == ResponseCode.SUCCESS, back.remark
    await wait_until(lambda: broker.stats.lateness[1].total >= 1, timeout=5)
    (retried,) = await pull_all(peer, "%RETRY%JCG", queues=1)
    # one still pending, found by key
    later = "LATER-" + uuid.uuid4().hex[:8].upper()
    later_due = now_ms() + 600_000
    props = {"UNIQ_KEY": later, "KEYS": "order-78", "TIMER_DELIVER_MS": str(later_due)}
    assert (await send(peer, "JourneyT", b"x", props)).code == ResponseCode.SUCCESS
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", f"/api/journey?msgId={uniq}")
    assert status == 200, out
    (msg,) = out["messages"]
    assert msg["msgId"] == uniq and msg["topic"] == "JourneyT" and msg["pending"] == []
    steps = [s["step"] for s in msg["steps"]]
    assert steps == ["sent", "scheduled", "fired", "retry scheduled", "dead-lettered", "retried"]
    by = {s["step"]: s for s in msg["steps"]}
    assert by["scheduled"]["kind"] == "timer" and by["scheduled"]["dueMs"] == due
    assert by["fired"]["storeMs"] == fired.store_timestamp
    assert by["fired"]["latenessMs"] == fired.store_timestamp - due >= 0
    assert by["retry scheduled"]["level"] == 1 and by["retry scheduled"]["group"] == "JCG"
    retry_due = by["retry scheduled"]["dueMs"]
    assert by["retried"]["latenessMs"] == retried.store_timestamp - retry_due >= 0
    assert by["retried"]["originMsgId"] == uniq and by["retried"]["topic"] == "%RETRY%JCG"
    assert by["dead-lettered"]["group"] == "JCG"
    consumed = {(c["group"], c["topic"]): c["consumed"] for c in msg["consumed"]}
    assert consumed[("JCG", "JourneyT")] is True
    assert consumed[("OtherCG", "JourneyT")] is False
    assert ("JCG", "%RETRY%JCG") not in consumed or consumed[("JCG", "%RETRY%JCG")] is False
    # by key: the pending one, with its due time
    status, out = await vera.call("GET", "/api/journey?key=order-78")
    assert status == 200, out
    (msg,) = out["messages"]
    assert msg["msgId"] == later and [s["step"] for s in msg["steps"]] == ["sent", "scheduled"]
    assert [(p["step"], p["dueMs"]) for p in msg["pending"]] == [("pending", later_due)]
    status, out = await vera.call("GET", "/api/journey?key=nothing-here")
    assert status == 200 and out["messages"] == []
    assert (await vera.call("GET", "/api/journey"))[0] == 400
    await peer.close()


async def _timers(peer: RawPeer, topic: str, n: int, ahead_ms: int, key: str) -> list[str]:
    ids = []
    for _ in range(n):
        uniq = uuid.uuid4().hex.upper()
        props = {"UNIQ_KEY": uniq, "KEYS": key, "TIMER_DELIVER_MS": str(now_ms() + ahead_ms)}
        assert (await send(peer, topic, b"x", props)).code == ResponseCode.SUCCESS
        ids.append(uniq)
    return ids


async def test_bulk_dry_run_confirm_and_act(console) -> None:
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    recall_ids = await _timers(peer, "BulkA", 3, 3_600_000, "a")
    shift_ids = await _timers(peer, "BulkB", 2, 3_600_000, "b")
    await _timers(peer, "BulkC", 2, 600_000, "c")
    otto, vera = Http(port), Http(port)
    await otto.login("otto", "op-pw")
    await vera.login("vera", "view-pw")
    dry = {"topic": "BulkA", "action": "recall", "dryRun": True}
    # viewer refused, CSRF required
    assert (await vera.call("POST", "/api/pending/bulk", dry))[0] == 403
    assert (await otto.call("POST", "/api/pending/bulk", dry, csrf=False))[0] == 403
    status, out = await otto.call("POST", "/api/pending/bulk", dry)
    assert status == 200 and out["count"] == 3 and out["dryRun"] is True, out
    assert {r["msgId"] for r in out["sample"]} == set(recall_ids)
    assert not [e for e, _ in log.lines if e in ("console.action", "console.bulk_action")]
    # one more arrives: the confirmed count no longer matches, nothing is done
    recall_ids += await _timers(peer, "BulkA", 1, 3_600_000, "a")
    run = {"topic": "BulkA", "action": "recall", "dryRun": False, "confirmCount": 3}
    status, out = await otto.call("POST", "/api/pending/bulk", run)
    assert status == 409 and out["count"] == 4 and "confirm again" in out["error"], out
    status, page = await otto.call("GET", "/api/pending?topic=BulkA")
    assert len(page["rows"]) == 4
    status, out = await otto.call("POST", "/api/pending/bulk", {**run, "confirmCount": 4})
    assert status == 200 and out["outcomes"] == {"recalled": 4} and out["failed"] == [], out
    status, page = await otto.call("GET", "/api/pending?topic=BulkA")
    assert page["rows"] == []
    # shift BulkB by one hour: the due times move, to the millisecond
    status, before = await otto.call("GET", "/api/pending?topic=BulkB")
    old = sorted(r["dueMs"] for r in before["rows"])
    shift = {"topic": "BulkB", "action": "shift", "shiftMs": 3_600_000, "dryRun": False}
    status, out = await otto.call("POST", "/api/pending/bulk", {**shift, "confirmCount": 2})
    assert status == 200 and out["outcomes"] == {"rescheduled": 2}, out
    status, after = await otto.call("GET", "/api/pending?topic=BulkB")
    assert sorted(r["dueMs"] for r in after["rows"]) == [d + 3_600_000 for d in old]
    assert {r["msgId"] for r in after["rows"]} == set(shift_ids)
    # run now by due window: only BulkC's (due in 10 minutes) are in it
    t = now_ms()
    window = {"fromMs": t, "toMs": t + 1_200_000, "action": "run-now", "dryRun": True}
    status, out = await otto.call("POST", "/api/pending/bulk", window)
    assert status == 200 and out["count"] == 2 and {r["topic"] for r in out["sample"]} == {"BulkC"}
    fired0 = broker.stats.timers_fired
    status, out = await otto.call(
        "POST", "/api/pending/bulk", {**window, "dryRun": False, "confirmCount": 2}
    )
    assert status == 200 and out["outcomes"] == {"rescheduled": 2}, out
    await wait_until(lambda: broker.stats.timers_fired == fired0 + 2, timeout=5)
    assert len(await pull_all(peer, "BulkC")) == 2
    assert await pull_all(peer, "BulkA") == []  # recalled: never delivered
    # refusals: no filter, bad action, bad shift
    for body, words in [
        ({"action": "recall"}, "give a topic, a key or a due window"),
        ({"topic": "BulkB", "action": "delete"}, "action must be"),
        ({"topic": "BulkB", "action": "shift"}, "shiftMs"),
        ({"topic": "BulkB", "action": "recall", "dryRun": False}, "confirmCount"),
    ]:
        status, out = await otto.call("POST", "/api/pending/bulk", body)
        assert status == 400 and words in out["error"], out
    actions = [kw for e, kw in log.lines if e == "console.action"]
    assert len(actions) == 4 + 2 + 2 and all(a["route"] == "/api/pending/bulk" for a in actions)
    assert all(a["user"] == "otto" and a["code"] == 0 for a in actions)
    summaries = [kw for e, kw in log.lines if e == "console.bulk_action"]
    assert [(s["action"], s["selected"], s["done"], s["confirmed"]) for s in summaries] == [
        ("recall", 4, 0, False),
        ("recall", 4, 4, True),
        ("shift", 2, 2, True),
        ("run-now", 2, 2, True),
    ]
    await peer.close()


async def test_dlq_one_row_resend_through_the_console(console) -> None:
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    for i in range(2):
        assert (await send(peer, "RowT", b"d", {"UNIQ_KEY": f"ROW-{i}"})).code == 0
    for m in await pull_all(peer, "RowT"):
        r = await peer.call(
            R.CONSUMER_SEND_MSG_BACK,
            {"offset": m.commit_log_offset, "group": "RowCG", "delayLevel": -1},
        )
        assert r.code == ResponseCode.SUCCESS
    otto = Http(port)
    await otto.login("otto", "op-pw")
    status, page = await otto.call("GET", "/api/dlq?consumerGroup=RowCG")
    row = next(r for r in page["rows"] if r["msgId"] == "ROW-1")
    body = {"consumerGroup": "RowCG", "queueId": row["queueId"], "queueOffset": row["queueOffset"]}
    status, out = await otto.call("POST", "/api/dlq/resend", body)
    assert status == 200 and [r["msgId"] for r in out["resent"]] == ["ROW-1"], out
    assert sorted(m.msg_id for m in await pull_all(peer, "RowT")) == ["ROW-0", "ROW-1", "ROW-1"]
    (action,) = [kw for e, kw in log.lines if e == "console.action"]
    assert f"queueOffset={row['queueOffset']}" in action["target"]
    await peer.close()


async def test_on_time_shares_from_the_lateness_histograms(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    await _timers(peer, "OnTimeT", 3, 200, "t")
    assert (await send(peer, "OnTimeT", b"x", {"DELAY": "1"})).code == ResponseCode.SUCCESS
    await wait_until(
        lambda: broker.stats.timers_fired >= 3 and broker.stats.lateness[1].total >= 1,
        timeout=10,
    )
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", "/api/timers")
    assert status == 200, out
    lat = broker.stats.timer_lateness
    within10 = sum(c for b, c in zip((1, 2, 5, 10), lat.counts, strict=False))
    assert out["timers"]["onTime"]["fired"] == 3
    assert out["timers"]["onTime"]["within10ms"] == round(100 * within10 / 3, 2)
    level1 = next(lv for lv in out["levels"] if lv["level"] == 1)
    assert level1["onTime"]["fired"] == 1
    assert level1["onTime"]["within100ms"] in (0.0, 100.0)
    assert out["onTime"]["fired"] == 4
    await peer.close()


async def test_report_route_without_the_option(console) -> None:
    _broker, port, _log = console
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", "/api/report")
    assert status == 404 and "--spark-report-dir" in out["error"]
