"""Consumer offsets per (group, topic, queue): RocketMQ's ConsumerOffsetManager.

Owns: the in-memory table, its atomic persistence to ``config/consumerOffset.json``
(temp file, fsync, rename), and the queries the admin tools need (groups, lag inputs).

Invariants:
* An offset is the next logical queue offset the group will consume; it is only moved by
  UPDATE_CONSUMER_OFFSET, a pull's COMMIT_OFFSET, or an admin reset.
* Every stored offset is an int in ``0..2**63-1``: ``commit`` refuses anything else
  (``offset.commit_refused``), so the table can always be written (a 20-digit value once
  made every later write fail, and every group's offsets rewind at restart).
* The file is rewritten only when something changed since the last *successful* write:
  a failed write is logged (``offset.persist_failed``), raised to the caller (the
  supervised checkpoint service counts it) and retried with the next snapshot; it never
  silently stops persistence.
* ``load`` never stops a start: entries that are not valid offsets are dropped and an
  unreadable file is moved aside (``offset.file_unreadable``), both logged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .logs import get_logger
from .store.files import read_json, write_json_atomic

MAX_OFFSET = (1 << 63) - 1
Table = dict[str, dict[str, dict[int, int]]]


@dataclass(frozen=True, slots=True)
class OffsetSnapshot:
    """A copy of the table taken on the loop, with the change count it reflects."""

    version: int
    table: Table


def _valid(offset: object) -> bool:
    return isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset <= MAX_OFFSET


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.table: Table = {}
        self.log = get_logger("offsets")
        self._version = 0  # bumped on every change
        self._persisted = 0  # the version last written successfully
        self.refused = 0
        self.persist_failures = 0

    def load(self) -> None:
        try:
            raw = read_json(self.path, {}) or {}
            if not isinstance(raw, dict):
                raise ValueError(f"a JSON {type(raw).__name__}, not an object")
        except (ValueError, OSError) as err:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            try:
                os.replace(self.path, aside)
            except OSError:
                pass
            self.log.error("offset.file_unreadable", path=str(self.path),
                           error=f"{type(err).__name__}: {err}; moved to {aside.name}")
            raw = {}
        table: Table = {}
        dropped = 0
        for group, topics in raw.items():
            if not isinstance(topics, dict):
                dropped += 1
                continue
            for topic, queues in topics.items():
                if not isinstance(queues, dict):
                    dropped += 1
                    continue
                for qid, off in queues.items():
                    try:
                        q = int(qid)
                    except (TypeError, ValueError):
                        dropped += 1
                        continue
                    if not _valid(off) or q < 0:
                        dropped += 1
                        continue
                    table.setdefault(group, {}).setdefault(topic, {})[q] = off
        if dropped:
            self.log.error("offset.file_unreadable", path=str(self.path),
                           error=f"{dropped} entries were not valid offsets and were dropped")
        self.table = table

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Set an offset; False (nothing changed, logged) unless it is in 0..2**63-1."""
        if not _valid(offset):
            self.refused += 1
            self.log.warning("offset.commit_refused", group=group, topic=topic,
                             queue_id=queue_id, value=str(offset)[:40])
            return False
        queues = self.table.setdefault(group, {}).setdefault(topic, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._version += 1
        return True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(group, {}).get(topic, {}).get(queue_id)

    def groups(self) -> list[str]:
        return sorted(self.table)

    def snapshot(self) -> OffsetSnapshot | None:
        """A copy to persist, or None when nothing changed since the last successful write
        (take it on the loop)."""
        if self._version == self._persisted:
            return None
        return OffsetSnapshot(self._version, {
            g: {t: dict(qs) for t, qs in topics.items()} for g, topics in self.table.items()})

    def persist(self, snap: OffsetSnapshot | None) -> None:
        """Write a snapshot (blocking: a thread). On failure: logged, raised, retried by the
        next snapshot (the table stays dirty)."""
        if snap is None:
            return
        try:
            write_json_atomic(self.path, snap.table)
        except Exception as err:
            self.persist_failures += 1
            self.log.error("offset.persist_failed", path=str(self.path),
                           error=f"{type(err).__name__}: {err}")
            raise
        self._persisted = max(self._persisted, snap.version)

    def remove_topic(self, topic: str) -> None:
        for topics in self.table.values():
            if topics.pop(topic, None) is not None:
                self._version += 1

    def remove_group(self, group: str) -> bool:
        """Drop every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with removeOffset)."""
        if self.table.pop(group, None) is None:
            return False
        self._version += 1
        return True

    @property
    def dirty(self) -> bool:
        return self._version != self._persisted

    def as_dict(self) -> dict[str, Any]:
        return {"refused": self.refused, "persistFailures": self.persist_failures,
                "dirty": self.dirty}
