"""What a scheduled delivery tells: the stats counters and per-message events of a due
record re-put into its real topic.

Owns: ``DeliveryLog`` — ``delivered`` (a level's re-put: ``stats.delivered`` per topic,
the level's lateness histogram, ``message.due`` at debug and ``message.delivered``) and
``timer_fired`` (a timer's: ``stats.timers_fired``, the timer lateness histogram,
``timer.fired``). Both services call it after a DONE re-put (``reput.Reputs``), with the
``Target`` the re-put stored.

Invariants: the lateness is measured from the wall clock right after the re-put, to
the microsecond (store timestamps are whole milliseconds); the events are written only
with ``log_messages`` on and the message log enabled, and are those the Spark job reads
(names and fields unchanged, ``protocol/events.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.properties import UNIQ_KEY

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.logs import MessageLog
    from ..observe.stats import BrokerStats
    from ..store import MessageStore, PutResult
    from .reput import Target


class DeliveryLog:
    """Stats and ``message.delivered``/``timer.fired`` events of the scheduler's re-puts."""

    def __init__(
        self, store: MessageStore, stats: BrokerStats, msglog: MessageLog, config: BrokerConfig
    ) -> None:
        self.store = store
        self.stats = stats
        self.msglog = msglog
        self.config = config

    def _logging(self) -> bool:
        return self.config.log_messages and self.msglog.enabled

    def _msg_id(self, target: Target, result: PutResult) -> str:
        ip, port = self.store.store_host
        return target.properties.get(UNIQ_KEY) or create_offset_msg_id(ip, port, result.phy_offset)

    def delivered(
        self,
        target: Target,
        result: PutResult,
        level: int,
        schedule_offset: int,
        deliver_ts: int,
        woke_ms: int,
    ) -> None:
        """A level's re-put of the message at ``schedule_offset`` in its queue, due at
        ``deliver_ts`` (the task woke at ``woke_ms``)."""
        lateness = round(time.time() * 1000 - deliver_ts, 3)
        self.stats.delivered[target.topic] += 1
        self.stats.lateness[level].observe(lateness)
        if not self._logging():
            return
        msg_id = self._msg_id(target, result)
        if self.msglog.debug_enabled:
            self.msglog.debug(
                "message.due",
                msg_id=msg_id,
                delay_level=level,
                queue_offset=schedule_offset,
                deliver_ts=deliver_ts,
                wake_lag_ms=float(woke_ms - deliver_ts),
            )
        self.msglog.info(
            "message.delivered",
            msg_id=msg_id,
            topic=target.topic,
            queue_id=target.queue_id,
            queue_offset=result.queue_offset,
            phy_offset=result.phy_offset,
            delay_level=level,
            lateness_ms=lateness,
            reconsume_times=target.reconsume_times,
        )

    def timer_fired(self, target: Target, result: PutResult, due: int) -> None:
        """The timer service's re-put of a timer due at ``due``."""
        lateness = round(time.time() * 1000 - due, 3)
        self.stats.timers_fired += 1
        self.stats.timer_lateness.observe(lateness)
        if not self._logging():
            return
        self.msglog.info(
            "timer.fired",
            msg_id=self._msg_id(target, result),
            topic=target.topic,
            queue_id=target.queue_id,
            queue_offset=result.queue_offset,
            phy_offset=result.phy_offset,
            deliver_ts=due,
            lateness_ms=lateness,
        )
