"""The whole job through ``main(argv)`` (shared session) and through the real ``spark-submit``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from kairosmq.spark.job import main

from tests.spark import scenario
from tests.spark.conftest import NO_JAVA, java_available, write_jsonl

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "event_counts",
    "lateness_by_level",
    "lateness_by_topic",
    "lateness_overall",
    "retry_funnel",
    "dlq_counts",
    "throughput_per_minute",
    "top_late",
    "e2e_latency",
    "added_delay",
    "added_delay_by_topic",
    "timer_lateness",
    "timer_lateness_by_topic",
    "timer_added_delay",
    "timer_counts",
    "transaction_counts",
}


def _layout(tmp_path: Path) -> tuple[Path, Path, list]:
    """Scenario split like a broker's log dir: a gzipped rotated file, the active file, a stray."""
    recs = scenario.records()
    logs = tmp_path / "logs"
    write_jsonl(logs / "broker-20260101T000000-42-1.jsonl.gz", recs[:40])
    write_jsonl(logs / "broker.jsonl", recs[40:-5])
    (logs / "notes.txt").write_text("not a log file\n")
    extra = write_jsonl(tmp_path / "elsewhere" / "tail.jsonl", recs[-5:])
    return logs, extra, recs


def _check_outputs(out: Path, recs: list, dirs: frozenset[str] = frozenset()) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lines"] == len(recs)
    assert summary["malformed_lines"] == scenario.MALFORMED_LINES
    assert summary["lines_without_event"] == 1 and summary["uncatalogued_events"] == 1
    assert summary["newer_format_lines"] == scenario.NEWER_FORMAT_LINES
    names = Counter(r["event"] for r in recs if isinstance(r, dict))
    assert summary["events"]["delivered"] == names["message.delivered"]
    assert summary["events"]["consumed"] == names["message.pulled"]
    assert summary["funnel"] == {
        "succeeded_first_try": 3,
        "succeeded_after_retry": 1,
        "in_retry": 1,
        "dead_lettered": 1,
    }
    assert summary["dead_lettered_by_group"] == {"g1": 1}
    assert summary["lateness_ms"]["max"] == 20.0
    # no work directory left behind; messages/ only with --messages
    assert {p.name for p in out.iterdir() if p.is_dir()} - {"parquet-cache"} == dirs
    assert {p.stem for p in out.glob("*.jsonl")} == TABLES
    top = [json.loads(line) for line in (out / "top_late.jsonl").read_text().splitlines()]
    assert top[0]["rank"] == 1 and top[0]["delivered_at"].startswith("2026-01-01T00:02:01")
    html = (out / "report.html").read_text(encoding="utf-8")
    svgs = [
        html[i : html.index("</svg>", i) + 6]
        for i in range(len(html))
        if html.startswith("<svg", i)
    ]
    assert len(svgs) == 4
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    assert "made.up.event" in html and "%RETRY%g1" in html and "<details>" in html
    return summary


def test_main_reads_a_log_dir_with_rotated_gzip_plus_a_file(spark, tmp_path, capsys):
    logs, extra, recs = _layout(tmp_path)
    out = tmp_path / "out"
    rc = main(
        [
            str(logs),
            "--input",
            str(extra),
            "-o",
            str(out),
            "--top",
            "5",
            "--shuffle-partitions",
            "2",
            "--messages",
        ]
    )
    assert rc == 0
    _check_outputs(out, recs, frozenset({"messages"}))
    assert len((out / "top_late.jsonl").read_text().splitlines()) == 5
    assert spark.read.parquet(str(out / "messages")).count() == 25
    printed = capsys.readouterr()
    assert "dead-lettered 1" in printed.out and "[9/9] report" in printed.err


def test_incremental_converts_closed_files_once_and_reports_the_same(spark, tmp_path, capsys):
    logs, extra, recs = _layout(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [
        str(logs),
        "-i",
        str(extra),
        "-o",
        str(out),
        "--shuffle-partitions",
        "2",
        "--incremental",
        "--cache-dir",
        str(cache),
    ]
    assert main(args) == 0
    first = _check_outputs(out, recs)
    entries = sorted(p.name for p in cache.iterdir())
    # the rotated gzip file and the stray tail.jsonl are closed; broker.jsonl is the open one
    assert [e.split("-")[0] for e in entries] == ["broker", "tail.jsonl"], entries
    assert "parquet cache (+2)" in capsys.readouterr().err
    stamp = {e: (cache / e / "_SUCCESS").stat().st_mtime_ns for e in entries}
    assert main(args) == 0
    assert "parquet cache (+0)" in capsys.readouterr().err
    second = _check_outputs(out, recs)
    assert {e: (cache / e / "_SUCCESS").stat().st_mtime_ns for e in entries} == stamp
    first.pop("meta", None), second.pop("meta", None)
    assert first == second


def test_failfast_stops_on_a_malformed_line_and_bad_inputs_exit_2(spark, tmp_path, capsys):
    bad = write_jsonl(tmp_path / "bad.jsonl", scenario.records())
    assert main([str(bad), "-o", str(tmp_path / "o"), "--mode", "failfast", "-q"]) == 1
    assert "MALFORMED" in capsys.readouterr().err
    assert main([str(tmp_path / "missing"), "-o", str(tmp_path / "o")]) == 2
    assert "no log files" in capsys.readouterr().err


@pytest.mark.slow
def test_spark_submit_runs_the_job_file_as_a_script(tmp_path):
    if not java_available():
        pytest.skip(NO_JAVA)
    logs, extra, recs = _layout(tmp_path)
    out = tmp_path / "out"
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "spark" / "job.py"),
            str(logs),
            "-i",
            str(extra),
            "-o",
            str(out),
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_outputs(out, recs)
