"""Retry/DLQ planning (server/put/retry.py): which topic and delay level a sent-back message
gets."""

from __future__ import annotations

import pytest
from kairosmq.server.put.retry import plan_send_back


@pytest.mark.parametrize(
    ("reconsume", "requested", "max_times", "expected"),
    [
        (0, 0, 16, ("%RETRY%G", 3, 1, False)),  # level 0: broker picks 3 + reconsumeTimes
        (5, 0, 16, ("%RETRY%G", 8, 6, False)),
        (15, 0, 16, ("%RETRY%G", 18, 16, False)),
        (2, 7, 16, ("%RETRY%G", 7, 3, False)),  # an explicit level is kept
        (16, 0, 16, ("%DLQ%G", 0, 17, True)),  # reconsume >= max -> DLQ
        (20, 4, 16, ("%DLQ%G", 0, 21, True)),
        (0, 0, 0, ("%DLQ%G", 0, 1, True)),
        (0, -1, 16, ("%DLQ%G", 0, 1, True)),  # negative level -> DLQ straight away
        (3, -5, 16, ("%DLQ%G", 0, 4, True)),
    ],
)
def test_plan_send_back(
    reconsume: int, requested: int, max_times: int, expected: tuple[str, int, int, bool]
) -> None:
    p = plan_send_back("G", reconsume, requested, max_times)
    assert (p.topic, p.delay_level, p.reconsume_times, p.dead_letter) == expected


def test_retry_schedule_with_default_max() -> None:
    # retries 1..16 land at levels 3..18, the 17th failure goes to the DLQ
    levels = [plan_send_back("G", n, 0, 16).delay_level for n in range(16)]
    assert levels == list(range(3, 19))
    assert plan_send_back("G", 16, 0, 16).dead_letter
