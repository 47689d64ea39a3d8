"""Pending scheduled messages for operators (907-910) against a real in-process broker.

Browse pages timers and level-delayed messages together in (due, phy) order with a keyset
cursor and filters; the histogram counts them per minute/hour; reschedule, run-now and
recall by ref, msgId or key take effect exactly once (the old instant never fires, a
recalled message never does), refuse what already fired, and race the fire safely;
``kairosmq admin pending`` drives the same calls.
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections import Counter
from typing import Any

import orjson
from kairosmq.client.admin import main as admin_main
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.timer import decode_recall_handle

from tests.helpers import pull_all, send, stays_false, wait_until
from tests.wire import RawPeer

ILLEGAL = ResponseCode.ILLEGAL_OPERATION


def now_ms() -> int:
    return int(time.time() * 1000)


async def timer(peer: RawPeer, topic: str, due: int, keys: str = "") -> tuple[str, int]:
    uniq = uuid.uuid4().hex.upper()
    props = {"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(due)}
    if keys:
        props["KEYS"] = keys
    r = await send(peer, topic, uniq.encode(), props)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return uniq, decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms


async def delayed(peer: RawPeer, topic: str, level: int, keys: str = "") -> tuple[str, int]:
    uniq = uuid.uuid4().hex.upper()
    props = {"UNIQ_KEY": uniq, "DELAY": str(level)}
    if keys:
        props["KEYS"] = keys
    r = await send(peer, topic, uniq.encode(), props)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return uniq, decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms


async def call(peer: RawPeer, code: int, **fields: Any) -> Any:
    return await peer.call(code, {k: str(v) for k, v in fields.items() if v is not None})


async def body(peer: RawPeer, code: int, **fields: Any) -> Any:
    r = await call(peer, code, **fields)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return orjson.loads(r.body)


async def browse_all(peer: RawPeer, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    rows: list[dict[str, Any]] = []
    cursor, pages = None, 0
    while True:
        page = await body(peer, R.KAIROS_BROWSE_PENDING, cursor=cursor, **filters)
        pages += 1
        rows.extend(page["rows"])
        cursor = page["nextCursor"]
        if cursor is None:
            return rows, pages


async def test_browse_pages_timers_and_levels_in_due_order(broker_factory) -> None:
    broker = await broker_factory(delay_levels="1s 30s 1m")
    peer = await RawPeer.connect(broker.address)
    base = now_ms() + 20_000
    due: dict[str, int] = {}
    for i in range(30):  # spread over three minute buckets, some due at the same ms
        uniq, d = await timer(peer, "PA" if i % 3 else "PB", base + (i // 2) * 4_000, f"k{i % 5}")
        due[uniq] = d
    for _ in range(6):
        uniq, d = await delayed(peer, "PA", 3, "lv")
        due[uniq] = d
    rows, pages = await browse_all(peer, limit=7)
    assert pages == 6
    assert [r["msgId"] for r in rows] == sorted(due, key=lambda u: (due[u], rows_phy(rows, u)))
    assert len({r["ref"] for r in rows}) == 36  # no entry twice across pages
    assert {r["msgId"]: r["dueMs"] for r in rows} == due
    assert {r["kind"] for r in rows if r["level"] == 3} == {"level"}
    assert all(r["topic"] in ("PA", "PB") and r["bodySize"] == 32 for r in rows)
    # filters: topic (scanned), kind, window, msgId and key (the key index)
    pb, _ = await browse_all(peer, topic="PB", limit=4)
    assert len(pb) == 10 and {r["topic"] for r in pb} == {"PB"}
    levels, _ = await browse_all(peer, kind="level")
    assert [r["level"] for r in levels] == [3] * 6
    window, _ = await browse_all(peer, fromMs=base + 8_000, toMs=base + 20_000, kind="timer")
    assert sorted(r["dueMs"] for r in window) == sorted(
        d for d in due.values() if base + 8_000 <= d < base + 20_000
    )
    some = rows[11]["msgId"]
    (one,) = (await body(peer, R.KAIROS_BROWSE_PENDING, msgId=some))["rows"]
    assert one["ref"] == rows[11]["ref"]
    k2, _ = await browse_all(peer, key="k2", limit=2)
    assert len(k2) == 6 and all(r["keys"] == "k2" for r in k2)
    # a filter-heavy page runs out of budget and says where to go on
    part = await body(peer, R.KAIROS_BROWSE_PENDING, topic="PB", maxScan=3, limit=50)
    assert part["complete"] is False and part["scanned"] == 3 and part["nextCursor"]
    # bad fields: SYSTEM_ERROR naming the field, nothing done
    for fields, words in [
        ({"cursor": "x:1"}, "cursor"),
        ({"kind": "other"}, "kind"),
        ({"limit": 0}, "limit"),
        ({"fromMs": 10, "toMs": 5}, "toMs"),
        ({"limit": "ten"}, "limit"),
        ({"topic": "bad topic!"}, "topic"),
    ]:
        r = await call(peer, R.KAIROS_BROWSE_PENDING, **fields)
        assert r.code == ResponseCode.SYSTEM_ERROR and words in r.remark, (fields, r.remark)
    await peer.close()


def rows_phy(rows: list[dict[str, Any]], uniq: str) -> int:
    return next(r["phyOffset"] for r in rows if r["msgId"] == uniq)


async def test_browse_lists_a_timer_due_before_the_first_loaded_one(broker) -> None:
    """Before any timer fired, the loaded span starts at the first timer's bucket: a timer
    sent later, due earlier, lands below it and is still browsed and counted (it was
    left out of pages and the histogram)."""
    peer = await RawPeer.connect(broker.address)
    t = now_ms()
    dues = [t + 600_000, t + 3_600_000, t + 90_000, t + 4_000_000]
    ids = [(await timer(peer, "Below", due))[0] for due in dues]
    page = await body(peer, R.KAIROS_BROWSE_PENDING, topic="Below")
    assert [r["msgId"] for r in page["rows"]] == [ids[2], ids[0], ids[1], ids[3]]
    hist = await body(peer, R.KAIROS_PENDING_HISTOGRAM, unit="day", kind="timer")
    assert hist["timers"] == 4
    window = await body(peer, R.KAIROS_BROWSE_PENDING, fromMs=t, toMs=t + 120_000)
    assert [r["msgId"] for r in window["rows"]] == [ids[2]]
    await peer.close()


async def test_histogram_counts_every_pending_message(broker_factory) -> None:
    broker = await broker_factory(delay_levels="1s 2m")
    peer = await RawPeer.connect(broker.address)
    start = (now_ms() // 3_600_000 + 1) * 3_600_000  # the next full hour
    dues = [start + m * 60_000 + s * 1000 for m in (0, 1, 1, 5, 59, 60, 61) for s in (1, 2)]
    for d in dues:
        await timer(peer, "HA", d)
    for d in dues[:3]:
        await timer(peer, "HB", d)
    level_dues = [(await delayed(peer, "HA", 2))[1] for _ in range(4)]
    hist = await body(peer, R.KAIROS_PENDING_HISTOGRAM, unit="minute")
    minute = Counter(d // 60_000 * 60_000 for d in dues + dues[:3])
    assert {b["startMs"]: b["timers"] for b in hist["bins"] if b["timers"]} == dict(minute)
    assert hist["levels"] == 4 and hist["timers"] == len(dues) + 3 and hist["complete"]
    assert sum(b["levels"] for b in hist["bins"]) == 4
    assert {b["startMs"] for b in hist["bins"] if b["levels"]} == {
        d // 60_000 * 60_000 for d in level_dues
    }
    hours = await body(peer, R.KAIROS_PENDING_HISTOGRAM, unit="hour", kind="timer")
    assert [(b["startMs"], b["timers"]) for b in hours["bins"]] == [
        (start, 13),
        (start + 3_600_000, 4),
    ]
    # a window cutting minute buckets counts only what falls inside it
    cut = await body(
        peer, R.KAIROS_PENDING_HISTOGRAM, unit="day", fromMs=start + 61_500, toMs=start + 3_660_000
    )
    assert cut["timers"] == sum(
        1 for d in dues + dues[:3] if start + 61_500 <= d < start + 3_660_000
    )
    # per topic: a scan in steps (maxScan), summed by the caller
    total, cursor, steps = Counter(), None, 0
    while True:
        part = await body(
            peer, R.KAIROS_PENDING_HISTOGRAM, unit="minute", topic="HB", maxScan=4, cursor=cursor
        )
        steps += 1
        total.update({b["startMs"]: b["timers"] for b in part["bins"]})
        cursor = part["nextCursor"]
        if part["complete"]:
            break
    assert steps > 3 and dict(total) == dict(Counter(d // 60_000 * 60_000 for d in dues[:3]))
    r = await call(peer, R.KAIROS_PENDING_HISTOGRAM, unit="week")
    assert r.code == ResponseCode.SYSTEM_ERROR and "unit" in r.remark
    # a recalled timer leaves the histogram
    await body(peer, R.KAIROS_RECALL_PENDING, ref=(await browse_all(peer, topic="HB"))[0][0]["ref"])
    assert (await body(peer, R.KAIROS_PENDING_HISTOGRAM, unit="day"))["timers"] == len(dues) + 2
    await peer.close()


async def test_reschedule_run_now_and_recall_take_effect_once(broker_factory) -> None:
    broker = await broker_factory(delay_levels="1s 2s 20s")
    peer = await RawPeer.connect(broker.address)
    late = now_ms() + 20_000
    moved, old_due = await timer(peer, "RA", late)
    runnow, _ = await timer(peer, "RA", late)
    gone, _ = await timer(peer, "RA", late, "bulk")
    gone2, _ = await timer(peer, "RA", late + 1, "bulk")
    lvl, lvl_due = await delayed(peer, "RA", 3)
    keep, _ = await timer(peer, "RA", now_ms() + 600)
    new_due = now_ms() + 800
    r = await body(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=moved, dueMs=new_due)
    (res,) = r["results"]
    assert res["outcome"] == "rescheduled" and res["newDueMs"] == new_due
    assert res["dueMs"] == old_due and res["kind"] == "timer"
    r = await body(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=runnow, runNow="true")
    assert r["results"][0]["outcome"] == "rescheduled"
    ref_lvl = (await browse_all(peer, kind="level"))[0][0]["ref"]
    r = await body(peer, R.KAIROS_RESCHEDULE_PENDING, ref=ref_lvl, runNow="true")
    assert r["results"][0]["kind"] == "level"
    r = await body(peer, R.KAIROS_RECALL_PENDING, key="bulk", topic="RA")
    assert [x["msgId"] for x in r["results"]] == [gone, gone2] and r["done"] == 2
    await wait_until(lambda: broker.stats.timers_fired >= 4, timeout=5)
    got = {m.body.decode(): m for m in await pull_all(peer, "RA")}
    assert set(got) == {moved, runnow, lvl, keep}
    assert got[moved].store_timestamp >= new_due
    assert got[lvl].store_timestamp < lvl_due - 10_000  # ran now, not at its level's due
    # the old instants never fire, the recalled never do
    rows, _ = await browse_all(peer)
    assert rows == []
    assert await stays_false(lambda: broker.stats.timers_fired > 4, 0.3)
    # acting on what already fired (or is unknown) is refused, naming what was asked
    r = await call(peer, R.KAIROS_RECALL_PENDING, msgId=moved)
    assert r.code == ILLEGAL and f"msgId {moved}" in r.remark
    r = await call(peer, R.KAIROS_RESCHEDULE_PENDING, ref=res["newRef"], runNow="true")
    assert r.code == ILLEGAL, r.remark
    for fields, words in [
        ({"runNow": "true"}, "exactly one of ref, msgId, key"),
        ({"msgId": moved, "key": "bulk", "runNow": "true"}, "exactly one"),
        ({"msgId": moved}, "dueMs"),
        ({"msgId": moved, "dueMs": now_ms() + 41 * 86_400_000}, "timerMaxDelaySec"),
        ({"ref": "1:2:3", "runNow": "true"}, "ref"),
    ]:
        r = await call(peer, R.KAIROS_RESCHEDULE_PENDING, **fields)
        assert r.code == ResponseCode.SYSTEM_ERROR and words in r.remark, (fields, r.remark)
    assert len(await pull_all(peer, "RA")) == 4
    await peer.close()


async def test_producer_recall_after_an_operator_reschedule(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    uniq = uuid.uuid4().hex.upper()
    r = await send(peer, "RB", b"x", {"UNIQ_KEY": uniq, "TIMER_DELAY_MS": "30000"})
    handle = r.ext_fields["recallHandle"]
    await body(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=uniq, dueMs=now_ms() + 600)
    rc = await peer.call(
        R.RECALL_MESSAGE, {"producerGroup": "PG", "topic": "RB", "recallHandle": handle}
    )
    assert rc.code == ResponseCode.SUCCESS and rc.remark != "already recalled", rc.remark
    assert await stays_false(lambda: broker.stats.timers_fired > 0, 1.0)
    assert await pull_all(peer, "RB") == []
    await peer.close()


async def test_actions_racing_the_fire_deliver_each_message_once(broker_factory) -> None:
    broker = await broker_factory()
    peer = await RawPeer.connect(broker.address)
    at = now_ms() + 700
    ids = [(await timer(peer, "RC", at))[0] for _ in range(40)]

    async def act(i: int, u: str) -> Any:
        await asyncio.sleep(max(0.0, (at - 100 + 5 * i - now_ms()) / 1000))  # around `at`
        if i % 2:
            return await call(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=u, dueMs=at + 400)
        return await call(peer, R.KAIROS_RECALL_PENDING, msgId=u)

    outcomes = await asyncio.gather(*(act(i, u) for i, u in enumerate(ids)))
    await asyncio.sleep(0.8)
    msgs = await pull_all(peer, "RC")
    got = Counter(m.body.decode() for m in msgs)
    stored = {m.body.decode(): m.store_timestamp for m in msgs}
    assert all(n == 1 for n in got.values())
    won: Counter[tuple[int, bool]] = Counter()
    for i, (u, r) in enumerate(zip(ids, outcomes, strict=True)):
        won[(i % 2, r.code == ResponseCode.SUCCESS)] += 1
        if r.code == ResponseCode.SUCCESS and i % 2 == 0:
            assert u not in got, "a recalled message fired"
        else:
            assert got[u] == 1, (u, r.remark)  # rescheduled, or the fire won
            if r.code == ResponseCode.SUCCESS:  # moved: fired at the new instant only
                assert stored[u] >= at + 400, (u, stored[u] - at)
    # the requests straddle the instant: some actions won, some came after the fire
    assert won[(0, True)] + won[(1, True)] > 0 and won[(0, False)] + won[(1, False)] > 0, won
    await peer.close()


async def test_admin_cli_pending_commands(broker_factory) -> None:
    broker = await broker_factory(delay_levels="1s 20s")
    peer = await RawPeer.connect(broker.address)
    uniq, _ = await timer(peer, "CL", now_ms() + 30_000, "cli-key")
    await delayed(peer, "CL", 2)

    def admin(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--broker", broker.address, *argv], out=out, err=err)
        return code, out.getvalue() + err.getvalue()

    code, text = await asyncio.to_thread(admin, "pending", "list", "--all", "--limit", "1")
    assert code == 0 and uniq in text and "level 2" in text, text
    code, text = await asyncio.to_thread(admin, "--json", "pending", "histogram", "--unit", "day")
    assert code == 0 and orjson.loads(text)["timers"] == 1, text
    code, text = await asyncio.to_thread(admin, "pending", "run-now", "--key", "cli-key")
    assert code == 0 and text.startswith("rescheduled: " + uniq), text
    await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
    code, text = await asyncio.to_thread(admin, "pending", "recall", "--id", uniq)
    assert code == 1 and "no pending" in text, text
    code, text = await asyncio.to_thread(
        admin, "pending", "reschedule", "--id", uniq, "--at", "soon"
    )
    assert code == 1 and "not an instant" in text, text
    await peer.close()
