"""Time the delivery-quality Spark job against a bare full parse of the same logs.

Generates the input with ``bench/gen_events.py`` once per size and format (kept under
``--work``), then per size runs, through ``spark-submit --master local[2]``:

* the bare full parse: every field of every line parsed with the job's schema
  (``LOG_EVENT_SCHEMA``) and nothing else (``write.format("noop")``), timed inside Spark;
* the job itself (``spark/job.py``), its own time from its summary.

It prints, per size, both wall times (JVM start included), both inner times and the ratio
job / parse (the goal: <= 1.3, and <= 60 s wall at 10M events).

    python bench/bench_spark.py --sizes 1000000 10000000 --work /tmp/kmq-bench
    python bench/bench_spark.py --sizes 1000000 --format 1     # the old log format
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_only(logs: str, out: str) -> None:
    """Inside spark-submit: the bare full parse of every file under ``logs``; writes JSON."""
    from kairosmq.spark.job import build_session, resolve_inputs
    from kairosmq.spark.schema import LOG_EVENT_SCHEMA, read_options

    spark = build_session()
    paths = resolve_inputs([logs])
    t = time.perf_counter()
    (spark.read.schema(LOG_EVENT_SCHEMA).options(**read_options("PERMISSIVE")).json(paths)
     .write.format("noop").mode("overwrite").save())
    Path(out).write_text(json.dumps({"parse_s": round(time.perf_counter() - t, 1)}))
    spark.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--work", default="/tmp/kmq-bench")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--format", type=int, choices=(1, 2), default=2, help="log line format")
    p.add_argument("--no-parse", action="store_true", help="time the job only")
    p.add_argument("--parse-only", nargs=2, metavar=("LOGS", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.parse_only:
        parse_only(*a.parse_only)
        return
    from kairosmq.spark.preflight import quiet_log4j_options

    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", a.master,
              "--driver-memory", a.driver_memory, "--conf", "spark.ui.enabled=false",
              "--driver-java-options", quiet_log4j_options()]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    rows = []
    for n in a.sizes:
        logs = Path(a.work) / (f"logs-{n}" + ("" if a.format == 2 else f"-v{a.format}"))
        if not logs.exists():
            subprocess.run([sys.executable, str(ROOT / "bench" / "gen_events.py"),
                            "--events", str(n), "--out", str(logs), "--format", str(a.format)],
                           check=True)
        size_mb = sum(f.stat().st_size for f in logs.iterdir()) / 1e6
        parse = parse_wall = None
        if not a.no_parse:
            t = time.perf_counter()
            subprocess.run([*submit, __file__, "--parse-only", str(logs), str(logs) + ".parse"],
                           check=True, env=env)
            parse_wall = time.perf_counter() - t
            parse = json.loads(Path(str(logs) + ".parse").read_text())["parse_s"]
        out = Path(a.work) / f"out-{n}"
        t = time.perf_counter()
        subprocess.run([*submit, str(ROOT / "spark" / "job.py"), str(logs), "-o", str(out), "-q"],
                       check=True, env=env)
        wall = time.perf_counter() - t
        job = json.loads((out / "summary.json").read_text())["meta"]["elapsed_s"]
        rows.append((n, size_mb, parse_wall, parse, wall, job))
    print(f"\n{'events':>12} {'MB':>7} {'parse wall':>10} {'parse s':>8} {'job wall':>9} "
          f"{'job s':>7} {'job/parse':>9}   ({a.master}, format {a.format})")
    for n, mb, pw, ps, wall, job in rows:
        ratio = f"{job / ps:9.2f}" if ps else f"{'-':>9}"
        print(f"{n:>12,} {mb:7.0f} {pw or 0:10.1f} {ps or 0:8.1f} {wall:9.1f} {job:7.1f} "
              f"{ratio}")


if __name__ == "__main__":
    main()
