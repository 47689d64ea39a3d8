"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320, or 310 with m=true).

Owns: the broker-side checks of a send (J4 ``AbstractSendMessageProcessor.msgCheck`` and
``DefaultMessageStore.checkMessage``), topic auto-creation, the %RETRY% -> %DLQ% rule of
the send path, batch unpacking, and the send response. Transactional half messages
(``TRAN_MSG=true``) are refused with NO_PERMISSION, as a J4 broker with
``rejectTransactionMessage=true`` does: without END_TRANSACTION support they would
otherwise be delivered at once, even when the producer later rolls them back.

Invariants: every rejection answers a RocketMQ code with a remark saying what was wrong
and is logged as ``message.rejected``; nothing is stored for a rejected request; a batch
is all-or-nothing with respect to validation.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader
from kairosmq.protocol.message import decode_batch
from kairosmq.protocol.properties import (
    CLUSTER,
    DELAY,
    MAX_RECONSUME_TIMES,
    RETRY_TOPIC,
    TRAN_MSG,
    WAIT,
    decode_properties,
)

from ..config import FlushMode
from ..store import MessageInner, PutResult, PutStatus
from ..topics import (
    AUTO_CREATE_TOPIC_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    is_system_topic,
    validate_topic,
)

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

_STATUS_CODES = {
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
}


class Rejected(Exception):
    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _reject(broker: Broker, conn: Connection, cmd: RemotingCommand, h: Any,
            code: ResponseCode, remark: str) -> RemotingCommand:
    broker.stats.rejected += 1
    broker.log.warning("message.rejected", topic=getattr(h, "topic", None),
                       producer_group=getattr(h, "producer_group", None), code=int(code),
                       remark=remark, peer=conn.peer)
    return cmd.error(code, remark)


def _resolve_topic(broker: Broker, h: SendMessageRequestHeader) -> int:
    """Check topic and queue; auto-create if allowed; return the queue id to use."""
    cfg = broker.topics.get(h.topic)
    if cfg is None or is_system_topic(h.topic):  # known user topics were validated on creation
        bad = validate_topic(h.topic)
        if bad:
            raise Rejected(ResponseCode.SYSTEM_ERROR, bad)
        if is_system_topic(h.topic):
            raise Rejected(ResponseCode.NO_PERMISSION,
                           f"the topic {h.topic} is a system topic; clients cannot send to it")
    if cfg is None:
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            cfg, _ = broker.topics.ensure(h.topic, broker.config.retry_queue_nums)
        elif broker.config.auto_create_topic and h.default_topic == AUTO_CREATE_TOPIC_KEY:
            n = max(1, min(h.default_topic_queue_nums, broker.config.default_queue_nums))
            cfg, _ = broker.topics.ensure(h.topic, n)
            broker.log.info("topic.created", topic=h.topic, queue_nums=n, auto=True)
        else:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST,
                           f"topic {h.topic} does not exist and auto-creation is off")
    if not cfg.perm & PERM_WRITE:
        raise Rejected(ResponseCode.NO_PERMISSION, f"the topic {h.topic} is not writable")
    if h.queue_id < 0:
        return random.randrange(cfg.write_queue_nums)
    if h.queue_id >= cfg.queue_nums:
        raise Rejected(ResponseCode.SYSTEM_ERROR,
                       f"queueId {h.queue_id} is out of range: topic {h.topic} has "
                       f"{cfg.queue_nums} queues")
    return h.queue_id


def _check_props(broker: Broker, props: dict[str, str]) -> None:
    level = props.get(DELAY)
    if level is not None:
        try:
            n = int(level)
        except ValueError:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                           f"DELAY must be an integer level, got {level!r}") from None
        if n < 0:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"delay level {n} is negative; "
                           f"levels are 0..{broker.config.max_delay_level}")
    if props.get(TRAN_MSG, "").lower() == "true":
        raise Rejected(ResponseCode.NO_PERMISSION,
                       "transaction messages are not supported: this broker rejects half "
                       "messages (TRAN_MSG=true) like RocketMQ with rejectTransactionMessage")
    props.pop(WAIT, None)
    props[CLUSTER] = broker.config.cluster_name


def _retry_to_dlq(broker: Broker, h: SendMessageRequestHeader, msg: MessageInner) -> None:
    """The send path's handleRetryAndDLQ: a %RETRY% message past its max goes to the DLQ."""
    if not h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return
    max_times = h.max_reconsume_times
    if max_times is None:
        raw = msg.properties.get(MAX_RECONSUME_TIMES)
        max_times = int(raw) if raw and raw.isdigit() else broker.config.max_reconsume_times
    if msg.reconsume_times >= max_times:
        group = h.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        topic = dlq_topic(group)
        broker.topics.ensure(topic, 1)
        msg.topic, msg.queue_id = topic, 0
        msg.properties.pop(DELAY, None)
        msg.properties.setdefault(RETRY_TOPIC, h.topic)


def handle_send(broker: Broker, conn: Connection, cmd: RemotingCommand) -> Any:
    v2 = cmd.code != RequestCode.SEND_MESSAGE
    h = SendMessageRequestHeader.from_ext_fields(cmd.ext_fields, v2=v2)
    try:
        queue_id = _resolve_topic(broker, h)
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            return _send_batch(broker, conn, cmd, h, queue_id)
        if len(cmd.body) > broker.config.max_message_size:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                           f"the body is {len(cmd.body)} bytes, the limit is "
                           f"{broker.config.max_message_size}")
        props = decode_properties(h.properties or "")
        _check_props(broker, props)
    except Rejected as r:
        return _reject(broker, conn, cmd, h, r.code, r.remark)
    msg = MessageInner(
        topic=h.topic, queue_id=queue_id, body=cmd.body, properties=props, flag=h.flag,
        sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
        born_host=(conn.peer_ip4, conn.peer_port), reconsume_times=h.reconsume_times or 0,
    )
    _retry_to_dlq(broker, h, msg)
    result = broker.put_message(msg)
    return _respond(broker, conn, cmd, h, [result], queue_id)


def _send_batch(broker: Broker, conn: Connection, cmd: RemotingCommand,
                h: SendMessageRequestHeader, queue_id: int) -> Any:
    if len(cmd.body) > broker.config.max_message_size:
        raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                       f"the batch is {len(cmd.body)} bytes, the limit is "
                       f"{broker.config.max_message_size}")
    try:
        items = decode_batch(cmd.body)
    except MessageDecodeError as err:
        raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {err}") from None
    shared = decode_properties(h.properties or "")
    msgs = []
    for item in items:
        props = decode_properties(item.properties)
        props.update(shared)
        if DELAY in props:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                           "a batch cannot carry a delay level; send delayed messages singly")
        _check_props(broker, props)
        msgs.append(MessageInner(
            topic=h.topic, queue_id=queue_id, body=item.body, properties=props, flag=item.flag,
            sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
            born_host=(conn.peer_ip4, conn.peer_port), reconsume_times=h.reconsume_times or 0,
        ))
    results = []
    for msg in msgs:
        r = broker.put_message(msg)
        results.append(r)
        if r.status is not PutStatus.PUT_OK:
            break
    return _respond(broker, conn, cmd, h, results, queue_id)


def _respond(broker: Broker, conn: Connection, cmd: RemotingCommand,
             h: SendMessageRequestHeader, results: list[PutResult], queue_id: int) -> Any:
    bad = next((r for r in results if r.status is not PutStatus.PUT_OK), None)
    if bad is not None:
        code = _STATUS_CODES.get(bad.status, ResponseCode.SYSTEM_ERROR)
        return _reject(broker, conn, cmd, h, code, bad.remark or bad.status.value)
    ext = SendMessageResponseHeader(
        msg_id=",".join(r.offset_msg_id or broker.store_offset_msg_id(r.phy_offset)
                        for r in results),
        queue_id=queue_id, queue_offset=results[0].queue_offset,
    ).to_ext_fields()
    ext["MSG_REGION"] = "DefaultRegion"
    ext["TRACE_ON"] = "true"
    response = cmd.response(ResponseCode.SUCCESS, ext_fields=ext)
    if broker.config.flush_mode is FlushMode.SYNC_FLUSH:
        return _after_flush(broker, cmd, response, results[-1].phy_offset + results[-1].size)
    return response


async def _after_flush(broker: Broker, cmd: RemotingCommand, response: RemotingCommand,
                       end: int) -> RemotingCommand:
    if await broker.wait_flushed(end):
        return response
    return cmd.response(ResponseCode.FLUSH_DISK_TIMEOUT, ext_fields=response.ext_fields,
                        remark="stored, but the disk flush did not finish in time")

