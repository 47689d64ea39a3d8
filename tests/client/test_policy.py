"""Pure client policy: allocation, tag checks, error mapping, process-queue offsets, messages."""

from __future__ import annotations

import pytest
from kairosmq.client import (
    BrokerError,
    ClientStateError,
    ConnectionClosed,
    Message,
    MessageError,
    MessageQueue,
    MessageTooLarge,
    Producer,
    RequestTimeout,
    hash_selector,
)
from kairosmq.client.common import check_topic
from kairosmq.client.errors import (
    BrokerSystemError,
    MessageIllegal,
    SubscriptionError,
    TopicNotExist,
)
from kairosmq.client.message import wire_properties
from kairosmq.client.process_queue import ProcessQueue
from kairosmq.client.rebalance import allocate_averagely, tag_filter
from kairosmq.protocol.headers import SendMessageRequestHeader
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.properties import decode_properties

MQS = [MessageQueue("T", "b", i) for i in range(8)]


# ------------------------------------------------------------------ allocation


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


# ------------------------------------------------------------------ errors


def test_for_code_maps_codes_to_classes_and_retriable_flags() -> None:
    cases = {1: BrokerSystemError, 13: MessageIllegal, 17: TopicNotExist, 24: SubscriptionError}
    for code, cls in cases.items():
        err = BrokerError.for_code(code, "why", "1.2.3.4:10911")
        assert type(err) is cls and err.code == code and err.remark == "why"
        assert "1.2.3.4:10911" in str(err) and "why" in str(err)
    assert BrokerError.for_code(17).retriable and BrokerError.for_code(14).retriable
    assert not BrokerError.for_code(13).retriable
    unknown = BrokerError.for_code(999)
    assert type(unknown) is BrokerError and not unknown.retriable
    assert ConnectionClosed("a:1").retriable and RequestTimeout("a:1", 10, 1.0).retriable
    assert not MessageTooLarge(2, 1).retriable


# ------------------------------------------------------------------ process queue


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


# ------------------------------------------------------------------ messages and producer checks


def test_wire_properties_carry_system_fields_and_user_props() -> None:
    msg = Message("T", "hé", tags="TagA", keys=["k1", "k2"], delay_level=3,
                  properties={"color": "red", "empty": ""})
    assert msg.body == "hé".encode()
    props = decode_properties(wire_properties(msg, "ABC"))
    assert props == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3",
                     "UNIQ_KEY": "ABC", "WAIT": "true"}


def test_send_header_parses_as_v2_header() -> None:
    p = Producer("PG", "127.0.0.1:1")
    mq = MessageQueue("T", "broker-a", 2)
    ext = p._header(mq, "T", 0, 7, "TAGS\x01A", batch=True)
    h = SendMessageRequestHeader.from_ext_fields(ext, v2=True)
    assert (h.producer_group, h.topic, h.queue_id, h.flag, h.batch, h.broker_name) == (
        "PG", "T", 2, 7, True, "broker-a")
    assert h.properties == "TAGS\x01A" and h.default_topic == "TBW102"


def test_hash_selector_is_stable_and_in_range() -> None:
    queues = MQS[:4]
    assert hash_selector(queues, None, "order-1") == hash_selector(queues, None, "order-1")
    assert hash_selector(queues, None, 6) == queues[2]
    assert {hash_selector(queues, None, f"o{i}") for i in range(40)} == set(queues)


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "t/1"])
def test_check_topic_rejects(topic: str) -> None:
    with pytest.raises(MessageError):
        check_topic(topic)


async def test_client_side_checks_run_before_any_io() -> None:
    p = Producer("PG", "127.0.0.1:1", max_message_size=10)
    with pytest.raises(MessageTooLarge, match="exceeds max_message_size 10"):
        await p.send(Message("T", b"x" * 11))
    with pytest.raises(ClientStateError):
        await p.send(Message("T", b"x"))
    await p.start()
    try:
        with pytest.raises(MessageError, match="delay level is not supported for batching"):
            await p.send_batch([Message("T", b"a"), Message("T", b"b", delay_level=2)])
        with pytest.raises(MessageError, match="one topic"):
            await p.send_batch([Message("T", b"a"), Message("U", b"b")])
        with pytest.raises(MessageTooLarge):
            await p.send_batch([Message("T", b"aaaa"), Message("T", b"bbbb")])
        with pytest.raises(MessageError):
            await p.send_batch([])
    finally:
        await p.shutdown()


def test_retry_queue_choice_avoids_the_broker_that_failed() -> None:
    p = Producer("PG", "127.0.0.1:1")
    queues = [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0)]
    assert {p._pick(queues, "a").broker_name for _ in range(6)} == {"b"}
    assert {p._pick(queues, None) for _ in range(3)} == set(queues)  # round robin
    only_a = queues[:2]
    assert p._pick(only_a, "a") in only_a  # a single broker: another queue of it
