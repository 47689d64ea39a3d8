"""Timer messages: any due millisecond, on disk, crash-exact, recallable.

``buckets.py`` keeps pending timers in per-minute files; ``service.py`` loads the near
buckets, fires each timer at its due instant exactly once and decides recalls. The
property rules and the recall handle codec are sans-IO, in ``kairosmq.protocol.timer``.
"""

from __future__ import annotations

from .buckets import TimerBuckets
from .service import TimerService
from .topic import RecallOutcome

__all__ = ["RecallOutcome", "TimerBuckets", "TimerService"]
