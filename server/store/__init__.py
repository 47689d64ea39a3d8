"""kairosmq.server.store: commit log, consume queues and the message store."""

from __future__ import annotations

from .message_store import (
    DispatchRequest,
    GetResult,
    GetStatus,
    MessageInner,
    MessageStore,
    PutResult,
    PutStatus,
)

__all__ = [
    "DispatchRequest",
    "GetResult",
    "GetStatus",
    "MessageInner",
    "MessageStore",
    "PutResult",
    "PutStatus",
]
