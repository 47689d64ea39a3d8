"""The HTML report in a real browser: headless Chromium loads it with no console message, the
DOM holds every chart and fold, and the chart export writes real PNG files.

Skips (with the reason) when no Chromium is installed: ``apt-get install -y chromium``.
A control page with a failing script proves the console check can see errors.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path

import pytest
from kairosmq.spark import png, report

BROWSER = png.find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BROWSER is None,
        reason="no Chromium on PATH (apt-get install -y chromium, or set KAIROSMQ_CHROMIUM)",
    ),
]
STATS = {"count": 40, "p50": 2.0, "p90": 9.0, "p99": 30.0, "p999": 80.0, "max": 120.0, "mean": 4.0}


def _tables() -> dict[str, list[dict]]:
    minute = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return {
        "event_counts": [
            {"event": "message.delivered", "catalogued": True, "lines": 40},
            {"event": "<malformed>", "catalogued": False, "lines": 1},
        ],
        "lateness_by_level": [{"delay_level": lv, **STATS} for lv in (1, 2, 3)],
        "lateness_by_topic": [{"topic": "T", **STATS}],
        "lateness_overall": [STATS],
        "added_delay": [{"delay_level": lv, **STATS} for lv in (0, 1, 2, 3)],
        "added_delay_by_topic": [
            {"topic": t, "delay_level": lv, **STATS} for t in ("A", "B") for lv in (0, 1)
        ],
        "e2e_latency": [
            {"topic": t, "delay_level": lv, **STATS} for t in ("A", "B") for lv in (0, 1)
        ],
        "retry_funnel": [
            {"group": "g", "attempts": 1, "outcome": "succeeded", "messages": 30},
            {"group": "g", "attempts": 2, "outcome": "dead_lettered", "messages": 1},
        ],
        "dlq_counts": [
            {"group": "g", "dead_lettered": 1, "messages": 1, "first_at": minute, "last_at": minute}
        ],
        "throughput_per_minute": [
            {
                "minute": minute + dt.timedelta(minutes=m),
                "stored": 5,
                "scheduled": 3,
                "delivered": 3,
                "consumed": 8,
                "redelivered": 0,
                "dead_lettered": 0,
                "rejected": 0,
            }
            for m in range(5)
        ],
        "top_late": [
            {
                "rank": 1,
                "msg_id": "m",
                "topic": "T",
                "delay_level": 1,
                "reconsume_times": 0,
                "lateness_ms": 120.0,
                "delivered_at": minute,
            }
        ],
    }


def _load(page: Path, tmp: Path) -> tuple[str, list[str]]:
    """DOM after load, and the console lines Chromium logged while loading ``page``."""
    assert BROWSER is not None
    proc = subprocess.run(
        [
            *png.chromium_args(BROWSER, str(tmp / "profile")),
            "--enable-logging=stderr",
            "--log-level=0",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [ln for ln in proc.stderr.splitlines() if re.search(r":CONSOLE[:(]", ln)]
    return proc.stdout, console


def test_the_console_check_sees_a_script_error(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><p>x</p><script>notDefined()</script>")
    _, console = _load(bad, tmp_path)
    assert any("notDefined" in ln for ln in console), console


def test_report_renders_in_chromium_without_console_messages(tmp_path):
    tables = _tables()
    html = report.render_html(
        tables, report.summarize(tables), {"inputs": "x", "mode": "PERMISSIVE", "elapsed_s": 1.0}
    )
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom, console = _load(page, tmp_path)
    assert console == [], console
    assert dom.count("<svg") == 4 and dom.count("<details") == 2 + 2  # 2 topics + 2 folds
    assert "Added delay" in dom and "no data" not in dom


def test_chart_export_writes_svg_and_png(tmp_path):
    notes = png.export_charts(report.charts(_tables()), tmp_path / "charts")
    assert notes == []
    names = {"added_delay", "lateness", "throughput", "retry_funnel"}
    for name in names:
        data = (tmp_path / "charts" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert (width, height) == (760, 300), name
    assert {p.stem for p in (tmp_path / "charts").glob("*.svg")} == names
