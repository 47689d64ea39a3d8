"""Unit tests of ConsumerSendMsgBackProcessor (server/handlers/send_back.py) on a real
store: a given-back message is copied into %RETRY% through the delay path, or into %DLQ%
past its max; a client-given offset that is not a record start is refused."""

from __future__ import annotations

import inspect
from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import SCHEDULE_TOPIC, dlq_topic, retry_topic
from kairosmq.protocol.properties import (
    DELAY,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RETRY_TOPIC,
    UNIQ_KEY,
)
from kairosmq.server.handlers.send_back import ConsumerSendMsgBackProcessor

from tests.server.handlers.rig import Services, req


async def _send_back(
    s: Services, offset: int, delay_level: int = 0, **extra: Any
) -> RemotingCommand:
    """A send-back, answered as the broker answers it (after a new topic's write)."""
    proc = ConsumerSendMsgBackProcessor(
        reads=s.store, topics=s.topics, config=s.config, stats=s.stats, log=s.log, put=s.put
    )
    ext: dict[str, Any] = {
        "offset": offset,
        "group": "G",
        "delayLevel": delay_level,
        "originMsgId": "",
        "originTopic": "T",
    }
    ext.update(extra)
    answer = s.guarded(proc.handle_send_back)(
        s.conn(), req(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
    )
    return await answer if inspect.isawaitable(answer) else answer


async def test_send_back_schedules_a_retry_copy(services: Services) -> None:
    r = services.store_message("T", b"payload", props={UNIQ_KEY: "U1", "KEYS": "k"})
    services.store.write_out()
    resp = await _send_back(services, r.phy_offset)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    [m] = services.messages(SCHEDULE_TOPIC, 2)  # level 3 + 0 reconsumes -> queue 2
    p = m.properties
    assert m.body == b"payload" and m.reconsume_times == 1
    assert p[REAL_TOPIC] == retry_topic("G") and p[RETRY_TOPIC] == "T"
    assert p[UNIQ_KEY] == "U1" and p[ORIGIN_MESSAGE_ID] == "U1" and p["KEYS"] == "k"
    assert services.stats.redelivered["G"] == 1


async def test_send_back_past_max_goes_to_the_dlq(services: Services) -> None:
    r = services.store_message("T", b"tired")
    services.store.write_out()
    resp = await _send_back(services, r.phy_offset, maxReconsumeTimes=0)  # 0 >= 0: dead
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    [m] = services.messages(dlq_topic("G"), 0)
    assert m.body == b"tired" and DELAY not in m.properties
    assert services.stats.dead_lettered["G"] == 1 and services.stats.redelivered["G"] == 0
    negative = services.store_message("T", b"now")
    services.store.write_out()
    assert (await _send_back(services, negative.phy_offset, delay_level=-1)).code == 0
    assert [m.body for m in services.messages(dlq_topic("G"), 0)] == [b"tired", b"now"]


async def test_an_offset_inside_a_record_is_refused(services: Services) -> None:
    r = services.store_message("T", b"x" * 64)
    services.store.write_out()
    resp = await _send_back(services, r.phy_offset + 8)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "offset" in (resp.remark or "")
    assert services.topics.get(retry_topic("G")) is None
    bad_group = await _send_back(services, r.phy_offset, group="a/b")
    assert bad_group.code == ResponseCode.SYSTEM_ERROR and services.stats.rejected == 1
