"""Operator requests behind ``kairosmq admin``: message query by msgId/key, consumer groups
and lag, the schedule backlog, DLQ resend and broker status.

Owns: QUERY_MESSAGE (12, RocketMQ's: answers concatenated records like the Java broker;
``topic`` may be empty for any topic) and the kairosmq 900-range codes, whose bodies are
plain JSON objects (see ``protocol/codes.py``).

Invariants:
* Read-only except KAIROS_RESEND_DLQ. Index hits are verified by reading the record, so
  a hash collision or a stale entry never yields a wrong message.
* DLQ resend progress is the group's own consumer offset on ``%DLQ%<group>`` (consumers
  never read the DLQ), committed per message after its re-put succeeded: a message is
  resent at most once per request, and a failure that may pass (topic gone, store
  refusing) stops the request where it failed. Dead letters read with the store's
  checked read; one that can never be resent (unreadable, or a RETRY_TOPIC that is not
  an existing user topic: ``SCHEDULE_TOPIC_XXXX`` would loop forever) is skipped with
  its reason in ``skipped`` (``message.resend_skipped``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ResendDlqRequestHeader,
)
from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.protocol.naming import group_of_dlq_topic, group_of_retry_topic
from kairosmq.protocol.properties import KEYS, RETRY_TOPIC, UNIQ_KEY

from .. import ingress
from ..requeue import requeue, resend_target
from ..store import PutStatus
from ..store.commitlog import RecordProblem
from ..store.index import KIND_KEY, KIND_UNIQ
from ..topics import dlq_topic, retry_topic

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
MAX_QUERY = 64
MAX_RESEND = 10_000


def _json(cmd: RemotingCommand, data: Any) -> RemotingCommand:
    return cmd.response(body=orjson.dumps(data))


def _matches(m: MessageExt, kind: str, key: str) -> bool:
    if kind == KIND_UNIQ:
        return m.properties.get(UNIQ_KEY) == key
    return key in (m.properties.get(KEYS) or "").split(" ")


def handle_query_message(broker: Broker, conn: Connection,
                         cmd: RemotingCommand) -> RemotingCommand:
    h = QueryMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_query_message(h)
    kind = KIND_UNIQ if cmd.ext_fields.get(UNIQUE_KEY_QUERY) == "true" else KIND_KEY
    want = max(1, min(h.max_num, MAX_QUERY))
    end_ts = h.end_timestamp if h.end_timestamp > 0 else 1 << 62
    found: list[bytes] = []
    for phy in broker.index.lookup(kind, h.key, limit=want * 4):
        record = broker.store.read_at(phy)
        if record is None:
            continue
        try:
            m = decode_record(record)
        except MessageDecodeError:
            continue
        if (m.commit_log_offset == phy and _matches(m, kind, h.key)
                and (not h.topic or m.topic == h.topic)
                and h.begin_timestamp <= m.store_timestamp <= end_ts):
            found.append(record)
            if len(found) >= want:
                break
    if not found:
        what = "msgId" if kind == KIND_UNIQ else "key"
        return cmd.error(ResponseCode.QUERY_NOT_FOUND, f"no message with {what} {h.key!r}"
                         + (f" in topic {h.topic}" if h.topic else ""))
    header = QueryMessageResponseHeader(
        index_last_update_timestamp=int(time.time() * 1000),
        index_last_update_phyoffset=broker.index.end_phy)
    return cmd.response(ext_fields=header.to_ext_fields(), body=b"".join(found))


def _lag_rows(broker: Broker, group: str) -> list[dict[str, Any]]:
    table = broker.offsets.table.get(group, {})
    topics = set(table)
    info = broker.clients.consumers.get(group)
    if info is not None:
        topics.update(info.subscriptions)
    topics.update(t for t in (retry_topic(group), dlq_topic(group)) if t in broker.topics.topics)
    rows: list[dict[str, Any]] = []
    for topic in sorted(topics):
        cfg = broker.topics.get(topic)
        qids = set(table.get(topic, {}))
        if cfg is not None:
            qids.update(range(cfg.read_queue_nums))
        for qid in sorted(qids):
            lo, hi = broker.store.min_offset(topic, qid), broker.store.max_offset(topic, qid)
            committed = broker.offsets.query(group, topic, qid)
            start = lo if committed is None or committed < 0 else max(committed, lo)
            rows.append({"topic": topic, "queueId": qid, "brokerOffset": hi, "minOffset": lo,
                         "consumerOffset": committed, "lag": max(0, hi - start)})
    return rows


def _known_groups(broker: Broker) -> set[str]:
    """Groups with offsets, online clients, or a retry/DLQ topic."""
    groups = set(broker.offsets.table) | set(broker.clients.consumers)
    for topic in broker.topics.topics:
        group = group_of_retry_topic(topic) or group_of_dlq_topic(topic)
        if group:
            groups.add(group)
    return groups


def handle_consumer_groups(broker: Broker, conn: Connection,
                           cmd: RemotingCommand) -> RemotingCommand:
    out = []
    for group in sorted(_known_groups(broker)):
        info = broker.clients.consumers.get(group)
        rows = _lag_rows(broker, group)
        dlq = dlq_topic(group)
        out.append({
            "group": group,
            "online": len(info.clients) if info else 0,
            "messageModel": info.message_model if info else None,
            "subscriptions": sorted(info.subscriptions) if info else [],
            "lag": sum(r["lag"] for r in rows if r["topic"] != dlq),
            "dlq": sum(r["lag"] for r in rows if r["topic"] == dlq),
        })
    return _json(cmd, {"groups": out})


def handle_consumer_lag(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_group(h.consumer_group, "consumerGroup")
    g = h.consumer_group
    if g not in _known_groups(broker):
        return cmd.error(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"consumer group {g} has no offsets, clients or retry/DLQ topics")
    rows = _lag_rows(broker, g)
    return _json(cmd, {"group": g, "queues": rows, "lag": sum(
        r["lag"] for r in rows if r["topic"] != dlq_topic(g))})


def handle_schedule_backlog(broker: Broker, conn: Connection,
                            cmd: RemotingCommand) -> RemotingCommand:
    levels = []
    for level, (pending, due) in sorted(broker.schedule.backlog().items()):
        levels.append({
            "level": level, "delayMs": broker.config.delay_levels_ms[level - 1],
            "pending": pending, "nextDueMs": due,
            "scheduled": broker.stats.scheduled.get(level, 0),
            "delivered": broker.stats.lateness[level].total
            if level in broker.stats.lateness else 0,
        })
    return _json(cmd, {"nowMs": broker.store.clock_ms(), "levels": levels})


def handle_resend_dlq(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ResendDlqRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_group(h.consumer_group, "consumerGroup")
    group, dlq = h.consumer_group, dlq_topic(h.consumer_group)
    cfg = broker.topics.get(dlq)
    if cfg is None:
        return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"group {group} has no dead letters")
    budget = max(0, min(h.max_num, MAX_RESEND))
    resent: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    error = None
    for qid in range(cfg.read_queue_nums):
        cq = broker.store.find_queue(dlq, qid)
        if cq is None:
            continue
        committed = broker.offsets.query(group, dlq, qid)
        off = max(committed if committed is not None and committed >= 0 else 0, cq.min_offset)
        while off < cq.max_offset and len(resent) < budget and error is None:
            outcome = _resend_one(broker, group, cq.get(off), h.to_retry_topic, resent)
            if isinstance(outcome, _Stop):
                error = outcome.reason
                break
            if outcome is not None:  # never resendable: pass over it, say why
                skipped.append(outcome)
                broker.log.warning("message.resend_skipped", group=group,
                                   msg_id=outcome["msgId"], reason=outcome["reason"])
            off += 1
            broker.offsets.commit(group, dlq, qid, off)
    remaining = sum(r["lag"] for r in _lag_rows(broker, group) if r["topic"] == dlq)
    return _json(cmd, {"group": group, "resent": resent, "skipped": skipped,
                       "remaining": remaining, "error": error})


class _Stop:
    """A failure that may pass (the topic is re-created, the disk has room): stop here."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _resend_one(broker: Broker, group: str, unit: tuple[int, int, int] | None, to_retry: bool,
                resent: list[dict[str, Any]]) -> _Stop | dict[str, Any] | None:
    """Re-put one dead letter. None: resent (or its record is gone); a dict: skipped for
    good (msgId, offset, reason); ``_Stop``: failed now, stop the request here."""
    if unit is None:
        return None
    record = broker.store.read_record(unit[0])  # checked: size cap, magic, CRC, start
    if record is RecordProblem.OUT_OF_RANGE:
        return None  # removed by retention (or rolled back): nothing left to resend
    if isinstance(record, RecordProblem):
        return {"msgId": None, "offset": unit[0], "reason": record.value}
    try:
        m = decode_record(record)
    except MessageDecodeError as err:
        return {"msgId": None, "offset": unit[0], "reason": f"unreadable: {err}"}
    target, why = resend_target(group, m.properties.get(RETRY_TOPIC), to_retry)
    if target is None:
        return {"msgId": m.msg_id, "offset": unit[0], "reason": why}
    if to_retry:
        tcfg, _ = broker.topics.ensure(target, broker.config.retry_queue_nums)
    else:
        maybe = broker.topics.get(target)
        if maybe is None:
            return _Stop(f"original topic {target} of {m.msg_id} no longer exists")
        tcfg = maybe
    msg = requeue(m, target, m.commit_log_offset % max(1, tcfg.write_queue_nums),
                  reconsume_times=0, drop=() if to_retry else (RETRY_TOPIC,))
    result = broker.put_message(msg)
    if result.status is not PutStatus.PUT_OK:
        return _Stop(f"storing {m.msg_id} in {target} failed: "
                     f"{result.remark or result.status.value}")
    resent.append({"msgId": m.msg_id, "topic": target, "queueId": msg.queue_id,
                   "queueOffset": result.queue_offset})
    return None


def handle_broker_status(broker: Broker, conn: Connection,
                         cmd: RemotingCommand) -> RemotingCommand:
    log = broker.store.commitlog
    return _json(cmd, {
        "running": broker.running, "address": broker.address,
        "namesrvAddress": broker.namesrv_address, "brokerName": broker.config.broker_name,
        "uptimeMs": round(broker.uptime_ms),
        "connections": len(broker.server.connections), "heldPulls": broker.pull_holds.held,
        "commitLogMinOffset": log.min_offset, "commitLogMaxOffset": log.max_offset,
        "topics": len(broker.topics.topics), "indexEndOffset": broker.index.end_phy,
        # supervised services (server/supervise.py): state, failures, last error
        "services": broker.supervisor.status(), "degraded": broker.supervisor.degraded,
    })
