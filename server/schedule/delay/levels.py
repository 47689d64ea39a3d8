"""The delay levels: RocketMQ's ``messageDelayLevel`` table and the send side of a delayed
message.

Owns: ``parse_delay_levels`` (``"1s 5s 10s ..."`` -> milliseconds per level; ``BrokerConfig``
derives ``delay_levels_ms`` with it) and ``transform_delayed`` (divert a message with a delay
level into ``SCHEDULE_TOPIC_XXXX`` queue ``level-1``, saving REAL_TOPIC/REAL_QID and the due
time; the put path calls it for DELAYED and RETRY puts). ``service.py``'s ``ScheduleService``
moves the due messages back; the inverse, ``restore_delayed_view``, is ``schedule/reput.py``'s.

Invariants: a bad level string raises ``ValueError`` naming the bad token (a clear start-up
error); a level above the table's last is clamped to it; the due time never precedes the
put instant plus the level's delay. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import DELAY, DELIVER_TIME, REAL_QID, REAL_TOPIC

if TYPE_CHECKING:
    from ...store import MessageInner

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Parse ``"1s 5s 1m ..."`` into milliseconds per level (level n = index n-1)."""
    tokens = text.split()
    if not tokens:
        raise ValueError("message_delay_level is empty: give at least one level like '1s'")
    out: list[int] = []
    for i, tok in enumerate(tokens, start=1):
        m = _LEVEL_RE.match(tok.strip().lower())
        if not m:
            raise ValueError(
                f"message_delay_level token {i} {tok!r} is not <number><unit> "
                f"with unit one of ms, s, m, h, d"
            )
        ms = round(float(m.group(1)) * _UNITS_MS[m.group(2)])
        if ms <= 0:
            raise ValueError(f"message_delay_level token {i} {tok!r} must be positive")
        out.append(ms)
    return tuple(out)


def transform_delayed(
    msg: MessageInner, level: int, levels_ms: tuple[int, ...], now_ms: int, *, round_up_ms: int = 0
) -> int:
    """Divert ``msg`` into the schedule topic in place; return the (clamped) level.

    The due time is ``now_ms + delay + round_up_ms``. The broker passes ``round_up_ms=1``
    because its ``now_ms`` is a truncated wall-clock reading (the real instant of the put
    lies in ``[now_ms, now_ms + 1)``): so the due time never precedes the real put instant
    plus the delay, and no message is delivered early as seen by a sender's
    sub-millisecond clock. Exact clocks (tests) pass 0.
    """
    level = min(level, len(levels_ms))
    props = msg.properties
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    props[DELAY] = str(level)
    props[DELIVER_TIME] = str(now_ms + levels_ms[level - 1] + round_up_ms)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
    msg.store_timestamp = now_ms
    return level
