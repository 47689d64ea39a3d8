"""Spark test fixtures: ONE session for the whole run, and a writer of catalogue-format log lines.

Spark needs a JVM: the ``spark`` fixture skips (with the reason) only when no ``java`` is found
on PATH or under JAVA_HOME. Tests that use it are marked ``@pytest.mark.spark``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install kairosmq[spark])")
# Reports run by the tests write no class archive to the user's cache (test_cli turns it on
# with its own cache directory).
os.environ.setdefault("KAIROSMQ_SPARK_CDS", "off")

from kairosmq.server.observe.logs import CATALOGUE, COMMON, FORMAT_1_FIELDS, record  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch ms


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and (Path(home) / "bin" / "java").exists()) or shutil.which("java") is not None


NO_JAVA = "Spark needs Java 17+: no `java` on PATH and no JAVA_HOME/bin/java"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The report's own ``build_session`` (its JVM options, quiet log4j, UTC), on
    ``local[2]`` with two shuffle partitions and no UI: one JVM for every test that uses it
    (``test_cli`` checks that JVM's collector and JIT options on it)."""
    if not java_available():
        pytest.skip(NO_JAVA)
    from kairosmq.spark.job import build_session

    session = build_session(
        "local[2]",
        app_name="kairosmq-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        },
    )  # errors only: build_session's log4j file
    yield session
    session.stop()


def iso(ts_ms: float) -> str:
    """structlog's ``TimeStamper(fmt="iso", utc=True)`` rendering of an epoch-ms time."""
    return dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def _check(event: str, fields: dict[str, Any], extra_ok: set[str] = frozenset()) -> None:
    allowed = set(CATALOGUE.get(event, {})) | extra_ok
    extra = set(fields) - allowed
    assert not extra or event not in CATALOGUE, f"{event} has no fields {extra}"


def ev(event: str, ts_ms: float, **fields: Any) -> dict[str, Any]:
    """One log record as the broker writes it (format 2, through ``logs.record``); fields
    are checked against the catalogue (format-1-only fields are accepted and dropped)."""
    _check(event, fields, set(FORMAT_1_FIELDS))
    return record(event, {"component": "test", **fields}, int(ts_ms))


def ev_v1(event: str, ts_ms: float, **fields: Any) -> dict[str, Any]:
    """The same record in log format 1 (ISO ``timestamp``, ``level``, ``component``)."""
    _check(event, fields, set(FORMAT_1_FIELDS))
    return {"timestamp": iso(ts_ms), "level": "info", "event": event, "component": "test", **fields}


def write_jsonl(path: Path, records: list[dict[str, Any] | str]) -> Path:
    """Write records (dicts as JSON, strings verbatim) one per line; ``.gz`` suffix gzips."""
    data = b"".join(
        (r.encode() if isinstance(r, str) else orjson.dumps(r)) + b"\n" for r in records
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


assert set(COMMON) == {"ts", "v", "event", "level", "component"}
