"""What a scheduled delivery tells: the stats counters and per-message events of a due
record re-put into its real topic.

Owns: ``DeliveryLog`` — ``delivered`` (a level's re-puts: ``stats.delivered`` per topic,
the level's lateness histogram, ``message.due`` at debug and ``message.delivered``) and
``timers_fired`` (a timer's: ``stats.timers_fired``, the timer lateness histogram,
``timer.fired``). Both services call it once per batch of re-puts (``reput.Reputs``),
with the ``Target`` and result of each DONE one and the wall clock read right after it.

Invariants: the lateness is measured from the wall clock read right after the re-put, to
the microsecond (store timestamps are whole milliseconds), and that read is also the
line's ``ts`` (as if it were written right then); the events are written only with
``log_messages`` on and the message log enabled, one ``MessageLog.info_many`` per batch
(the same lines as one ``info`` each), and are those the Spark job reads (names and
fields unchanged, ``protocol/events.py``).

The methods here are the reference; their native twin (``_delivered.pyx``, chosen by
``protocol/native.py``) runs the same loops in one C frame and hands a batch it does not
mirror (a histogram subclass, ``message.due`` at debug) to them
(tests/server/test_native_delivered.py: the same stats and lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any  # Any: a log event's field values

from kairosmq.protocol import native
from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.properties import UNIQ_KEY

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.logs import MessageLog
    from ..observe.stats import BrokerStats
    from ..store import MessageStore, PutResult
    from .reput import Target

# a level's re-put: target, result, level, schedule offset, deliver_ts, woke_ms, wall_s
Delivered = tuple["Target", "PutResult", int, int, int, int, float]
# a timer's fire: target, result, due ms, wall_s
Fired = tuple["Target", "PutResult", int, float]


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

    def delivered(self, rows: Sequence[Delivered]) -> None:
        """A level's re-puts of one drain, each ``(target, result, level, schedule_offset,
        deliver_ts, woke_ms, wall_s)``: the message at ``schedule_offset`` in its queue,
        due at ``deliver_ts`` (the task woke at ``woke_ms``), re-put when the wall clock
        read ``wall_s``. Stats per row, the events in one write."""
        stats = self.stats
        delivered, lateness_of = stats.delivered, stats.lateness
        logging = self._logging()
        debug = logging and self.msglog.debug_enabled
        lines: list[tuple[int, dict[str, Any]]] = []
        for target, result, level, schedule_offset, deliver_ts, woke_ms, wall in rows:
            wall_ms = wall * 1000
            lateness = round(wall_ms - deliver_ts, 3)
            delivered[target.topic] += 1
            lateness_of[level].observe(lateness)
            if not logging:
                continue
            msg_id = self._msg_id(target, result)
            if debug:
                self.msglog.debug(
                    "message.due",
                    msg_id=msg_id,
                    delay_level=level,
                    queue_offset=schedule_offset,
                    deliver_ts=deliver_ts,
                    wake_lag_ms=float(woke_ms - deliver_ts),
                )
            lines.append(
                (
                    int(wall_ms),
                    {
                        "msg_id": msg_id,
                        "topic": target.topic,
                        "queue_id": target.queue_id,
                        "queue_offset": result.queue_offset,
                        "phy_offset": result.phy_offset,
                        "delay_level": level,
                        "lateness_ms": lateness,
                        "reconsume_times": target.reconsume_times,
                    },
                )
            )
        if lines:
            self.msglog.info_many("message.delivered", lines)

    def timers_fired(self, rows: Sequence[Fired]) -> None:
        """The timer service's re-puts of one fire turn, each ``(target, result, due,
        wall_s)``: a timer due at ``due`` re-put when the wall clock read ``wall_s``.
        Stats per turn, the events in one write."""
        stats = self.stats
        stats.timers_fired += len(rows)
        observe = stats.timer_lateness.observe
        logging = self._logging()
        lines: list[tuple[int, dict[str, Any]]] = []
        for target, result, due, wall in rows:
            wall_ms = wall * 1000
            lateness = round(wall_ms - due, 3)
            observe(lateness)
            if logging:
                lines.append(
                    (
                        int(wall_ms),
                        {
                            "msg_id": self._msg_id(target, result),
                            "topic": target.topic,
                            "queue_id": target.queue_id,
                            "queue_offset": result.queue_offset,
                            "phy_offset": result.phy_offset,
                            "deliver_ts": due,
                            "lateness_ms": lateness,
                        },
                    )
                )
        if lines:
            self.msglog.info_many("timer.fired", lines)


# ------------------------------------------------------------------ the native twin

# The methods above are the reference (tests/server/test_native_delivered.py holds the
# twin to them); the twin's (``_delivered.pyx``) replace them when protocol/native.py
# chooses it.
reference = SimpleNamespace(timers_fired=DeliveryLog.timers_fired, delivered=DeliveryLog.delivered)


def _load_twin() -> ModuleType:
    from . import _delivered  # type: ignore[attr-defined]

    twin: ModuleType = _delivered  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    DeliveryLog.timers_fired = _twin.timers_fired  # type: ignore[method-assign]
    DeliveryLog.delivered = _twin.delivered  # type: ignore[method-assign]
