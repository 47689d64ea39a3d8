"""Side-by-side delayed-delivery benchmark: kairosmq vs Redis, RabbitMQ and Apache RocketMQ.

Owns: the client-side drivers of every system (one module each), the producer/consumer agent
processes (``agent``), the server lifecycles (``servers``) and the statistics (``stats``).
``bench/bench_peers.py`` is the entry point; see ``bench/peers/README.md``.

Invariants: the workload is identical for every system (N messages, 1 KiB, each delayed 1 s,
persistent, acknowledged); producer and consumer run in their own processes, never the
broker's; every server is started on 127.0.0.1 with a fresh data dir and stopped by its pid.
The drivers run in a separate bench venv (redis, aio-pika, uvloop) and do not import kairosmq.
"""

from __future__ import annotations

import importlib
from typing import Any

# system name -> "module:Class" (client side of the system)
DRIVERS = {
    "kairosmq": "peers.rocketmq_peer:RocketMQPeer",
    "rocketmq": "peers.rocketmq_peer:RocketMQPeer",
    "redis": "peers.redis_zset:RedisZsetPeer",
    "redis-pipelined": "peers.redis_zset:RedisPipelinedPeer",
    "rabbitmq": "peers.rabbit_dlx:RabbitDlxPeer",
}


def load_driver(system: str, opts: dict[str, str]) -> Any:
    mod, cls = DRIVERS[system].split(":")
    return getattr(importlib.import_module(mod), cls)(opts)
