"""Offset requests: consumer offsets (14, 15) and queue offsets (29, 30, 31, 32).

Owns: QUERY_CONSUMER_OFFSET (QUERY_NOT_FOUND when the group has none, except on a fresh
queue whose first message is still at offset 0 - the RocketMQ rule that lets new groups start
at 0), UPDATE_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME
and SEARCH_OFFSET_BY_TIMESTAMP.

Invariants: offsets are logical consume-queue indexes; GET_MAX_OFFSET is the next index.
Every request passes ``ingress`` first (group and topic names, queue id within the
topic's queues, a committed offset within int64, so the offset file can always be
written). A negative commitOffset is answered SUCCESS and not stored: stock clients
(ali-ons) send -1 for "no offset yet", and a RocketMQ broker accepts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    EarliestMsgStoretimeResponseHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

from .. import ingress

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection


def _offset(cmd: RemotingCommand, value: int) -> RemotingCommand:
    return cmd.response(ext_fields=OffsetResponseHeader(offset=value).to_ext_fields())


def handle_query_consumer_offset(broker: Broker, conn: Connection,
                                 cmd: RemotingCommand) -> RemotingCommand:
    h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_consumer_queue(broker, h.consumer_group, h.topic, h.queue_id)
    off = broker.offsets.query(h.consumer_group, h.topic, h.queue_id)
    if off is not None and off >= 0:
        return _offset(cmd, off)
    if broker.store.min_offset(h.topic, h.queue_id) == 0 and broker.store.max_offset(
        h.topic, h.queue_id
    ) > 0:
        return _offset(cmd, 0)
    return cmd.error(ResponseCode.QUERY_NOT_FOUND,
                     f"no offset for group {h.consumer_group} on {h.topic}:{h.queue_id}")


def handle_update_consumer_offset(broker: Broker, conn: Connection,
                                  cmd: RemotingCommand) -> RemotingCommand:
    h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_consumer_queue(broker, h.consumer_group, h.topic, h.queue_id)
    if h.commit_offset >= 0:  # -1 means "none" (ali-ons sends it): answered, not stored
        broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        broker.log.debug("offset.committed", group=h.consumer_group, topic=h.topic,
                         queue_id=h.queue_id, offset=h.commit_offset)
    return cmd.response()


def handle_get_max_offset(broker: Broker, conn: Connection,
                          cmd: RemotingCommand) -> RemotingCommand:
    h = QueueRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_queue(broker, h.topic, h.queue_id)
    return _offset(cmd, broker.store.max_offset(h.topic, h.queue_id))


def handle_get_min_offset(broker: Broker, conn: Connection,
                          cmd: RemotingCommand) -> RemotingCommand:
    h = QueueRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_queue(broker, h.topic, h.queue_id)
    return _offset(cmd, broker.store.min_offset(h.topic, h.queue_id))


def handle_earliest_msg_storetime(broker: Broker, conn: Connection,
                                  cmd: RemotingCommand) -> RemotingCommand:
    h = QueueRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_queue(broker, h.topic, h.queue_id)
    first = broker.store.min_offset(h.topic, h.queue_id)
    ts = broker.store.store_time_at(h.topic, h.queue_id, first)
    return cmd.response(ext_fields=EarliestMsgStoretimeResponseHeader(
        timestamp=ts if ts is not None else -1).to_ext_fields())


def handle_search_offset(broker: Broker, conn: Connection,
                         cmd: RemotingCommand) -> RemotingCommand:
    h = SearchOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_queue(broker, h.topic, h.queue_id)
    cq = broker.store.find_queue(h.topic, h.queue_id)
    if cq is None:
        return _offset(cmd, 0)
    off = cq.offset_by_time(
        h.timestamp, lambda i: broker.store.store_time_at(h.topic, h.queue_id, i)
    )
    return _offset(cmd, off)
