"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): request-reply (RocketMQ 4.6+),
and the system topics request-reply and message trace need.

Owns: ``ReplyMessageProcessor`` (RocketMQ's ``ReplyMessageProcessor``): a responder's
reply, sent to ``<cluster>_REPLY_TOPIC`` with the request's ``CORRELATION_ID``,
``REPLY_TO_CLIENT`` and ``TTL``, is pushed to the requesting client's connection as
PUSH_REPLY_MESSAGE_TO_CLIENT (326), found by ``REPLY_TO_CLIENT`` among the producers
registered by heartbeat; with ``store_reply_message_enable`` (RocketMQ's default: on) the
reply is also stored in the reply topic. ``ensure_system_topics`` creates the reply topic
(1 queue, as RocketMQ's TopicConfigManager) and, with ``trace_topic_enable``,
``RMQ_SYS_TRACE_TOPIC`` (1 queue) at start; with the flag off the trace topic is taken out
of the table, so sends to it are refused as to any system topic (server/remoting/ingress.py).

Invariants (RocketMQ's answers):
* The answer is SUCCESS only when the requester took the push (its answer was SUCCESS);
  otherwise SYSTEM_ERROR with a remark naming the client: no REPLY_TO_CLIENT, no
  connection for it, a failed or timed-out push. The stored copy does not change that.
* A push waits at most ``push_timeout`` seconds (client_calls.call_client); the broker
  never waits on a closed connection.
* The header and properties get the send path's ingress checks; nothing is stored for a
  refused request, and the stored copy is a plain message (no DELAY/timer properties).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers (see Handler)

from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    DEFAULT_REGION,
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from kairosmq.protocol.naming import TRACE_TOPIC, reply_topic
from kairosmq.protocol.properties import (
    PUSH_REPLY_TIME,
    REPLY_TO_CLIENT,
    SCHEDULING_PROPERTIES,
    WAIT,
    encode_properties,
)

from ..put.kind import MessageKind
from ..put.requeue import stripped
from ..remoting import ingress
from ..remoting.client_calls import call_client
from ..remoting.ingress import Rejected
from ..store import MessageInner, PutResult, PutStatus

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..endpoints import Endpoints
    from ..remoting.transport import Connection
    from ..tables.clients import ClientRegistry
    from ..tables.topics import TopicConfigManager

PUSH_TIMEOUT = 3.0  # seconds (RocketMQ Broker2Client.callClient: 3 s)


def ensure_system_topics(topics: TopicConfigManager, config: BrokerConfig) -> list[str]:
    """Create the reply topic and (``trace_topic_enable``) the trace topic; return the
    names created. With the flag off, drop a trace topic a previous run left."""
    created = []
    wanted = [reply_topic(config.cluster_name)]
    if config.trace_topic_enable:
        wanted.append(TRACE_TOPIC)
    else:
        topics.drop(TRACE_TOPIC)
    for name in wanted:
        if topics.get(name) is None:
            topics.create(name, 1, perm=PERM_READ | PERM_WRITE, bounded=False)
            created.append(name)
    if topics.dirty:
        topics.persist()
    return created


def find_producer_connection(clients: ClientRegistry, client_id: str) -> Connection | None:
    """The connection of a producer registered as ``client_id`` (RocketMQ's
    ProducerManager.findChannel); the most recently seen one if several."""
    best = None
    for members in clients.producers.values():
        info = members.get(client_id)
        if (
            info is not None
            and not getattr(info.conn, "closed", False)
            and (best is None or info.last_seen > best.last_seen)
        ):
            best = info
    return None if best is None else best.conn  # type: ignore[return-value]


class ReplyMessageProcessor:
    """SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2."""

    def __init__(
        self,
        *,
        topics: TopicConfigManager,
        clients: ClientRegistry,
        config: BrokerConfig,
        endpoints: Endpoints,
        log: Any,
        put: Callable[..., PutResult],
        offset_msg_id: Callable[[int], str],
        push_timeout: float = PUSH_TIMEOUT,
    ) -> None:
        self.topics = topics
        self.clients = clients
        self.config = config
        self.endpoints = endpoints
        self.log = log
        self.put = put
        self.offset_msg_id = offset_msg_id
        self.push_timeout = push_timeout

    def handle_reply(self, conn: Connection, cmd: RemotingCommand) -> Any:
        v2 = cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2
        h = SendMessageRequestHeader.from_ext_fields(cmd.ext_fields, v2=v2)
        cfg = ingress.check_send_header(self.topics, h)
        if cfg is None:
            raise Rejected(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {h.topic} does not exist (replies go to "
                f"{reply_topic(self.config.cluster_name)})",
            )
        if not cfg.perm & PERM_WRITE:
            raise Rejected(ResponseCode.NO_PERMISSION, f"the topic {h.topic} is not writable")
        if len(cmd.body) > self.config.max_message_size:
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the body is {len(cmd.body)} bytes, the limit is {self.config.max_message_size}",
            )
        props = ingress.message_properties(h.properties)
        props.pop(WAIT, None)
        queue_id = h.queue_id if h.queue_id >= 0 else random.randrange(cfg.write_queue_nums)
        return self._reply(conn, cmd, h, props, queue_id)

    async def _reply(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader,
        props: dict[str, str],
        queue_id: int,
    ) -> RemotingCommand:
        ok, remark = await self._push(conn, cmd, h, props)
        msg_id, offset = "0", 0  # RocketMQ: "set to zero to avoid client decoding exception"
        if self.config.store_reply_message_enable:
            stored = stripped(props, SCHEDULING_PROPERTIES)
            r = self.put(
                MessageInner(
                    topic=h.topic,
                    queue_id=queue_id,
                    body=cmd.body,
                    properties=stored,
                    flag=h.flag,
                    sys_flag=h.sys_flag,
                    born_timestamp=h.born_timestamp,
                    born_host=(conn.born_ip, conn.peer_port),
                    reconsume_times=h.reconsume_times or 0,
                ),
                MessageKind.NORMAL,
            )
            if r.status is PutStatus.PUT_OK:
                msg_id = r.offset_msg_id or self.offset_msg_id(r.phy_offset)
                offset = r.queue_offset
            else:
                self.log.warning(
                    "reply.store_failed", topic=h.topic, status=r.status.value, remark=r.remark
                )
        if not ok:
            self.log.warning(
                "reply.push_failed",
                client_id=props.get(REPLY_TO_CLIENT, ""),
                topic=h.topic,
                remark=remark,
                peer=conn.peer,
            )
            return cmd.error(ResponseCode.SYSTEM_ERROR, remark)
        ext = SendMessageResponseHeader(
            msg_id=msg_id,
            queue_id=queue_id,
            queue_offset=offset,
            msg_region=DEFAULT_REGION,
            trace_on=True,
        ).to_ext_fields()
        return cmd.response(ResponseCode.SUCCESS, ext_fields=ext)

    async def _push(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader,
        props: dict[str, str],
    ) -> tuple[bool, str]:
        """Push the reply to its requester; (pushed, remark)."""
        client_id = props.get(REPLY_TO_CLIENT)
        if not client_id:
            return False, f"reply message properties[{REPLY_TO_CLIENT}] is null"
        target = find_producer_connection(self.clients, client_id)
        if target is None:
            return False, f"push reply message fail, channel of <{client_id}> not found."
        pushed = dict(props)
        pushed[PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        ext = ReplyMessageRequestHeader(
            producer_group=h.producer_group,
            topic=h.topic,
            default_topic=h.default_topic,
            default_topic_queue_nums=h.default_topic_queue_nums,
            queue_id=h.queue_id,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            flag=h.flag,
            properties=encode_properties(pushed),
            reconsume_times=h.reconsume_times or 0,
            unit_mode=bool(h.unit_mode),
            born_host=conn.peer,
            store_host=self.endpoints.address,
            store_timestamp=int(time.time() * 1000),
        ).to_ext_fields()
        try:
            resp = await call_client(
                target,
                RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                ext,
                cmd.body,
                timeout=self.push_timeout,
            )
        except (TimeoutError, ConnectionError) as err:
            return False, f"push reply message to {client_id} fail: {err or 'timeout'}"
        if resp.code != ResponseCode.SUCCESS:
            return False, (
                f"push reply message to {client_id} fail: {resp.code} {resp.remark or ''}".rstrip()
            )
        return True, ""
