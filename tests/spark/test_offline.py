"""Parts of spark/ that need no JVM: schema derivation, input resolution, rendering, generator."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kairosmq.server.observe.logs import CATALOGUE, COMMON, FORMAT_1_FIELDS, LEAN_EVENTS, all_fields
from kairosmq.spark import report, svg, tables
from kairosmq.spark.job import InputError, parse_args, resolve_inputs
from kairosmq.spark.schema import (
    CORRUPT,
    LOG_EVENT_SCHEMA,
    SPARK_TYPES,
    build_schema,
    contract_fields,
)
from kairosmq.spark.transforms import READ_COLUMNS
from pyspark.sql.types import IntegerType, LongType, StringType, TimestampType

ROOT = Path(__file__).resolve().parents[2]


def test_schema_is_the_catalogue_plus_the_corrupt_column():
    fields = contract_fields()
    names = [f.name for f in LOG_EVENT_SCHEMA.fields]
    assert names == [*fields, CORRUPT]
    assert list(fields)[: len(all_fields())] == list(all_fields())  # format 2 first
    for f in LOG_EVENT_SCHEMA.fields[:-1]:
        assert f.dataType == SPARK_TYPES[fields[f.name]] and f.nullable, f.name
    # spot checks written out by hand, so a wrong mapping table cannot pass unnoticed
    by_name = {f.name: f.dataType for f in LOG_EVENT_SCHEMA.fields}
    assert by_name["timestamp"] == TimestampType() and by_name["delay_level"] == IntegerType()
    assert by_name["ts"] == LongType() and by_name["v"] == IntegerType()
    assert by_name["lateness_ms"].typeName() == "double"
    assert by_name["deliver_ts"].typeName() == "long" and by_name[CORRUPT] == StringType()
    every = set(COMMON).union(*CATALOGUE.values()) | set(FORMAT_1_FIELDS)
    assert set(names) == every | {CORRUPT}
    assert set(READ_COLUMNS) <= set(names)  # the metrics read only catalogued fields
    for event, dropped in LEAN_EVENTS.items():  # format 2 dropped them: format 1 still types
        assert set(dropped) <= set(FORMAT_1_FIELDS) and not set(dropped) & set(CATALOGUE[event])


def test_schema_rejects_unknown_catalogue_types():
    with pytest.raises(ValueError, match="unknown type 'decimal'"):
        build_schema({"x": "decimal"})


def test_resolve_inputs_expands_dirs_and_globs(tmp_path):
    for name in ("broker.jsonl", "broker-1-2-3.jsonl.gz", "notes.txt", ".hidden.jsonl"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "sub").mkdir()
    found = resolve_inputs([str(tmp_path)])
    assert [Path(p).name for p in found] == ["broker-1-2-3.jsonl.gz", "broker.jsonl"]
    # globs skip hidden files like a shell; a file named twice is read once
    assert resolve_inputs([str(tmp_path / "*.jsonl"), str(tmp_path / "broker.jsonl")]) == [
        str(tmp_path / "broker.jsonl")
    ]
    assert resolve_inputs(["s3a://bucket/logs/"]) == ["s3a://bucket/logs/"]
    with pytest.raises(InputError):
        resolve_inputs([str(tmp_path / "nope*.jsonl")])
    args = parse_args(["a", "-i", "b", "--input", "c", "--mode", "failfast"])
    assert args.inputs == ["a", "b", "c"] and args.mode == "FAILFAST" and args.master is None


def test_charts_are_well_formed_and_escaped():
    chart = svg.bar_chart(
        ["<L1>", "L2"], {"p50 & co": [1.0, None], "max": [0.0, 1e6]}, title="a <b>", log=True
    )
    root = ET.fromstring(chart)
    assert root.tag.endswith("svg") and "a <b>" in "".join(root.itertext())
    assert len([e for e in root.iter() if e.tag.endswith("rect")]) == 2 + 3  # legend + bars
    ticks = [
        t.text for t in root.iter() if t.tag.endswith("text") and t.get("text-anchor") == "end"
    ]
    assert ticks == ["1", "10", "100", "1k", "10k", "100k", "1M"]  # a log axis: no 0 tick
    band = svg.band_chart(
        ["L1", "L2"],
        [{"p50": 2.0, "p90": 3.0, "p99": 9.0, "p999": 9.5, "max": 12.0}, {"p50": None}],
        title="b",
    )
    assert len([e for e in ET.fromstring(band).iter() if e.tag.endswith("rect")]) == 4 + 3
    line = svg.line_chart(["00:00", "00:01", "00:02"], {"s": [1, None, 3]}, title="t")
    ET.fromstring(line)
    assert "no data" in svg.line_chart([], {}, title="empty")


def test_summary_console_and_html_from_plain_rows():
    tables = {
        "event_counts": [
            {"event": "message.delivered", "catalogued": True, "lines": 4},
            {"event": "<malformed>", "catalogued": False, "lines": 2},
            {"event": "x.y", "catalogued": False, "lines": 1},
        ],
        "lateness_by_level": [
            {
                "delay_level": 1,
                "count": 4,
                "p50": 1.0,
                "p90": 2.0,
                "p99": 3.0,
                "p999": 3.0,
                "max": 3.0,
                "mean": 1.5,
            }
        ],
        "lateness_overall": [
            {"count": 4, "p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 3.0, "max": 3.0, "mean": 1.5}
        ],
        "retry_funnel": [
            {"group": "g", "attempts": 1, "outcome": "succeeded", "messages": 5},
            {"group": "g", "attempts": 3, "outcome": "succeeded", "messages": 2},
            {"group": "g", "attempts": 4, "outcome": "dead_lettered", "messages": 1},
        ],
        "dlq_counts": [{"group": "g<script>", "dead_lettered": 1, "messages": 1}],
        "throughput_per_minute": [
            {
                "minute": dt.datetime(2026, 1, 1, 0, m),
                "stored": 1,
                "scheduled": 0,
                "delivered": 2,
                "consumed": 3,
                "redelivered": 0,
                "dead_lettered": 0,
                "rejected": 0,
            }
            for m in (0, 2)
        ],
    }
    s = report.summarize(tables)
    assert (s["lines"], s["malformed_lines"], s["uncatalogued_events"]) == (7, 2, 1)
    assert s["funnel"] == {
        "succeeded_first_try": 5,
        "succeeded_after_retry": 2,
        "in_retry": 0,
        "dead_lettered": 1,
    }
    assert s["max_attempts"] == 4 and s["events"]["delivered"] == 4 and s["events"]["stored"] == 2
    text = report.console_summary(tables, s)
    assert "dead-lettered 1" in text and len(text.splitlines()) < 30
    html = report.render_html(tables, s, {"inputs": "x", "mode": "PERMISSIVE"})
    assert "g&lt;script&gt;" in html and "<script>" not in html and html.count("<svg") == 4
    assert "00:01" in html  # the missing minute is drawn as zero


@pytest.mark.slow  # child processes
def test_gen_events_speaks_the_catalogue(tmp_path):
    out = tmp_path / "gen"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gen_events.py"),
            "--events",
            "3000",
            "--files",
            "2",
            "--gzip",
            "--out",
            str(out),
            "--jobs",
            "1",
            "--groups",
            "2",
        ],
        check=True,
        capture_output=True,
    )
    assert sorted(p.name for p in out.iterdir()) == ["broker-0000.jsonl.gz", "broker-0001.jsonl"]
    lines = (out / "broker-0001.jsonl").read_text().splitlines()
    assert len(lines) >= 1500
    for line in lines:
        rec = json.loads(line)
        assert set(rec) - set(COMMON) <= set(CATALOGUE[rec["event"]])


@pytest.mark.slow  # child processes
def test_gen_events_replicates_with_distinct_messages(tmp_path):
    gen = [sys.executable, str(ROOT / "bench" / "gen_events.py")]
    subprocess.run(
        [*gen, "--events", "2000", "--files", "2", "--out", str(tmp_path / "a"), "--jobs", "1"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*gen, "--replicate", str(tmp_path / "a"), "--copies", "3", "--out", str(tmp_path / "b")],
        check=True,
        capture_output=True,
    )
    src = [
        json.loads(ln)
        for f in sorted((tmp_path / "a").iterdir())
        for ln in f.read_text().splitlines()
    ]
    out = [
        json.loads(ln)
        for f in sorted((tmp_path / "b").iterdir())
        for ln in f.read_text().splitlines()
    ]
    assert len(list((tmp_path / "b").iterdir())) == 6 and len(out) == 3 * len(src)
    ids = {r["msg_id"] for r in src if "msg_id" in r}
    copied = {r["msg_id"] for r in out if "msg_id" in r}
    assert len(copied) == 3 * len(ids) and ids <= copied
    strip = [{k: v for k, v in r.items() if "msg_id" not in k} for r in out[: len(src)]]
    assert strip == [{k: v for k, v in r.items() if "msg_id" not in k} for r in src]


@pytest.mark.slow  # child processes
def test_job_file_runs_as_a_script_without_the_package_installed():
    # Hide the editable install: _bootstrap must map kairosmq.* onto the checkout.
    code = (
        "import sys, runpy; sys.meta_path[:] = [f for f in sys.meta_path "
        "if 'editable' not in repr(f).lower()]; sys.argv = ['job.py', '--help']; "
        f"runpy.run_path({str(ROOT / 'spark' / 'job.py')!r}, run_name='__main__')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "kairosmq report" in proc.stdout and "--mode" in proc.stdout


def test_histogram_percentiles_are_nearest_rank_within_one_percent():
    import math
    import random

    rng = random.Random(7)
    values = [round(rng.lognormvariate(1, 1.2), 3) for _ in range(5000)] + [0.0, -1.5]
    growth = 1.01
    hist: dict[int, list[float]] = {}
    for v in values:  # the same bucket rule as transforms.bucket
        b = -10_000 if v <= 0.001 else math.ceil(math.log(v) / math.log(growth))
        cell = hist.setdefault(b, [0, -math.inf, 0.0])
        cell[0] += 1
        cell[1] = max(cell[1], v)
        cell[2] += v
    rows = [{"k": "x", "bucket": b, "n": n, "hi": hi, "total": t} for b, (n, hi, t) in hist.items()]
    got = tables.summary_rows(rows, ["k"])[0]
    exact = sorted(values)
    assert got["count"] == len(values) and got["max"] == max(values)
    assert got["mean"] == pytest.approx(sum(values) / len(values))
    for name, p in tables.QUANTILES:
        true = exact[math.ceil(p * len(exact)) - 1]
        assert true <= got[name] <= true * growth + 1e-9, name
    # merging across keys equals summarizing the union
    half = [{**r, "k": "y" if i % 2 else "x"} for i, r in enumerate(rows)]
    assert tables.summary_rows(half, [])[0] == tables.summary_rows(rows, [])[0]
