"""Reading the store's checkpoint without ever refusing to start.

Owns: ``read_checkpoint`` (the JSON object, or {} when the file is unreadable) and
``trusted_offset`` (where replay may start: the checkpointed offset only when every
consume queue it saw is intact and its fields are sane, else 0).

Invariant: any doubt means a full replay from the log's start, never a failed start and
never a skipped record: the commit log is the truth and replay rebuilds everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any  # Any: JSON values of the checkpoint; structlog's logger

from .consumequeue import ConsumeQueue
from .files import read_json

_INT64_MAX = (1 << 63) - 1


def read_checkpoint(path: Path, log: Any) -> dict[str, Any]:
    """The checkpoint, or {} (full replay: the log is the truth) if it is unreadable."""
    try:
        cp = read_json(path, {}) or {}
        if not isinstance(cp, dict):
            raise ValueError(f"a JSON {type(cp).__name__}, not an object")
        return cp
    except (ValueError, OSError) as err:
        log.error(
            "store.checkpoint_unreadable", path=str(path), error=f"{type(err).__name__}: {err}"
        )
        return {}


def trusted_offset(
    cp: dict[str, Any], queues: Mapping[tuple[str, int], ConsumeQueue], path: Path, log: Any
) -> tuple[int, int | None]:
    """(offset replay starts from, offset of the record that ends there)."""
    try:
        trusted = int(cp.get("dispatched_offset", 0))
        last = cp.get("last_record")
        last = None if last is None else int(last)
        for key, saved in (cp.get("queues") or {}).items():
            topic, _, qid = key.rpartition("/")
            cq = queues.get((topic, int(qid)))
            if cq is None or cq.max_offset < int(saved):
                return 0, None  # queue files were lost below the checkpoint: full replay
    except (TypeError, ValueError, AttributeError) as err:
        log.error(
            "store.checkpoint_unreadable", path=str(path), error=f"{type(err).__name__}: {err}"
        )
        return 0, None
    if not 0 <= trusted <= _INT64_MAX or (last is not None and not 0 <= last < trusted):
        return 0, None
    return trusted, last
