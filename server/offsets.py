"""Consumer offsets per (group, topic, queue): RocketMQ's ConsumerOffsetManager.

Owns: the in-memory table, its atomic persistence to ``config/consumerOffset.json``
(temp file, fsync, rename), and the queries the admin tools need (groups, lag inputs).

Invariants: an offset is the next logical queue offset the group will consume; it is
only moved by UPDATE_CONSUMER_OFFSET, a pull's COMMIT_OFFSET, or an admin reset; the
file is rewritten only when something changed since the last write.
"""

from __future__ import annotations

from pathlib import Path

from .store.files import read_json, write_json_atomic


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.table: dict[str, dict[str, dict[int, int]]] = {}
        self._dirty = False

    def load(self) -> None:
        raw = read_json(self.path, {}) or {}
        self.table = {
            g: {t: {int(q): int(o) for q, o in qs.items()} for t, qs in topics.items()}
            for g, topics in raw.items()
        }

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.table.setdefault(group, {}).setdefault(topic, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(group, {}).get(topic, {}).get(queue_id)

    def groups(self) -> list[str]:
        return sorted(self.table)

    def snapshot(self) -> dict[str, dict[str, dict[int, int]]] | None:
        """A copy to persist, or None when nothing changed (take it on the loop)."""
        if not self._dirty:
            return None
        self._dirty = False
        return {g: {t: dict(qs) for t, qs in topics.items()} for g, topics in self.table.items()}

    def persist(self, snap: dict[str, dict[str, dict[int, int]]] | None) -> None:
        if snap is not None:
            write_json_atomic(self.path, snap)

    def remove_topic(self, topic: str) -> None:
        for topics in self.table.values():
            if topics.pop(topic, None) is not None:
                self._dirty = True
