"""The console's Report view: the newest delivery-quality report under
``--spark-report-dir``, produced by the real Spark job (``kairosmq report``) on logs
``bench/gen_events.py`` generates, read through the HTTP API (a viewer may, nobody
logged out may; without the option it is a 404) and shown in headless Chromium (a
screenshot with ``KAIROSMQ_SCREENSHOTS``).

Spark needs Java (skipped with the reason without it) and PySpark; the browser step
skips without Chromium or Playwright.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.client.remoting import RemotingPool
from kairosmq.console.api import Brokers, ConsoleApi
from kairosmq.console.auth import Users
from kairosmq.console.http import HttpServer
from kairosmq.spark.png import find_chromium

from tests.console.harness import Http, Log, users_file

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install kairosmq[spark])")
pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]


def _java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and (Path(home) / "bin" / "java").exists()) or shutil.which("java") is not None


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reports directory holding an older, empty run and the newest real one."""
    if not _java():
        pytest.skip("Spark needs Java 17+: no `java` on PATH and no JAVA_HOME/bin/java")
    base = tmp_path_factory.mktemp("spark-report")
    logs, root = base / "logs", base / "reports"
    gen = [sys.executable, str(ROOT / "bench" / "gen_events.py")]
    subprocess.run(
        [*gen, "--events", "3000", "--out", str(logs), "--jobs", "1", "--seed", "7"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    old = root / "2026-11-01"
    old.mkdir(parents=True)
    (old / "summary.json").write_text('{"lines": 0}')
    env = {**os.environ, "KAIROSMQ_SPARK_CDS": "off"}
    job = [sys.executable, "-m", "kairosmq.spark.job", str(logs), "-o", str(root / "2026-11-28")]
    done = subprocess.run(job, capture_output=True, timeout=280, env=env, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return root


@pytest.fixture
async def console_with_report(broker_factory, tmp_path: Path, reports: Path) -> Any:
    broker = await broker_factory()
    pool = RemotingPool()
    log = Log()
    api = ConsoleApi(
        Users.load(users_file(tmp_path)),
        Brokers(pool, namesrv=None, broker=broker.address),
        log=log,
        spark_report_dir=reports,
    )
    server = HttpServer(api.handle, "127.0.0.1", 0, log=log)
    await server.start()
    yield server.port
    await server.stop()
    pool.close()


async def test_report_api_reads_the_newest_run(console_with_report, reports: Path) -> None:
    port = console_with_report
    anon = Http(port)
    assert (await anon.call("GET", "/api/report"))[0] == 401
    vera = Http(port)
    await vera.login("vera", "view-pw")
    status, out = await vera.call("GET", "/api/report")
    assert status == 200, out
    newest = reports / "2026-11-28"
    assert out["dir"] == str(newest) and out["html"] is True
    assert out["summary"] == orjson.loads((newest / "summary.json").read_bytes())
    assert out["summary"]["lines"] > 0
    for path in newest.glob("*.jsonl"):
        lines = [x for x in path.read_bytes().splitlines() if x.strip()]
        table = out["tables"][path.stem]
        assert table["total"] == len(lines)
        assert table["rows"] == [orjson.loads(x) for x in lines[: len(table["rows"])]]
    assert out["tables"]["lateness_by_level"]["rows"], "no delay-level lateness rows"


async def test_report_view_in_chromium(console_with_report, reports: Path) -> None:
    playwright = pytest.importorskip("playwright.async_api", reason="pip install playwright")
    browser_path = find_chromium()
    if browser_path is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium)")
    shots = os.environ.get("KAIROSMQ_SCREENSHOTS")
    port = console_with_report
    problems: list[str] = []
    summary = orjson.loads((reports / "2026-11-28" / "summary.json").read_bytes())
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=browser_path, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.fill("#login-user", "vera")
        await page.fill("#login-password", "view-pw")
        problems.clear()  # the page's first GET /api/me (401)
        await page.click("#login button[type=submit]")
        await page.wait_for_selector("#pending:not([hidden])")
        await page.click("button[data-tab=report]")
        await playwright.expect(page.locator("#report-head")).to_contain_text("2026-11-28")
        lines = page.locator("#report-summary tr", has_text="lines")
        assert str(summary["lines"]) in await lines.first.text_content()
        level = page.locator("#report-tables details[data-table=lateness_by_level]")
        await playwright.expect(level).to_have_count(1)
        if not await level.evaluate("d => d.open"):
            await level.locator("summary").click()
        await playwright.expect(level.locator("table tr").nth(1)).to_be_visible()
        if shots:
            await asyncio.to_thread(Path(shots).mkdir, parents=True, exist_ok=True)
            await page.screenshot(path=str(Path(shots) / "console-report.png"), full_page=True)
        await browser.close()
    assert problems == [], problems
