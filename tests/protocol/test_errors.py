"""``errors.shown``: the one way a value is quoted in a remark (moved here with the function
from ``naming``)."""

from __future__ import annotations

from kairosmq.protocol import errors


def test_shown_truncates() -> None:
    text = errors.shown("x" * 10_000)
    assert len(text) < 100 and "10000 chars" in text
