"""Scheduled delivery, kairosmq's headline: ``delay/`` (RocketMQ 4.x's delay levels, one
task per level over ``SCHEDULE_TOPIC_XXXX``), ``timer/`` (timer messages at any due ms,
pending in per-minute bucket files, recallable) and what both share: ``reput`` (the one
re-put of a due record: restore, patched put, done / skip / retry, the origin in
flight), ``delivered`` (the stats and events of a delivery), ``recalls`` (the recall
marks of level-delayed messages) and ``waker`` (``PreciseWaker``, a timerfd wake at the
due ms).
"""

from __future__ import annotations
