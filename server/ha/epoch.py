"""EpochFile: the broker's mastership epochs, ``<data-dir>/store/epoch.json``.

Owns: the list of ``{"epoch": n, "startOffset": offset}`` entries, oldest first (RocketMQ
5's epoch file: from ``startOffset`` on, the log was written by the master of epoch
``n``), read at start and appended by a promotion (``begin``), written atomically.

Invariants: epochs strictly increase and start offsets never decrease; an unreadable
file is treated as empty (``load`` says why, the caller logs it; a promotion then starts
epoch 1). The commit log up to the current epoch's start offset is the previous
master's log byte for byte (the promoted slave held exactly that), which is what an old
master rejoining as a slave cuts back to (rejoin.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any  # Any: JSON read from the epoch file, checked field by field

from ..store.files import read_json, write_json_atomic


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[dict[str, int]] = []

    def load(self) -> str | None:
        """Read the file; the reason it could not be read (then empty), else None."""
        try:
            raw: Any = read_json(self.path, [])
        except (OSError, ValueError) as err:
            self.entries = []
            return f"{type(err).__name__}: {err}"
        out: list[dict[str, int]] = []
        for e in raw if isinstance(raw, list) else []:
            if isinstance(e, dict) and isinstance(e.get("epoch"), int):
                start = e.get("startOffset")
                if isinstance(start, int) and (not out or e["epoch"] > out[-1]["epoch"]):
                    out.append({"epoch": e["epoch"], "startOffset": start})
        self.entries = out
        return None

    @property
    def current(self) -> dict[str, int] | None:
        return self.entries[-1] if self.entries else None

    def begin(self, start_offset: int) -> dict[str, int]:
        """A new epoch from ``start_offset`` (blocking write: call from a thread)."""
        last = self.current
        if last is not None and start_offset < last["startOffset"]:
            raise ValueError(
                f"epoch start {start_offset} is below the current one ({last['startOffset']})"
            )
        entry = {"epoch": (last["epoch"] if last else 0) + 1, "startOffset": start_offset}
        write_json_atomic(self.path, [*self.entries, entry])
        self.entries.append(entry)
        return entry
