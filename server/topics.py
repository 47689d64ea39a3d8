"""Topic configuration: which topics exist, their queue counts and permissions.

Owns: ``TopicConfig`` and ``TopicConfigManager`` (create on demand, persist to
``config/topics.json`` atomically). Mirrors RocketMQ's TopicConfigManager: ``TBW102`` is
the auto-create template, ``SCHEDULE_TOPIC_XXXX`` has one queue per delay level,
``%RETRY%<group>`` and ``%DLQ%<group>`` are created on demand. The naming rules live in
``kairosmq.protocol.naming`` (re-exported here for the server's modules).

Invariants:
* Every topic in the table has a valid name (``naming.validate_queue_topic``: a valid
  topic, or a valid group behind ``%RETRY%``/``%DLQ%``): callers validate before
  creating (``server/ingress.py``), and ``load`` skips names that break the rules (a file
  written before they were checked).
* System topics (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``TBW102``) are never writable by
  clients.
* Persistence: ``create``/``ensure`` persist before returning unless told
  ``persist=False``; then the table is marked dirty and the caller persists once (one
  write for all the retry topics a heartbeat creates; ``persist_async`` writes in a
  thread, as UPDATE_AND_CREATE_TOPIC does before its answer). Writes are ordered by a
  generation number: an older snapshot never overwrites a newer one.
* Every change of the table (``create``, ``delete``; ``ensure`` when it creates) calls
  each ``on_change`` listener with the topic name, after the table changed (the broker's
  name-server registration re-registers, server/registration.py). ``load`` does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kairosmq.protocol.codes import PERM_READ, PERM_WRITE
from kairosmq.protocol.naming import (
    AUTO_CREATE_TOPIC_KEY,
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_TOPIC_LENGTH,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    dlq_topic,
    is_system_topic,
    retry_topic,
    validate_queue_topic,
    validate_topic,
)

from .store.files import OrderedJsonFile, read_json

__all__ = [
    "AUTO_CREATE_TOPIC_KEY", "DLQ_GROUP_TOPIC_PREFIX", "MAX_TOPIC_LENGTH",
    "RETRY_GROUP_TOPIC_PREFIX", "SCHEDULE_TOPIC", "SYSTEM_TOPIC_PREFIX", "TopicConfig",
    "TopicConfigManager", "dlq_topic", "is_system_topic", "retry_topic", "validate_topic",
]


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def queue_nums(self) -> int:
        return max(self.read_queue_nums, self.write_queue_nums)


class TopicConfigManager:
    def __init__(self, config_dir: Path, *, default_queue_nums: int, delay_levels: int) -> None:
        self.path = config_dir / "topics.json"
        self.default_queue_nums = default_queue_nums
        self.topics: dict[str, TopicConfig] = {}
        self.topics[AUTO_CREATE_TOPIC_KEY] = TopicConfig(
            AUTO_CREATE_TOPIC_KEY, default_queue_nums, default_queue_nums, 7
        )
        self.topics[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, delay_levels, delay_levels)
        self.skipped_on_load: list[str] = []
        self.dirty = False
        self.on_change: list[Callable[[str], None]] = []
        self._file = OrderedJsonFile(self.path)

    def load(self) -> None:
        for d in read_json(self.path, []) or []:
            cfg = TopicConfig(**d)
            if cfg.topic_name == SCHEDULE_TOPIC:
                continue
            if validate_queue_topic(cfg.topic_name) is not None:
                self.skipped_on_load.append(cfg.topic_name)
                continue
            self.topics[cfg.topic_name] = cfg

    # ------------------------------------------------------------ persistence

    def _snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        self.dirty = False
        return self._file.snapshot_id(), [asdict(t) for t in self.topics.values()]

    def persist(self) -> None:
        """Write the table now (on the calling thread)."""
        self._file.write(*self._snapshot())

    async def persist_async(self) -> None:
        """Write the table in a thread; the snapshot is taken on the loop, before awaiting."""
        generation, data = self._snapshot()
        await asyncio.to_thread(self._file.write, generation, data)

    # ------------------------------------------------------------ table

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def create(
        self, topic: str, queue_nums: int | None = None, *, perm: int = PERM_READ | PERM_WRITE,
        order: bool = False, persist: bool = True,
    ) -> TopicConfig:
        """Create (or update the queue count of) a topic; the name is the caller's to check."""
        n = queue_nums or self.default_queue_nums
        cfg = TopicConfig(topic, n, n, perm, 0, order)
        self.topics[topic] = cfg
        self.dirty = True
        if persist:
            self.persist()
        self._changed(topic)
        return cfg

    def delete(self, topic: str) -> bool:
        if is_system_topic(topic) or self.topics.pop(topic, None) is None:
            return False
        self.persist()
        self._changed(topic)
        return True

    def _changed(self, topic: str) -> None:
        for listener in self.on_change:
            listener(topic)

    def ensure(self, topic: str, queue_nums: int, *,
               persist: bool = True) -> tuple[TopicConfig, bool]:
        """Return the topic, creating it with ``queue_nums`` queues if absent."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg, False
        return self.create(topic, queue_nums, persist=persist), True
