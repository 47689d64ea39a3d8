"""kairosmq.client: asyncio producer and push consumer for the RocketMQ 4.x remoting protocol.

Works against kairosmq brokers and Apache RocketMQ 4.x alike::

    async with Producer("PG", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))

    consumer = PushConsumer("CG", namesrv="127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")   # or MessageSelector.sql("a > 5")
    consumer.register_listener(on_messages)   # async or sync fn(msgs, context)
    await consumer.start()
"""

from __future__ import annotations

from .consume import ConsumeContext
from .consumer import MessageModel, PushConsumer
from .errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    ConnectionClosed,
    InvalidName,
    MessageError,
    MessageTooLarge,
    NoRouteError,
    RequestTimeout,
)
from .message import (
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
    format_host,
)
from .offset_store import ConsumeFromWhere
from .producer import Producer, hash_selector
from .selector import MessageSelector

__all__ = [
    "BrokerError",
    "ClientError",
    "ClientStateError",
    "ConnectionClosed",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "InvalidName",
    "Message",
    "MessageError",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "MessageTooLarge",
    "NoRouteError",
    "Producer",
    "PushConsumer",
    "RequestTimeout",
    "SendResult",
    "SendStatus",
    "format_host",
    "hash_selector",
]
