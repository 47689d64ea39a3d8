"""Timer requests: RECALL_MESSAGE (370, RocketMQ 5.3) and KAIROS_GET_TIMER_STATUS (905).

RECALL_MESSAGE cancels a timer or level-delayed message before it fires. Owns: the
request's checks in RocketMQ's order and remarks (topic exists, the handle decodes, names
this topic and this broker), finding the message a handle names (the key index by its
UNIQ_KEY, each candidate verified by reading the record), and the answer: SUCCESS
(recalled now, or already recalled: recall is idempotent) or ILLEGAL_OPERATION saying
the message was already delivered or is unknown here. KAIROS_GET_TIMER_STATUS reports
pending timers per hour for ``kairosmq admin timers``.

Invariants:
* The decision and the recall record's append happen in one loop step after the last
  await (``TimerService.recall_state``), so a recall racing the fire of the same message
  gets exactly one of "recalled" / "already delivered".
* A recall is durable like a send: the recall record is in the commit log before the
  answer is written (the outbox), and with SYNC_FLUSH after it is fsynced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple  # Any: structlog loggers; BrokerStats, duck-typed

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import shown
from kairosmq.protocol.headers import RecallMessageRequestHeader, RecallMessageResponseHeader
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.properties import (
    DELIVER_TIME,
    INT64_DIGITS,
    REAL_TOPIC,
    TIMER_ORIGIN,
    UNIQ_KEY,
    parse_decimal,
)
from kairosmq.protocol.timer import (
    TIMER_OUT_MS,
    RecallHandle,
    RecallHandleInvalid,
    decode_recall_handle,
)

from ..put.kind import MessageKind
from ..remoting import ingress
from ..schedule.timer.topic import TIMER_QUEUE, RecallOutcome, recall_record
from ..store import MessageInner, PutResult, PutStatus
from ..store.index import KIND_UNIQ

if TYPE_CHECKING:
    from ..remoting.transport import Connection
    from ..schedule.timer import TimerService
    from ..store.index import KeyIndex
    from ..store.reads import StoreReads
    from ..tables.topics import TopicConfigManager

ILLEGAL_OPERATION = ResponseCode.ILLEGAL_OPERATION


class RecallMessageProcessor:
    """RocketMQ's ``RecallMessageProcessor``, for timer and level-delayed messages."""

    def __init__(
        self,
        *,
        timer: TimerService,
        reads: StoreReads,
        index: KeyIndex,
        topics: TopicConfigManager,
        put: Callable[[MessageInner, MessageKind], PutResult],
        schedule_fired: Callable[[int, int], bool],
        clock_ms: Callable[[], int],
        broker_name: str,
        msglog: Any,
        log_messages: bool,
        wait_flushed: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        self.timer = timer
        self.reads = reads
        self.index = index
        self.topics = topics
        self.put = put
        self.schedule_fired = schedule_fired  # (level, schedule queue offset) -> re-put?
        self.clock_ms = clock_ms
        self.broker_name = broker_name
        self.msglog = msglog
        self.log_messages = log_messages
        self.wait_flushed = wait_flushed

    async def handle_recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = RecallMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.producer_group, "producerGroup")
        if self.topics.get(h.topic) is None:
            return cmd.error(
                ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{h.topic}] not exist"
            )
        try:
            handle = decode_recall_handle(h.recall_handle)
        except RecallHandleInvalid as err:
            return cmd.error(ILLEGAL_OPERATION, str(err))
        if handle.topic != h.topic:
            return cmd.error(ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != self.broker_name:
            return cmd.error(
                ILLEGAL_OPERATION,
                f"recall failed, broker service not available (the handle names "
                f"broker {shown(handle.broker_name)}, this is {self.broker_name})",
            )
        found, delivered = self._find(handle)
        if delivered is not None:
            return self._already_delivered(cmd, handle, delivered)
        if found is None:
            return cmd.error(
                ILLEGAL_OPERATION,
                f"recall failed, no delayed or timer message {handle.uniq_key} "
                f"of topic {handle.topic} on this broker",
            )
        if found.kind == "timer":
            outcome = await self.timer.recall_state(found.due, found.phy)
        else:
            outcome = self.timer.level_recall_state(
                found.phy, self.schedule_fired(found.level, found.queue_offset)
            )
        # no await from here to the append: the fire cannot slip in between
        if outcome is RecallOutcome.ALREADY_FIRED:
            if self._find(handle)[1] is not None:
                return self._already_delivered(cmd, handle, found.due)
            outcome = RecallOutcome.ALREADY_RECALLED  # passed over without a copy
        resp = cmd.response(
            ResponseCode.SUCCESS,
            ext_fields=RecallMessageResponseHeader(msg_id=handle.uniq_key).to_ext_fields(),
        )
        if outcome is RecallOutcome.ALREADY_RECALLED:
            resp.remark = "already recalled"
            return resp
        marker = recall_record(
            found.due, found.phy, found.kind, self.clock_ms(), (conn.born_ip, conn.peer_port)
        )
        result = self.put(marker, MessageKind.RECALL)
        if result.status is not PutStatus.PUT_OK:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"recall failed, execute error: {result.remark or result.status.value}",
            )
        if self.log_messages and self.msglog.enabled:
            self.msglog.info(
                "timer.recalled",
                msg_id=handle.uniq_key,
                topic=handle.topic,
                deliver_ts=found.due,
                phy_offset=found.phy,
                kind=found.kind,
            )
        if self.wait_flushed is not None and not await self.wait_flushed(
            result.phy_offset + result.size
        ):
            return cmd.error(ResponseCode.FLUSH_DISK_TIMEOUT, "recall record flush timed out")
        return resp

    @staticmethod
    def _already_delivered(cmd: RemotingCommand, handle: RecallHandle, due: int) -> RemotingCommand:
        return cmd.error(
            ILLEGAL_OPERATION,
            f"recall failed, message {handle.uniq_key} was already delivered (due {due})",
        )

    def _find(self, handle: RecallHandle) -> tuple[Target | None, int | None]:
        """(the pending timer or schedule record a handle names, the due ms of its
        delivered copy), each None when absent; from the key index, every candidate read
        and checked."""
        target: Target | None = None
        delivered: int | None = None
        for phy in self.index.lookup(KIND_UNIQ, handle.uniq_key):
            rec = self.reads.read_at(phy)
            if rec is None:
                continue
            m = decode_record(rec)
            props = m.properties
            if props.get(UNIQ_KEY) != handle.uniq_key:
                continue
            if m.topic == handle.topic and (TIMER_ORIGIN in props or DELIVER_TIME in props):
                due = props.get(TIMER_OUT_MS) or props.get(DELIVER_TIME)
                delivered = parse_decimal(due, INT64_DIGITS) or 0
            elif props.get(REAL_TOPIC) == handle.topic and target is None:
                if m.topic == TIMER_TOPIC and m.queue_id == TIMER_QUEUE:
                    due = props.get(TIMER_OUT_MS)
                    target = Target("timer", parse_decimal(due, INT64_DIGITS) or 0, phy)
                elif m.topic == SCHEDULE_TOPIC:
                    due = props.get(DELIVER_TIME)
                    target = Target(
                        "level",
                        parse_decimal(due, INT64_DIGITS) or 0,
                        phy,
                        m.queue_id + 1,
                        m.queue_offset,
                    )
        return target, delivered


class Target(NamedTuple):
    kind: str  # "timer" | "level": the record waiting in the timer / schedule topic
    due: int
    phy: int
    level: int = 0
    queue_offset: int = 0


class TimerStatusProcessor:
    """KAIROS_GET_TIMER_STATUS (905, ``kairosmq admin timers``): pending timer entries per
    hour (from the bucket files' sizes: recalled and duplicate entries included, fired
    buckets excluded), the next due instant, counters and the fired cursor."""

    def __init__(
        self, *, timer: TimerService, stats: Any, clock_ms: Callable[[], int], max_delay_ms: int
    ) -> None:
        self.timer = timer
        self.stats = stats
        self.clock_ms = clock_ms
        self.max_delay_ms = max_delay_ms

    async def handle_timer_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        timer = self.timer
        counts = await timer.run_blocking(timer.buckets.entry_counts)
        first = timer.buckets.bucket_of(timer.cursor[0]) if timer.cursor[1] >= 0 else 0
        per_hour: dict[int, int] = {}
        bucket_ms = timer.buckets.bucket_ms
        for bucket, n in counts.items():
            if bucket >= first:
                hour = bucket * bucket_ms // 3_600_000 * 3_600_000
                per_hour[hour] = per_hour.get(hour, 0) + n
        lat = self.stats.timer_lateness
        body = {
            "nowMs": self.clock_ms(),
            "nextDueMs": timer.next_due(),
            "maxDelayMs": self.max_delay_ms,
            "scheduled": self.stats.timers_scheduled,
            "fired": self.stats.timers_fired,
            "meanLatenessMs": round(lat.sum_ms / lat.total, 3) if lat.total else None,
            "lateness": lat.as_json(),
            "loaded": timer.pending_in_memory,
            "cursor": list(timer.cursor),
            "buckets": sum(1 for b in counts if b >= first),
            "entriesPerHour": [{"hourMs": h, "entries": n} for h, n in sorted(per_hour.items())],
        }
        return cmd.response(body=orjson.dumps(body))
