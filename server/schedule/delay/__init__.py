"""Delayed delivery by level (RocketMQ 4.x's ``messageDelayLevel``): ``levels`` (the level
table and the transform of a delayed send into ``SCHEDULE_TOPIC_XXXX``) and ``service``
(``ScheduleService``: one task per level, re-putting due messages exactly once).
"""

from __future__ import annotations
