"""kairosmq.client: asyncio producer and push consumer for the RocketMQ 4.x remoting protocol.

Works against kairosmq brokers and Apache RocketMQ 4.x alike::

    async with Producer("PG", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))

    consumer = PushConsumer("CG", namesrv="127.0.0.1:9876", pull_batch_size=16)
    # or PushConsumer(options=PushConsumerOptions(consumer_group="CG", ...)); docs/client.md
    consumer.subscribe("TopicTest", "TagA || TagB")   # or MessageSelector.sql("a > 5")
    consumer.register_listener(on_messages)   # async or sync fn(msgs, context)
    await consumer.start()

The code lives in two rooms: ``producer/`` (Producer, SendRequest and selectors, the fault
strategy, request-reply, TransactionProducer) and ``consumer/`` (PushConsumer and the
parts it holds: rebalance, consume services, process queues, pull, offsets, locks,
selectors, the broker's callbacks); the modules at this level are what both share
(messages, options, errors, the lifecycle, remoting, routes, credentials) and the
``kairosmq admin`` client. Import from here; the module paths are not the API.
"""

from __future__ import annotations

from .consumer.consume_service import ConsumeContext
from .consumer.push_consumer import PushConsumer
from .consumer.selector import MessageSelector
from .errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    ConnectionClosed,
    InvalidName,
    MessageError,
    MessageTooLarge,
    NoRouteError,
    RecallFailed,
    RequestTimeout,
)
from .lifecycle import ServiceState
from .message import (
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
    format_host,
)
from .options import (
    ClientConfig,
    ConsumeFromWhere,
    MessageModel,
    ProducerOptions,
    PushConsumerOptions,
)
from .producer.producer import Producer
from .producer.request import ReplyTimeout, create_reply, get_reply_to_client
from .producer.send import SendRequest, hash_selector
from .producer.transaction import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "BrokerError",
    "ClientConfig",
    "ClientError",
    "ClientStateError",
    "ConnectionClosed",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "InvalidName",
    "LocalTransactionState",
    "Message",
    "MessageError",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "MessageTooLarge",
    "NoRouteError",
    "Producer",
    "ProducerOptions",
    "PushConsumer",
    "PushConsumerOptions",
    "RecallFailed",
    "ReplyTimeout",
    "RequestTimeout",
    "SendRequest",
    "SendResult",
    "SendStatus",
    "ServiceState",
    "TransactionProducer",
    "TransactionSendResult",
    "format_host",
    "get_reply_to_client",
    "create_reply",
    "hash_selector",
]
