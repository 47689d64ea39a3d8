"""The process queue (client/consumer/process_queue.py): commit offsets, flow control,
orderly take."""

from __future__ import annotations

from kairosmq.client import MessageQueue
from kairosmq.client.consumer.process_queue import ProcessQueue
from kairosmq.protocol.message import MessageExt

MQS = [MessageQueue("T", "b", i) for i in range(8)]


def _msgs(*offsets: int) -> list[MessageExt]:
    return [MessageExt("T", b"x", queue_offset=o) for o in offsets]


def test_commit_offset_never_skips_unfinished_messages() -> None:
    pq = ProcessQueue(MQS[0], next_offset=10)
    m = _msgs(10, 11, 12, 13)
    pq.put(m, next_offset=14)
    assert pq.commit_offset == 10
    assert pq.remove([m[1], m[3]]) == 10  # 10 still in flight
    assert pq.remove([m[0]]) == 12
    assert pq.remove([m[2]]) == 14  # nothing in flight: the next pull offset
    assert pq.msg_count == 0


def test_commit_offset_moves_past_filtered_and_empty_pulls_but_never_back() -> None:
    pq = ProcessQueue(MQS[0], next_offset=0)
    pq.put([], next_offset=5)  # five messages filtered out by tag
    assert pq.commit_offset == 5
    pq.put(_msgs(5), next_offset=6)
    assert pq.commit_offset == 5
    pq.put([], next_offset=3)  # a stale smaller next offset is ignored
    assert pq.next_offset == 6


async def test_flow_control_blocks_at_threshold() -> None:
    pq = ProcessQueue(MQS[0], 0, threshold=2)
    m = _msgs(0, 1)
    pq.put(m, 2)
    assert not pq._space.is_set()
    pq.remove(m[:1])
    await pq.wait_for_space()  # returns at once now


def test_orderly_take_and_give_back_keep_queue_order() -> None:
    pq = ProcessQueue(MQS[0], 0)
    pq.put(_msgs(0, 1, 2, 3, 4), 5, orderly=True)
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.give_back(first)
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert [m.queue_offset for m in pq.take(3)] == [3, 4]
    assert not pq.has_pending
