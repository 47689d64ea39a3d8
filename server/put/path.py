"""The one put path: every message the broker stores goes through ``PutPath.put``.

Owns: ``PutPath`` (the delay transform, the timer transform at the due time the timer
admission gives, the half-message transform, the store put, the stats counters and the
``message.stored``/``message.scheduled``/``timer.scheduled``/``transaction.prepared``
log events, decided by the ``MessageKind`` (``kind.py``) the caller states, never
guessed from properties) and ``response_code`` (a refused put's status -> the response
code its request gets). The scheduler's and the timer service's re-puts of due records
patch the stored bytes instead (``schedule/reput.py``).

Invariants:
* The kind decides: only DELAYED and RETRY messages with a positive DELAY level are
  diverted into the schedule topic; NORMAL and DLQ drop a stray DELAY; a REPUT is
  stored as it is (its properties are the scheduler's). A refused put changes no
  counter and logs nothing.
* A timer is never stored behind the fired cursor: its due time is the one
  ``admit_timer`` (``TimerService.admit``) gives, passed in at construction.
* Synchronous, on the event loop, like ``MessageStore.put``.
* ``PutPath.put`` here is the reference; its native twin (``_path.pyx``) makes a NORMAL
  or DELAYED put in one C function (also exported as a C function, ``PUT``, that the
  send twin calls) and hands every other kind to it (``tests/server/test_native_send.py``
  holds the twin to it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

from kairosmq.protocol import native
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    UNIQ_KEY,
)

from ..schedule.delay.levels import transform_delayed
from ..schedule.timer.topic import transform_timer
from ..store import MessageInner, PutResult, PutStatus
from ..transaction.messages import transform_half
from .kind import MessageKind

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.logs import MessageLog
    from ..observe.stats import BrokerStats
    from ..store import MessageStore


# a refused put's answer on the wire (RocketMQ's SendMessageProcessor); others SYSTEM_ERROR
_RESPONSE_CODES = {
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
}


def response_code(status: PutStatus) -> ResponseCode:
    """The response code answering a put that ended with ``status`` (a send, a commit)."""
    return _RESPONSE_CODES.get(status, ResponseCode.SYSTEM_ERROR)


class PutPath:
    """The delay transform, store put, stats and per-message logs of every put."""

    # slots: the native twin reads the fields a put touches in place (``_path.pyx``)
    __slots__ = ("store", "stats", "msglog", "config", "admit_timer")

    def __init__(
        self,
        store: MessageStore,
        stats: BrokerStats,
        msglog: MessageLog,
        config: BrokerConfig,
        *,
        admit_timer: Callable[[int], int],
    ) -> None:
        self.store = store
        self.stats = stats
        self.msglog = msglog
        self.config = config
        self.admit_timer = admit_timer  # TimerService.admit: never behind the fired cursor

    def offset_msg_id(self, phy_offset: int) -> str:
        ip, port = self.store.store_host
        return create_offset_msg_id(ip, port, phy_offset)

    def put(
        self, msg: MessageInner, kind: MessageKind = MessageKind.NORMAL, *, due_ms: int = 0
    ) -> PutResult:
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
            if kind is MessageKind.DELAYED or kind is MessageKind.RETRY:  # (no Enum hash)
                level = int(props[DELAY])
            if level > 0:
                level = transform_delayed(
                    msg, level, self.config.delay_levels_ms, self.store.clock_ms(), round_up_ms=1
                )
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
                    "message.scheduled",
                    msg_id=props.get(UNIQ_KEY) or offset_id,
                    real_topic=props[REAL_TOPIC],
                    real_queue_id=int(props[REAL_QID]),
                    delay_level=level,
                    queue_offset=result.queue_offset,
                    phy_offset=result.phy_offset,
                    deliver_ts=int(props[DELIVER_TIME]),
                    reconsume_times=msg.reconsume_times,
                )
            else:
                self.msglog.info(
                    "message.stored",
                    msg_id=props.get(UNIQ_KEY) or offset_id,
                    topic=msg.topic,
                    queue_id=msg.queue_id,
                    queue_offset=result.queue_offset,
                    phy_offset=result.phy_offset,
                    size=result.size,
                    born_ts=msg.born_timestamp,
                    reconsume_times=msg.reconsume_times,
                )
        return result

    # ------------------------------------------------------------------ timers

    def _put_timer(self, msg: MessageInner, due_ms: int) -> PutResult:
        """Divert a timer send into the timer topic, due at ``due_ms`` (never behind the
        fired cursor: ``TimerService.admit``)."""
        due = self.admit_timer(due_ms)
        transform_timer(msg, due)
        result = self.store.put(msg)
        if result.status is not PutStatus.PUT_OK:
            return result
        self.stats.timers_scheduled += 1
        self._target_ready(msg.properties[REAL_TOPIC], msg.properties[REAL_QID])
        if self.config.log_messages and self.msglog.enabled:
            props = msg.properties
            offset_id = result.offset_msg_id = self.offset_msg_id(result.phy_offset)
            self.msglog.info(
                "timer.scheduled",
                msg_id=props.get(UNIQ_KEY) or offset_id,
                real_topic=props[REAL_TOPIC],
                real_queue_id=int(props[REAL_QID]),
                queue_offset=result.queue_offset,
                phy_offset=result.phy_offset,
                deliver_ts=due,
            )
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
        if result.status is PutStatus.PUT_OK and self.config.log_messages and self.msglog.enabled:
            props = msg.properties
            offset_id = result.offset_msg_id = self.offset_msg_id(result.phy_offset)
            self.msglog.info(
                "transaction.prepared",
                msg_id=props.get(UNIQ_KEY) or offset_id,
                producer_group=props.get(PGROUP, ""),
                real_topic=props[REAL_TOPIC],
                real_queue_id=int(props[REAL_QID]),
                queue_offset=result.queue_offset,
                phy_offset=result.phy_offset,
            )
        return result


# ------------------------------------------------------------------ the native twin

# ``PutPath.put`` above is the reference (tests/server/test_native_send.py holds the twin
# to it); the twin's (``_path.pyx``: a NORMAL or DELAYED put in one C function) replaces
# it when protocol/native.py chooses it.
reference = SimpleNamespace(put=PutPath.put)


def _load_twin() -> ModuleType:
    from . import _path  # type: ignore[attr-defined]

    twin: ModuleType = _path  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    PutPath.put = _twin.put  # type: ignore[method-assign]
