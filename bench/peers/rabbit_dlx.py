"""RabbitMQ delay by per-queue TTL + dead-letter exchange (no delayed-message plugin).

Owns: the producer and consumer sides of the ``rabbitmq`` system (aio-pika).

topology (all durable): queue ``bench.delay.<ms>`` with ``x-message-ttl=<ms>``,
``x-dead-letter-exchange=bench.dlx``, ``x-dead-letter-routing-key=bench.ready`` and no consumer;
direct exchange ``bench.dlx`` -> queue ``bench.ready``, which the consumer reads.
producer: persistent publish (delivery_mode 2) on a channel with publisher confirms; ``send``
          returns when the broker's confirm arrives.
consumer: ``basic.consume`` on ``bench.ready``, auto-ack, prefetch 1,000.

Invariants: one queue per distinct delay (a queue expires only at its head, so mixing delays in
one queue would block short delays behind long ones); the TTL clock starts at enqueue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aio_pika

DLX, READY = "bench.dlx", "bench.ready"


class RabbitDlxPeer:
    def __init__(self, opts: dict[str, str]) -> None:
        self.url = opts["url"]
        self.delay_ms = int(opts["delay_ms"])
        self.errors: list[str] = []
        self.conn: Any = None

    async def start(self, role: str) -> None:
        self.conn = await aio_pika.connect(self.url)
        self.ch = await self.conn.channel(publisher_confirms=True)
        dlx = await self.ch.declare_exchange(DLX, aio_pika.ExchangeType.DIRECT, durable=True)
        self.ready = await self.ch.declare_queue(READY, durable=True)
        await self.ready.bind(dlx, routing_key=READY)
        self.delay_queue = f"bench.delay.{self.delay_ms}"
        dq = await self.ch.declare_queue(
            self.delay_queue,
            durable=True,
            arguments={
                "x-message-ttl": self.delay_ms,
                "x-dead-letter-exchange": DLX,
                "x-dead-letter-routing-key": READY,
            },
        )
        if role == "consumer":
            await dq.purge()
            await self.ready.purge()

    async def send(self, delay_ms: int, body: bytes) -> None:
        await self.ch.default_exchange.publish(
            aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=self.delay_queue,
        )

    async def consume(self, callback: Callable[[bytes], None]) -> None:
        await self.ch.set_qos(prefetch_count=1000)

        async def on_message(msg: Any) -> None:
            callback(msg.body)

        await self.ready.consume(on_message, no_ack=True)

    async def stop(self) -> None:
        if self.conn is not None:
            await self.conn.close()
