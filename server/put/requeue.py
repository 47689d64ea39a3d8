"""requeue: the one copy "stored record -> message for a new put".

Owns: ``INTERNAL_PROPERTIES`` (the broker-internal properties a re-put never inherits
from the record it copies), ``stripped`` (a record's properties without a table of
names: the one strip rule, used by every copy and by the byte-patching re-puts in
``schedule/reput.py``), ``copy_record`` (the copy itself: the scheduler's and the
timer's reference restores, CONSUMER_SEND_MSG_BACK, DLQ resend and a transaction's
committed copy), ``requeue`` (the copy for a re-put: ``INTERNAL_PROPERTIES`` stripped)
and ``resend_target`` (where a dead letter may be resent).

Invariants:
* A copy keeps body, flag, sys flag (unless the caller states it), born time and host
  and every property not in its strip table (UNIQ_KEY included, so the msgId is
  unchanged), in the record's order, then the caller's properties; it gets a fresh store
  time. ``requeue`` loses ``INTERNAL_PROPERTIES`` unless the caller sets them again.
* Nothing here trusts a record's properties as names: ``resend_target`` accepts only an
  existing, non-system, non-DLQ topic (a RETRY_TOPIC naming ``SCHEDULE_TOPIC_XXXX`` would
  loop forever). The store checks every topic name again before it reaches the file
  system.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection

from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.naming import (
    is_dlq_topic,
    is_system_topic,
    retry_topic,
    validate_queue_topic,
)
from kairosmq.protocol.properties import (
    BROKER_INTERNAL_PROPERTIES,
    DELAY,
    DELIVER_TIME,
    RECALL_KIND,
    RECALL_TARGET,
    RESCHEDULE_OF,
    SCHEDULE_ORIGIN,
    TIMER_ORIGIN,
)

from ..store import MessageInner

# Set by the broker on its way through the store; never copied from a stored record.
INTERNAL_PROPERTIES: tuple[str, ...] = (
    DELAY,
    DELIVER_TIME,
    SCHEDULE_ORIGIN,
    *BROKER_INTERNAL_PROPERTIES,
    TIMER_ORIGIN,
    RECALL_TARGET,
    RECALL_KIND,
    RESCHEDULE_OF,
)


def stripped(props: dict[str, str], strip: Collection[str]) -> dict[str, str]:
    """``props`` without the names in ``strip``, in their order (a new dict)."""
    return {k: v for k, v in props.items() if k not in strip}


def copy_record(
    m: MessageExt,
    topic: str,
    queue_id: int,
    strip: Collection[str],
    *,
    properties: dict[str, str] | None = None,
    sys_flag: int | None = None,
    reconsume_times: int | None = None,
) -> MessageInner:
    """A new message copying ``m`` into ``topic``/``queue_id``: its properties without
    ``strip``, then ``properties`` set; ``sys_flag``/``reconsume_times`` replace the
    record's when given."""
    props = stripped(m.properties, strip)
    if properties:
        props.update(properties)
    return MessageInner(
        topic=topic,
        queue_id=queue_id,
        body=m.body,
        properties=props,
        flag=m.flag,
        sys_flag=m.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        reconsume_times=m.reconsume_times if reconsume_times is None else reconsume_times,
    )


def requeue(
    m: MessageExt,
    topic: str,
    queue_id: int,
    *,
    reconsume_times: int | None = None,
    properties: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
) -> MessageInner:
    """A new message copying ``m`` into ``topic``/``queue_id`` for a re-put.

    ``INTERNAL_PROPERTIES`` and ``drop`` are removed, then ``properties`` are set;
    ``reconsume_times`` replaces the record's count when given.
    """
    return copy_record(
        m,
        topic,
        queue_id,
        INTERNAL_PROPERTIES + drop,
        properties=properties,
        reconsume_times=reconsume_times,
    )


def resend_target(group: str, origin: str | None, to_retry: bool) -> tuple[str | None, str]:
    """Where DLQ resend may put a dead letter of ``group``: (topic, "") or (None, reason).

    ``to_retry`` targets the group's own ``%RETRY%`` topic; otherwise the record's
    RETRY_TOPIC (its original topic), which must be a valid queue topic that is neither a
    system topic nor a DLQ. Whether the topic exists is the caller's check.
    """
    if to_retry:
        return retry_topic(group), ""
    if not origin:
        return None, "it has no RETRY_TOPIC property (original topic)"
    bad = validate_queue_topic(origin)
    if bad is not None:
        return None, f"its RETRY_TOPIC is not a topic: {bad}"
    if is_system_topic(origin) or is_dlq_topic(origin):
        return None, f"its RETRY_TOPIC {origin} is a system or DLQ topic"
    return origin, ""
