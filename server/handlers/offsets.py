"""Offset requests: consumer offsets (14, 15) and queue offsets (29, 30, 31, 32).

Owns: ``ConsumerManageProcessor`` (consumer offsets; services: store reads, topic
table, offset table, log) and ``QueueOffsetProcessor`` (queue offsets; store reads and
topic table). QUERY_CONSUMER_OFFSET (QUERY_NOT_FOUND when the group has none, except on a fresh
queue whose first message is still at offset 0 - the RocketMQ rule that lets new groups start
at 0), UPDATE_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME
and SEARCH_OFFSET_BY_TIMESTAMP.

Invariants: offsets are logical consume-queue indexes; GET_MAX_OFFSET is the next index.
Every request passes ``ingress`` first (group and topic names, queue id within the
topic's queues, a committed offset within int64, so the offset file can always be
written). A negative commitOffset is answered SUCCESS and not stored: stock clients
(ali-ons) send -1 for "no offset yet", and a RocketMQ broker accepts it.
UPDATE_CONSUMER_OFFSET stores offsets only for topics and subscription groups that exist,
the group auto-created first as a pull of it would (autoCreateSubscriptionGroup, bounded
by ``max_subscription_groups``): an unknown topic answers TOPIC_NOT_EXIST, a group that
does not exist and is not created SUBSCRIPTION_GROUP_NOT_EXIST (RocketMQ's codes for them;
4.9.8's UPDATE_CONSUMER_OFFSET stores any name, so its table grows without bound), and a
new offset past ``max_consumer_offsets`` SYSTEM_ERROR naming the option; nothing is stored
then. A stock client commits offsets of queues it pulled (their topic and group exist, its
``%RETRY%<group>`` included), so this refuses nothing it sends in normal use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods)

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

from ..remoting import ingress

if TYPE_CHECKING:
    from ..remoting.transport import Connection
    from ..store.message_store import MessageStore
    from ..tables.offsets import ConsumerOffsetManager
    from ..tables.subscriptions import SubscriptionGroupManager
    from ..tables.topics import TopicConfigManager


def _offset(cmd: RemotingCommand, value: int) -> RemotingCommand:
    return cmd.response(ext_fields=OffsetResponseHeader(offset=value).to_ext_fields())


class ConsumerManageProcessor:
    """QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET."""

    def __init__(
        self,
        *,
        reads: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        log: Any,
        subscriptions: SubscriptionGroupManager | None = None,
    ) -> None:
        self.reads = reads
        self.topics = topics
        self.offsets = offsets
        self.log = log
        self.subscriptions = subscriptions

    def handle_query_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_consumer_queue(self.topics, h.consumer_group, h.topic, h.queue_id)
        off = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if off is not None and off >= 0:
            return _offset(cmd, off)
        if (
            self.reads.min_offset(h.topic, h.queue_id) == 0
            and self.reads.max_offset(h.topic, h.queue_id) > 0
        ):
            return _offset(cmd, 0)
        return cmd.error(
            ResponseCode.QUERY_NOT_FOUND,
            f"no offset for group {h.consumer_group} on {h.topic}:{h.queue_id}",
        )

    def handle_update_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        cfg = ingress.check_consumer_queue(self.topics, h.consumer_group, h.topic, h.queue_id)
        if cfg is None:
            raise ingress.Rejected(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {h.topic} does not exist: no offset is stored for it",
            )
        if self.subscriptions is not None:
            refused = self.subscriptions.missing(h.consumer_group)
            if refused is not None:
                raise ingress.Rejected(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, refused)
        if h.commit_offset >= 0:  # -1 means "none" (ali-ons sends it): answered, not stored
            full = self.offsets.refusal(h.consumer_group, h.topic, h.queue_id)
            if full is not None:
                raise ingress.Rejected(ResponseCode.SYSTEM_ERROR, full)
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
            self.log.debug(
                "offset.committed",
                group=h.consumer_group,
                topic=h.topic,
                queue_id=h.queue_id,
                offset=h.commit_offset,
            )
        return cmd.response()


class QueueOffsetProcessor:
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME and
    SEARCH_OFFSET_BY_TIMESTAMP."""

    def __init__(self, *, reads: MessageStore, topics: TopicConfigManager) -> None:
        self.reads = reads
        self.topics = topics

    def _queue(self, cmd: RemotingCommand) -> QueueRequestHeader:
        h = QueueRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_queue(self.topics, h.topic, h.queue_id)
        return h

    def handle_get_max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = self._queue(cmd)
        return _offset(cmd, self.reads.max_offset(h.topic, h.queue_id))

    def handle_get_min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = self._queue(cmd)
        return _offset(cmd, self.reads.min_offset(h.topic, h.queue_id))

    def handle_earliest_msg_storetime(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = self._queue(cmd)
        first = self.reads.min_offset(h.topic, h.queue_id)
        ts = self.reads.store_time_at(h.topic, h.queue_id, first)
        return cmd.response(
            ext_fields=EarliestMsgStoretimeResponseHeader(
                timestamp=ts if ts is not None else -1
            ).to_ext_fields()
        )

    def handle_search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_queue(self.topics, h.topic, h.queue_id)
        cq = self.reads.find_queue(h.topic, h.queue_id)
        if cq is None:
            return _offset(cmd, 0)
        off = cq.offset_by_time(
            h.timestamp, lambda i: self.reads.store_time_at(h.topic, h.queue_id, i)
        )
        return _offset(cmd, off)
