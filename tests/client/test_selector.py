"""The client-side tag re-check of a TAG subscription (client/consumer/selector.py's
tag_filter), a pure function."""

from __future__ import annotations

from kairosmq.client.consumer.selector import tag_filter
from kairosmq.protocol.message import MessageExt


def test_tag_filter() -> None:
    assert tag_filter("*") is None and tag_filter("") is None
    keep = tag_filter("TagA || TagB")
    assert keep is not None
    mk = lambda tags: MessageExt("T", b"x", properties={"TAGS": tags} if tags else {})  # noqa: E731
    assert keep(mk("TagA")) and keep(mk("TagB"))
    assert not keep(mk("TagC")) and not keep(mk(None))
