"""Contract: the job's parser reads the per-message log writer's lines
(``configure_logging``'s fast emitter for ``LEAN_EVENTS``) into the same rows as the
lines structlog's processor chain writes for the same calls (FAILFAST: the schema holds
every line of both)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kairosmq.spark.job import extract
from pyspark.sql import SparkSession

from tests.server.test_lean_log_writer import lean_cases, write_both

pytestmark = pytest.mark.spark


def test_the_parser_reads_lean_lines_as_the_chain_s(spark: SparkSession, tmp_path: Path) -> None:
    cases = [(e, f) for e, f in lean_cases(seed=11) if "extra_field" not in f]
    lean, chain = write_both(tmp_path, cases)
    rows = []
    for name, lines in (("lean.jsonl", lean), ("chain.jsonl", chain)):
        path = tmp_path / name
        path.write_bytes(b"\n".join(lines) + b"\n")
        df = extract(spark, [str(path)], "FAILFAST")
        rows.append(sorted((tuple(r) for r in df.collect()), key=repr))
    assert len(rows[0]) == len(cases) > 0
    assert rows[0] == rows[1]
