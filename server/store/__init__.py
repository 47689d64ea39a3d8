"""kairosmq.server.store: commit log, consume queues and the message store."""

from __future__ import annotations

# SCHEDULE_TOPIC lives in protocol/naming.py; importable from here only for
# server/put/path.py, until it imports it from naming (then drop this line).
from kairosmq.protocol.naming import SCHEDULE_TOPIC  # noqa: F401

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
