"""Topic names (server/tables/topics.py): which names the broker accepts and why it refuses the
rest."""

from __future__ import annotations

import pytest
from kairosmq.protocol.naming import validate_topic


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        ("TopicTest", None),
        ("%RETRY%G", None),
        ("%DLQ%CID_ALIONS_TEST", None),
        ("a|b-c_d09", None),
        ("x" * 127, None),
        ("", "blank"),
        ("   ", "blank"),
        ("x" * 128, "128"),
        ("bad topic", "outside"),
        ("a/b", "outside"),
        ("caf\u00e9", "outside"),
        ("T\n", "outside"),  # a trailing newline is not a valid character either
        ("a.b", "outside"),
    ],
)
def test_validate_topic(topic: str, error: str | None) -> None:
    reason = validate_topic(topic)
    if error is None:
        assert reason is None
    else:
        assert reason is not None and error in reason
