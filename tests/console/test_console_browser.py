"""The console's pages in a real browser: headless Chromium (the system's, driven by
Playwright) logs in, sees the pending messages and their histogram, runs one now,
recalls one and moves one, and logs out; a viewer sees no action. No console message or
page error (a Content-Security-Policy violation would be one).

Skips (with the reason) without Playwright or Chromium (``apt-get install -y chromium``).
With ``KAIROSMQ_SCREENSHOTS=<dir>`` it also saves the screenshots docs/console.md shows.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import UpdateConsumerOffsetRequestHeader
from kairosmq.spark.png import find_chromium

from tests.helpers import pull_all, send, wait_until
from tests.transaction.txpeer import half
from tests.wire import RawPeer

playwright = pytest.importorskip("playwright.async_api", reason="pip install playwright")
expect = playwright.expect
BROWSER = find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH (apt-get install chromium)"),
]
SHOTS = os.environ.get("KAIROSMQ_SCREENSHOTS")


if SHOTS:
    Path(SHOTS).mkdir(parents=True, exist_ok=True)


async def shot(page: Any, name: str) -> None:
    if SHOTS:
        await page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


async def test_operator_and_viewer_in_chromium(console) -> None:
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    now = int(time.time() * 1000)
    ids = []
    for i, (topic, ahead) in enumerate(
        [("Orders", 90_000), ("Orders", 95_000), ("Invoices", 3_600_000), ("Orders", 7_200_000)]
    ):
        uniq = uuid.uuid4().hex.upper()
        props = {"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(now + ahead), "KEYS": f"order-{i}"}
        assert (await send(peer, topic, b"x", props)).code == ResponseCode.SUCCESS
        ids.append(uniq)
    level = uuid.uuid4().hex.upper()
    r = await send(peer, "Orders", b"x", {"UNIQ_KEY": level, "DELAY": "2", "TAGS": "retry"})
    assert r.code == ResponseCode.SUCCESS
    # a dead letter of group WebCG and a pending transaction half
    assert (await send(peer, "Paid", b"dead", {"UNIQ_KEY": "DEAD-1"})).code == ResponseCode.SUCCESS
    (dead,) = await pull_all(peer, "Paid")
    back = await peer.call(
        R.CONSUMER_SEND_MSG_BACK,
        {"offset": dead.commit_log_offset, "group": "WebCG", "delayLevel": -1},
    )
    assert back.code == ResponseCode.SUCCESS, back.remark
    await half(peer, "Ledger", "HALF-1")
    # a group with offsets on Paid (for the Groups view)
    for qid in range(4):
        commit = UpdateConsumerOffsetRequestHeader("PaidCG", "Paid", qid, 0)
        assert (await peer.call(R.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())).code == 0
    problems: list[str] = []
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=BROWSER, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.wait_for_selector("#login:not([hidden])")
        await shot(page, "console-login")
        await page.fill("#login-user", "otto")
        await page.fill("#login-password", "wrong")
        await page.click("#login button[type=submit]")
        await page.wait_for_selector("#status.error")
        assert "wrong user or password" in await page.text_content("#status")
        problems.clear()  # the browser logs the 401 of that fetch itself
        await page.fill("#login-password", "op-pw")
        await page.click("#login button[type=submit]")
        rows = page.locator("#pending-table tbody tr")
        await rows.nth(4).wait_for()
        assert await rows.count() == 5
        assert not await page.locator("#login").is_visible()
        assert level in await rows.nth(0).text_content()  # 30 s: due first
        assert "level 2" in await rows.nth(0).text_content()
        assert ids[0] in await rows.nth(1).text_content()
        assert "4 timers, 1 level-delayed" in await page.text_content("#hist-total")
        assert await page.locator("#histogram .bar").count() >= 3
        await shot(page, "console-pending")
        # run the first one now: it is delivered, and leaves the list
        first = page.locator("#pending-table tbody tr", has_text=ids[0])
        await first.get_by_role("button", name="Run now").click()
        await expect(page.locator("#status")).to_contain_text(f"run {ids[0]} now: rescheduled")
        await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
        await expect(rows).to_have_count(4)
        # recall the next one
        second = page.locator("#pending-table tbody tr", has_text=ids[1])
        await second.get_by_role("button", name="Recall").click()
        await expect(page.locator("#status")).to_contain_text(f"recall {ids[1]}: recalled")
        # move the Invoices timer to a new instant, to the second
        row = page.locator("#pending-table tbody tr", has_text=ids[2])
        await row.get_by_role("button", name="Reschedule").click()
        new_due = dt.datetime.now().replace(microsecond=0) + dt.timedelta(minutes=10)
        await row.locator("input[type=datetime-local]").fill(new_due.strftime("%Y-%m-%dT%H:%M:%S"))
        await row.get_by_role("button", name="Move").click()
        await expect(page.locator("#status")).to_contain_text(
            re.compile(f"move {ids[2]} .*: rescheduled")
        )
        moved = page.locator("#pending-table tbody tr", has_text=ids[2])
        assert new_due.strftime("%Y-%m-%d %H:%M:%S") in await moved.text_content()
        # dead letters: listed, then resent
        await page.click("button[data-tab=dlq]")
        await page.fill("#dlq-filter input[name=consumerGroup]", "WebCG")
        await page.click("#dlq-filter button[type=submit]")
        await expect(page.locator("#dlq-table tbody tr")).to_have_count(1)
        assert "DEAD-1" in await page.text_content("#dlq-table tbody")
        await shot(page, "console-dlq")
        await page.click("#dlq-resend button[type=submit]")
        await expect(page.locator("#status")).to_contain_text("resent 1; still in the DLQ: 0")
        # a pending half message: committed from the page
        await page.click("button[data-tab=transactions]")
        tx_rows = page.locator("#tx-table tbody tr")
        await expect(tx_rows).to_have_count(1)
        await tx_rows.nth(0).get_by_role("button", name="Commit").click()
        await expect(page.locator("#status")).to_contain_text("commit: HALF-1")
        await expect(tx_rows).to_have_count(0)
        # the read-only views: timer health, cluster, topics, groups
        await page.click("button[data-tab=timers]")
        await expect(page.locator("#timer-table tbody tr")).to_have_count(1)
        assert (await page.locator("#timer-table tbody td").first.text_content()) == "2"
        level2 = page.locator("#level-table tbody tr").nth(1)  # level 2: 30 s, one pending
        await expect(level2).to_contain_text("30.0 s")
        assert [await c.text_content() for c in await level2.locator("td").all()][:3] == [
            "2",
            "30.0 s",
            "1",
        ]
        await shot(page, "console-timers")
        await page.click("button[data-tab=cluster]")
        await expect(page.locator("#cluster-table tbody tr")).to_have_count(1)
        assert broker.address in await page.text_content("#cluster-table tbody")
        assert "master" in await page.text_content("#cluster-table tbody")
        await shot(page, "console-cluster")
        await page.click("button[data-tab=topics]")
        await page.fill("#topics-filter input[name=contains]", "Paid")
        await page.click("#topics-filter button[type=submit]")
        paid = page.locator("#topics-table tbody tr", has_text="Paid")
        await expect(paid).to_have_count(1)
        assert "Paid" in await paid.text_content()
        await page.fill("#topics-filter input[name=contains]", "")
        await page.click("#topics-filter button[type=submit]")
        await expect(page.locator("#topics-total")).to_contain_text("of ")
        await shot(page, "console-topics")
        await page.click("button[data-tab=groups]")
        group_row = page.locator("#groups-table tbody tr", has_text="PaidCG")
        await expect(group_row).to_have_count(1)
        await group_row.get_by_role("button", name="Details").click()
        await expect(page.locator("#group-queues tbody tr")).to_have_count(4)  # Paid's queues
        assert "lag 2" in await page.text_content("#group-name")  # DEAD-1 and its resend
        await shot(page, "console-groups")
        await page.click("button[data-tab=pending]")
        await page.click("#logout")
        await page.wait_for_selector("#login:not([hidden])")
        assert not await page.locator("#pending").is_visible()
        # a viewer sees the list, not the actions
        await page.fill("#login-user", "vera")
        await page.fill("#login-password", "view-pw")
        await page.click("#login button[type=submit]")
        await rows.nth(2).wait_for()
        assert not await rows.nth(0).get_by_role("button", name="Run now").is_visible()
        await shot(page, "console-viewer")
        await page.click("button[data-tab=topics]")
        await expect(page.locator("#topics-table tbody tr").first).to_be_visible()
        assert not await page.locator("#topic-create").is_visible()  # admin only
        # an admin creates and deletes a topic and resets a group's offsets
        await page.click("#logout")
        await page.wait_for_selector("#login:not([hidden])")
        await page.fill("#login-user", "ada")
        await page.fill("#login-password", "admin-pw")
        await page.click("#login button[type=submit]")
        await rows.nth(2).wait_for()
        await page.click("button[data-tab=topics]")
        await page.fill("#topic-create input[name=topic]", "WebAdmT")
        await page.fill("#topic-create input[name=queues]", "2")
        await page.click("#topic-create button[type=submit]")
        await expect(page.locator("#status")).to_contain_text("create WebAdmT: done")
        assert broker.topics.get("WebAdmT") is not None
        page.on("dialog", lambda d: asyncio.ensure_future(d.accept()))
        made = page.locator("#topics-table tbody tr", has_text="WebAdmT")
        await made.get_by_role("button", name="Delete").click()
        await expect(page.locator("#status")).to_contain_text("delete WebAdmT: done")
        assert broker.topics.get("WebAdmT") is None
        await page.click("button[data-tab=groups]")
        group_row = page.locator("#groups-table tbody tr", has_text="PaidCG")
        await group_row.get_by_role("button", name="Details").click()
        await page.fill("#reset-offset input[name=topic]", "Paid")
        await page.check("#reset-offset input[name=end]")
        await shot(page, "console-admin")
        await page.click("#reset-offset button[type=submit]")
        await expect(page.locator("#status")).to_contain_text("reset PaidCG: done")
        await expect(page.locator("#group-name")).to_contain_text("lag 0")
        await browser.close()
    assert problems == [], problems
    got = {m.properties["UNIQ_KEY"] for m in await pull_all(peer, "Orders")}
    assert got == {ids[0]}  # run now; the recalled one never
    assert [m.msg_id for m in await pull_all(peer, "Paid")] == ["DEAD-1", "DEAD-1"]  # resent
    assert [m.msg_id for m in await pull_all(peer, "Ledger")] == ["HALF-1"]  # committed
    row_events = [kw["route"] for e, kw in log.lines if e == "console.action"]
    assert row_events == [
        "/api/pending/run-now",
        "/api/pending/recall",
        "/api/pending/reschedule",
        "/api/dlq/resend",
        "/api/transactions/end",
        "/api/topics/create",
        "/api/topics/delete",
        "/api/groups/reset-offset",
    ]
    await peer.close()


async def test_pending_and_timer_health_refresh_without_a_reload(console) -> None:
    broker, port, _log = console
    peer = await RawPeer.connect(broker.address)
    problems: list[str] = []

    async def timer_in(ms: int) -> str:
        uniq = uuid.uuid4().hex.upper()
        props = {"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(int(time.time() * 1000) + ms)}
        assert (await send(peer, "Live", b"x", props)).code == ResponseCode.SUCCESS
        return uniq

    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=BROWSER, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.fill("#login-user", "vera")
        await page.fill("#login-password", "view-pw")
        await page.click("#login button[type=submit]")
        await expect(page.locator("#status")).to_contain_text("Nothing pending here.")
        await page.evaluate("window.loadedOnce = true")  # gone if the page reloads
        problems.clear()  # the page's first GET /api/me (401) and favicon.ico (404)
        rows = page.locator("#pending-table tbody tr")
        first = await timer_in(600_000)
        await expect(rows).to_have_count(1, timeout=10_000)
        assert first in await rows.nth(0).text_content()
        await expect(page.locator("#hist-total")).to_contain_text("1 timers")
        await page.click("button[data-tab=timers]")
        pending = page.locator("#timer-table tbody td").first
        await expect(pending).to_have_text("1")
        await timer_in(700_000)
        await expect(pending).to_have_text("2", timeout=10_000)
        assert await page.evaluate("window.loadedOnce") is True
        await browser.close()
    assert problems == [], problems
    await peer.close()


async def test_timeline_bulk_search_dlq_row_and_on_time_in_chromium(console) -> None:
    """The due-time timeline (a click on a bar opens that window in Pending), a bulk
    shift and a bulk recall after the dry-run count and its confirmation, a message's
    journey found by key, one dead letter resent from its row, and the on-time shares;
    a viewer sees none of the actions."""
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    now = int(time.time() * 1000)
    hour = 3_600_000
    soon = (now + 2 * hour) // hour * hour + 600_000  # ten minutes into an hour two hours on
    for i in range(3):
        props = {"UNIQ_KEY": f"TLA-{i}", "KEYS": "bulk-a", "TIMER_DELIVER_MS": str(soon + i)}
        assert (await send(peer, "TimelineA", b"x", props)).code == ResponseCode.SUCCESS
    for i in range(2):
        props = {"UNIQ_KEY": f"TLB-{i}", "TIMER_DELIVER_MS": str(now + 26 * hour + i)}
        assert (await send(peer, "TimelineB", b"x", props)).code == ResponseCode.SUCCESS
    # one message's whole journey: a timer fired, consumed by TripCG, retried, dead-lettered
    trip = "TRIP-" + uuid.uuid4().hex[:8].upper()
    props = {"UNIQ_KEY": trip, "KEYS": "trip-1", "TIMER_DELIVER_MS": str(now + 300)}
    assert (await send(peer, "Trips", b"x", props)).code == ResponseCode.SUCCESS
    await wait_until(lambda: broker.stats.timers_fired >= 1, timeout=5)
    (fired,) = await pull_all(peer, "Trips")
    h = UpdateConsumerOffsetRequestHeader("TripCG", "Trips", fired.queue_id, fired.queue_offset + 1)
    assert (await peer.call(R.UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).code == 0
    for level in (1, -1):
        back = await peer.call(
            R.CONSUMER_SEND_MSG_BACK,
            {"offset": fired.commit_log_offset, "group": "TripCG", "delayLevel": level},
        )
        assert back.code == ResponseCode.SUCCESS, back.remark
    await wait_until(lambda: broker.stats.lateness[1].total >= 1, timeout=5)
    # two dead letters of RowCG: the second one is resent from its row
    for i in range(2):
        assert (await send(peer, "Rows", b"d", {"UNIQ_KEY": f"ROW-{i}"}, queue_id=0)).code == 0
    for m in sorted(await pull_all(peer, "Rows"), key=lambda m: m.queue_offset):
        r = await peer.call(
            R.CONSUMER_SEND_MSG_BACK,
            {"offset": m.commit_log_offset, "group": "RowCG", "delayLevel": -1},
        )
        assert r.code == ResponseCode.SUCCESS
    problems: list[str] = []
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=BROWSER, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.fill("#login-user", "otto")
        await page.fill("#login-password", "op-pw")
        problems.clear()  # the page's first GET /api/me (401)
        await page.click("#login button[type=submit]")
        await page.locator("#pending-table tbody tr").nth(4).wait_for()
        # the timeline: one bar per hour with pending messages; a click opens its window
        await page.click("button[data-tab=timeline]")
        bars = page.locator("#timeline-chart rect.tl-bar")
        await expect(bars).to_have_count(2)
        await expect(page.locator("#timeline-total")).to_contain_text("5 pending")
        await shot(page, "console-timeline")
        start = soon // hour * hour
        await page.locator(f"#timeline-chart rect[data-start='{start}']").click()
        rows = page.locator("#pending-table tbody tr")
        await expect(rows).to_have_count(3)
        assert "TimelineA" in await rows.nth(0).text_content()
        # bulk: shift what the window selects by an hour, after the count is confirmed
        await page.select_option("#bulk select[name=action]", "shift")
        await page.fill("#bulk input[name=shiftMin]", "60")
        await page.click("#bulk button[type=submit]")
        await expect(page.locator("#bulk-count")).to_contain_text("3 pending messages selected")
        assert broker.stats.timers_scheduled == 3 + 2 + 1  # nothing moved by the dry run
        await shot(page, "console-bulk")
        await page.click("#bulk-go")
        await expect(page.locator("#status")).to_contain_text("shift: 3 rescheduled")
        await expect(rows).to_have_count(0)  # moved out of the window
        moved = await pull_pending(peer, "TimelineA")
        assert sorted(moved.values()) == [soon + hour + i for i in range(3)]
        # bulk recall by topic
        await page.fill("#pending-filter input[name=from]", "")
        await page.fill("#pending-filter input[name=to]", "")
        await page.fill("#pending-filter input[name=topic]", "TimelineB")
        await page.click("#pending-filter button[type=submit]")
        await expect(rows).to_have_count(2)
        await page.select_option("#bulk select[name=action]", "recall")
        await page.click("#bulk button[type=submit]")
        await expect(page.locator("#bulk-count")).to_contain_text("2 pending messages selected")
        await page.click("#bulk-go")
        await expect(page.locator("#status")).to_contain_text("recall: 2 recalled")
        await expect(rows).to_have_count(0)
        # search by key: the journey of the message
        await page.click("button[data-tab=search]")
        await page.fill("#search-form input[name=key]", "trip-1")
        await page.click("#search-form button[type=submit]")
        card = page.locator(f".journey[data-msg-id='{trip}']")
        await expect(card).to_have_count(1)
        steps = [await r.get_attribute("data-step") for r in await card.locator("tr").all()][1:]
        assert steps[:6] == [
            "sent",
            "scheduled",
            "fired",
            "retry scheduled",
            "dead-lettered",
            "retried",
        ], steps
        consumed = card.locator("tr[data-step=consumed]")
        await expect(consumed).to_have_count(1)
        assert "group TripCG" in await consumed.text_content()
        late = fired.store_timestamp - int(props["TIMER_DELIVER_MS"])
        assert f"{late} ms" in await card.locator("tr[data-step=fired]").text_content()
        await shot(page, "console-search")
        # one dead letter resent from its row
        await page.click("button[data-tab=dlq]")
        await page.fill("#dlq-filter input[name=consumerGroup]", "RowCG")
        await page.click("#dlq-filter button[type=submit]")
        dlq_rows = page.locator("#dlq-table tbody tr")
        await expect(dlq_rows).to_have_count(2)
        await shot(page, "console-dlq-row")
        await dlq_rows.filter(has_text="ROW-1").get_by_role("button", name="Resend").click()
        await expect(page.locator("#status")).to_contain_text("resent ROW-1")
        # on time: the shares of the fired ones
        await page.click("button[data-tab=timers]")
        await expect(page.locator("#ontime-all")).to_contain_text("fired within 10 ms of due")
        timer_cells = await page.locator("#timer-table tbody td").all_text_contents()
        assert timer_cells[-2].endswith(" %") and timer_cells[-1].endswith(" %"), timer_cells
        await shot(page, "console-ontime")
        # a viewer: no bulk form, no row resend
        await page.click("#logout")
        await page.wait_for_selector("#login:not([hidden])")
        await page.fill("#login-user", "vera")
        await page.fill("#login-password", "view-pw")
        await page.click("#login button[type=submit]")
        await expect(page.locator("#pending")).to_be_visible()
        assert not await page.locator("#bulk").is_visible()
        await page.click("button[data-tab=dlq]")
        await page.fill("#dlq-filter input[name=consumerGroup]", "RowCG")
        await page.click("#dlq-filter button[type=submit]")
        await expect(page.locator("#dlq-table tbody tr")).to_have_count(2)
        assert await page.get_by_role("button", name="Resend").count() == 0
        await browser.close()
    assert problems == [], problems
    assert sorted(m.msg_id for m in await pull_all(peer, "Rows")) == ["ROW-0", "ROW-1", "ROW-1"]
    assert await pull_all(peer, "TimelineB") == []
    summaries = [kw["action"] for e, kw in log.lines if e == "console.bulk_action"]
    assert summaries == ["shift", "recall"]
    await peer.close()


async def pull_pending(peer: RawPeer, topic: str) -> dict[str, int]:
    """msgId -> due time of ``topic``'s pending messages (907)."""
    r = await peer.call(R.KAIROS_BROWSE_PENDING, {"topic": topic})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return {row["msgId"]: row["dueMs"] for row in orjson.loads(r.body)["rows"]}
