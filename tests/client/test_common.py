"""Shared client checks (client/common.py): topic names the client refuses."""

from __future__ import annotations

import pytest
from kairosmq.client import (
    MessageError,
)
from kairosmq.client.common import check_topic


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "t/1"])
def test_check_topic_rejects(topic: str) -> None:
    with pytest.raises(MessageError):
        check_topic(topic)
