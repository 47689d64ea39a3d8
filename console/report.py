"""The latest Spark delivery-quality report (``kairosmq report -o DIR``, docs/spark.md),
read for the console's Report view.

Owns: finding the newest report under ``--spark-report-dir`` (the directory itself when
it holds a ``summary.json``, else the subdirectory whose ``summary.json`` was written
last: one directory per run, as ``-o /shared/reports/$(date +%F)`` makes them) and
reading its ``summary.json`` and small tables (``*.jsonl``, one JSON object a line).

Invariants:
* Read-only, only below the configured directory (no path comes from a request), and
  bounded: at most ``MAX_TABLES`` tables of at most ``MAX_ROWS`` rows each, files of at
  most ``MAX_FILE_BYTES``; a line that is not a JSON object is skipped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

MAX_ROWS = 500
MAX_TABLES = 64
MAX_FILE_BYTES = 8 << 20


def latest(root: Path) -> Path | None:
    """The newest report directory at or under ``root`` (None: no report yet)."""
    if (root / "summary.json").is_file():
        return root
    try:
        dirs = [d for d in root.iterdir() if (d / "summary.json").is_file()]
    except OSError:
        return None
    if not dirs:
        return None
    return max(dirs, key=lambda d: ((d / "summary.json").stat().st_mtime_ns, d.name))


def _table(path: Path) -> dict[str, Any]:
    rows: list[Any] = []
    skipped = total = 0
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    for line in data[:MAX_FILE_BYTES].splitlines():
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(row, dict):
            skipped += 1
            continue
        total += 1
        if len(rows) < MAX_ROWS:
            rows.append(row)
    return {
        "rows": rows,
        "total": total,
        "skipped": skipped,
        "truncated": total > len(rows) or len(data) > MAX_FILE_BYTES,
    }


def read(root: Path) -> dict[str, Any]:
    """The newest report's summary and tables (blocking: run it in a thread)."""
    where = latest(root)
    if where is None:
        return {"dir": None, "summary": None, "tables": {}}
    summary_path = where / "summary.json"
    summary = orjson.loads(summary_path.read_bytes()[:MAX_FILE_BYTES])
    tables = {
        p.stem: _table(p)
        for p in sorted(where.glob("*.jsonl"))[:MAX_TABLES]
        if p.is_file() and p.stat().st_size <= MAX_FILE_BYTES * 4
    }
    return {
        "dir": str(where),
        "writtenMs": summary_path.stat().st_mtime_ns // 1_000_000,
        "summary": summary,
        "tables": tables,
        "html": (where / "report.html").is_file(),
    }
