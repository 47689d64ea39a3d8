"""Delay over the RocketMQ 4.x protocol: delay level 1 (= 1 s), for kairosmq and Apache RocketMQ.

Owns: the producer and consumer sides of the ``kairosmq`` and ``rocketmq`` systems.

producer: SEND_MESSAGE_V2 (code 310, the stock Java client's request) with a JSON header; the
          properties carry ``DELAY=1``, a ``UNIQ_KEY`` and ``WAIT=true`` like a stock client's.
          ``send`` returns when the broker's SUCCESS answer arrives (the message is stored);
          one connection, many sends in flight.
consumer: one PULL_MESSAGE long-poll loop per queue (suspend 15 s, up to 32 records a pull),
          on one connection, from offset 0 of the topic's 4 queues.

Invariants: a non-SUCCESS send answer raises (counted as a send error, never as sent); the
consumer hands every record body to the callback in queue order and moves to
``nextBeginOffset`` only after it did.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from .remoting import (
    PULL_MESSAGE,
    PULL_NOT_FOUND,
    PULL_OFFSET_MOVED,
    PULL_RETRY_IMMEDIATELY,
    PULL_SUSPEND_AND_SUBSCRIPTION,
    SEND_MESSAGE_V2,
    SUCCESS,
    RemotingClient,
    decode_bodies,
)

# RocketMQ 4's default messageDelayLevel starts "1s 5s 10s ..."; kairosmq's default level 1 is 1 s.
LEVEL_FOR_MS = {1000: 1, 5000: 2, 10000: 3, 30000: 4}
QUEUES = 4


def _props(d: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in d.items())


class RocketMQPeer:
    def __init__(self, opts: dict[str, str]) -> None:
        self.host = opts.get("host", "127.0.0.1")
        self.port = int(opts["port"])
        self.topic = opts.get("topic", "PeerBench")
        self.group = opts.get("group", "peer_bench")
        self.client = RemotingClient()
        self.rr = itertools.count()
        self.prefix = os.urandom(6).hex().upper()
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        self.errors: list[str] = []

    async def start(self, role: str) -> None:
        await self.client.open(self.host, self.port)

    async def send(self, delay_ms: int, body: bytes) -> None:
        i = next(self.rr)
        props = _props(
            {
                "DELAY": str(LEVEL_FOR_MS[delay_ms]),
                "UNIQ_KEY": f"{self.prefix}{i:012X}",
                "WAIT": "true",
            }
        )
        hdr, _ = await self.client.call(
            SEND_MESSAGE_V2,
            {
                "a": self.group,
                "b": self.topic,
                "c": "TBW102",
                "d": QUEUES,
                "e": i % QUEUES,
                "f": 0,
                "g": int(time.time() * 1000),
                "h": 0,
                "i": props,
                "j": 0,
                "k": "false",
                "m": "false",
            },
            body,
        )
        if hdr.get("code") != SUCCESS:
            raise RuntimeError(f"send: code={hdr.get('code')} remark={hdr.get('remark')}")

    async def consume(self, callback: Callable[[bytes], None]) -> None:
        async def pull_loop(qid: int) -> None:
            offset = 0
            while not self.stopping:
                try:
                    hdr, body = await self.client.call(
                        PULL_MESSAGE,
                        {
                            "consumerGroup": self.group,
                            "topic": self.topic,
                            "queueId": qid,
                            "queueOffset": offset,
                            "maxMsgNums": 32,
                            "sysFlag": PULL_SUSPEND_AND_SUBSCRIPTION,
                            "commitOffset": 0,
                            "suspendTimeoutMillis": 15000,
                            "subscription": "*",
                            "subVersion": 0,
                            "expressionType": "TAG",
                        },
                        timeout=30,
                    )
                except TimeoutError:
                    continue
                code = hdr.get("code")
                ext: dict[str, Any] = hdr.get("extFields") or {}
                if code == SUCCESS:
                    for b in decode_bodies(body):
                        callback(b)
                if code in (SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED):
                    if "nextBeginOffset" in ext:
                        offset = int(ext["nextBeginOffset"])
                else:  # 17 = the topic does not exist yet: the producer's first send makes it
                    if code != 17 and len(self.errors) < 5:
                        self.errors.append(f"pull q{qid}: {code} {hdr.get('remark')}")
                    await asyncio.sleep(0.05)

        self.tasks = [asyncio.ensure_future(pull_loop(q)) for q in range(QUEUES)]

    async def stop(self) -> None:
        self.stopping = True
        for t in self.tasks:
            t.cancel()
        await self.client.close()
