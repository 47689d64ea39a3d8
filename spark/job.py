"""The delivery-quality batch job: broker JSON logs -> parquet metric tables + an HTML report.

Owns the E/T/L wiring: ``main(argv)`` (options: ``options.py``), ``build_session()``,
``resolve_inputs()``, ``extract()`` (JSON with the explicit schema; PERMISSIVE counts
malformed lines, FAILFAST raises on the first), ``run()`` (the one pass of
``transforms.py``, the small tables of ``tables.py``) and the loads (the small tables as JSON
lines, optionally the ``messages/`` parquet table, ``report.html``, ``summary.json``, a
console summary).

Invariants:
* Runs unchanged as ``kairosmq report ...`` (``main(argv)``), as ``python spark/job.py`` and as
  ``spark-submit spark/job.py``: when run as a script from a checkout where the package is not
  installed, ``_bootstrap`` maps ``kairosmq.protocol``/``kairosmq.spark`` onto the folders next to
  this file (the same mapping as ``pyproject.toml``; protocol as a bare package, so the
  driver needs nothing but pyspark). spark/ never imports ``kairosmq.server`` (a test checks).
* Built-in Spark SQL only (no UDFs): executors never start Python. The small tables are
  collected to the driver and written there as JSON lines.
* The input is parsed once, in one pass that computes every aggregate (no cache of the
  parsed lines: building it cost more than it saved), and the report's results are ONE
  query over it, collected once (nothing written in between; with ``--messages`` a parquet
  work directory holds the aggregate for the table and the results). Under spark-submit
  the master comes from spark-submit; otherwise ``--master`` (default ``local[*]``).
* ``main`` stops only a session it started (tests share one session).
"""

from __future__ import annotations

import datetime as dt
import glob
import importlib.util
import json
import os
import re
import sys
import time
import types
from collections.abc import Mapping, Sequence
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
    # kairosmq.protocol as a bare package: only its stdlib-only ``events`` module is needed
    # here, and its __init__ would import the codecs (and their third-party dependencies).
    protocol = types.ModuleType("kairosmq.protocol")
    protocol.__path__ = [str(here.parent / "protocol")]
    sys.modules["kairosmq.protocol"] = protocol
    pkg.protocol = protocol  # type: ignore[attr-defined]
    for sub in ("spark",):
        spec = importlib.util.spec_from_file_location(
            f"kairosmq.{sub}",
            here.parent / sub / "__init__.py",
            submodule_search_locations=[str(here.parent / sub)],
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        setattr(pkg, sub, module)
    try:
        importlib.import_module("kairosmq.protocol.events")
    except ImportError as exc:
        raise SystemExit(
            f"spark/job.py: cannot import the log catalogue kairosmq.protocol.events ({exc}); "
            "install kairosmq on the driver (pip install 'kairosmq[spark]') or point "
            "PYSPARK_PYTHON at an environment that has it"
        ) from exc


if __package__ in (None, ""):
    _bootstrap()

from kairosmq.protocol.events import CATALOGUE  # noqa: E402
from kairosmq.spark import incremental, preflight, report, tables  # noqa: E402
from kairosmq.spark import transforms as T  # noqa: E402
from kairosmq.spark.options import parse_args  # noqa: E402
from kairosmq.spark.png import export_charts  # noqa: E402
from kairosmq.spark.schema import (  # noqa: E402
    FAST_READ_SCHEMA,
    LOG_EVENT_SCHEMA,
    event_time,
    read_options,
)
from py4j.protocol import Py4JJavaError  # noqa: E402
from pyspark import SparkContext  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

# The JVM's throughput collector: the job allocates short-lived rows per line and needs no
# short pauses; measured, G1 (the JVM's default) cost 7-30 % more CPU (docs/spark.md).
JVM_GC = "-XX:+UseParallelGC"
# The JIT for a JVM that lives a minute or two: HotSpot's optimizing compiler (C2) takes a
# method only after ten times the default invocation/loop counts, so it compiles fewer of the
# methods that run hot only briefly (Spark start-up, planning, code generation, task set-up),
# while the per-row code, called millions of times, still gets there. Measured: a third less
# JIT CPU at 2M and 10M lines, 8 % less CPU in all at 2M, within the noise at 10M (docs/spark.md,
# "Performance"); 30 times the defaults slowed the tasks. "" restores HotSpot's own thresholds.
JVM_JIT = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)
JVM_OPTIONS = f"{JVM_GC} {JVM_JIT}"
LOG_FILE = re.compile(r"^[^._].*\.(jsonl|json|log)(\.gz)?$")
Rows = list[dict[str, Any]]
# The small tables, computed on the driver (tables.py) and written there as JSON lines.
TABLES = (
    "event_counts",
    "lateness_by_level",
    "lateness_by_topic",
    "lateness_overall",
    "e2e_latency",
    "added_delay",
    "added_delay_by_topic",
    "retry_funnel",
    "dlq_counts",
    "throughput_per_minute",
    "top_late",
    "timer_lateness",
    "timer_lateness_by_topic",
    "timer_added_delay",
    "timer_counts",
    "transaction_counts",
)


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


def build_session(
    master: str | None = None,
    *,
    app_name: str = "kairosmq-report",
    driver_memory: str | None = None,
    verbose: bool = False,
    jvm_options: str = "",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the session: UTC; ``local[*]`` unless told or submitted.

    Spark logs errors only (a log4j2 file for the driver JVM this process starts, then
    ``setLogLevel``); ``verbose`` keeps Spark's WARN lines. The driver JVM this process
    starts, and the executors of a cluster it starts, use the parallel collector and the
    short-job JIT thresholds (``JVM_OPTIONS``; under spark-submit the JVM options are
    spark-submit's); ``jvm_options`` are added to the driver JVM's
    (``preflight.class_archive``); ``conf`` is set last (the tests' session: its own
    shuffle partitions, no UI).
    """
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # set by spark-submit's PythonRunner
    level = "WARN" if verbose else "ERROR"
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    if not submitted:
        if driver_memory:
            builder = builder.config("spark.driver.memory", driver_memory)
        java_options = [] if verbose else [preflight.quiet_log4j_options()]
        builder = builder.config(
            "spark.driver.extraJavaOptions",
            " ".join([*java_options, JVM_OPTIONS, jvm_options]).strip(),
        )
        # executors of a cluster master get the same options (spark-submit: user's choice)
        builder = builder.config("spark.executor.extraJavaOptions", JVM_OPTIONS)
    # Spark's stage progress bar on a terminal; plain step lines only when piped.
    builder = builder.config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if verbose or submitted:
        spark.sparkContext.setLogLevel(level)  # prints one line; the quiet start set it already
    return spark


def extract(spark: SparkSession, paths: Sequence[str], mode: str = "PERMISSIVE") -> DataFrame:
    """Parse log lines with the explicit schema (never inferred); add ``ts_ms``.

    FAILFAST reads with ``LOG_EVENT_SCHEMA`` itself (the contract); PERMISSIVE reads the
    ``timestamp`` of format 1 as text (``FAST_READ_SCHEMA``). Only ``READ_COLUMNS`` are kept:
    the JSON reader then parses no other field.
    """
    schema = LOG_EVENT_SCHEMA if read_options(mode)["mode"] == "FAILFAST" else FAST_READ_SCHEMA
    raw = spark.read.schema(schema).options(**read_options(mode)).json(list(paths))
    return raw.select(*T.READ_COLUMNS).transform(event_time)


def check_every_field(spark: SparkSession, paths: Sequence[str]) -> None:
    """FAILFAST: parse every field of every line with ``LOG_EVENT_SCHEMA`` (raises on the
    first line the contract cannot hold; the metrics themselves parse only what they read)."""
    (
        spark.read.schema(LOG_EVENT_SCHEMA)
        .options(**read_options("FAILFAST"))
        .json(list(paths))
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


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


def _rows(df: DataFrame) -> Rows:
    return [row.asDict() for row in df.collect()]


def run(
    spark: SparkSession,
    inputs: Sequence[str],
    output: str | Path,
    *,
    mode: str = "PERMISSIVE",
    top_n: int = 100,
    quiet: bool = False,
    parallel: int = 2,
    png: bool = False,
    write_messages: bool = False,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Extract, transform and load; return the summary written to ``summary.json``.

    One pass: the input is parsed once and every aggregate comes out of one hash aggregation
    (``transforms.facts`` -> ``transforms.one_pass``: one scan, one shuffle); the results the
    report needs (latency histograms, retry funnel, line counts, lateness histogram, top-late
    rows) come out of it in the same query (``transforms.results_of``: a second, small
    aggregation) and are collected once; everything else is derived on the driver. Only
    with ``write_messages`` is the aggregate written as a parquet work directory, read by
    the ``messages/`` write and the result jobs (``parallel`` at a time) and removed at the
    end. With ``cache_dir`` (``--incremental``) closed files are read from their Parquet
    copies.
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    paths = resolve_inputs(inputs)
    strict = mode.upper() == "FAILFAST"
    progress = Progress(
        total=(9 if write_messages else 3) + strict + (cache_dir is not None), quiet=quiet
    )
    if strict:
        check_every_field(spark, paths)
        progress.step("check every field")
    if cache_dir is None:
        source = extract(spark, paths, mode).transform(T.lines)
    else:
        source, converted = incremental.lines_frame(
            spark, paths, Path(cache_dir), lambda p: extract(spark, p, mode)
        )
        progress.step(f"parquet cache (+{converted})")
    if write_messages:
        got = _via_work_dir(spark, source, out, top_n, parallel, progress)
    else:
        # The one pass and every result from it in ONE query: one scan, the one-pass
        # aggregation, a second small one; nothing written in between.
        got = T.split_results(
            _rows(source.transform(T.facts).transform(T.one_pass).transform(T.results_of, top_n))
        )
        progress.step("one pass")
    tables = derive_tables(got)
    for name in TABLES:
        write_table(out, name, tables[name])
    progress.step("tables written")
    summary = report.summarize(tables)
    meta = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "inputs": f"{len(paths)} file(s)" if len(paths) > 3 else ", ".join(paths),
        "mode": mode.upper(),
        "output": str(out),
        "elapsed_s": round(progress.elapsed, 1),
    }
    (out / "report.html").write_text(report.render_html(tables, summary, meta), encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps({**summary, "meta": meta}, indent=2, default=str), encoding="utf-8"
    )
    notes = export_charts(report.charts(tables), out / "charts") if png else []
    progress.step("report")
    for note in notes:
        print(note, file=sys.stderr)
    if not quiet:
        print(report.console_summary(tables, summary))
        print(f"report: {out / 'report.html'}  ({progress.elapsed:.1f} s)")
    return summary


def _via_work_dir(
    spark: SparkSession, source: DataFrame, out: Path, top_n: int, parallel: int, progress: Progress
) -> dict[str, Rows]:
    """With ``messages/``: the one pass written once as a parquet work directory partitioned
    by row kind (``_one_pass/``, removed at the end), then ``messages/`` and the results read
    from it as columns, ``parallel`` jobs at a time (the table needs every message's row, so
    the aggregate is kept rather than computed twice)."""
    work = out / "_one_pass"
    got: dict[str, Rows] = {}

    def collect(name: str, df: DataFrame) -> str:
        got[name] = _rows(df)
        return name

    def messages() -> str:
        # no dictionary encoding: msg_id and the times are unique per row
        (
            agg.transform(T.lifecycle_of)
            .write.mode("overwrite")
            .option("parquet.enable.dictionary", "false")
            .parquet(str(out / "messages"))
        )
        return "messages"

    try:
        (
            source.transform(T.facts)
            .transform(T.one_pass)
            .write.mode("overwrite")
            .option("parquet.enable.dictionary", "false")
            .partitionBy("kind")
            .parquet(str(work))
        )
        progress.step("one pass")
        agg = spark.read.parquet(str(work))
        with ThreadPoolExecutor(max(1, parallel), thread_name_prefix="metric") as pool:
            running = [pool.submit(messages)]
            running += [
                pool.submit(collect, name, df)
                for name, df in (
                    ("latency", agg.transform(T.lifecycle_of).transform(T.e2e_histogram)),
                    ("retry_funnel", agg.transform(T.outcomes_of).transform(T.retry_funnel)),
                    ("line_counts", agg.transform(T.counts_of)),
                    ("lateness", agg.transform(T.lateness_of)),
                    ("top_late", agg.transform(T.top_late_of, top_n)),
                )
            ]
            for fut in as_completed(running):
                progress.step(fut.result())
    finally:
        _remove(spark, work)
    return got


def _remove(spark: SparkSession, path: Path) -> None:
    """Delete a work directory through Hadoop's file system (local or an object store)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(str(path))
    hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(hpath, True)


def derive_tables(got: Mapping[str, Rows]) -> dict[str, Rows]:
    """The report's tables from the collected aggregates (see ``tables.py``)."""
    counts, funnel = got["line_counts"], got["retry_funnel"]
    return {
        "event_counts": tables.event_counts(counts, CATALOGUE),
        "throughput_per_minute": tables.throughput_per_minute(counts, T.THROUGHPUT_EVENTS),
        "dlq_counts": tables.dlq_counts(counts, funnel, T.DEAD_LETTERED),
        "timer_counts": tables.timer_counts(counts),
        "transaction_counts": tables.transaction_counts(counts),
        "retry_funnel": funnel,
        "top_late": [
            {**r, "delivered_at": tables.utc(r.pop("delivered_ms"))}
            for r in sorted(got["top_late"], key=lambda r: r["rank"])
        ],
        **tables.lateness_tables(got["lateness"]),
        **tables.latency_tables(got["latency"]),
    }


def write_table(out: Path, name: str, rows: Rows) -> None:
    """One small table as ``out/name.jsonl`` (one JSON object per row; times ISO-8601 UTC).

    Written by the driver: a Spark job per table of a few dozen rows cost more than the rest
    of a small report, and ``spark.read.json``, pandas and jq all read this directly.
    """

    def default(value: Any) -> str:
        if isinstance(value, dt.datetime):
            return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()
        return str(value)

    with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, default=default, allow_nan=False) + "\n")


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
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if owned and not submitted and (missing := preflight.problem()) is not None:
        print(f"kairosmq report: {missing}", file=sys.stderr)
        return 2
    # Spark's classes from the JVM's class archive (a first run dumps it): half the start CPU
    archive, pending = preflight.class_archive() if owned and not submitted else ("", None)
    spark = build_session(
        args.master, driver_memory=args.driver_memory, verbose=args.verbose, jvm_options=archive
    )
    if args.shuffle_partitions or spark.sparkContext.master.startswith("local"):
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions or 8))
    try:
        run(
            spark,
            args.inputs,
            args.output,
            mode=args.mode,
            top_n=args.top,
            quiet=args.quiet,
            png=args.png,
            write_messages=args.messages,
            cache_dir=(args.cache_dir or Path(args.output) / "parquet-cache")
            if args.incremental
            else None,
        )
    except (Py4JJavaError, PySparkException) as exc:
        print(f"kairosmq report: Spark job failed ({args.mode}): {_reason(exc)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
            if pending is not None:  # end the JVM now: it dumps the archive as it exits
                preflight.keep_archive(pending, getattr(SparkContext._gateway, "proc", None))
                SparkContext._gateway = SparkContext._jvm = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
