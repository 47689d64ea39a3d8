"""The command line of ``kairosmq report`` / ``spark/job.py`` (no PySpark import here).

Owns: ``parse_args(argv)`` and ``MODES``. Kept apart from ``job.py`` so that ``kairosmq report
--help`` and the "PySpark is missing" message work where PySpark is not installed.

Invariants: at least one input (positional or ``--input``); ``--mode`` is upper-cased and one of
``MODES``; a usage error exits 2 (argparse).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

MODES = ("PERMISSIVE", "FAILFAST")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="kairosmq report",
        description="Delivery-quality report from kairosmq broker JSON logs (PySpark).",
        epilog="Needs pip install 'kairosmq[spark]' and Java 17+. Exit codes: 0 ok, "
        "1 the Spark job failed, 2 bad usage, no input, or PySpark/Java missing.",
    )
    p.add_argument("inputs", nargs="*", help="log directories, globs or files (.jsonl, .jsonl.gz)")
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        dest="more_inputs",
        help="another input (repeatable); same forms as the positional inputs",
    )
    p.add_argument(
        "-o",
        "--output",
        default="kairosmq-report",
        help="output directory: parquet tables, report.html, summary.json",
    )
    p.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[*]; under spark-submit, spark-submit's)",
    )
    p.add_argument(
        "--mode",
        default="PERMISSIVE",
        type=str.upper,
        choices=MODES,
        help="PERMISSIVE counts malformed lines; FAILFAST stops at the first",
    )
    p.add_argument("--top", type=int, default=100, help="rows in the top-late table")
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        help="spark.sql.shuffle.partitions (default: 8 on local masters)",
    )
    p.add_argument(
        "--driver-memory",
        default="2g",
        help="driver heap when this process starts Spark itself (default 2g)",
    )
    p.add_argument(
        "--incremental",
        action="store_true",
        help="convert closed (rotated) log files to Parquet once, under --cache-dir, "
        "and read those columns on later runs instead of the JSON",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="Parquet cache of --incremental (default: OUTPUT/parquet-cache)",
    )
    p.add_argument(
        "--messages",
        action="store_true",
        help="also write the per-message table OUTPUT/messages/ (parquet, one row "
        "per message; costs about a quarter more time)",
    )
    p.add_argument(
        "--png",
        action="store_true",
        help="also write each chart as charts/<name>.svg and .png (PNG through "
        "headless Chromium when installed)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress, no console summary")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Spark's own log lines (WARN and up); default: errors only",
    )
    args = p.parse_args(argv)
    args.inputs = [*args.inputs, *args.more_inputs]
    if not args.inputs:
        p.error("give at least one input (positional or --input)")
    return args
