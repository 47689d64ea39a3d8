"""Send 100 messages to a kairosmq (or Apache RocketMQ) broker.

Start a broker with defaults first (``kairosmq broker``: name server 127.0.0.1:9876), then::

    python examples/producer.py [--namesrv 127.0.0.1:9876] [--topic TopicTest] [-n 100]

The name server address can also come from ``NAMESRV_ADDR`` (RocketMQ's variable).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from kairosmq.client import Message, Producer, SendResult


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
        help="name server host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    ap.add_argument("--topic", default="TopicTest")
    ap.add_argument("-n", type=int, default=100)
    args = ap.parse_args()

    async with Producer("example_producer_group", args.namesrv) as producer:
        # awaited sends, a few at a time
        results: list[SendResult] = await asyncio.gather(
            *(
                producer.send(
                    Message(
                        args.topic,
                        f"Hello kairosmq {i}".encode(),
                        tags="TagA" if i % 2 == 0 else "TagB",
                        keys=f"key-{i}",
                    )
                )
                for i in range(args.n)
            )
        )
        print(f"sent {len(results)} messages; first: {results[0]}")
        # one delayed message (level 3 = 10 s with RocketMQ's default levels)
        delayed = await producer.send(Message(args.topic, b"see you in 10s", delay_level=3))
        print(f"delayed message {delayed.msg_id} stored at queue offset {delayed.queue_offset}")


if __name__ == "__main__":
    asyncio.run(main())
