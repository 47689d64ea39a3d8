"""Timer admission on the send path: which kind a single send is, and its recall handle.

Owns: ``timer_due`` (a send's timer properties -> its due ms, checked before anything
else happens for the send) and ``timer_kind`` (TIMER, or the kind the send already had:
a delay level wins over timer properties, which are then dropped, as RocketMQ's
``checkIfTimerMessage`` does) and ``recall_handle`` (the send response's
``recallHandle`` for a stored timer or level-delayed message, RocketMQ 5.3's
``attachRecallHandle``, extended to delay levels).

Invariants: a refused timer (``TimerIllegal``) is refused before anything is stored; a
handle is only given for what RECALL_MESSAGE can find: a single send with a UNIQ_KEY to
a topic that is not a %RETRY% topic.
"""

from __future__ import annotations

from collections.abc import Callable

from kairosmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    REAL_TOPIC,
    TIMER_PROPERTIES,
    UNIQ_KEY,
)
from kairosmq.protocol.timer import TIMER_OUT_MS, encode_recall_handle, has_timer, resolve_timer

from ...put.kind import MessageKind
from ...store import MessageInner


def timer_due(props: dict[str, str], clock_ms: Callable[[], int], max_delay_ms: int) -> int:
    """The due ms of a single send's timer properties, 0 if none or if a delay level
    wins (the clock is read only for a timer). Raises ``TimerIllegal`` (checked before
    the topic is even auto-created)."""
    if not has_timer(props) or props.get(DELAY, "0") not in ("0", ""):
        return 0
    return resolve_timer(props, clock_ms(), max_delay_ms, round_up_ms=1) or 0


def timer_kind(msg: MessageInner, kind: MessageKind, due: int) -> MessageKind:
    """TIMER for a NORMAL send with a due instant; any other kind keeps its own (a delay
    level or a dead letter wins) and loses the timer properties."""
    if due and kind is MessageKind.NORMAL:
        return MessageKind.TIMER
    if has_timer(msg.properties):
        for key in TIMER_PROPERTIES:
            msg.properties.pop(key, None)
    return kind


def recall_handle(msg: MessageInner, kind: MessageKind, broker_name: str) -> str | None:
    """The recall handle of a stored single send (after the put transformed it)."""
    props = msg.properties
    if kind is MessageKind.TIMER:
        due = props.get(TIMER_OUT_MS)
    elif kind is MessageKind.DELAYED:
        due = props.get(DELIVER_TIME)
    else:
        return None
    topic, uniq = props.get(REAL_TOPIC), props.get(UNIQ_KEY)
    if not (due and topic and uniq) or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None
    return encode_recall_handle(topic, broker_name, int(due), uniq)
