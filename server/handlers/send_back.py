"""CONSUMER_SEND_MSG_BACK (36): a consumer gives a message back for a later retry.

Owns: the broker side of RocketMQ's retry (J4 ``asyncConsumerSendMsgBack``): find the
original by commit-log offset, apply ``retry.plan_send_back``, and store a new record in
``%RETRY%<group>`` (through the delay path) or ``%DLQ%<group>``.

Invariants: the new record keeps body, flag, sys flag, born time/host and properties,
including UNIQ_KEY (so msg_id is unchanged); RETRY_TOPIC is the first real topic;
ORIGIN_MESSAGE_ID is the existing one or the original's id; reconsumeTimes grows by
one; the header's maxReconsumeTimes applies when the client's version is >= 121.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from kairosmq.protocol.message import decode_record
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    ORIGIN_MESSAGE_ID,
    REAL_QID,
    REAL_TOPIC,
    RETRY_TOPIC,
    SCHEDULE_ORIGIN,
    UNIQ_KEY,
)

from ..retry import plan_send_back
from ..store import MessageInner, PutStatus

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

_V3_4_9 = 121


def handle_send_back(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ConsumerSendMsgBackRequestHeader.from_ext_fields(cmd.ext_fields)
    record = broker.store.read_at(h.offset)
    if record is None:
        return cmd.error(ResponseCode.SYSTEM_ERROR,
                         f"no message at commit-log offset {h.offset}")
    try:
        orig = decode_record(record)
    except MessageDecodeError as err:
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"message at {h.offset} is unreadable: {err}")
    max_times = broker.config.max_reconsume_times
    if h.max_reconsume_times is not None and cmd.version >= _V3_4_9:
        max_times = h.max_reconsume_times
    plan = plan_send_back(h.group, orig.reconsume_times, h.delay_level, max_times)
    queue_nums = 1 if plan.dead_letter else broker.config.retry_queue_nums
    cfg, _ = broker.topics.ensure(plan.topic, queue_nums)
    props = dict(orig.properties)
    for key in (DELAY, DELIVER_TIME, SCHEDULE_ORIGIN, REAL_TOPIC, REAL_QID):
        props.pop(key, None)
    props.setdefault(RETRY_TOPIC, h.origin_topic or orig.topic)
    origin_id = props.get(ORIGIN_MESSAGE_ID) or props.get(UNIQ_KEY) or orig.offset_msg_id
    props[ORIGIN_MESSAGE_ID] = origin_id
    if not plan.dead_letter:
        props[DELAY] = str(plan.delay_level)
    msg = MessageInner(
        topic=plan.topic, queue_id=orig.commit_log_offset % cfg.write_queue_nums, body=orig.body,
        properties=props, flag=orig.flag, sys_flag=orig.sys_flag,
        born_timestamp=orig.born_timestamp, born_host=orig.born_host,
        reconsume_times=plan.reconsume_times,
    )
    result = broker.put_message(msg)
    if result.status is not PutStatus.PUT_OK:
        return cmd.error(ResponseCode.SYSTEM_ERROR, result.remark or result.status.value)
    msg_id = props.get(UNIQ_KEY) or origin_id
    (broker.stats.dead_lettered if plan.dead_letter else broker.stats.redelivered)[h.group] += 1
    event = "message.dead_lettered" if plan.dead_letter else "message.redelivered"
    fields = {"msg_id": msg_id, "group": h.group, "topic": plan.topic,
              "origin_topic": props[RETRY_TOPIC], "origin_msg_id": origin_id,
              "reconsume_times": plan.reconsume_times}
    if not plan.dead_letter:
        fields["delay_level"] = plan.delay_level
    broker.log.info(event, **fields)
    return cmd.response()
