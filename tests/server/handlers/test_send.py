"""Unit tests of SendMessageProcessor (server/handlers/send.py) on a real store and topic
table: what a send stores, where the %RETRY% -> %DLQ% rule sends it, and what a refused
send leaves behind (nothing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.naming import SCHEDULE_TOPIC, dlq_topic, retry_topic
from kairosmq.protocol.properties import (
    DELAY,
    MAX_RECONSUME_TIMES,
    REAL_TOPIC,
    RETRY_TOPIC,
    encode_properties,
)
from kairosmq.server.config import FlushMode
from kairosmq.server.handlers.send import SendMessageProcessor

from tests.helpers import send_ext
from tests.server.handlers.rig import Services, req


def _processor(s: Services) -> SendMessageProcessor:
    async def wait_flushed(end: int) -> bool:  # the real store's fsync, as the broker's is
        s.store.write_out()
        return await asyncio.to_thread(s.store.fsync) >= end

    return SendMessageProcessor(
        topics=s.topics,
        config=s.config,
        stats=s.stats,
        log=s.log,
        put=s.put,
        offset_msg_id=s.broker.put_path.offset_msg_id,
        wait_flushed=wait_flushed,
        clock_ms=s.store.clock_ms,
        ack_token=s.store.ack_token,
    )


def _send(
    s: Services,
    topic: str,
    body: bytes = b"hello",
    props: dict[str, str] | None = None,
    port: int = 40001,
    **extra: object,
) -> RemotingCommand:
    cmd = req(RequestCode.SEND_MESSAGE_V2, send_ext(topic, props, **extra), body)
    out = _processor(s).handle_send(s.conn(port), cmd)
    assert isinstance(out, RemotingCommand)
    return out


async def test_send_stores_the_message_with_the_born_host_port(services: Services) -> None:
    services.topics.create("T", 4)
    resp = _send(services, "T", b"hello", {"KEYS": "k1"}, port=45678)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["queueId"] == "0"
    [m] = services.messages("T", 0)
    assert m.body == b"hello" and m.properties["KEYS"] == "k1"
    assert m.born_host == (b"\x7f\x00\x00\x01", 45678)  # the peer's port, not 0
    assert resp.ext_fields["msgId"] == m.offset_msg_id
    assert services.stats.stored["T"] == 1


async def test_delayed_send_goes_to_the_schedule_topic(services: Services) -> None:
    services.topics.create("T", 4)
    resp = _send(services, "T", b"later", {DELAY: "2"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert services.messages("T", 0) == []
    [m] = services.messages(SCHEDULE_TOPIC, 1)  # level 2 -> queue 1
    assert m.properties[REAL_TOPIC] == "T" and m.body == b"later"
    assert services.stats.scheduled[2] == 1 and services.stats.stored["T"] == 0


async def test_retry_send_within_max_stays_in_retry_with_its_delay(services: Services) -> None:
    topic = retry_topic("G")
    resp = _send(
        services, topic, b"r", {DELAY: "3", MAX_RECONSUME_TIMES: "5"}, j=4
    )  # reconsumeTimes (V2 short name)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert services.topics.get(dlq_topic("G")) is None
    [m] = services.messages(SCHEDULE_TOPIC, 2)
    assert m.properties[REAL_TOPIC] == topic


async def test_retry_send_past_max_goes_to_the_dlq(services: Services) -> None:
    """The send path's rule is retry.plan_send_back's: reconsumeTimes >= max -> %DLQ%."""
    topic = retry_topic("G")
    resp = _send(services, topic, b"dead", {DELAY: "3", MAX_RECONSUME_TIMES: "2"}, j=2)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    [m] = services.messages(dlq_topic("G"), 0)
    assert m.body == b"dead" and DELAY not in m.properties
    assert m.properties[RETRY_TOPIC] == topic and m.reconsume_times == 2
    assert services.messages(SCHEDULE_TOPIC, 2) == []


async def test_unknown_topic_without_auto_create_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    s = Services(tmp_path, auto_create_topic=False)
    try:
        before = s.store.phy_range()
        resp = _send(s, "Nope")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in (resp.remark or "")
        assert s.stats.rejected == 1 and s.topics.get("Nope") is None
        assert s.store.phy_range() == before
    finally:
        s.close()


async def test_auto_create_from_tbw102(services: Services) -> None:
    resp = _send(services, "Fresh", d=2)  # defaultTopicQueueNums
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    cfg = services.topics.get("Fresh")
    assert cfg is not None and cfg.write_queue_nums == 2


async def test_oversized_body_and_system_topic_are_refused(services: Services) -> None:
    services.topics.create("T", 1)
    big = _send(services, "T", b"x" * (services.config.max_message_size + 1))
    assert big.code == ResponseCode.MESSAGE_ILLEGAL and "limit" in (big.remark or "")
    sys_topic = _send(services, SCHEDULE_TOPIC)
    assert sys_topic.code == ResponseCode.NO_PERMISSION
    assert services.messages("T", 0) == [] and services.stats.rejected == 2


async def test_batch_is_all_or_nothing(services: Services) -> None:
    services.topics.create("T", 1)
    proc = _processor(services)
    good = encode_batch([BatchItem(b"a"), BatchItem(b"b")])
    resp = proc.handle_send(
        services.conn(), req(RequestCode.SEND_BATCH_MESSAGE, send_ext("T"), good)
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert len(resp.ext_fields["msgId"].split(",")) == 2
    delayed = encode_batch(
        [BatchItem(b"c"), BatchItem(b"d", properties=encode_properties({DELAY: "1"}))]
    )
    resp = proc.handle_send(
        services.conn(), req(RequestCode.SEND_BATCH_MESSAGE, send_ext("T"), delayed)
    )
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "delay" in (resp.remark or "")
    assert [m.body for m in services.messages("T", 0)] == [b"a", b"b"]


async def test_sync_flush_answers_after_the_fsync(tmp_path: Path) -> None:
    s = Services(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    try:
        s.topics.create("T", 1)
        cmd = req(RequestCode.SEND_MESSAGE_V2, send_ext("T"), b"durable")
        pending = _processor(s).handle_send(s.conn(), cmd)
        assert not isinstance(pending, RemotingCommand)  # awaitable: the flush comes first
        resp = await pending
        assert resp.code == ResponseCode.SUCCESS
        assert s.store.commitlog.flushed_offset >= s.store.phy_range()[1]
    finally:
        s.close()
