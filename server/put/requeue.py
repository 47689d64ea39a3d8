"""requeue: the one copy "stored record -> message for a new put".

Owns: ``INTERNAL_PROPERTIES`` (the broker-internal properties a re-put never inherits
from the record it copies), ``requeue`` (the copy, used by the scheduler's
``restore_delayed``, CONSUMER_SEND_MSG_BACK and DLQ resend), ``restore_delayed`` (a due
schedule record back to its real topic; ``restore_delayed_view``: the same without
decoding the record, for the scheduler's byte-patching re-put), ``restore_timer`` /
``restore_timer_view`` (the same for a due timer record) and ``resend_target`` (where a
dead letter may be resent).

Invariants:
* A re-put keeps body, flag, sys flag, born time and host and every client property
  (UNIQ_KEY included, so the msgId is unchanged); it gets a fresh store time and loses
  ``INTERNAL_PROPERTIES`` unless the caller sets them again explicitly.
* Nothing here trusts a record's properties as names: a REAL_QID that is not a small
  decimal raises ``RequeueError``, and ``resend_target`` accepts only an existing,
  non-system, non-DLQ topic (a RETRY_TOPIC naming ``SCHEDULE_TOPIC_XXXX`` would loop
  forever). The store checks every topic name again before it reaches the file system.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import MessageExt, RecordView, decode_record, view_record
from kairosmq.protocol.naming import (
    is_dlq_topic,
    is_system_topic,
    retry_topic,
    validate_queue_topic,
)
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    REAL_QID,
    REAL_TOPIC,
    RECALL_KIND,
    RECALL_TARGET,
    SCHEDULE_ORIGIN,
    TIMER_ORIGIN,
    TIMER_PROPERTIES,
    decode_properties,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ..store import MessageInner

# Set by the broker on its way through the store; never copied from a stored record.
INTERNAL_PROPERTIES: tuple[str, ...] = (DELAY, DELIVER_TIME, SCHEDULE_ORIGIN, REAL_TOPIC,
                                        REAL_QID, TIMER_ORIGIN, RECALL_TARGET, RECALL_KIND)
_TIMER_STRIP = INTERNAL_PROPERTIES + TIMER_PROPERTIES
_MAX_QID_DIGITS = 9
_KEEP_ON_REPUT = (REAL_TOPIC, REAL_QID, DELIVER_TIME)  # a re-put keeps these, in this order


class RequeueError(ValueError):
    """A stored record cannot be re-put (undecodable, or a property it relies on is bad)."""


def requeue(m: MessageExt, topic: str, queue_id: int, *, reconsume_times: int | None = None,
            properties: dict[str, str] | None = None, drop: tuple[str, ...] = ()
            ) -> MessageInner:
    """A new message copying ``m`` into ``topic``/``queue_id``.

    ``INTERNAL_PROPERTIES`` and ``drop`` are removed, then ``properties`` are set;
    ``reconsume_times`` replaces the record's count when given.
    """
    strip = INTERNAL_PROPERTIES + drop
    props = {k: v for k, v in m.properties.items() if k not in strip}
    if properties:
        props.update(properties)
    return MessageInner(
        topic=topic, queue_id=queue_id, body=m.body, properties=props, flag=m.flag,
        sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
        reconsume_times=m.reconsume_times if reconsume_times is None else reconsume_times,
    )


def restore_delayed(record: bytes, level: int, schedule_offset: int) -> MessageInner:
    """The message to re-put for a due schedule record: its real topic and queue, no DELAY,
    ``KAIROS_SCHEDULE_ORIGIN=level:offset``. REAL_TOPIC/REAL_QID stay (as RocketMQ keeps
    them) and so does the due time (it marks the re-put as a delivery in logs and stats).

    Raises ``RequeueError`` for a record that cannot be decoded or whose REAL_QID is not a
    small decimal (the scheduler then skips it, logged, instead of stalling its level).
    """
    try:
        m = decode_record(record)
    except MessageDecodeError as err:
        raise RequeueError(str(err)) from err
    props = m.properties
    topic = props.get(REAL_TOPIC, m.topic)
    raw_qid = props.get(REAL_QID, "0")
    if not (raw_qid.isascii() and raw_qid.isdigit() and len(raw_qid) <= _MAX_QID_DIGITS):
        raise RequeueError(f"REAL_QID {raw_qid[:32]!r} is not a queue id")
    keep = {k: props[k] for k in _KEEP_ON_REPUT if k in props}
    keep[SCHEDULE_ORIGIN] = f"{level}:{schedule_offset}"
    return requeue(m, topic, int(raw_qid), properties=keep)


def restore_delayed_view(record: bytes, level: int, schedule_offset: int
                         ) -> tuple[RecordView, str, int, dict[str, str]]:
    """``restore_delayed`` without building a message: the record's layout, the real
    topic and queue, and the properties to store, for ``MessageStore.put_patched`` (the
    scheduler's re-put). The same checks, the same ``RequeueError``s, the same properties
    in the same order (a parity test holds the two together)."""
    try:
        view = view_record(record)
        props = decode_properties(record[view.props_start:view.props_end].decode())
    except (MessageDecodeError, UnicodeDecodeError) as err:
        raise RequeueError(str(err)) from err
    topic = props.get(REAL_TOPIC, view.topic)
    raw_qid = props.get(REAL_QID, "0")
    if not (raw_qid.isascii() and raw_qid.isdigit() and len(raw_qid) <= _MAX_QID_DIGITS):
        raise RequeueError(f"REAL_QID {raw_qid[:32]!r} is not a queue id")
    new = {k: v for k, v in props.items() if k not in INTERNAL_PROPERTIES}
    for k in _KEEP_ON_REPUT:
        if k in props:
            new[k] = props[k]
    new[SCHEDULE_ORIGIN] = f"{level}:{schedule_offset}"
    return view, topic, int(raw_qid), new


def _timer_target(props: dict[str, str]) -> tuple[str, int]:
    topic = props.get(REAL_TOPIC, "")
    raw_qid = props.get(REAL_QID, "0")
    if not topic or not (raw_qid.isascii() and raw_qid.isdigit()
                         and len(raw_qid) <= _MAX_QID_DIGITS):
        raise RequeueError(f"REAL_TOPIC {topic[:64]!r} / REAL_QID {raw_qid[:32]!r} do not "
                           f"name a queue")
    return topic, int(raw_qid)


def _timer_properties(props: dict[str, str], due: int, phy: int) -> dict[str, str]:
    new = {k: v for k, v in props.items() if k not in _TIMER_STRIP}
    new[TIMER_OUT_MS] = str(due)
    new[TIMER_ORIGIN] = f"{due}:{phy}"
    return new


def restore_timer(record: bytes, due: int, phy: int) -> MessageInner:
    """The message to re-put for a due timer record (server/schedule/timer/): its real topic and
    queue, the timer properties gone except ``TIMER_OUT_MS`` (when it was due), and
    ``KAIROS_TIMER_ORIGIN=due:phy``. Raises ``RequeueError`` for a record that cannot be
    decoded or whose REAL_TOPIC/REAL_QID do not name a queue."""
    try:
        m = decode_record(record)
    except MessageDecodeError as err:
        raise RequeueError(str(err)) from err
    topic, qid = _timer_target(m.properties)
    return requeue(m, topic, qid, drop=TIMER_PROPERTIES,
                   properties=_timer_properties(m.properties, due, phy))


def restore_timer_view(record: bytes, due: int, phy: int
                       ) -> tuple[RecordView, str, int, dict[str, str]]:
    """``restore_timer`` without building a message, for ``MessageStore.put_patched`` (the
    timer service's re-put); the same checks and properties (a parity test)."""
    try:
        view = view_record(record)
        props = decode_properties(record[view.props_start:view.props_end].decode())
    except (MessageDecodeError, UnicodeDecodeError) as err:
        raise RequeueError(str(err)) from err
    topic, qid = _timer_target(props)
    return view, topic, qid, _timer_properties(props, due, phy)


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
