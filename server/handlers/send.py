"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320, or 310 with m=true).

Owns: the send's work after ``ingress`` checked header and properties (the checks of
RocketMQ's ``AbstractSendMessageProcessor.msgCheck`` live there): topic auto-creation,
the %RETRY% -> %DLQ% rule of the send path, batch unpacking, and the send response.
Transactional half messages (``TRAN_MSG=true`` or a PREPARED sysFlag) are refused with
NO_PERMISSION, as a RocketMQ broker with ``rejectTransactionMessage=true`` does: without
END_TRANSACTION support they would otherwise be delivered at once, even when the
producer later rolls them back.

Invariants: every rejection answers a RocketMQ code with a remark saying what was wrong
and is logged as ``message.rejected``; nothing is stored for a rejected request; a batch
is all-or-nothing with respect to validation, and a topic is auto-created only for a
request that passed every check.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader
from kairosmq.protocol.message import decode_batch
from kairosmq.protocol.naming import AUTO_CREATE_TOPIC_KEY, dlq_topic, group_of_retry_topic
from kairosmq.protocol.properties import (
    CLUSTER,
    DELAY,
    MAX_RECONSUME_TIMES,
    RETRY_TOPIC,
    WAIT,
)

from .. import ingress
from ..config import FlushMode
from ..ingress import Rejected
from ..store import MessageInner, PutResult, PutStatus
from ..topics import TopicConfig

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

_STATUS_CODES = {
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
}


def _reject(broker: Broker, conn: Connection, cmd: RemotingCommand, h: Any,
            code: ResponseCode, remark: str) -> RemotingCommand:
    broker.stats.rejected += 1
    broker.log.warning("message.rejected", topic=getattr(h, "topic", None),
                       producer_group=getattr(h, "producer_group", None), code=int(code),
                       remark=remark, peer=conn.peer)
    return cmd.error(code, remark)


def _resolve_topic(broker: Broker, h: SendMessageRequestHeader, cfg: TopicConfig | None) -> int:
    """Auto-create the (checked) topic if allowed; return the queue id to use."""
    if cfg is None:
        if group_of_retry_topic(h.topic) is not None:
            cfg, _ = broker.topics.ensure(h.topic, broker.config.retry_queue_nums)
        elif broker.config.auto_create_topic and h.default_topic == AUTO_CREATE_TOPIC_KEY:
            n = max(1, min(h.default_topic_queue_nums, broker.config.default_queue_nums))
            cfg, _ = broker.topics.ensure(h.topic, n)
            broker.log.info("topic.created", topic=h.topic, queue_nums=n, auto=True)
        else:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST,
                           f"topic {h.topic} does not exist and auto-creation is off")
        if h.queue_id >= 0:
            ingress.check_queue_id(cfg, h.topic, h.queue_id)
    if not cfg.perm & PERM_WRITE:
        raise Rejected(ResponseCode.NO_PERMISSION, f"the topic {h.topic} is not writable")
    if h.queue_id < 0:
        return random.randrange(cfg.write_queue_nums)
    return h.queue_id


def _props(broker: Broker, raw: str | None) -> dict[str, str]:
    props = ingress.message_properties(raw)
    props.pop(WAIT, None)
    props[CLUSTER] = broker.config.cluster_name
    return props


def _retry_to_dlq(broker: Broker, h: SendMessageRequestHeader, msg: MessageInner) -> None:
    """The send path's handleRetryAndDLQ: a %RETRY% message past its max goes to the DLQ."""
    group = group_of_retry_topic(h.topic)
    if group is None:
        return
    max_times = h.max_reconsume_times
    if max_times is None:
        raw = msg.properties.get(MAX_RECONSUME_TIMES) or ""
        max_times = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 10 \
            else broker.config.max_reconsume_times
    if msg.reconsume_times >= max_times:
        topic = dlq_topic(group)
        broker.topics.ensure(topic, 1)
        msg.topic, msg.queue_id = topic, 0
        msg.properties.pop(DELAY, None)
        msg.properties.setdefault(RETRY_TOPIC, h.topic)


def handle_send(broker: Broker, conn: Connection, cmd: RemotingCommand) -> Any:
    v2 = cmd.code != RequestCode.SEND_MESSAGE
    h = SendMessageRequestHeader.from_ext_fields(cmd.ext_fields, v2=v2)
    try:
        cfg = ingress.check_send_header(broker, h)
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            return _send_batch(broker, conn, cmd, h, cfg)
        if len(cmd.body) > broker.config.max_message_size:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                           f"the body is {len(cmd.body)} bytes, the limit is "
                           f"{broker.config.max_message_size}")
        props = _props(broker, h.properties)
        queue_id = _resolve_topic(broker, h, cfg)
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
                h: SendMessageRequestHeader, cfg: TopicConfig | None) -> Any:
    if len(cmd.body) > broker.config.max_message_size:
        raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                       f"the batch is {len(cmd.body)} bytes, the limit is "
                       f"{broker.config.max_message_size}")
    try:
        items = decode_batch(cmd.body)
    except MessageDecodeError as err:
        raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {err}") from None
    ingress.check_batch_size(broker, len(items))
    shared = _props(broker, h.properties)
    prepared = []
    for item in items:
        props = ingress.message_properties(item.properties)
        props.update(shared)
        if DELAY in props:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL,
                           "a batch cannot carry a delay level; send delayed messages singly")
        prepared.append((item, props))
    queue_id = _resolve_topic(broker, h, cfg)
    msgs = [MessageInner(
        topic=h.topic, queue_id=queue_id, body=item.body, properties=props, flag=item.flag,
        sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
        born_host=(conn.peer_ip4, conn.peer_port), reconsume_times=h.reconsume_times or 0,
    ) for item, props in prepared]
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

