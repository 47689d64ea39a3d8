"""The store's value types: put/get outcomes, messages on their way in, dispatch requests.

Owns: ``PutStatus``/``GetStatus`` (expected outcomes, RocketMQ's names), ``MessageInner``
(RocketMQ's MessageExtBrokerInner), ``PutResult``, ``DispatchRequest``, ``GetResult`` and
the ``StateProvider`` protocol (derived state saved with each checkpoint).

Invariant: plain data, no behaviour: ``message_store`` re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Protocol  # Any: a service's snapshot state (JSON)


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


@dataclass(slots=True)
class MessageInner:
    """A message on its way into the store (RocketMQ's MessageExtBrokerInner)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    reconsume_times: int = 0
    store_timestamp: int | None = None


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    phy_offset: int = -1
    size: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    tags_code: int = 0
    remark: str = ""
    offset_msg_id: str = ""  # filled by the broker when it needs it (logs, response)


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    phy_offset: int
    size: int
    tags_code: int
    queue_offset: int
    store_timestamp: int
    properties: dict[str, str]
    replay: bool = False


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    chunks: list[bytes] = field(default_factory=list)
    units: list[tuple[int, int, int]] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)


class StateProvider(Protocol):
    """Derived state saved with each checkpoint and rebuilt by replay after it."""

    name: str

    def snapshot(self) -> Any: ...

    def restore(self, state: Any) -> None: ...


class Expired(NamedTuple):
    """What one retention pass deleted (files are fixed-size: the bytes are their sizes)."""

    segments: int
    queue_files: int
    segment_bytes: int
    queue_file_bytes: int
