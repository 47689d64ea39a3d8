"""Unit tests of ConsumerManageProcessor and QueueOffsetProcessor
(server/handlers/offsets.py) on a real store and offset table."""

from __future__ import annotations

from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.handlers.offsets import ConsumerManageProcessor, QueueOffsetProcessor

from tests.server.handlers.rig import Services, req


def _consumer(s: Services, code: int, **ext: Any) -> RemotingCommand:
    proc = ConsumerManageProcessor(reads=s.store, topics=s.topics, offsets=s.offsets, log=s.log)
    handler = (
        proc.handle_query_consumer_offset
        if code == RequestCode.QUERY_CONSUMER_OFFSET
        else proc.handle_update_consumer_offset
    )
    base = {"consumerGroup": "G", "topic": "T", "queueId": 0}
    return s.guarded(handler)(s.conn(), req(code, {**base, **ext}))


async def test_query_update_consumer_offset(services: Services) -> None:
    services.topics.create("T", 4)
    q = RequestCode.QUERY_CONSUMER_OFFSET
    assert _consumer(services, q).code == ResponseCode.QUERY_NOT_FOUND
    services.store_message("T", b"x")
    fresh = _consumer(services, q)  # a fresh queue whose first message is at 0
    assert fresh.code == ResponseCode.SUCCESS and fresh.ext_fields["offset"] == "0"
    u = RequestCode.UPDATE_CONSUMER_OFFSET
    assert _consumer(services, u, commitOffset=7).code == ResponseCode.SUCCESS
    assert _consumer(services, q).ext_fields["offset"] == "7"
    assert _consumer(services, u, commitOffset=-1).code == ResponseCode.SUCCESS  # ignored
    assert services.offsets.query("G", "T", 0) == 7
    out_of_range = _consumer(services, u, queueId=4, commitOffset=1)
    assert out_of_range.code == ResponseCode.SYSTEM_ERROR and "queueId" in out_of_range.remark


async def test_queue_offsets_and_search_by_time(services: Services) -> None:
    times = iter(range(1_000, 100_000, 1_000))
    services.store.clock_ms = lambda: next(times)  # store times 1000, 2000, ...
    for i in range(10):
        services.store_message("T", f"m{i}".encode())
    proc = QueueOffsetProcessor(reads=services.store, topics=services.topics)
    conn = services.conn()

    def ask(handler: Any, code: int, **ext: Any) -> RemotingCommand:
        return services.guarded(handler)(conn, req(code, {"topic": "T", "queueId": 0, **ext}))

    assert ask(proc.handle_get_max_offset, RequestCode.GET_MAX_OFFSET).ext_fields["offset"] == "10"
    assert ask(proc.handle_get_min_offset, RequestCode.GET_MIN_OFFSET).ext_fields["offset"] == "0"
    earliest = ask(proc.handle_earliest_msg_storetime, RequestCode.GET_EARLIEST_MSG_STORETIME)
    assert earliest.ext_fields["timestamp"] == "1000"
    for ts, want in ((500, 0), (4_000, 3), (4_500, 4), (99_000, 9)):
        found = ask(proc.handle_search_offset, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=ts)
        assert found.ext_fields["offset"] == str(want), ts
