"""Queue allocation and tag filtering (client/consumer/rebalance.py), pure functions."""

from __future__ import annotations

import pytest
from kairosmq.client import (
    MessageQueue,
)
from kairosmq.client.consumer.rebalance import allocate_averagely, tag_filter
from kairosmq.protocol.message import MessageExt

MQS = [MessageQueue("T", "b", i) for i in range(8)]


@pytest.mark.parametrize(
    ("n_mq", "n_cid", "sizes"),
    [(8, 3, [3, 3, 2]), (8, 2, [4, 4]), (3, 5, [1, 1, 1, 0, 0]), (4, 4, [1, 1, 1, 1]), (5, 1, [5])],
)
def test_allocate_averagely_splits_evenly_and_disjointly(
    n_mq: int, n_cid: int, sizes: list[int]
) -> None:
    mqs = MQS[:n_mq]
    cids = [f"10.0.0.{i}@1" for i in range(n_cid)]
    parts = [allocate_averagely(c, list(reversed(mqs)), cids[::-1]) for c in cids]
    assert [len(p) for p in parts] == sizes
    flat = [mq for p in parts for mq in p]
    assert sorted(flat) == sorted(mqs) and len(set(flat)) == len(flat)
    # consecutive ranges, like Java's AllocateMessageQueueAveragely
    assert parts[0] == sorted(mqs)[: sizes[0]]


def test_allocate_unknown_client_gets_nothing() -> None:
    assert allocate_averagely("x@1", MQS, ["a@1", "b@1"]) == []
    assert allocate_averagely("a@1", [], ["a@1"]) == []


def test_tag_filter() -> None:
    assert tag_filter("*") is None and tag_filter("") is None
    keep = tag_filter("TagA || TagB")
    assert keep is not None
    mk = lambda tags: MessageExt("T", b"x", properties={"TAGS": tags} if tags else {})  # noqa: E731
    assert keep(mk("TagA")) and keep(mk("TagB"))
    assert not keep(mk("TagC")) and not keep(mk(None))
