"""Time the delivery-quality Spark job against a bare full parse of the same logs.

Generates the input with ``bench/gen_events.py`` once per size and format (kept under
``--work``), then per size runs, through ``spark-submit --master local[2]``:

* the bare full parse: every field of every line parsed with the job's schema
  (``LOG_EVENT_SCHEMA``) and nothing else (``write.format("noop")``), timed inside Spark;
* the job itself (``spark/job.py``), its own time from its summary.

It prints, per size, both wall times (JVM start included), both inner times, the CPU seconds
each run used (user + system of the whole process tree: less sensitive to other load on a
shared machine than wall time), the load average before and after each run, the ratios job /
parse (inner times and CPU) and a verdict against the goals of issue 17: job wall <= 60 s at
10M events and job <= 1.3 x the bare parse.

    nice -n 10 python bench/bench_spark.py --sizes 10000000 --work /tmp/kmq-bench
    python bench/bench_spark.py --sizes 1000000 --format 1     # the old log format
    python bench/bench_spark.py --sizes 10000000 --messages    # + the messages/ table
    python bench/bench_spark.py --sizes 10000000 --g1   # + the job again with the JVM's G1

Both runs use the job's JVM collector (``job.JVM_GC``, the parallel one) unless ``--gc
default``, and the job's JIT thresholds for short jobs (``job.JVM_JIT``) unless ``--jit
default``; ``--g1`` adds a third run per size, the job with the JVM's default collector (G1),
printed as its own row with the same parse time. Both also map Spark's classes from the
class archive ``kairosmq report`` uses (``preflight.class_archive``); when there is none yet,
an untimed job over 2,000 events writes it first, as a user's first report would
(``--no-cds``: JVMs without it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WALL_GOAL_S, RATIO_GOAL = 60.0, 1.3


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``cmd``; return its wall seconds, CPU seconds (children) and the load averages."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, f"{load0:.1f}->{os.getloadavg()[0]:.1f}"


def parse_only(logs: str, out: str) -> None:
    """Inside spark-submit: the bare full parse of every file under ``logs``; writes JSON."""
    from kairosmq.spark.job import build_session, resolve_inputs
    from kairosmq.spark.schema import LOG_EVENT_SCHEMA, read_options

    spark = build_session()
    paths = resolve_inputs([logs])
    t = time.perf_counter()
    (
        spark.read.schema(LOG_EVENT_SCHEMA)
        .options(**read_options("PERMISSIVE"))
        .json(paths)
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    Path(out).write_text(json.dumps({"parse_s": round(time.perf_counter() - t, 1)}))
    spark.stop()


def make_archive(a: argparse.Namespace, dump: str, pending: Path, env: dict[str, str]) -> None:
    """Untimed: the job once over 2,000 generated events with ``dump`` (the options that
    write the class archive at JVM exit), as a user's first report would."""
    with tempfile.TemporaryDirectory(prefix="kmq-cds-") as tmp:
        logs = Path(tmp) / "logs"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "gen_events.py"),
                "--events",
                "2000",
                "--out",
                str(logs),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                str(Path(sys.executable).parent / "spark-submit"),
                "--master",
                a.master,
                "--conf",
                "spark.ui.enabled=false",
                "--driver-java-options",
                dump,
                str(ROOT / "spark" / "job.py"),
                str(logs),
                "-o",
                str(Path(tmp) / "o"),
                "-q",
            ],
            check=True,
            env=env,
            capture_output=True,
        )
    print(f"class archive written: {pending.name.rsplit('.', 2)[0]}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--work", default="/tmp/kmq-bench")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--format", type=int, choices=(1, 2), default=2, help="log line format")
    p.add_argument("--no-parse", action="store_true", help="time the job only")
    p.add_argument("--messages", action="store_true", help="the job also writes messages/")
    p.add_argument(
        "--gc",
        choices=("parallel", "default"),
        default="parallel",
        help="JVM collector of every run: the job's (parallel) or the JVM's (G1)",
    )
    p.add_argument(
        "--jit",
        choices=("short", "default"),
        default="short",
        help="JIT thresholds of every run: the job's (short) or the JVM's own",
    )
    p.add_argument("--g1", action="store_true", help="also run the job with the JVM's G1")
    p.add_argument(
        "--no-cds",
        action="store_true",
        help="start the JVMs without the class archive (preflight.class_archive)",
    )
    p.add_argument("--parse-only", nargs=2, metavar=("LOGS", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.parse_only:
        parse_only(*a.parse_only)
        return
    from kairosmq.spark.job import JVM_GC, JVM_JIT
    from kairosmq.spark.preflight import class_archive, keep_archive, quiet_log4j_options

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    archive = ""
    if not a.no_cds:  # the class archive the job's own JVM uses (kairosmq report)
        archive, pending = class_archive()
        if pending is not None:
            make_archive(a, archive, pending, env)
            keep_archive(pending)
            archive = class_archive()[0]

    def submit_cmd(gc: str) -> list[str]:
        java = quiet_log4j_options() + (f" {JVM_GC}" if gc == "parallel" else "")
        java += f" {JVM_JIT}" if a.jit == "short" else ""
        return [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            a.master,
            "--driver-memory",
            a.driver_memory,
            "--conf",
            "spark.ui.enabled=false",
            "--driver-java-options",
            f"{java} {archive}".strip(),
        ]

    submit = submit_cmd(a.gc)
    rows = []
    for n in a.sizes:
        logs = Path(a.work) / (f"logs-{n}" + ("" if a.format == 2 else f"-v{a.format}"))
        if not logs.exists():
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "bench" / "gen_events.py"),
                    "--events",
                    str(n),
                    "--out",
                    str(logs),
                    "--format",
                    str(a.format),
                ],
                check=True,
            )
        size_mb = sum(f.stat().st_size for f in logs.iterdir()) / 1e6
        parse = parse_wall = parse_cpu = None
        parse_load = "-"
        if not a.no_parse:
            parse_wall, parse_cpu, parse_load = timed(
                [*submit, __file__, "--parse-only", str(logs), str(logs) + ".parse"], env
            )
            parse = json.loads(Path(str(logs) + ".parse").read_text())["parse_s"]
        out = Path(a.work) / f"out-{n}"
        for gc in (a.gc, "default") if a.g1 and a.gc != "default" else (a.gc,):
            job_cmd = [
                *submit_cmd(gc),
                str(ROOT / "spark" / "job.py"),
                str(logs),
                "-o",
                str(out),
                "-q",
                *(["--messages"] if a.messages else []),
            ]
            wall, cpu, load = timed(job_cmd, env)
            summary = json.loads((out / "summary.json").read_text())
            rows.append(
                (
                    n,
                    gc,
                    summary.get("lines"),
                    size_mb,
                    parse_wall,
                    parse,
                    parse_cpu,
                    parse_load,
                    wall,
                    summary["meta"]["elapsed_s"],
                    cpu,
                    load,
                )
            )
    print(
        f"\n({a.master}, format {a.format}, messages/ {'on' if a.messages else 'off'}, "
        f"parse with gc {a.gc}, jit {a.jit}; wall = spark-submit incl. JVM start, "
        "s = timed inside Spark, cpu = user+sys s)"
    )
    print(
        f"{'events':>12} {'job gc':>8} {'MB':>6} {'parse wall':>10} {'parse s':>8} "
        f"{'parse cpu':>9} {'job wall':>9} {'job s':>7} {'job cpu':>8} {'job/parse':>9} "
        f"{'cpu ratio':>9}  "
        "load parse | job"
    )
    for n, gc, _ev, mb, pw, ps, pc, pl, wall, job, cpu, load in rows:
        ratio = f"{job / ps:9.2f}" if ps else f"{'-':>9}"
        cratio = f"{cpu / pc:9.2f}" if pc else f"{'-':>9}"
        print(
            f"{n:>12,} {gc:>8} {mb:6.0f} {pw or 0:10.1f} {ps or 0:8.1f} {pc or 0:9.1f} "
            f"{wall:9.1f} {job:7.1f} {cpu:8.1f} {ratio} {cratio}  {pl} | {load}"
        )
    for n, gc, ev, _mb, _pw, ps, _pc, _pl, wall, job, _cpu, _load in rows:
        verdict = [
            f"job wall {wall:.1f} s {'<=' if wall <= WALL_GOAL_S else '>'} "
            f"{WALL_GOAL_S:.0f} s: {'met' if wall <= WALL_GOAL_S else 'NOT met'}"
        ]
        if ps:
            r = job / ps
            verdict.append(
                f"job/parse {r:.2f} {'<=' if r <= RATIO_GOAL else '>'} {RATIO_GOAL}: "
                f"{'met' if r <= RATIO_GOAL else 'NOT met'}"
            )
        print(f"verdict {n:,} events, job gc {gc} ({ev or '?'} lines read): " + "; ".join(verdict))


if __name__ == "__main__":
    main()
