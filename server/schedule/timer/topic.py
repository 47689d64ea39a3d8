"""The timer topic (``rmq_sys_wheel_timer``) and its records: its queues, the ``due:phy``
pairs the broker writes in properties, the put-side transform and the recall outcomes.

Owns: ``TIMER_QUEUE`` / ``RECALL_QUEUE`` (queues 0 and 1 of ``rmq_sys_wheel_timer``),
``format_pair`` / ``parse_pair`` (``KAIROS_TIMER_ORIGIN``, ``KAIROS_RECALL_TARGET``),
``transform_timer`` (a timer send into the timer topic), ``recall_record`` (the record a
recall appends, the producer's RECALL_MESSAGE or an operator's) and ``RecallOutcome``.

Invariant: a pair parses only as two decimal numbers of at most 18 digits (int64-safe);
anything else is ignored by the timer service, never trusted.
"""

from __future__ import annotations

from enum import Enum

from kairosmq.protocol.naming import TIMER_TOPIC
from kairosmq.protocol.properties import (
    INT64_DIGITS,
    REAL_QID,
    REAL_TOPIC,
    RECALL_KIND,
    RECALL_TARGET,
    parse_decimal_pair,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ...store import MessageInner

TIMER_QUEUE = 0
RECALL_QUEUE = 1


class RecallOutcome(Enum):
    RECALLED = "recalled"
    ALREADY_FIRED = "already fired"
    ALREADY_RECALLED = "already recalled"


def format_pair(due_ms: int, phy: int) -> str:
    return f"{due_ms}:{phy}"


def parse_pair(text: str) -> tuple[int, int] | None:
    return parse_decimal_pair(text, INT64_DIGITS, INT64_DIGITS)


def transform_timer(msg: MessageInner, due_ms: int) -> None:
    """Divert ``msg`` into the timer topic in place, due at ``due_ms``: REAL_TOPIC and
    REAL_QID keep where it fires to, ``TIMER_OUT_MS`` when (RocketMQ 5's names)."""
    props = msg.properties
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    props[TIMER_OUT_MS] = str(due_ms)
    msg.topic = TIMER_TOPIC
    msg.queue_id = TIMER_QUEUE


def recall_record(
    due_ms: int, phy: int, kind: str, born_ts: int, born_host: tuple[bytes, int]
) -> MessageInner:
    """The recall record of the timer (``kind`` "timer") or schedule record ("level") at
    ``(due_ms, phy)``: queue 1 of the timer topic, ``KAIROS_RECALL_TARGET`` naming it."""
    return MessageInner(
        topic=TIMER_TOPIC,
        queue_id=RECALL_QUEUE,
        body=b"0",
        properties={RECALL_TARGET: format_pair(due_ms, phy), RECALL_KIND: kind},
        born_timestamp=born_ts,
        born_host=born_host,
    )
