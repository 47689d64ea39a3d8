"""Consumer offsets per (group, topic, queue): RocketMQ's ConsumerOffsetManager.

Owns: the in-memory table, its atomic persistence to ``config/consumerOffset.json``
(temp file, fsync, rename), and the queries the admin tools need (groups, lag inputs).
Whether a topic or group exists is the handlers' to check (UPDATE_CONSUMER_OFFSET answers
TOPIC_NOT_EXIST / SUBSCRIPTION_GROUP_NOT_EXIST, a pull of an unknown topic commits
nothing), so the table only grows with queues of existing topics.

Invariants:
* An offset is the next logical queue offset the group will consume; it is only moved by
  UPDATE_CONSUMER_OFFSET, a pull's COMMIT_OFFSET, or an admin reset.
* Every stored offset is an int in ``0..2**63-1``: ``commit`` refuses anything else
  (``offset.commit_refused``), so the table can always be written (a 20-digit value once
  made every later write fail, and every group's offsets rewind at restart).
* Bounded: at most ``max_offsets`` stored offsets ((group, topic, queue) entries; BrokerConfig
  ``max_consumer_offsets``). A new entry past it is not stored (``refusal`` says why,
  naming the option; ``commit`` returns False and logs ``offset.table_full``); existing
  entries are always updated. ``load`` keeps every valid entry of the file.
* The snapshot is encoded in parts (``json_parts``): ``snapshot_async`` yields to the
  loop between parts and the checkpoint thread only writes bytes, so a large table never
  stalls the event loop (1M offsets: ~0.3 s of encoding, spread over the checkpoint).
  An offset committed while the parts are encoded may or may not be in them; the version
  the snapshot carries is the one from before its first part, so it is written again.
* The file is rewritten only when something changed since the last *successful* write:
  a failed write is logged (``offset.persist_failed``), raised to the caller (the
  supervised checkpoint service counts it) and retried with the next snapshot; it never
  silently stops persistence.
* ``load`` never stops a start: entries that are not valid offsets are dropped and an
  unreadable file is moved aside (``offset.file_unreadable``), both logged.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # Any: JSON values of the offsets file

import orjson

from ..observe.logs import get_logger
from ..store.files import read_json, write_parts_atomic
from .table_file import PART_ENTRIES

MAX_OFFSET = (1 << 63) - 1
# BrokerConfig.max_consumer_offsets' default: e.g. 10,000 groups each reading 25 topics of
# 4 queues (RocketMQ has no limit; ~100 MB of memory and ~0.3 s of encoding per write here)
MAX_OFFSETS = 1_000_000
Table = dict[str, dict[str, dict[int, int]]]


@dataclass(frozen=True, slots=True)
class OffsetSnapshot:
    """The table's JSON in parts, with the change count it reflects."""

    version: int
    parts: list[bytes]

    @property
    def table(self) -> Table:
        """The snapshot decoded (tests)."""
        raw = orjson.loads(b"".join(self.parts))
        return {
            g: {t: {int(q): o for q, o in qs.items()} for t, qs in ts.items()}
            for g, ts in raw.items()
        }


def _valid(offset: object) -> bool:
    return isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset <= MAX_OFFSET


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path, *, max_offsets: int = MAX_OFFSETS) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.table: Table = {}
        self.log = get_logger("offsets")
        self.max_offsets = max_offsets
        self.count = 0  # stored offsets: (group, topic, queue) entries
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
            self.log.error(
                "offset.file_unreadable",
                path=str(self.path),
                error=f"{type(err).__name__}: {err}; moved to {aside.name}",
            )
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
            self.log.error(
                "offset.file_unreadable",
                path=str(self.path),
                error=f"{dropped} entries were not valid offsets and were dropped",
            )
        self.table = table
        self.count = sum(len(qs) for topics in table.values() for qs in topics.values())

    def refusal(self, group: str, topic: str, queue_id: int) -> str | None:
        """Why an offset of this queue would not be stored (the table is full and it has
        none yet), naming the option; None if it would be."""
        if self.count < self.max_offsets or queue_id in self.table.get(group, {}).get(topic, {}):
            return None
        return (
            f"offset of {group} on {topic}:{queue_id} not stored: the broker holds "
            f"{self.count} consumer offsets, the limit is {self.max_offsets} "
            f"(max_consumer_offsets)"
        )

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Set an offset; False (nothing changed, logged) unless it is in 0..2**63-1 and
        the queue has an offset already or the table has room."""
        if not _valid(offset):
            self.refused += 1
            self.log.warning(
                "offset.commit_refused",
                group=group,
                topic=topic,
                queue_id=queue_id,
                value=str(offset)[:40],
            )
            return False
        queues = self.table.get(group, {}).get(topic)
        if queues is None or queue_id not in queues:
            if self.count >= self.max_offsets:
                self.refused += 1
                self.log.warning(
                    "offset.table_full",
                    group=group,
                    topic=topic,
                    queue_id=queue_id,
                    limit=self.max_offsets,
                )
                return False
            queues = self.table.setdefault(group, {}).setdefault(topic, {})
            self.count += 1
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._version += 1
        return True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(group, {}).get(topic, {}).get(queue_id)

    def groups(self) -> list[str]:
        return sorted(self.table)

    def json_parts(self) -> Iterator[bytes]:
        """The table's JSON (``{group: {topic: {queueId: offset}}}``) in parts of about
        ``PART_ENTRIES`` offsets each."""
        yield b"{"
        buf: list[bytes] = []
        n = 0
        first_group = True
        for group, topics in list(self.table.items()):
            buf.append((b"" if first_group else b",") + orjson.dumps(group) + b":{")
            first_group = False
            first_topic = True
            for topic, queues in list(topics.items()):
                buf.append(
                    (b"" if first_topic else b",")
                    + orjson.dumps(topic)
                    + b":"
                    + orjson.dumps(queues, option=orjson.OPT_NON_STR_KEYS)
                )
                first_topic = False
                n += len(queues) + 1
                if n >= PART_ENTRIES:
                    yield b"".join(buf)
                    buf, n = [], 0
            buf.append(b"}")
        buf.append(b"}")
        yield b"".join(buf)

    def snapshot(self) -> OffsetSnapshot | None:
        """The parts to persist, encoded now, or None when nothing changed since the last
        successful write (stop, tests; the checkpoint uses ``snapshot_async``)."""
        if self._version == self._persisted:
            return None
        return OffsetSnapshot(self._version, list(self.json_parts()))

    async def snapshot_async(self) -> OffsetSnapshot | None:
        """``snapshot``, yielding to the loop between parts."""
        if self._version == self._persisted:
            return None
        version = self._version
        parts: list[bytes] = []
        for part in self.json_parts():
            parts.append(part)
            await asyncio.sleep(0)
        return OffsetSnapshot(version, parts)

    def persist(self, snap: OffsetSnapshot | None) -> None:
        """Write a snapshot (blocking: a thread). On failure: logged, raised, retried by the
        next snapshot (the table stays dirty)."""
        if snap is None:
            return
        try:
            write_parts_atomic(self.path, snap.parts)
        except Exception as err:
            self.persist_failures += 1
            self.log.error(
                "offset.persist_failed", path=str(self.path), error=f"{type(err).__name__}: {err}"
            )
            raise
        self._persisted = max(self._persisted, snap.version)

    def remove_topic(self, topic: str) -> None:
        for topics in self.table.values():
            queues = topics.pop(topic, None)
            if queues is not None:
                self.count -= len(queues)
                self._version += 1

    def remove_group(self, group: str) -> bool:
        """Drop every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with removeOffset)."""
        topics = self.table.pop(group, None)
        if topics is None:
            return False
        self.count -= sum(len(qs) for qs in topics.values())
        self._version += 1
        return True

    @property
    def dirty(self) -> bool:
        return self._version != self._persisted

    def as_dict(self) -> dict[str, Any]:
        return {
            "refused": self.refused,
            "persistFailures": self.persist_failures,
            "dirty": self.dirty,
            "count": self.count,
            "limit": self.max_offsets,
        }
