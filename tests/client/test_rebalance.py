"""Queue allocation (client/consumer/rebalance.py's allocate_averagely), a pure function."""

from __future__ import annotations

import pytest
from kairosmq.client import (
    MessageQueue,
)
from kairosmq.client.consumer.rebalance import allocate_averagely

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
