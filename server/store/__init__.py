"""kairosmq.server.store: commit log, consume queues and the message store."""

from __future__ import annotations

from .message_store import (
    SCHEDULE_TOPIC,
    DispatchRequest,
    GetResult,
    GetStatus,
    MessageInner,
    MessageStore,
    PutResult,
    PutStatus,
)

__all__ = [
    "SCHEDULE_TOPIC",
    "DispatchRequest",
    "GetResult",
    "GetStatus",
    "MessageInner",
    "MessageStore",
    "PutResult",
    "PutStatus",
]
