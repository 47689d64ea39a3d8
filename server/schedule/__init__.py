"""Scheduled delivery, kairosmq's headline: ``delay/`` (RocketMQ 4.x's delay levels, one
task per level over ``SCHEDULE_TOPIC_XXXX``), ``timer/`` (timer messages at any due ms,
pending in per-minute bucket files, recallable) and what both share: ``waker``
(``PreciseWaker``, a timerfd wake at the due ms).
"""

from __future__ import annotations
