"""The delivery-quality batch job: broker JSON logs -> parquet metric tables + an HTML report.

Owns the E/T/L wiring: ``main(argv)`` (argparse), ``build_session()``, ``resolve_inputs()``,
``extract()`` (JSON with ``LOG_EVENT_SCHEMA``; PERMISSIVE counts malformed lines, FAILFAST
raises on the first), ``run()`` (the transforms of ``transforms.py``) and the loads (one parquet
directory per metric, ``report.html``, ``summary.json``, a console summary).

Invariants:
* Runs unchanged as ``kairosmq report ...`` (``main(argv)``), as ``python spark/job.py`` and as
  ``spark-submit spark/job.py``: when run as a script from a checkout where the package is not
  installed, ``_bootstrap`` maps ``kairosmq.server``/``kairosmq.spark`` onto the folders next to
  this file (the same mapping as ``pyproject.toml``).
* Built-in Spark SQL only (no UDFs, no Python rows shipped): executors never start Python.
* The input is parsed once and cached; every metric reads the cache. Under spark-submit the
  master comes from spark-submit; otherwise ``--master`` (default ``local[*]``).
* ``main`` stops only a session it started (tests share one session).
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import importlib.util
import json
import os
import re
import sys
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any


def _bootstrap() -> None:
    """Make ``kairosmq.*`` importable when this file runs as a script (see module docstring)."""
    here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0] or ".").resolve() == here:
        sys.path.pop(0)  # spark/ itself must not shadow top-level modules
    try:
        import kairosmq.spark.transforms  # noqa: F401 - installed, or shipped with --py-files
        return
    except ImportError:
        pass
    pkg = types.ModuleType("kairosmq")
    pkg.__path__ = []
    sys.modules["kairosmq"] = pkg
    for sub in ("server", "spark"):
        spec = importlib.util.spec_from_file_location(
            f"kairosmq.{sub}", here.parent / sub / "__init__.py",
            submodule_search_locations=[str(here.parent / sub)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        setattr(pkg, sub, module)
    try:
        importlib.import_module("kairosmq.server.logs")
    except ImportError as exc:
        raise SystemExit(
            f"spark/job.py: cannot import the log catalogue kairosmq.server.logs ({exc}); "
            "install kairosmq on the driver (pip install 'kairosmq[spark]') or point "
            "PYSPARK_PYTHON at an environment that has it") from exc


if __package__ in (None, ""):
    _bootstrap()

from kairosmq.spark import report  # noqa: E402
from kairosmq.spark import transforms as T  # noqa: E402
from kairosmq.spark.schema import (  # noqa: E402
    CORRUPT,
    FAST_READ_SCHEMA,
    LOG_EVENT_SCHEMA,
    MODES,
    parse_timestamp,
    read_options,
)
from py4j.protocol import Py4JJavaError  # noqa: E402
from pyspark import SparkContext, StorageLevel  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

LOG_FILE = re.compile(r"^[^._].*\.(jsonl|json|log)(\.gz)?$")
# Small metric tables: collected for the report, then written as one parquet file each.
TABLES: dict[str, Callable[[DataFrame], DataFrame]] = {
    "retry_funnel": lambda ev: ev.transform(T.consumer_outcomes).transform(T.retry_funnel),
    "dlq_counts": T.dlq_counts,
    "throughput_per_minute": T.throughput_per_minute,
}
# The same, from the message.delivered rows only (cached apart: a sixth of the events).
DELIVERY_TABLES: dict[str, Callable[[DataFrame], DataFrame]] = {
    "lateness_by_level": T.lateness_by_level,
    "lateness_by_topic": T.lateness_by_topic,
    "lateness_overall": T.lateness_overall,
}


class InputError(ValueError):
    """An input path that names no log file."""


def resolve_inputs(specs: Sequence[str]) -> list[str]:
    """Expand directories (their ``*.jsonl[.gz]`` files) and globs; keep URIs (``s3a://``) as is.

    Raises:
        InputError: a spec that matches no file.
    """
    out: list[str] = []
    for spec in specs:
        if re.match(r"^[a-z][a-z0-9+.-]*://", spec) and not spec.startswith("file://"):
            out.append(spec)
            continue
        path = Path(spec).expanduser()
        if path.is_dir():
            found = sorted(str(p) for p in path.iterdir() if p.is_file() and LOG_FILE.match(p.name))
        elif glob.has_magic(spec):
            found = sorted(p for p in glob.glob(os.path.expanduser(spec)) if os.path.isfile(p))
        else:
            found = [str(path)] if path.is_file() else []
        if not found:
            raise InputError(f"{spec}: no log files (*.jsonl, *.jsonl.gz) there")
        out.extend(found)
    return list(dict.fromkeys(out))


def build_session(master: str | None = None, *, app_name: str = "kairosmq-report",
                  driver_memory: str | None = None) -> SparkSession:
    """Get or create the session: UTC, WARN logging; ``local[*]`` unless told or submitted."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # set by spark-submit's PythonRunner
    builder = (SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
               .config("spark.log.level", "WARN"))
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    if driver_memory and not submitted:
        builder = builder.config("spark.driver.memory", driver_memory)
    # Spark's stage progress bar on a terminal; plain step lines only when piped.
    builder = builder.config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def extract(spark: SparkSession, paths: Sequence[str], mode: str = "PERMISSIVE") -> DataFrame:
    """Parse log lines with the explicit schema (never inferred).

    FAILFAST reads with ``LOG_EVENT_SCHEMA`` itself (the contract, every field type-checked);
    PERMISSIVE takes the fast path (``FAST_READ_SCHEMA`` + ``parse_timestamp``), same columns.
    """
    if read_options(mode)["mode"] == "FAILFAST":
        return spark.read.schema(LOG_EVENT_SCHEMA).options(**read_options(mode)).json(list(paths))
    return (spark.read.schema(FAST_READ_SCHEMA).options(**read_options(mode))
            .json(list(paths)).transform(parse_timestamp))


class Progress:
    """One stderr line per finished step: ``[i/n] name  seconds``."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total, self.quiet, self.i = total, quiet, 0
        self.t0 = self.last = time.perf_counter()

    def step(self, name: str) -> None:
        self.i += 1
        now = time.perf_counter()
        if not self.quiet:
            print(f"[{self.i}/{self.total}] {name:<24} {now - self.last:6.1f} s", file=sys.stderr)
        self.last = now

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def _key(value: Any) -> tuple[bool, Any]:
    """Sort key that puts None last and compares like with like."""
    return (value is None, value if value is not None else 0)


SORT_KEYS: dict[str, tuple[str, ...]] = {  # row order of each small table in the report
    "event_counts": ("event",), "lateness_by_level": ("delay_level",),
    "lateness_by_topic": ("topic",), "lateness_overall": (), "dlq_counts": ("group",),
    "retry_funnel": ("group", "attempts", "outcome"), "throughput_per_minute": ("minute",),
    "top_late": ("rank",), "e2e_latency": ("topic", "delay_level"),
}


def run(spark: SparkSession, inputs: Sequence[str], output: str | Path, *,
        mode: str = "PERMISSIVE", top_n: int = 100, quiet: bool = False,
        parallel: int = 4) -> dict[str, Any]:
    """Extract, transform and load; return the summary written to ``summary.json``.

    After the first job fills the cache, the metrics run as concurrent Spark jobs from
    ``parallel`` driver threads (small inputs are dominated by per-job overhead).
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    paths = resolve_inputs(inputs)
    progress = Progress(total=len(TABLES) + len(DELIVERY_TABLES) + 4, quiet=quiet)
    raw = extract(spark, paths, mode)
    # FAILFAST type-checks every field; PERMISSIVE parses only what the metrics read.
    columns = raw.columns if mode.upper() == "FAILFAST" else [*T.MESSAGE_COLUMNS, CORRUPT]
    parsed = raw.select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [parsed]
    tables: dict[str, list[dict[str, Any]]] = {}

    def collect(name: str, df: DataFrame) -> str:
        # Written by the executors, read back for the report: no Python rows go to the
        # cluster, so executors never start Python workers.
        df.coalesce(1).write.mode("overwrite").parquet(str(out / name))
        rows = [row.asDict() for row in spark.read.parquet(str(out / name)).collect()]
        tables[name] = sorted(rows, key=lambda r: [_key(r.get(k)) for k in SORT_KEYS[name]])
        return name

    def messages() -> str:
        events.transform(T.message_lifecycle).write.mode("overwrite").parquet(str(out / "messages"))
        return collect("e2e_latency", spark.read.parquet(str(out / "messages"))
                       .transform(T.e2e_latency))

    try:
        progress.step(collect("event_counts", parsed.transform(T.event_counts)))  # fills cache
        events = parsed.transform(T.message_events)
        delivered = events.where(events.event == T.DELIVERED).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(delivered)
        jobs = [(name, events.transform(build)) for name, build in TABLES.items()]
        jobs += [(name, delivered.transform(build)) for name, build in DELIVERY_TABLES.items()]
        jobs.append(("top_late", delivered.transform(T.top_late, top_n)))
        with ThreadPoolExecutor(max(1, parallel), thread_name_prefix="metric") as pool:
            # The messages lifecycle is the longest job (a 2.8M-key shuffle at 10M events):
            # it starts first so that the small tables run beside it, not after it.
            running = [pool.submit(messages)]
            running += [pool.submit(collect, name, df) for name, df in jobs]
            for fut in as_completed(running):
                progress.step(fut.result())
    finally:
        for df in cached:
            df.unpersist()
    summary = report.summarize(tables)
    meta = {"generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "inputs": f"{len(paths)} file(s)" if len(paths) > 3 else ", ".join(paths),
            "mode": mode.upper(), "output": str(out), "elapsed_s": round(progress.elapsed, 1)}
    (out / "report.html").write_text(report.render_html(tables, summary, meta), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps({**summary, "meta": meta}, indent=2,
                                                 default=str), encoding="utf-8")
    progress.step("report")
    if not quiet:
        print(report.console_summary(tables, summary))
        print(f"report: {out / 'report.html'}  ({progress.elapsed:.1f} s)")
    return summary


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="kairosmq report",
        description="Delivery-quality report from kairosmq broker JSON logs (PySpark).")
    p.add_argument("inputs", nargs="*", help="log directories, globs or files (.jsonl, .jsonl.gz)")
    p.add_argument("-i", "--input", action="append", default=[], dest="more_inputs",
                   help="another input (repeatable); same forms as the positional inputs")
    p.add_argument("-o", "--output", default="kairosmq-report",
                   help="output directory: parquet tables, report.html, summary.json")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[*]; under spark-submit, spark-submit's)")
    p.add_argument("--mode", default="PERMISSIVE", type=str.upper, choices=MODES,
                   help="PERMISSIVE counts malformed lines; FAILFAST stops at the first")
    p.add_argument("--top", type=int, default=100, help="rows in the top-late table")
    p.add_argument("--shuffle-partitions", type=int, default=None,
                   help="spark.sql.shuffle.partitions (default: 8 on local masters)")
    p.add_argument("--driver-memory", default="2g",
                   help="driver heap when this process starts Spark itself (default 2g)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress, no console summary")
    args = p.parse_args(argv)
    args.inputs = [*args.inputs, *args.more_inputs]
    if not args.inputs:
        p.error("give at least one input (positional or --input)")
    return args


def _reason(exc: BaseException) -> str:
    """The most telling line of a Spark error (the innermost ``[ERROR_CLASS]`` line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if re.search(r"\[[A-Z_.]+\]", ln)]
    text = lines[-1] if lines else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text[:400]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kairosmq report`` and ``spark-submit spark/job.py``; returns exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        resolve_inputs(args.inputs)
    except InputError as exc:
        print(f"kairosmq report: {exc}", file=sys.stderr)
        return 2
    # A running SparkContext (any thread) belongs to the caller, e.g. a test session.
    owned = SparkContext._active_spark_context is None
    spark = build_session(args.master, driver_memory=args.driver_memory)
    if args.shuffle_partitions or spark.sparkContext.master.startswith("local"):
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions or 8))
    try:
        run(spark, args.inputs, args.output, mode=args.mode, top_n=args.top, quiet=args.quiet)
    except (Py4JJavaError, PySparkException) as exc:
        print(f"kairosmq report: Spark job failed ({args.mode}): {_reason(exc)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
