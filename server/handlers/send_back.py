"""CONSUMER_SEND_MSG_BACK (36): a consumer gives a message back for a later retry.

Owns: ``ConsumerSendMsgBackProcessor``, the broker side of RocketMQ's retry (RocketMQ
``asyncConsumerSendMsgBack``; services: checked store reads, topic table, put path): find the
original by commit-log offset, apply ``retry.plan_send_back``, and store a new record in
``%RETRY%<group>`` (through the delay path) or ``%DLQ%<group>``.

Invariants: the original is read with the store's checked ``read_record`` (a client-given
offset: size cap, magic, CRC, a real record start), else SYSTEM_ERROR with the reason;
the new record is ``requeue.requeue``'s copy: it keeps body, flag, sys flag, born
time/host and properties, including UNIQ_KEY (so msg_id is unchanged), without the
broker-internal ones; RETRY_TOPIC is the first real topic (never a system topic the
client names);
ORIGIN_MESSAGE_ID is the existing one or the original's id; reconsumeTimes grows by
one; the header's maxReconsumeTimes applies when the client's version is >= 121.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods)

from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.naming import is_system_topic
from kairosmq.protocol.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, UNIQ_KEY

from ..put.kind import MessageKind
from ..put.requeue import requeue
from ..put.retry import plan_send_back
from ..remoting import ingress
from ..store import MessageInner, PutResult, PutStatus
from ..store.commitlog import RecordProblem

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.stats import BrokerStats
    from ..remoting.transport import Connection
    from ..store.reads import StoreReads
    from ..tables.subscriptions import SubscriptionGroupManager
    from ..tables.topics import TopicConfigManager

_V3_4_9 = 121


class ConsumerSendMsgBackProcessor:
    """CONSUMER_SEND_MSG_BACK."""

    def __init__(
        self,
        *,
        reads: StoreReads,
        topics: TopicConfigManager,
        config: BrokerConfig,
        stats: BrokerStats,
        log: Any,
        put: Callable[[MessageInner, MessageKind], PutResult],
        subscriptions: SubscriptionGroupManager | None = None,
    ) -> None:
        self.subscriptions = subscriptions  # MQADMIN: the group's retry settings
        self.reads = reads
        self.topics = topics
        self.config = config
        self.stats = stats
        self.log = log
        self.put = put

    def handle_send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_send_back(h)  # names (they become %RETRY%/%DLQ% dirs), offset
        record = self.reads.read_record(h.offset)  # checked: size, magic, CRC, record start
        if isinstance(record, RecordProblem):
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"look message by offset failed, {h.offset}: {record.value}",
            )
        try:
            orig = decode_record(record)
        except MessageDecodeError as err:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR, f"message at {h.offset} is unreadable: {err}"
            )
        # the group's retryMaxTimes / retryQueueNums (server/tables/subscriptions.py), as RocketMQ
        group_cfg = self.subscriptions.find(h.group) if self.subscriptions is not None else None
        if self.subscriptions is not None and group_cfg is None:
            return cmd.error(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.group}] does not exist",
            )
        max_times = (
            self.config.max_reconsume_times if group_cfg is None else (group_cfg.retry_max_times)
        )
        if h.max_reconsume_times is not None and cmd.version >= _V3_4_9:
            max_times = h.max_reconsume_times
        plan = plan_send_back(h.group, orig.reconsume_times, h.delay_level, max_times)
        queue_nums = (
            1
            if plan.dead_letter
            else (self.config.retry_queue_nums if group_cfg is None else group_cfg.retry_queue_nums)
        )
        cfg, _ = self.topics.ensure(plan.topic, queue_nums)
        msg = requeue(
            orig,
            plan.topic,
            orig.commit_log_offset % max(1, cfg.write_queue_nums),
            reconsume_times=plan.reconsume_times,
        )
        props = msg.properties
        if RETRY_TOPIC not in props:
            origin = h.origin_topic or orig.topic
            if is_system_topic(origin):  # a client-named system topic is not the original
                origin = orig.topic
            props[RETRY_TOPIC] = origin
        origin_id = props.get(ORIGIN_MESSAGE_ID) or props.get(UNIQ_KEY) or orig.offset_msg_id
        props[ORIGIN_MESSAGE_ID] = origin_id
        if not plan.dead_letter:
            props[DELAY] = str(plan.delay_level)
        result = self.put(msg, MessageKind.DLQ if plan.dead_letter else MessageKind.RETRY)
        if result.status is not PutStatus.PUT_OK:
            return cmd.error(ResponseCode.SYSTEM_ERROR, result.remark or result.status.value)
        msg_id = props.get(UNIQ_KEY) or origin_id
        stats = self.stats
        (stats.dead_lettered if plan.dead_letter else stats.redelivered)[h.group] += 1
        event = "message.dead_lettered" if plan.dead_letter else "message.redelivered"
        fields = {
            "msg_id": msg_id,
            "group": h.group,
            "topic": plan.topic,
            "origin_topic": props[RETRY_TOPIC],
            "origin_msg_id": origin_id,
            "reconsume_times": plan.reconsume_times,
        }
        if not plan.dead_letter:
            fields["delay_level"] = plan.delay_level
        self.log.info(event, **fields)
        return cmd.response()
