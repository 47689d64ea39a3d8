"""Producer checks without a broker (client/producer/producer.py): send header, hash selector,
client-side validation before any I/O, retry queue choice."""

from __future__ import annotations

import pytest
from kairosmq.client import (
    ClientStateError,
    Message,
    MessageError,
    MessageQueue,
    MessageTooLarge,
    Producer,
    SendRequest,
    hash_selector,
)
from kairosmq.protocol.headers import SendMessageRequestHeader

MQS = [MessageQueue("T", "b", i) for i in range(8)]


def test_send_header_parses_as_v2_header() -> None:
    p = Producer("PG", "127.0.0.1:1")
    mq = MessageQueue("T", "broker-a", 2)
    req = SendRequest("T", b"x", "ID", "TAGS\x01A", flag=7, batch=True)
    ext = p._header(req, mq)
    h = SendMessageRequestHeader.from_ext_fields(ext, v2=True)
    assert (h.producer_group, h.topic, h.queue_id, h.flag, h.batch, h.broker_name) == (
        "PG",
        "T",
        2,
        7,
        True,
        "broker-a",
    )
    assert h.properties == "TAGS\x01A" and h.default_topic == "TBW102"


def test_hash_selector_is_stable_and_in_range() -> None:
    queues = MQS[:4]
    assert hash_selector(queues, None, "order-1") == hash_selector(queues, None, "order-1")
    assert hash_selector(queues, None, 6) == queues[2]
    assert {hash_selector(queues, None, f"o{i}") for i in range(40)} == set(queues)


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
