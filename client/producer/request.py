"""Request-reply (RocketMQ 4.6+): the requester's waiting table and the responder's reply.

Owns: ``create_reply`` (RocketMQ's ``MessageUtil.createReplyMessage``: a reply to
``<cluster>_REPLY_TOPIC`` carrying the request's ``CORRELATION_ID``, ``REPLY_TO_CLIENT``
and ``TTL``, ``MSG_TYPE=reply``), ``get_reply_to_client``, ``is_reply``,
``prepare_request`` (the properties ``Producer.request`` adds, as
``DefaultMQProducerImpl.prepareSendRequest``), ``ReplyWaiters`` (RocketMQ's
``RequestFutureHolder``: correlation id -> the future ``Producer.request`` awaits) and
``reply_from_push`` (PUSH_REPLY_MESSAGE_TO_CLIENT, 326 -> the reply ``MessageExt``).
Nothing here sends: the request flow is ``Producer.request``'s (producer.py).

Flow: ``Producer.request`` registers with every broker of the route (HEART_BEAT, so the
broker can find it by client id), sends the request; a consumer answers with
``producer.send(create_reply(msg, body))``, which the producer sends as
SEND_REPLY_MESSAGE_V2 (325); the broker pushes it (326) on the requester's connection, and
``ReplyWaiters.on_push`` completes the waiting future.

Invariants:
* A waiter is removed when its reply arrives, when its request fails, or when it times
  out, so the table never outgrows the requests in flight; a reply without a waiter (late,
  or for another process) is answered SUCCESS and dropped, as the Java client does.
* The push is answered at once (SUCCESS, or SYSTEM_ERROR for an undecodable push); the
  requester's await never runs inside the connection's reader.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
import zlib

from kairosmq.protocol.codes import SYSFLAG_COMPRESSED, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import ReplyMessageRequestHeader
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.naming import reply_topic
from kairosmq.protocol.properties import (
    CLUSTER,
    CORRELATION_ID,
    MESSAGE_TTL,
    MESSAGE_TYPE,
    REPLY_MESSAGE_ARRIVE_TIME,
    REPLY_MESSAGE_FLAG,
    REPLY_TO_CLIENT,
    decode_properties,
)

from ..errors import ClientError, MessageError
from ..message import Message

__all__ = [
    "ReplyTimeout",
    "ReplyWaiters",
    "create_reply",
    "get_reply_to_client",
    "is_reply",
    "prepare_request",
    "reply_from_push",
]


class ReplyTimeout(ClientError):
    """No reply arrived within the request's timeout (RocketMQ's RequestTimeoutException).
    Not retriable: the request was delivered and may have been processed."""

    def __init__(self, topic: str, correlation_id: str, timeout: float) -> None:
        super().__init__(
            f"request to {topic} (correlation id {correlation_id}) got no "
            f"reply within {timeout:.3f}s"
        )
        self.correlation_id = correlation_id
        self.timeout = timeout


def _props(msg: Message | MessageExt) -> dict[str, str]:
    return msg.properties


def create_reply(request: Message | MessageExt, body: bytes | str) -> Message:
    """The reply to ``request`` (a message a consumer received): send it with
    ``producer.send``. Raises ``MessageError`` if the request carries no ``CLUSTER``
    (it was not delivered through a broker) or is not a request."""
    props = _props(request)
    cluster = props.get(CLUSTER)
    if not cluster:
        raise MessageError(
            f"create reply message fail, requestMessage error, property[{CLUSTER}] is null."
        )
    reply_props = {MESSAGE_TYPE: REPLY_MESSAGE_FLAG}
    for key in (CORRELATION_ID, REPLY_TO_CLIENT, MESSAGE_TTL):
        value = props.get(key)
        if value:
            reply_props[key] = value
    return Message(topic=reply_topic(cluster), body=body, properties=reply_props)


def get_reply_to_client(msg: Message | MessageExt) -> str | None:
    """The client id a request's reply goes to (MessageUtil.getReplyToClient)."""
    return _props(msg).get(REPLY_TO_CLIENT)


def is_reply(msg: Message) -> bool:
    """True for a message built by ``create_reply`` (sent with SEND_REPLY_MESSAGE_V2)."""
    return msg.properties.get(MESSAGE_TYPE) == REPLY_MESSAGE_FLAG


def prepare_request(msg: Message, client_id: str, timeout: float) -> tuple[Message, str]:
    """A copy of ``msg`` with the request properties; and its correlation id."""
    correlation_id = str(uuid.uuid4())
    props = dict(msg.properties)
    props[CORRELATION_ID] = correlation_id
    props[REPLY_TO_CLIENT] = client_id
    props[MESSAGE_TTL] = str(int(timeout * 1000))
    copy = Message(
        topic=msg.topic,
        body=msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties=props,
        flag=msg.flag,
    )
    return copy, correlation_id


def _host(text: str | None) -> tuple[bytes, int]:
    if not text or ":" not in text:
        return (b"\x00\x00\x00\x00", 0)
    host, _, port = text.rpartition(":")
    try:
        return socket.inet_aton(host), int(port)
    except (OSError, ValueError):
        return (b"\x00\x00\x00\x00", 0)


def reply_from_push(cmd: RemotingCommand) -> MessageExt:
    """The reply message a PUSH_REPLY_MESSAGE_TO_CLIENT carries (ClientRemotingProcessor
    .receiveReplyMessage); raises ``HeaderError``/``zlib.error`` for a bad push."""
    h = ReplyMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    body = cmd.body
    if h.sys_flag & SYSFLAG_COMPRESSED:
        body = zlib.decompress(body)
    props = decode_properties(h.properties or "")
    props[REPLY_MESSAGE_ARRIVE_TIME] = str(int(time.time() * 1000))
    return MessageExt(
        topic=h.topic,
        body=body,
        queue_id=h.queue_id,
        flag=h.flag,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        born_host=_host(h.born_host),
        store_timestamp=h.store_timestamp,
        store_host=_host(h.store_host),
        reconsume_times=h.reconsume_times or 0,
        properties=props,
    )


class ReplyWaiters:
    """Correlation id -> the future of a request awaiting its reply."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}
        self.unmatched = 0  # replies that arrived with no waiter (late or foreign)

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        fut: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = fut
        return fut

    def discard(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    async def wait(
        self, correlation_id: str, fut: asyncio.Future[MessageExt], topic: str, timeout: float
    ) -> MessageExt:
        """Await the reply at most ``timeout`` seconds (``ReplyTimeout``)."""
        try:
            return await asyncio.wait_for(fut, max(timeout, 0.0))
        except TimeoutError:
            raise ReplyTimeout(topic, correlation_id, timeout) from None
        finally:
            self.discard(correlation_id)

    def on_push(self, cmd: RemotingCommand) -> RemotingCommand:
        """Answer a PUSH_REPLY_MESSAGE_TO_CLIENT and hand the reply to its waiter."""
        try:
            reply = reply_from_push(cmd)
        except (HeaderError, zlib.error, ValueError) as err:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark=f"process reply message fail: {err}"
            )
        fut = self._waiting.pop(reply.properties.get(CORRELATION_ID, ""), None)
        if fut is None or fut.done():
            self.unmatched += 1
        else:
            fut.set_result(reply)
        return cmd.response(ResponseCode.SUCCESS)
