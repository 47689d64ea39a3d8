"""Topic configuration: which topics exist, their queue counts and permissions.

Owns: ``TopicConfig`` and ``TopicConfigManager`` (create on demand, validate names,
persist to ``config/topics.json`` atomically). Mirrors RocketMQ's TopicConfigManager:
``TBW102`` is the auto-create template, ``SCHEDULE_TOPIC_XXXX`` has one queue per delay
level, ``%RETRY%<group>`` and ``%DLQ%<group>`` are created on demand.

Invariants: a topic name is 1..127 characters of ``[%|a-zA-Z0-9_-]``; system topics
(``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``TBW102``) are never writable by clients.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from kairosmq.protocol.codes import PERM_READ, PERM_WRITE

from .store.files import read_json, write_json_atomic
from .store.message_store import SCHEDULE_TOPIC

AUTO_CREATE_TOPIC_KEY = "TBW102"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def validate_topic(topic: str) -> str | None:
    """None if ``topic`` is a valid name, else the reason (used as a remark)."""
    if not topic or not topic.strip():
        return "the topic is blank"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"the topic is {len(topic)} characters, the limit is {MAX_TOPIC_LENGTH}"
    if not _VALID.fullmatch(topic):  # not match(): "$" would also accept a trailing "\n"
        return f"the topic {topic!r} contains characters outside [%|a-zA-Z0-9_-]"
    return None


def is_system_topic(topic: str) -> bool:
    return (
        topic == SCHEDULE_TOPIC
        or topic == AUTO_CREATE_TOPIC_KEY
        or topic.startswith(SYSTEM_TOPIC_PREFIX)
    )


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

    def load(self) -> None:
        for d in read_json(self.path, []) or []:
            cfg = TopicConfig(**d)
            if cfg.topic_name != SCHEDULE_TOPIC:
                self.topics[cfg.topic_name] = cfg

    def persist(self) -> None:
        write_json_atomic(self.path, [asdict(t) for t in self.topics.values()])

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def create(
        self, topic: str, queue_nums: int | None = None, *, perm: int = PERM_READ | PERM_WRITE,
        order: bool = False, persist: bool = True,
    ) -> TopicConfig:
        """Create (or update the queue count of) a topic."""
        n = queue_nums or self.default_queue_nums
        cfg = TopicConfig(topic, n, n, perm, 0, order)
        self.topics[topic] = cfg
        if persist:
            self.persist()
        return cfg

    def delete(self, topic: str) -> bool:
        if is_system_topic(topic) or self.topics.pop(topic, None) is None:
            return False
        self.persist()
        return True

    def ensure(self, topic: str, queue_nums: int) -> tuple[TopicConfig, bool]:
        """Return the topic, creating it with ``queue_nums`` queues if absent."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg, False
        return self.create(topic, queue_nums), True
