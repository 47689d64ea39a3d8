"""MessageKind: what a put is, as its caller states it.

Owns: ``MessageKind`` (a plain send, a delayed send, the scheduler's re-put, a retry, a
dead letter, a RocketMQ 5 timer message, a recall record, a transaction half message or
op record). Below the put path and everything that tells it a kind (the handlers, the
timer admission, the transaction service): it imports nothing of the broker.

Invariant: the kind is told by the caller, never inferred from properties (a client's
properties cannot turn a send into a re-put).
"""

from __future__ import annotations

from enum import Enum


class MessageKind(Enum):
    """What a put is; the caller knows it, the put path does not infer it."""

    NORMAL = "NORMAL"  # a plain send
    DELAYED = "DELAYED"  # a send with a DELAY level: diverted into the schedule topic
    REPUT = "REPUT"  # the scheduler moving a due message to its real topic
    RETRY = "RETRY"  # CONSUMER_SEND_MSG_BACK into %RETRY% (with a DELAY level)
    DLQ = "DLQ"  # a dead letter into %DLQ%
    TIMER = "TIMER"  # a send with a due instant (RocketMQ 5 timer properties): timer topic
    RECALL = "RECALL"  # a recall record (RECALL_MESSAGE): stored as it is
    # a half message: into RMQ_SYS_TRANS_HALF_TOPIC queue 0, DELAY/timer parked until commit
    TRANSACTION_HALF = "TRANSACTION_HALF"
    TRANSACTION_OP = "TRANSACTION_OP"  # an op record (RMQ_SYS_TRANS_OP_HALF_TOPIC): as it is
