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
