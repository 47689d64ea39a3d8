"""Operator requests behind ``kairosmq admin``: consumer groups and lag, the schedule
backlog, DLQ resend and broker status (the kairosmq 900-range codes, whose bodies are
plain JSON objects; see ``protocol/codes.py``).

Owns: ``KairosAdminProcessor`` (services: store reads, topic table, offset table, client
registry, the scheduler's backlog, stats, the put path, the broker's status snapshot,
log, config values and the broker clock) and ``known_groups``.

Invariants:
* Read-only except KAIROS_RESEND_DLQ (KAIROS_BROWSE_DLQ pages dead letters, bodies
  included for an export, and changes nothing).
* A resend of one row (``queueId``/``queueOffset``) re-puts that dead letter only; it
  is refused once the group's resend progress passed it, and moves the progress on when
  it is the next one; one further on leaves the progress as it is (a later bulk resend
  sends it again: the progress is one offset per queue, not a set).
* A resend with ``delayMs`` stores each dead letter as a timer due that long after the
  resend (the TIMER kind of the put path), so it is delivered then, not at once.
* DLQ resend progress is the group's own consumer offset on ``%DLQ%<group>`` (consumers
  never read the DLQ), committed per message after its re-put succeeded: a message is
  resent at most once per request, and a failure that may pass (topic gone, store
  refusing) stops the request where it failed. Dead letters read with the store's
  checked read; one that can never be resent (unreadable, or a RETRY_TOPIC that is not
  an existing user topic: ``SCHEDULE_TOPIC_XXXX`` would loop forever) is skipped with
  its reason in ``skipped`` (``message.resend_skipped``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: JSON values; structlog's logger (dynamic methods)

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError, shown
from kairosmq.protocol.headers import (
    BrowseDlqRequestHeader,
    ConsumerGroupRequestHeader,
    ResendDlqRequestHeader,
)
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.naming import (
    dlq_topic,
    group_of_dlq_topic,
    group_of_retry_topic,
    retry_topic,
)
from kairosmq.protocol.properties import INT64_DIGITS, RETRY_TOPIC, parse_decimal_pair

from ...observe.stats import LatenessHistogram
from ...put.kind import MessageKind
from ...put.requeue import requeue, resend_target
from ...remoting import ingress
from ...remoting.ingress import Rejected
from ...store import PutResult, PutStatus
from ...store.commitlog import RecordProblem
from ...tables.topics import TopicTableFull

if TYPE_CHECKING:
    from ...config import BrokerConfig
    from ...observe.stats import BrokerStats
    from ...remoting.transport import Connection
    from ...store.message_store import MessageStore
    from ...tables.clients import ClientRegistry
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager

MAX_RESEND = 10_000
MAX_DLQ_PAGE = 1_000  # dead letters per KAIROS_BROWSE_DLQ page at most


def _json(cmd: RemotingCommand, data: Any) -> RemotingCommand:
    return cmd.response(body=orjson.dumps(data))


def known_groups(
    offsets: ConsumerOffsetManager, clients: ClientRegistry, topics: TopicConfigManager
) -> set[str]:
    """Groups with offsets, online clients, or a retry/DLQ topic."""
    groups = set(offsets.table) | set(clients.consumers)
    for topic in topics.topics:
        group = group_of_retry_topic(topic) or group_of_dlq_topic(topic)
        if group:
            groups.add(group)
    return groups


class _Stop:
    """A failure that may pass (the topic is re-created, the disk has room): stop here."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class KairosAdminProcessor:
    """KAIROS_GET_CONSUMER_GROUPS, KAIROS_GET_CONSUMER_LAG, KAIROS_GET_SCHEDULE_BACKLOG,
    KAIROS_RESEND_DLQ, KAIROS_BROWSE_DLQ and KAIROS_GET_BROKER_STATUS."""

    def __init__(
        self,
        *,
        reads: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        backlog: Callable[[], dict[int, tuple[int, int | None]]],
        stats: BrokerStats,
        put: Callable[..., PutResult],
        status: Callable[[], dict[str, Any]],
        config: BrokerConfig,
        log: Any,
        clock_ms: Callable[[], int],
    ) -> None:
        self.reads = reads
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.backlog = backlog
        self.stats = stats
        self.put = put
        self.status = status
        self.config = config
        self.log = log
        self.clock_ms = clock_ms

    def _lag_rows(self, group: str) -> list[dict[str, Any]]:
        table = self.offsets.table.get(group, {})
        topics = set(table)
        info = self.clients.consumers.get(group)
        if info is not None:
            topics.update(info.subscriptions)
        topics.update(t for t in (retry_topic(group), dlq_topic(group)) if t in self.topics.topics)
        rows: list[dict[str, Any]] = []
        for topic in sorted(topics):
            cfg = self.topics.get(topic)
            qids = set(table.get(topic, {}))
            if cfg is not None:
                qids.update(range(cfg.read_queue_nums))
            for qid in sorted(qids):
                lo, hi = self.reads.min_offset(topic, qid), self.reads.max_offset(topic, qid)
                committed = self.offsets.query(group, topic, qid)
                start = lo if committed is None or committed < 0 else max(committed, lo)
                rows.append(
                    {
                        "topic": topic,
                        "queueId": qid,
                        "brokerOffset": hi,
                        "minOffset": lo,
                        "consumerOffset": committed,
                        "lag": max(0, hi - start),
                    }
                )
        return rows

    def _known_groups(self) -> set[str]:
        return known_groups(self.offsets, self.clients, self.topics)

    def handle_consumer_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        out = []
        for group in sorted(self._known_groups()):
            info = self.clients.consumers.get(group)
            rows = self._lag_rows(group)
            dlq = dlq_topic(group)
            out.append(
                {
                    "group": group,
                    "online": len(info.clients) if info else 0,
                    "messageModel": info.message_model if info else None,
                    "subscriptions": sorted(info.subscriptions) if info else [],
                    "lag": sum(r["lag"] for r in rows if r["topic"] != dlq),
                    "dlq": sum(r["lag"] for r in rows if r["topic"] == dlq),
                }
            )
        return _json(cmd, {"groups": out})

    def handle_consumer_lag(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        g = h.consumer_group
        if g not in self._known_groups():
            return cmd.error(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"consumer group {g} has no offsets, clients or retry/DLQ topics",
            )
        rows = self._lag_rows(g)
        return _json(
            cmd,
            {
                "group": g,
                "queues": rows,
                "lag": sum(r["lag"] for r in rows if r["topic"] != dlq_topic(g)),
            },
        )

    def handle_schedule_backlog(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        stats = self.stats
        levels = []
        for level, (pending, due) in sorted(self.backlog().items()):
            levels.append(
                {
                    "level": level,
                    "delayMs": self.config.delay_levels_ms[level - 1],
                    "pending": pending,
                    "nextDueMs": due,
                    "scheduled": stats.scheduled.get(level, 0),
                    "delivered": stats.lateness[level].total if level in stats.lateness else 0,
                    "lateness": (
                        stats.lateness[level] if level in stats.lateness else LatenessHistogram()
                    ).as_json(),
                }
            )
        return _json(cmd, {"nowMs": self.clock_ms(), "levels": levels})

    def handle_resend_dlq(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResendDlqRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        group, dlq = h.consumer_group, dlq_topic(h.consumer_group)
        cfg = self.topics.get(dlq)
        if cfg is None:
            return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"group {group} has no dead letters")
        if h.delay_ms is not None and not 0 <= h.delay_ms <= self.config.timer_max_delay_sec * 1000:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"delayMs {h.delay_ms} is not within 0..{self.config.timer_max_delay_sec * 1000}",
            )
        if h.queue_id is not None or h.queue_offset is not None:
            return self._resend_single(cmd, h, cfg.read_queue_nums)
        budget = max(0, min(h.max_num, MAX_RESEND))
        resent: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        error = None
        for qid in range(cfg.read_queue_nums):
            cq = self.reads.find_queue(dlq, qid)
            if cq is None:
                continue
            committed = self.offsets.query(group, dlq, qid)
            off = max(committed if committed is not None and committed >= 0 else 0, cq.min_offset)
            while off < cq.max_offset and len(resent) < budget and error is None:
                outcome = self._resend_one(group, cq.get(off), h.to_retry_topic, resent, h.delay_ms)
                if isinstance(outcome, _Stop):
                    error = outcome.reason
                    break
                if outcome is not None:  # never resendable: pass over it, say why
                    skipped.append(outcome)
                    self.log.warning(
                        "message.resend_skipped",
                        group=group,
                        msg_id=outcome["msgId"],
                        reason=outcome["reason"],
                    )
                off += 1
                self.offsets.commit(group, dlq, qid, off)
        remaining = sum(r["lag"] for r in self._lag_rows(group) if r["topic"] == dlq)
        return _json(
            cmd,
            {
                "group": group,
                "resent": resent,
                "skipped": skipped,
                "remaining": remaining,
                "error": error,
            },
        )

    def _resend_single(
        self, cmd: RemotingCommand, h: ResendDlqRequestHeader, queues: int
    ) -> RemotingCommand:
        """One dead letter (a workbench row): the record at ``queueId``/``queueOffset``.
        One the group's resend progress has passed is refused (it was resent); the one
        at the progress moves it on by one, so a later bulk resend starts after it."""
        group, dlq = h.consumer_group, dlq_topic(h.consumer_group)
        if h.queue_id is None or h.queue_offset is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "give both queueId and queueOffset")
        qid, off = h.queue_id, h.queue_offset
        if not 0 <= qid < queues:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR, f"queueId {qid} is not within 0..{queues - 1}"
            )
        cq = self.reads.find_queue(dlq, qid)
        if cq is None or not cq.min_offset <= off < cq.max_offset:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR, f"queueOffset {off}: no dead letter there in queue {qid}"
            )
        committed = self.offsets.query(group, dlq, qid)
        progress = committed if committed is not None and committed >= 0 else 0
        if off < progress:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"queueOffset {off} of queue {qid} was resent already (resend progress {progress})",
            )
        resent: list[dict[str, Any]] = []
        outcome = self._resend_one(group, cq.get(off), h.to_retry_topic, resent, h.delay_ms)
        if isinstance(outcome, _Stop):
            raise Rejected(ResponseCode.SYSTEM_ERROR, outcome.reason)
        if off == progress:
            self.offsets.commit(group, dlq, qid, off + 1)
        remaining = sum(r["lag"] for r in self._lag_rows(group) if r["topic"] == dlq)
        return _json(
            cmd,
            {
                "group": group,
                "resent": resent,
                "skipped": [outcome] if outcome is not None else [],
                "remaining": remaining,
                "error": None,
            },
        )

    def _resend_one(
        self,
        group: str,
        unit: tuple[int, int, int] | None,
        to_retry: bool,
        resent: list[dict[str, Any]],
        delay_ms: int | None = None,
    ) -> _Stop | dict[str, Any] | None:
        """Re-put one dead letter. None: resent (or its record is gone); a dict: skipped for
        good (msgId, offset, reason); ``_Stop``: failed now, stop the request here."""
        if unit is None:
            return None
        record = self.reads.read_record(unit[0])  # checked: size cap, magic, CRC, start
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
            try:
                tcfg, _ = self.topics.ensure(target, self.config.retry_queue_nums)
            except TopicTableFull as full:
                return _Stop(full.remark)
        else:
            maybe = self.topics.get(target)
            if maybe is None:
                return _Stop(f"original topic {target} of {m.msg_id} no longer exists")
            tcfg = maybe
        msg = requeue(
            m,
            target,
            m.commit_log_offset % max(1, tcfg.write_queue_nums),
            reconsume_times=0,
            drop=() if to_retry else (RETRY_TOPIC,),
        )
        if delay_ms:  # a timer due delay_ms from now (put/path.py's TIMER kind)
            due = self.clock_ms() + delay_ms
            result = self.put(msg, MessageKind.TIMER, due_ms=due)
        else:
            due = None
            result = self.put(msg, MessageKind.NORMAL)  # requeue dropped DELAY: as is
        if result.status is not PutStatus.PUT_OK:
            return _Stop(
                f"storing {m.msg_id} in {target} failed: {result.remark or result.status.value}"
            )
        resent.append(
            {
                "msgId": m.msg_id,
                "topic": target,
                "queueId": msg.queue_id,
                "queueOffset": result.queue_offset,
                "dueMs": due,
            }
        )
        return None

    def handle_browse_dlq(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """KAIROS_BROWSE_DLQ: a page of dead letters from ``cursor`` (queue, offset), each
        with whether the group's resend progress passed it; ``withBody``: the bodies too
        (base64), for an export."""
        h = BrowseDlqRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        group, dlq = h.consumer_group, dlq_topic(h.consumer_group)
        start = (0, 0)
        if h.cursor:
            pair = parse_decimal_pair(h.cursor, 10, INT64_DIGITS)
            if pair is None:
                raise Rejected(
                    ResponseCode.SYSTEM_ERROR,
                    f"cursor: {shown(h.cursor)} is not <queueId>:<queueOffset>",
                )
            start = pair
        if h.limit <= 0:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"limit: {h.limit} must be positive")
        limit = min(h.limit, MAX_DLQ_PAGE)
        cfg = self.topics.get(dlq)
        if cfg is None:
            return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"group {group} has no dead letters")
        rows: list[dict[str, Any]] = []
        nxt: str | None = None
        for qid in range(start[0], cfg.read_queue_nums):
            cq = self.reads.find_queue(dlq, qid)
            if cq is None:
                continue
            committed = self.offsets.query(group, dlq, qid)
            done = committed if committed is not None and committed >= 0 else 0
            off = max(start[1] if qid == start[0] else 0, cq.min_offset)
            while off < cq.max_offset and len(rows) < limit:
                units = cq.units(off, min(limit - len(rows), cq.max_offset - off))
                if not units:  # a lost file: nothing readable from here on
                    off = cq.max_offset
                    break
                for i, unit in enumerate(units):
                    row = self._dlq_row(unit, qid, off + i, done, h.with_body)
                    if row is not None:
                        rows.append(row)
                off += len(units)
            if len(rows) >= limit:
                if off < cq.max_offset:
                    nxt = f"{qid}:{off}"
                elif qid + 1 < cfg.read_queue_nums:
                    nxt = f"{qid + 1}:0"
                break
        return _json(cmd, {"group": group, "rows": rows, "nextCursor": nxt})

    def _dlq_row(
        self, unit: tuple[int, int, int], qid: int, off: int, done: int, with_body: bool
    ) -> dict[str, Any] | None:
        if unit[0] < 0:  # a hole
            return None
        record = self.reads.read_record(unit[0])
        if isinstance(record, RecordProblem):
            return None
        try:
            m = decode_record(record)
        except MessageDecodeError:
            return None
        row: dict[str, Any] = {
            "queueId": qid,
            "queueOffset": off,
            "msgId": m.msg_id,
            "originTopic": m.properties.get(RETRY_TOPIC),
            "keys": m.keys,
            "tags": m.tags,
            "reconsumeTimes": m.reconsume_times,
            "bornMs": m.born_timestamp,
            "storeMs": m.store_timestamp,
            "bodySize": len(m.body),
            "resent": off < done,  # the group's resend progress passed it
        }
        if with_body:
            row["properties"] = m.properties
            row["body"] = base64.b64encode(m.body).decode()
        return row

    def handle_broker_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return _json(cmd, self.status())
