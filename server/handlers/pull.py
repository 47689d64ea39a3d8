"""PULL_MESSAGE (11): serve a queue's messages, holding the request while none are new.

Owns: subscription resolution (the request's own, else the group's from heartbeats),
the server-side tag-hash filter (SQL92 subscriptions: ``property_filter``), the
COMMIT_OFFSET side effect, the store-status to response-code table of the reference
(§9.2), long polling, and ``message.pulled`` logs.

Invariants:
* A held pull is answered when a message lands in its queue, when its suspend timeout
  (capped at ``max_pull_hold_ms``, well under the client's 30 s) passes, or when the
  broker stops - never left unanswered, and it never blocks other requests on the
  connection (it runs as its own task).
* The pull body is the stored record bytes concatenated, copied from the commit log
  without decoding (one read per contiguous run of records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kairosmq.protocol.bodies import SUB_ALL, SubscriptionData
from kairosmq.protocol.codes import (
    PERM_READ,
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from kairosmq.protocol.message import summarize_records
from kairosmq.protocol.sql92 import Selector

from .. import ingress, property_filter
from ..store import GetResult, GetStatus

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def _subscription(broker: Broker, h: PullMessageRequestHeader) -> SubscriptionData | None:
    if h.sys_flag & PULL_SUBSCRIPTION and h.subscription:
        if not property_filter.is_tag_type(h.expression_type):
            return property_filter.sql_subscription(h.topic, h.subscription, h.sub_version,
                                                    h.expression_type)
        return SubscriptionData.build(h.topic, h.subscription, h.sub_version)
    return broker.clients.subscription(h.consumer_group, h.topic)


def handle_pull(broker: Broker, conn: Connection, cmd: RemotingCommand) -> Any:
    h = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    cfg = ingress.check_pull(broker, h)
    if cfg is None:
        return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
    if not cfg.perm & PERM_READ:
        return cmd.error(ResponseCode.NO_PERMISSION, f"topic {h.topic} is not readable")
    sub = _subscription(broker, h)
    # SQL92: a compiled selector over record properties (Rejected if it does not compile)
    codes: frozenset[int] | Selector | None = property_filter.selector_for(broker, sub)
    if codes is None and sub is not None and sub.sub_string != SUB_ALL and sub.code_set:
        codes = frozenset(sub.code_set)
    if h.sys_flag & PULL_COMMIT_OFFSET and h.commit_offset >= 0:
        broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    result = _get(broker, h, codes)
    if (
        result.status is GetStatus.OFFSET_OVERFLOW_ONE
        or (result.status is GetStatus.NO_MESSAGE_IN_QUEUE and h.queue_offset == 0)
    ) and h.sys_flag & PULL_SUSPEND and broker.config.long_polling and broker.running:
        # held-pull limits (longpoll.PullHolds): beyond them, answered now, not held
        if broker.pull_holds.acquire(conn):
            return broker.pull_holds.run(conn, _hold(broker, conn, cmd, h, codes))
    return _answer(broker, cmd, h, result)


def _get(broker: Broker, h: PullMessageRequestHeader,
         codes: frozenset[int] | Selector | None) -> GetResult:
    if isinstance(codes, Selector):
        return property_filter.get_filtered(
            broker.store, h.topic, h.queue_id, h.queue_offset, max(1, min(h.max_msg_nums, 512)),
            broker.config.pull_max_bytes, codes)
    return broker.store.get(
        h.topic, h.queue_id, h.queue_offset, max(1, min(h.max_msg_nums, 512)),
        max_bytes=broker.config.pull_max_bytes,
        match=None if codes is None else codes.__contains__,
    )


async def _hold(broker: Broker, conn: Connection, cmd: RemotingCommand,
                h: PullMessageRequestHeader,
                codes: frozenset[int] | Selector | None) -> RemotingCommand:
    timeout_ms = max(0, min(h.suspend_timeout_millis, broker.config.max_pull_hold_ms))
    broker.log.debug("pull.held", group=h.consumer_group, topic=h.topic, queue_id=h.queue_id,
                     queue_offset=h.queue_offset, timeout_ms=timeout_ms)
    # The task starts a loop iteration after the handler ran: look again before waiting
    # (the check and the waiter's registration happen in one synchronous step).
    result = _get(broker, h, codes)
    if result.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE):
        await broker.notifier.wait(h.topic, h.queue_id, timeout_ms / 1000)
        result = _get(broker, h, codes)
    return _answer(broker, cmd, h, result)


def _answer(broker: Broker, cmd: RemotingCommand, h: PullMessageRequestHeader,
            result: GetResult) -> RemotingCommand:
    status = result.status
    if status is GetStatus.NO_MESSAGE_IN_QUEUE:
        code = (ResponseCode.PULL_NOT_FOUND if h.queue_offset == 0
                else ResponseCode.PULL_OFFSET_MOVED)
    else:
        code = _CODES[status]
    ext = PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset, max_offset=result.max_offset,
    ).to_ext_fields()
    body = b""
    if status is GetStatus.FOUND:
        body = result.chunks[0] if len(result.chunks) == 1 else b"".join(result.chunks)
        broker.stats.pulled[h.topic] += len(result.units)
        if broker.config.log_messages:
            info = broker.msglog.info
            for s in summarize_records(body):
                info("message.pulled", msg_id=s.msg_id, group=h.consumer_group, topic=h.topic,
                     queue_id=h.queue_id, queue_offset=s.queue_offset, store_ts=s.store_timestamp,
                     born_ts=s.born_timestamp, reconsume_times=s.reconsume_times)
    return cmd.response(code, ext_fields=ext, body=body)
