"""The one put path: every message the broker stores goes through ``PutPath.put``.

Owns: ``MessageKind`` (what a put is: a plain send, a delayed send, the scheduler's
re-put, a retry, a dead letter, a RocketMQ 5 timer message, a recall record, a
transaction half message or op record), ``PutPath`` (the delay transform, the store put, the stats
counters and the ``message.stored``/``message.scheduled`` log events, decided by the
kind the caller states, never guessed from properties), ``PutPath.reput`` (a due
schedule record re-put by patching its stored bytes, no object round trip) and
``PutPath.delivered`` (stats and the ``message.due``/``message.delivered`` events).

Invariants:
* The kind decides: only DELAYED and RETRY messages with a positive DELAY level are
  diverted into the schedule topic; NORMAL and DLQ drop a stray DELAY; a REPUT is
  stored as it is (its properties are the scheduler's). A refused put changes no
  counter and logs nothing.
* ``reput`` stores exactly the record the object path (``requeue.restore_delayed`` then
  ``put``) would store (tests/server/test_reput_parity.py), and raises
  ``RequeueError`` for a record that path could not restore.
* Synchronous, on the event loop, like ``MessageStore.put``.
"""

from __future__ import annotations

import contextlib
import time
from enum import Enum
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.message import record_properties
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    KEYS,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
    TAGS,
    UNIQ_KEY,
)

from ..schedule.delay.levels import transform_delayed
from ..schedule.timer.topic import transform_timer
from ..store import SCHEDULE_TOPIC, MessageInner, PutResult, PutStatus
from ..transaction.messages import transform_half
from .requeue import restore_delayed_view, restore_timer_view

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.logs import MessageLog
    from ..observe.stats import BrokerStats
    from ..schedule.timer import TimerService
    from ..store import MessageStore


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


_DELAYABLE = frozenset((MessageKind.DELAYED, MessageKind.RETRY))


class Reput:
    """What a raw re-put stored, as the delivered log needs it (duck-types MessageInner)."""

    __slots__ = ("topic", "queue_id", "properties", "reconsume_times")

    def __init__(self, topic: str, queue_id: int, properties: dict[str, str],
                 reconsume_times: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.properties = properties
        self.reconsume_times = reconsume_times


class PutPath:
    """The delay transform, store put, stats and per-message logs of every put."""

    def __init__(self, store: MessageStore, stats: BrokerStats, msglog: MessageLog,
                 config: BrokerConfig) -> None:
        self.store = store
        self.stats = stats
        self.msglog = msglog
        self.config = config
        self.timer: TimerService | None = None  # set by the broker (timers need the path)
        # (phy, topic, queue id, UNIQ_KEY) of the last timer re-put, for its fired event
        self._fired_target: tuple[int, str, int, str | None] | None = None

    def offset_msg_id(self, phy_offset: int) -> str:
        ip, port = self.store.store_host
        return create_offset_msg_id(ip, port, phy_offset)

    def put(self, msg: MessageInner, kind: MessageKind = MessageKind.NORMAL, *,
            due_ms: int = 0) -> PutResult:
        """Store ``msg`` as ``kind``; stats and logs only for a stored message.
        ``due_ms``: a TIMER's due instant (``protocol.timer.resolve_timer``)."""
        if kind is MessageKind.TIMER:
            return self._put_timer(msg, due_ms)
        if kind is MessageKind.RECALL or kind is MessageKind.TRANSACTION_OP:
            return self.store.put(msg)
        if kind is MessageKind.TRANSACTION_HALF:
            return self._put_half(msg)
        props = msg.properties
        level = 0
        if kind is not MessageKind.REPUT and DELAY in props and msg.topic != SCHEDULE_TOPIC:
            if kind in _DELAYABLE:
                level = int(props[DELAY])
            if level > 0:
                level = transform_delayed(msg, level, self.config.delay_levels_ms,
                                          self.store.clock_ms(), round_up_ms=1)
            else:
                del props[DELAY]
        result = self.store.put(msg)
        if result.status is not PutStatus.PUT_OK or kind is MessageKind.REPUT:
            return result
        if level > 0:
            self.stats.scheduled[level] += 1
            self._target_ready(props[REAL_TOPIC], props[REAL_QID])
        else:
            self.stats.stored[msg.topic] += 1
        if self.config.log_messages and self.msglog.enabled:
            offset_id = result.offset_msg_id = self.offset_msg_id(result.phy_offset)
            if level > 0:
                self.msglog.info(
                    "message.scheduled", msg_id=props.get(UNIQ_KEY) or offset_id,
                    offset_msg_id=offset_id, real_topic=props[REAL_TOPIC],
                    real_queue_id=int(props[REAL_QID]), delay_level=level,
                    queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                    store_ts=result.store_timestamp, deliver_ts=int(props[DELIVER_TIME]),
                    reconsume_times=msg.reconsume_times, tags=props.get(TAGS),
                )
            else:
                self.msglog.info(
                    "message.stored", msg_id=props.get(UNIQ_KEY) or offset_id,
                    offset_msg_id=offset_id, topic=msg.topic, queue_id=msg.queue_id,
                    queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                    size=result.size, store_ts=result.store_timestamp,
                    born_ts=msg.born_timestamp, tags=props.get(TAGS), keys=props.get(KEYS),
                    reconsume_times=msg.reconsume_times,
                )
        return result

    # ------------------------------------------------------------------ re-put

    def reput(self, record: bytes, level: int, schedule_offset: int
              ) -> tuple[PutResult, Reput]:
        """Re-put a due schedule record into its real topic by patching its bytes.

        The same record as ``restore_delayed`` + ``put(msg, REPUT)``: real topic and
        queue, internal properties dropped except REAL_TOPIC/REAL_QID/the due time,
        ``KAIROS_SCHEDULE_ORIGIN=level:offset`` added, a fresh store time. Raises
        ``RequeueError`` when the record cannot be restored.
        """
        view, topic, queue_id, new = restore_delayed_view(record, level, schedule_offset)
        result = self.store.put_patched(record, view, topic, queue_id, new)
        return result, Reput(topic, queue_id, new, view.reconsume_times)

    def delivered(self, msg: Any, result: PutResult, level: int, deliver_ts: int,
                  woke_ms: int) -> None:
        """Stats and log events of a message the scheduler re-put (``msg``: a
        MessageInner or a ``Reput``)."""
        # sub-millisecond lateness from the wall clock right after the re-put (store
        # timestamps are whole milliseconds)
        lateness = round(time.time() * 1000 - deliver_ts, 3)
        self.stats.delivered[msg.topic] += 1
        self.stats.lateness[level].observe(lateness)
        if not (self.config.log_messages and self.msglog.enabled):
            return
        props = msg.properties
        msg_id = props.get(UNIQ_KEY) or self.offset_msg_id(result.phy_offset)
        if self.msglog.debug_enabled:
            self.msglog.debug(
                "message.due", msg_id=msg_id, delay_level=level,
                queue_offset=int(props.get(SCHEDULE_ORIGIN, "0:0").split(":")[1]),
                deliver_ts=deliver_ts, wake_lag_ms=float(woke_ms - deliver_ts))
        self.msglog.info("message.delivered", msg_id=msg_id, topic=msg.topic,
                         queue_id=msg.queue_id, queue_offset=result.queue_offset,
                         phy_offset=result.phy_offset, delay_level=level,
                         deliver_ts=deliver_ts, lateness_ms=lateness,
                         reconsume_times=msg.reconsume_times)

    # ------------------------------------------------------------------ timers

    def _put_timer(self, msg: MessageInner, due_ms: int) -> PutResult:
        """Divert a timer send into the timer topic, due at ``due_ms`` (never behind the
        fired cursor: ``TimerService.admit``)."""
        assert self.timer is not None, "timer messages need the broker's TimerService"
        due = self.timer.admit(due_ms)
        transform_timer(msg, due)
        result = self.store.put(msg)
        if result.status is not PutStatus.PUT_OK:
            return result
        self.stats.timers_scheduled += 1
        self._target_ready(msg.properties[REAL_TOPIC], msg.properties[REAL_QID])
        if self.config.log_messages and self.msglog.enabled:
            props = msg.properties
            offset_id = result.offset_msg_id = self.offset_msg_id(result.phy_offset)
            self.msglog.info("timer.scheduled", msg_id=props.get(UNIQ_KEY) or offset_id,
                             real_topic=props[REAL_TOPIC], real_queue_id=int(props[REAL_QID]),
                             queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                             deliver_ts=due)
        return result

    def _target_ready(self, topic: str, queue_id: str) -> None:
        """A delayed or timer message will land in ``topic``/``queue_id``: if that consume
        queue has no file yet, it is made off the loop meanwhile (store/allocate.py), so
        the first delivery does not create it on the loop."""
        qid = int(queue_id)
        cq = self.store.find_queue(topic, qid)
        if cq is None or not cq.files:
            with contextlib.suppress(ValueError):  # a name the store refuses: the re-put says so
                self.store.queue(topic, qid).prepare_first()

    def _put_half(self, msg: MessageInner) -> PutResult:
        """A transaction half message (``transaction/messages.py``): stored in the half
        topic, its DELAY and timer properties kept for the commit, not applied."""
        transform_half(msg, msg.properties.get(PGROUP, ""))
        result = self.store.put(msg)
        if (result.status is PutStatus.PUT_OK and self.config.log_messages
                and self.msglog.enabled):
            props = msg.properties
            offset_id = result.offset_msg_id = self.offset_msg_id(result.phy_offset)
            self.msglog.info("transaction.prepared", msg_id=props.get(UNIQ_KEY) or offset_id,
                             producer_group=props.get(PGROUP, ""),
                             real_topic=props[REAL_TOPIC], real_queue_id=int(props[REAL_QID]),
                             queue_offset=result.queue_offset, phy_offset=result.phy_offset)
        return result

    def reput_timer(self, record: bytes, due: int, phy: int) -> PutResult:
        """The timer service's re-put of a due timer record into its real topic, by
        patching its bytes (the same record as ``requeue.restore_timer`` + ``put``)."""
        view, topic, queue_id, new = restore_timer_view(record, due, phy)
        self._fired_target = (phy, topic, queue_id, new.get(UNIQ_KEY))
        return self.store.put_patched(record, view, topic, queue_id, new)

    def timer_fired(self, record: bytes, result: PutResult, due: int, phy: int) -> None:
        """Stats and the ``timer.fired`` event of a timer the service re-put (its target
        as ``reput_timer`` just decoded it; the record is decoded again only otherwise)."""
        lateness = round(time.time() * 1000 - due, 3)
        self.stats.timers_fired += 1
        self.stats.timer_lateness.observe(lateness)
        if not (self.config.log_messages and self.msglog.enabled):
            return
        target = self._fired_target
        if target is not None and target[0] == phy:
            _phy, topic, queue_id, uniq = target
        else:
            props = record_properties(record)
            topic, queue_id = props.get(REAL_TOPIC, ""), _int(props.get(REAL_QID))
            uniq = props.get(UNIQ_KEY)
        self.msglog.info("timer.fired",
                         msg_id=uniq or self.offset_msg_id(result.phy_offset),
                         topic=topic, queue_id=queue_id,
                         queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                         deliver_ts=due, lateness_ms=lateness)


def _int(raw: str | None) -> int:
    return int(raw) if raw and raw.isascii() and raw.isdigit() and len(raw) < 10 else 0
