"""Unit tests of KairosAdminProcessor (server/handlers/admin/kairos.py): consumer groups and
lag, the schedule backlog, and DLQ resend (progress as the group's offset on its DLQ,
unresendable letters skipped with a reason), on the broker's real services."""

from __future__ import annotations

from typing import Any

import orjson
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.naming import SCHEDULE_TOPIC, dlq_topic
from kairosmq.protocol.properties import DELAY, RETRY_TOPIC, UNIQ_KEY
from kairosmq.server.handlers.admin.kairos import KairosAdminProcessor
from kairosmq.server.put.kind import MessageKind

from tests.server.handlers.rig import Services, req


def _processor(s: Services) -> KairosAdminProcessor:
    b = s.broker
    return KairosAdminProcessor(
        reads=s.store,
        topics=s.topics,
        offsets=s.offsets,
        clients=s.clients,
        backlog=b.schedule.backlog,
        stats=s.stats,
        put=s.put,
        status=b.status,
        config=s.config,
        log=s.log,
        clock_ms=s.store.clock_ms,
    )


def _call(s: Services, name: str, code: int, **ext: Any) -> Any:
    resp = s.guarded(getattr(_processor(s), name))(s.conn(), req(code, ext))
    return resp.code, (orjson.loads(resp.body) if resp.body else resp.remark)


async def test_groups_and_lag(services: Services) -> None:
    for i in range(5):
        services.store_message("T", b"m%d" % i)
    services.offsets.commit("G", "T", 0, 2)
    code, groups = _call(services, "handle_consumer_groups", RequestCode.KAIROS_GET_CONSUMER_GROUPS)
    assert code == ResponseCode.SUCCESS
    assert [(g["group"], g["lag"], g["dlq"]) for g in groups["groups"]] == [("G", 3, 0)]
    code, lag = _call(
        services, "handle_consumer_lag", RequestCode.KAIROS_GET_CONSUMER_LAG, consumerGroup="G"
    )
    assert lag["lag"] == 3
    row = next(r for r in lag["queues"] if r["queueId"] == 0)
    assert (row["brokerOffset"], row["consumerOffset"]) == (5, 2)
    code, remark = _call(
        services,
        "handle_consumer_lag",
        RequestCode.KAIROS_GET_CONSUMER_LAG,
        consumerGroup="Unknown",
    )
    assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


async def test_schedule_backlog_counts_pending(services: Services) -> None:
    services.store_message("T", b"later", props={DELAY: "3"}, kind=MessageKind.DELAYED)
    code, backlog = _call(
        services, "handle_schedule_backlog", RequestCode.KAIROS_GET_SCHEDULE_BACKLOG
    )
    level3 = next(lv for lv in backlog["levels"] if lv["level"] == 3)
    assert level3["pending"] == 1 and level3["scheduled"] == 1
    assert level3["nextDueMs"] >= backlog["nowMs"] - 1000
    assert services.store.max_offset(SCHEDULE_TOPIC, 2) == 1


async def test_resend_dlq_resends_once_and_skips_the_unresendable(services: Services) -> None:
    services.topics.create("T", 1)
    dlq = dlq_topic("G")
    services.store_message(
        dlq, b"good", props={RETRY_TOPIC: "T", UNIQ_KEY: "U1"}, kind=MessageKind.DLQ
    )
    services.store_message(dlq, b"loop", props={RETRY_TOPIC: SCHEDULE_TOPIC}, kind=MessageKind.DLQ)
    services.store.write_out()
    code, out = _call(
        services, "handle_resend_dlq", RequestCode.KAIROS_RESEND_DLQ, consumerGroup="G", maxNum=10
    )
    assert code == ResponseCode.SUCCESS and out["error"] is None
    assert [r["msgId"] for r in out["resent"]] == ["U1"] and out["remaining"] == 0
    assert len(out["skipped"]) == 1 and out["skipped"][0]["reason"]
    [m] = services.messages("T", 0)
    assert m.body == b"good" and RETRY_TOPIC not in m.properties
    assert services.offsets.query("G", dlq, 0) == 2
    code, again = _call(
        services, "handle_resend_dlq", RequestCode.KAIROS_RESEND_DLQ, consumerGroup="G", maxNum=10
    )
    assert again["resent"] == [] and len(services.messages("T", 0)) == 1


async def test_broker_status_is_the_brokers(services: Services) -> None:
    code, status = _call(services, "handle_broker_status", RequestCode.KAIROS_GET_BROKER_STATUS)
    assert code == ResponseCode.SUCCESS
    assert status["brokerName"] == services.config.broker_name and status["running"] is False
    assert status["commitLogMaxOffset"] == services.store.phy_range()[1]
