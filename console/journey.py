"""Message search by msgId or key, with the journey of each message found: sent ->
scheduled (a timer or a delay level, its due time) -> fired (its store time in the real
topic; lateness = store time - due time) -> consumed (per consumer group: the group's
committed offset is past the message's queue offset) -> retried (``%RETRY%<group>``
records carrying the UNIQ_KEY and ``ORIGIN_MESSAGE_ID``) -> dead-lettered
(``%DLQ%<group>``), and how late each scheduled step was.

Owns: composing the journey from calls the broker already serves, nothing new on the
broker: QUERY_MESSAGE (12) by UNIQ_KEY returns every record that carries the message's
msgId (its timer record in ``rmq_sys_wheel_timer`` or schedule record in
``SCHEDULE_TOPIC_XXXX``, the fired copy in the real topic, each retry's schedule record
and ``%RETRY%`` copy, the ``%DLQ%`` copy, an operator's reschedule or recall record);
KAIROS_BROWSE_PENDING (907) says whether it is still pending; GET_CONSUME_STATS (208)
per consumer group (the groups of ``views.groups``) says who consumed each delivered copy
(only groups with offsets on, or a subscription to, its topic are shown).

Invariants:
* Read-only; at most ``MAX_MESSAGES`` messages per search (a key names several), at most
  ``MAX_RECORDS`` records per message and ``MAX_GROUPS`` groups asked for offsets.
* A step's lateness is only given where the broker recorded a due time (the fired copy's
  ``KAIROS_TIMER_ORIGIN`` / ``KAIROS_DELIVER_MS``): it is never estimated.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.bodies import decode_mq_table
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import GetConsumeStatsRequestHeader, QueryMessageRequestHeader
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.pending import BrowsePendingRequestHeader
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RECALL_TARGET,
    RESCHEDULE_OF,
    TIMER_DELIVER_MS,
    TIMER_ORIGIN,
    UNIQ_KEY,
)

from . import views
from .http import HttpError

if TYPE_CHECKING:
    from .api import Brokers

MAX_MESSAGES = 10
MAX_RECORDS = 64
MAX_GROUPS = 200
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


def _int(value: str | None) -> int | None:
    if value is None or not value.lstrip("-").isdigit() or len(value) > 19:
        return None
    return int(value)


def _due_of_fired(m: MessageExt) -> int | None:
    """The due time a fired copy was scheduled for (its timer origin, else the delay
    level's deliver time)."""
    origin = m.properties.get(TIMER_ORIGIN)
    if origin:
        return _int(origin.split(":", 1)[0])
    return _int(m.properties.get(DELIVER_TIME))


def _step(m: MessageExt, step: str, **extra: Any) -> dict[str, Any]:
    return {
        "step": step,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset,
        "storeMs": m.store_timestamp,
        "reconsumeTimes": m.reconsume_times,
        **extra,
    }


def steps_of(records: list[MessageExt]) -> list[dict[str, Any]]:
    """The journey's steps of one message's records, in store order (consumption is
    added by ``journey``)."""
    out: list[dict[str, Any]] = []
    first = True
    for m in sorted(records, key=lambda r: (r.store_timestamp, r.commit_log_offset)):
        p = m.properties
        if m.topic == TIMER_TOPIC:
            due = _int(p.get(TIMER_DELIVER_MS))
            real = p.get(REAL_TOPIC, "")
            if p.get(RECALL_TARGET):
                out.append(_step(m, "recalled", realTopic=real))
                continue
            step = "rescheduled" if p.get(RESCHEDULE_OF) else "scheduled"
            if first and step == "scheduled":
                out.append(_step(m, "sent", realTopic=real, bornMs=m.born_timestamp))
            out.append(_step(m, step, kind="timer", dueMs=due, realTopic=real))
        elif m.topic == SCHEDULE_TOPIC:
            due = _int(p.get(DELIVER_TIME))
            real = p.get(REAL_TOPIC, "")
            retry = real.startswith(RETRY_PREFIX)
            if first and not retry:
                out.append(_step(m, "sent", realTopic=real, bornMs=m.born_timestamp))
            level = _int(p.get(DELAY))
            out.append(
                _step(
                    m,
                    "retry scheduled" if retry else "scheduled",
                    kind="level",
                    level=level,
                    dueMs=due,
                    realTopic=real,
                    group=real[len(RETRY_PREFIX) :] if retry else None,
                )
            )
        elif m.topic.startswith(DLQ_PREFIX):
            out.append(
                _step(
                    m,
                    "dead-lettered",
                    group=m.topic[len(DLQ_PREFIX) :],
                    originMsgId=p.get(ORIGIN_MESSAGE_ID),
                )
            )
        else:
            retry = m.topic.startswith(RETRY_PREFIX)
            due = _due_of_fired(m)
            if due is None and first:
                out.append(_step(m, "sent", realTopic=m.topic, bornMs=m.born_timestamp))
            name = "retried" if retry else ("fired" if due is not None else "stored")
            extra: dict[str, Any] = {}
            if due is not None:
                extra = {"dueMs": due, "latenessMs": m.store_timestamp - due}
            if retry:
                extra["group"] = m.topic[len(RETRY_PREFIX) :]
                extra["originMsgId"] = p.get(ORIGIN_MESSAGE_ID)
            out.append(_step(m, name, delivered=True, **extra))
        first = False
    return out


async def _records(brokers: Brokers, name: str | None, key: str, uniq: bool) -> list[MessageExt]:
    addr = await brokers.address(name)
    h = QueryMessageRequestHeader(key, "", MAX_RECORDS, unique_key_query="true" if uniq else None)
    resp = await brokers.raw(addr, R.QUERY_MESSAGE, h.to_ext_fields(), accept=views.ANY)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    if resp.code != ResponseCode.SUCCESS:
        raise views.BrokerError(resp.code, resp.remark or f"code {resp.code}")
    return decode_records(resp.body or b"")


async def _offsets(brokers: Brokers, addr: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, per (topic, queue), on the topics it has offsets on
    or subscribes to (GET_CONSUME_STATS, 208, without a topic: a group that never
    consumed a topic is not listed for it; QUERY_CONSUMER_OFFSET would answer 0 there,
    as RocketMQ does while the queue starts at 0)."""
    h = GetConsumeStatsRequestHeader(group)
    resp = await brokers.raw(addr, R.GET_CONSUME_STATS, h.to_ext_fields(), accept=views.ANY)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return {}
    table, _ = decode_mq_table(resp.body, "offsetTable")
    return {
        (mq.topic, mq.queue_id): int(v.get("consumerOffset", -1))
        for mq, v in table.items()
        if int(v.get("consumerOffset", -1)) >= 0
    }


async def journey(
    brokers: Brokers, name: str | None, msg_id: str | None, key: str | None
) -> dict[str, Any]:
    """The journeys of the message ``msg_id``, or of each message (by msgId) carrying
    ``key`` (at most ``MAX_MESSAGES``)."""
    if not msg_id and not key:
        raise HttpError(400, "give msgId or key")
    addr = await brokers.address(name)
    if msg_id:
        ids = [msg_id]
    else:
        found = await _records(brokers, name, str(key), uniq=False)
        ids = []
        for m in sorted(found, key=lambda r: r.store_timestamp):
            u = m.properties.get(UNIQ_KEY) or m.msg_id
            if u and u not in ids:
                ids.append(u)
    truncated = len(ids) > MAX_MESSAGES
    ids = ids[:MAX_MESSAGES]
    groups = [g["group"] for g in (await views.groups(brokers, name))["groups"]][:MAX_GROUPS]
    messages = []
    for uniq in ids:
        records = await _records(brokers, name, uniq, uniq=True)
        steps = steps_of(records)
        pend = (
            await brokers.call(
                name,
                R.KAIROS_BROWSE_PENDING,
                BrowsePendingRequestHeader(msg_id=uniq, limit=10).to_ext_fields(),
            )
            if await _kairosmq(brokers, addr)
            else {"rows": []}
        )
        pending = [
            {
                "step": "pending",
                "kind": r.get("kind"),
                "level": r.get("level"),
                "dueMs": r["dueMs"],
                "topic": r.get("topic"),
                "ref": r.get("ref"),
            }
            for r in pend.get("rows", [])
        ]
        consumed = await _consumed(brokers, addr, groups, steps)
        topic = next((s.get("realTopic") or s["topic"] for s in steps if s["step"] == "sent"), None)
        messages.append(
            {
                "msgId": uniq,
                "topic": topic,
                "keys": next((m.keys for m in records if m.keys), None),
                "steps": steps,
                "pending": pending,
                "consumed": consumed,
            }
        )
    return {"messages": messages, "truncated": truncated, "nowMs": int(time.time() * 1000)}


async def _kairosmq(brokers: Brokers, addr: str) -> bool:
    resp = await brokers.raw(addr, R.KAIROS_GET_BROKER_STATUS, {}, accept=views.ANY)
    return resp.code == ResponseCode.SUCCESS


async def _consumed(
    brokers: Brokers, addr: str, groups: list[str], steps: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per delivered copy and consumer group: whether the group's committed offset on the
    copy's queue is past it (a retry copy is only asked of its own group)."""
    asks: list[tuple[dict[str, Any], str]] = []
    for s in steps:
        if not s.get("delivered"):
            continue
        if s["topic"].startswith(RETRY_PREFIX):
            asks.append((s, s["topic"][len(RETRY_PREFIX) :]))
        else:
            asks += [(s, g) for g in groups]
    names = sorted({g for _s, g in asks})
    tables = dict(
        zip(
            names,
            await asyncio.gather(*(_offsets(brokers, addr, g) for g in names)),
            strict=True,
        )
    )
    out = []
    for s, g in asks:
        off = tables[g].get((s["topic"], s["queueId"]))
        if off is None:
            continue
        out.append(
            {
                "group": g,
                "topic": s["topic"],
                "queueId": s["queueId"],
                "queueOffset": s["queueOffset"],
                "committedOffset": off,
                "consumed": off > s["queueOffset"],
            }
        )
    return out
