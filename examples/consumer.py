"""Consume messages from a kairosmq (or Apache RocketMQ) broker until interrupted
(or until ``-n`` messages arrived).

Start a broker with defaults (``kairosmq broker``), run ``examples/producer.py``, then::

    python examples/consumer.py [--namesrv 127.0.0.1:9876] [--topic TopicTest] [-n 100]

The name server address can also come from ``NAMESRV_ADDR`` (RocketMQ's variable).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageExt,
    PushConsumer,
)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
        help="name server host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    ap.add_argument("--topic", default="TopicTest")
    ap.add_argument("--tags", default="*", help="tag expression, e.g. 'TagA || TagB'")
    ap.add_argument("-n", type=int, default=100, help="stop after this many (0: never)")
    args = ap.parse_args()

    received = 0
    enough = asyncio.Event()

    async def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        nonlocal received
        for m in msgs:
            received += 1
            print(
                f"[{received}] {m.msg_id} {ctx.message_queue} tags={m.tags} "
                f"body={m.body.decode(errors='replace')!r}"
            )
        if args.n and received >= args.n:
            enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "example_consumer_group", args.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(args.topic, args.tags)
    consumer.register_listener(on_messages)
    async with consumer:
        try:
            await enough.wait()
        except asyncio.CancelledError:
            pass
    print(f"consumed {received} messages")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
