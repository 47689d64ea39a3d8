"""User-facing message values: Message, MessageQueue, SendStatus, SendResult, ConsumeStatus.

Owns: what a producer sends (``Message``), where it goes (``MessageQueue``), what a send
returns (``SendResult``), what a listener answers (``ConsumeStatus``), and the properties
string a message carries on the wire (``wire_properties``).

Invariants:
* ``Message.properties`` holds user properties only; TAGS, KEYS, DELAY, WAIT and UNIQ_KEY
  are derived from the fields when the message is encoded, so the fields always win.
* ``MessageQueue`` orders by (topic, broker_name, queue_id), the order RocketMQ's
  allocation strategies sort by.
* Messages handed to listeners are ``kairosmq.protocol.MessageExt`` records (re-exported
  here) with ``topic`` already restored from RETRY_TOPIC for retried messages.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.properties import (
    DELAY,
    KEYS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TAGS,
    TIMER_DELAY_MS,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    WAIT,
)

__all__ = [
    "ConsumeStatus",
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "format_host",
]


@dataclass(slots=True)
class Message:
    """A message to send.

    Args:
        topic: destination topic (<= 127 bytes, ``[%|a-zA-Z0-9_-]``).
        body: payload bytes (``str`` is encoded as UTF-8).
        tags: one tag, used by consumers' tag filters.
        keys: one key or several (joined by a space on the wire), indexed by the broker.
        delay_level: 0 for immediate delivery, else the broker's delay level (1-based).
        properties: extra user properties (string to string).
        flag: the user flag stored with the message.
        deliver_at: a timer message: deliver at this instant (an aware ``datetime`` or
            epoch milliseconds; RocketMQ 5's ``TIMER_DELIVER_MS``), to the millisecond.
        delay: a timer message: deliver this long after the broker stores it (a
            ``timedelta``; RocketMQ 5's ``TIMER_DELAY_MS``). At most one of
            ``delay_level``, ``deliver_at`` and ``delay``.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    delay_level: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    deliver_at: datetime | int | None = None
    delay: timedelta | None = None

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            self.body = self.body.encode()
        timing = [n for n, v in (("delay_level", self.delay_level), ("deliver_at",
                  self.deliver_at), ("delay", self.delay)) if v]
        if len(timing) > 1:
            raise ValueError(f"a message takes one of delay_level, deliver_at and delay, "
                             f"not {' and '.join(timing)}")
        if isinstance(self.deliver_at, datetime) and self.deliver_at.tzinfo is None:
            raise ValueError("deliver_at must be timezone-aware (or epoch milliseconds)")
        if self.delay is not None and self.delay < timedelta(0):
            raise ValueError("delay must not be negative")

    @property
    def timer_property(self) -> tuple[str, str] | None:
        """The RocketMQ 5 timer property this message sends, if any."""
        if self.deliver_at is not None:
            at = self.deliver_at
            ms = round(at.timestamp() * 1000) if isinstance(at, datetime) else int(at)
            return TIMER_DELIVER_MS, str(ms)
        if self.delay is not None:
            return TIMER_DELAY_MS, str(self.delay // timedelta(milliseconds=1))
        return None

    @property
    def keys_str(self) -> str | None:
        if self.keys is None or isinstance(self.keys, str):
            return self.keys or None
        return " ".join(self.keys) or None


def wire_properties(msg: Message, uniq_id: str | None, *, wait: bool = True) -> str:
    """The properties string for ``msg`` (user properties first, then the system ones)."""
    parts = [
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in msg.properties.items() if k and v != ""
    ] if msg.properties else []
    if msg.tags:
        parts.append(f"{TAGS}{NAME_VALUE_SEPARATOR}{msg.tags}")
    keys = msg.keys_str
    if keys:
        parts.append(f"{KEYS}{NAME_VALUE_SEPARATOR}{keys}")
    if msg.delay_level > 0:
        parts.append(f"{DELAY}{NAME_VALUE_SEPARATOR}{msg.delay_level}")
    timer = msg.timer_property
    if timer is not None:
        parts.append(f"{timer[0]}{NAME_VALUE_SEPARATOR}{timer[1]}")
    if uniq_id:
        parts.append(f"{UNIQ_KEY}{NAME_VALUE_SEPARATOR}{uniq_id}")
    if wait:
        parts.append(f"{WAIT}{NAME_VALUE_SEPARATOR}true")
    return PROPERTY_SEPARATOR.join(parts)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """The broker's acknowledgement of a stored message.

    ``msg_id`` is the client-side UNIQ_KEY (comma-joined for a batch); ``offset_msg_id``
    is the broker's store-host + commit-log-offset id (comma-joined for a batch);
    ``queue_offset`` is the consume-queue offset (the first one for a batch).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    # a timer or delayed message's RocketMQ 5.3 recall handle (``Producer.recall``)
    recall_handle: str | None = None


class ConsumeStatus(Enum):
    """What a listener returns. Orderly listeners may also suspend the queue a moment."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


def format_host(host: tuple[bytes, int]) -> str:
    """``(ip bytes, port)`` as carried in records -> ``"ip:port"``."""
    ip, port = host
    family = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return f"{socket.inet_ntop(family, ip)}:{port}"
