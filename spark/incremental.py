"""``kairosmq report --incremental``: closed log files converted once to Parquet, then read as
columns on every later report.

Owns: ``is_closed(path)``, ``cache_key(path)`` and ``lines_frame(...)``, which yields the same
``transforms.lines`` frame as a JSON read, made of the cached Parquet of closed files plus the
JSON of the files still open.

Invariants:
* A file is closed unless it is the sink's active file (``broker.jsonl``); rotated files
  (``broker-<stamp>-<pid>-<n>.jsonl[.gz]``) never change again. URIs (``s3a://``) are not
  cached: they are read as JSON each time.
* A cache entry is named by the file's name, size and modification time and a digest of
  ``transforms.LINE_COLUMNS``, so a file that changes, or a job that keeps other columns
  (e.g. ``producer_group`` for the transaction table), gets a new entry; an entry is
  written under a temporary name and renamed when complete, so an interrupted conversion is
  redone, never half-read.
* Entries hold ``transforms.LINE_COLUMNS`` (after ``schema.event_time`` and ``lines``): a
  report over cached files parses no JSON at all.
"""

from __future__ import annotations

import re
import shutil
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from kairosmq.spark import transforms as T
from pyspark.sql import DataFrame, SparkSession

ACTIVE_NAMES = frozenset({"broker.jsonl"})
COLUMNS_DIGEST = f"{zlib.crc32(','.join(T.LINE_COLUMNS).encode()):08x}"


def is_closed(path: str) -> bool:
    return "://" not in path and Path(path).name not in ACTIVE_NAMES


def cache_key(path: str) -> str:
    st = Path(path).stat()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).name)
    return f"{stem}-{st.st_size}-{st.st_mtime_ns}-{COLUMNS_DIGEST}.parquet"


def lines_frame(
    spark: SparkSession,
    paths: Sequence[str],
    cache_dir: Path,
    read_json: Callable[[Sequence[str]], DataFrame],
) -> tuple[DataFrame, int]:
    """The ``lines`` frame of ``paths``; returns it and how many files were converted now.

    ``read_json(paths)`` is the job's own JSON extract (the same mode and schema).
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached, converted = [], 0
    open_files = [p for p in paths if not is_closed(p)]
    for path in (p for p in paths if is_closed(p)):
        entry = cache_dir / cache_key(path)
        if not (entry / "_SUCCESS").exists():
            tmp = cache_dir / f".{entry.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            read_json([path]).transform(T.lines).write.parquet(str(tmp))
            shutil.rmtree(entry, ignore_errors=True)
            tmp.rename(entry)
            converted += 1
        cached.append(str(entry))
    frames = [spark.read.parquet(*cached)] if cached else []
    if open_files:
        frames.append(read_json(open_files).transform(T.lines))
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame, converted
