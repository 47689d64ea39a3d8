"""Topic configuration: which topics exist, their queue counts and permissions.

Owns: ``TopicConfig``, ``TopicConfigManager`` (create on demand, persist to
``config/topics.json``) and ``TopicTableFull`` (the refusal past ``max_topics``). Mirrors
RocketMQ's TopicConfigManager: ``TBW102`` is the auto-create template,
``SCHEDULE_TOPIC_XXXX`` has one queue per delay level, ``%RETRY%<group>`` and
``%DLQ%<group>`` are created on demand (a heartbeat, a send-back, a send to them; never a
route lookup). The naming rules live in ``kairosmq.protocol.naming``.

Invariants:
* Every topic in the table has a valid name (``naming.validate_queue_topic``: a valid
  topic, or a valid group behind ``%RETRY%``/``%DLQ%``): callers validate before
  creating (``server/remoting/ingress.py``), and ``load`` skips names that break the rules (a file
  written before they were checked).
* System topics (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``TBW102``) are never writable by
  clients.
* Bounded: a new topic past ``max_topics`` topics (BrokerConfig ``max_topics``) raises
  ``TopicTableFull`` (SYSTEM_ERROR, the remark names the option; the send path answers
  TOPIC_NOT_EXIST, as RocketMQ when it cannot create a topic) and changes nothing.
  Updating an existing topic is always allowed; ``load`` keeps every valid topic of the
  file even past the limit (lowering it never drops topics).
* Persistence (``server/tables/table_file.py``): a change marks the table; one background task
  writes it (encoded in parts between other requests, written and fsync'd in a thread),
  coalescing the changes made meanwhile. No file I/O and no whole-table encoding on the
  event loop. ``await flushed()`` returns once the file holds every change made before
  the call: UPDATE_AND_CREATE_TOPIC, and every request that created a topic, is answered
  after it, so an acknowledged creation survives kill -9 and power loss.
* ``TopicConfig`` values are replaced, never changed in place, and only through this
  class, which keeps each one's JSON row next to it (``_rows``): a write joins the rows
  (copied in one loop step) instead of encoding 100k objects.
* Every change of the table (``create``, ``delete``; ``ensure`` when it creates) calls
  each ``on_change`` listener with the topic name, after the table changed (the broker's
  name-server registration re-registers, server/cluster/registration.py). ``load`` does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # Any: structlog's logger (dynamic methods)

import orjson
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.naming import (
    AUTO_CREATE_TOPIC_KEY,
    SCHEDULE_TOPIC,
    is_system_topic,
    validate_queue_topic,
)
from kairosmq.protocol.registration import TopicConfigData

from ..store.files import read_json
from .table_file import TableFile, join_parts

__all__ = ["MAX_TOPICS", "TopicConfig", "TopicConfigManager", "TopicTableFull"]

# BrokerConfig.max_topics' default: above the ~129k topics an Apache 4.9.8 broker can
# register with a name server at all (its topic table must fit one 16 MiB frame unless
# compressedRegister is on), so no table a RocketMQ cluster runs with is refused.
MAX_TOPICS = 150_000


class TopicTableFull(HeaderError):
    """A new topic past ``max_topics``: SYSTEM_ERROR with a remark naming the option (a
    ``HeaderError``, so any handler answers it; the send path answers TOPIC_NOT_EXIST)."""

    def __init__(self, topic: str, count: int, limit: int) -> None:
        super().__init__(
            f"topic {topic} not created: the broker holds {count} topics, the limit is "
            f"{limit} (max_topics)",
            ResponseCode.SYSTEM_ERROR,
        )
        self.topic = topic
        self.remark = str(self)


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

    def to_data(self) -> TopicConfigData:
        """RocketMQ's TopicConfig (registrations, GET_ALL_TOPIC_CONFIG's answer)."""
        return TopicConfigData(
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            "SINGLE_TAG",
            self.topic_sys_flag,
            self.order,
        )


class TopicConfigManager:
    def __init__(
        self,
        config_dir: Path,
        *,
        default_queue_nums: int,
        delay_levels: int,
        max_topics: int = MAX_TOPICS,
        log: Any = None,
    ) -> None:
        self.path = config_dir / "topics.json"
        self.default_queue_nums = default_queue_nums
        self.max_topics = max_topics
        self.topics: dict[str, TopicConfig] = {}
        self.topics[AUTO_CREATE_TOPIC_KEY] = TopicConfig(
            AUTO_CREATE_TOPIC_KEY, default_queue_nums, default_queue_nums, 7
        )
        self.topics[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, delay_levels, delay_levels)
        # each topic's JSON row, kept with the table (a write joins them: table_file.py)
        self._rows: dict[str, bytes] = {
            name: orjson.dumps(cfg) for name, cfg in self.topics.items()
        }
        self.skipped_on_load: list[str] = []
        self.on_change: list[Callable[[str], None]] = []
        self.log = log
        self.file = TableFile(self.path, self.json_parts, on_failed=self._persist_failed)

    def load(self) -> None:
        for d in read_json(self.path, []) or []:
            cfg = TopicConfig(**d)
            if cfg.topic_name == SCHEDULE_TOPIC:
                continue
            if validate_queue_topic(cfg.topic_name) is not None:
                self.skipped_on_load.append(cfg.topic_name)
                continue
            self._set(cfg)

    # ------------------------------------------------------------ persistence

    def _set(self, cfg: TopicConfig) -> None:
        self.topics[cfg.topic_name] = cfg
        self._rows[cfg.topic_name] = orjson.dumps(cfg)

    def json_parts(self) -> Iterator[bytes]:
        """The file's JSON (a list of TopicConfig objects) in parts; the rows are copied
        now, on the loop."""
        return join_parts(b"[", list(self._rows.values()), b"]")

    def _persist_failed(self, err: OSError) -> None:
        if self.log is not None:
            self.log.error(
                "topic.persist_failed", path=str(self.path), error=f"{type(err).__name__}: {err}"
            )

    @property
    def dirty(self) -> bool:
        return self.file.dirty

    @property
    def version(self) -> int:
        """Moves on every change of the table (RocketMQ's topic-table dataVersion)."""
        return self.file.changes

    def persist(self) -> None:
        """Write the table now, on the calling thread (start-up, stop, tests)."""
        self.file.write_now()

    async def flushed(self) -> None:
        """Return once ``topics.json`` holds every change made before the call."""
        await self.file.flushed()

    # ------------------------------------------------------------ table

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def check_room(self, topic: str, new: int = 1) -> None:
        """Raise ``TopicTableFull`` unless ``new`` more topics fit under ``max_topics``."""
        if len(self.topics) + new > self.max_topics:
            raise TopicTableFull(topic, len(self.topics), self.max_topics)

    def create(
        self,
        topic: str,
        queue_nums: int | None = None,
        *,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        bounded: bool = True,
    ) -> TopicConfig:
        """Create (or update the queue count of) a topic; the name is the caller's to
        check. ``TopicTableFull`` for a new topic past ``max_topics`` (``bounded=False``:
        a topic the broker itself needs, the reply and trace topics at start)."""
        if bounded and topic not in self.topics:
            self.check_room(topic)
        n = queue_nums or self.default_queue_nums
        cfg = TopicConfig(topic, n, n, perm, 0, order)
        self._set(cfg)
        self.file.changed()
        self._changed(topic)
        return cfg

    def drop(self, topic: str) -> bool:
        """Remove a topic the broker itself manages (the trace topic when its flag is
        off); ``delete`` is the clients' request and never removes a system topic."""
        if self.topics.pop(topic, None) is None:
            return False
        del self._rows[topic]
        self.file.changed()
        self._changed(topic)
        return True

    def delete(self, topic: str) -> bool:
        if is_system_topic(topic) or topic not in self.topics:
            return False
        return self.drop(topic)

    def _changed(self, topic: str) -> None:
        for listener in self.on_change:
            listener(topic)

    def replace_all(self, configs: list[TopicConfig]) -> int:
        """A slave's copy of its master's table (RocketMQ SlaveSynchronize: clear, putAll):
        exactly ``configs`` afterwards (the schedule topic stays); the topics changed."""
        wanted = {c.topic_name: c for c in configs if c.topic_name != SCHEDULE_TOPIC}
        changed = [t for t in self.topics if t != SCHEDULE_TOPIC and t not in wanted]
        for topic in changed:
            del self.topics[topic]
            del self._rows[topic]
        for name, cfg in wanted.items():
            if self.topics.get(name) != cfg:
                self._set(cfg)
                changed.append(name)
        if changed:
            self.file.changed()
            for topic in changed:
                self._changed(topic)
        return len(changed)

    def ensure(self, topic: str, queue_nums: int) -> tuple[TopicConfig, bool]:
        """Return the topic, creating it with ``queue_nums`` queues if absent (True)."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg, False
        return self.create(topic, queue_nums), True
