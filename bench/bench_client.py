"""Client benchmark: acked send throughput of Producer and drain rate of PushConsumer.

Usage::

    python bench/bench_client.py                      # broker in a subprocess (own core)
    python bench/bench_client.py --in-process         # broker on the client's event loop
    python bench/bench_client.py --namesrv 127.0.0.1:9876   # a running broker

Phase 1 keeps ``--inflight`` sends of ``--body`` bytes in flight until ``--messages``
are acknowledged and prints acked msgs/s. Phase 2 starts a PushConsumer (new group,
FIRST_OFFSET) on that backlog and prints msgs/s until all are consumed: with an async
listener, or with ``--sync-listener`` a plain function, which runs in the consumer's
thread pool (the usual listener of a RocketMQ user). Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvloop
from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_port(port: int, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.1)


async def produce(namesrv: str, topic: str, n: int, inflight: int, body: bytes) -> float:
    async with Producer("bench_pg", namesrv) as producer:
        await producer.send(Message(topic, body))  # route lookup + topic creation
        remaining = n

        async def sender() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await producer.send(Message(topic, body))

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(sender() for _ in range(inflight)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    rate = n / elapsed
    print(
        f"send:    {n} x {len(body)} B, {inflight} in flight: {elapsed:.2f}s  {rate:,.0f} msgs/s"
        f"  (this process: {cpu / n * 1e6:.1f} us CPU/msg)"
    )
    return rate


async def consume(namesrv: str, topic: str, n: int, batch: int, sync: bool = False) -> float:
    done = asyncio.Event()
    count = 0
    first: float | None = None
    loop = asyncio.get_running_loop()

    def counted(msgs: list[MessageExt]) -> ConsumeStatus:
        nonlocal count, first
        if first is None:
            first = time.perf_counter()
        count += len(msgs)
        if count >= n:
            loop.call_soon_threadsafe(done.set)
        return ConsumeStatus.CONSUME_SUCCESS

    async def async_listener(msgs: list[MessageExt], _ctx: ConsumeContext) -> ConsumeStatus:
        return counted(msgs)

    def sync_listener(msgs: list[MessageExt], _ctx: ConsumeContext) -> ConsumeStatus:
        with lock:  # the pool's threads
            return counted(msgs)

    lock = threading.Lock()

    consumer = PushConsumer(
        f"bench_cg_{os.getpid()}_{time.time_ns()}",
        namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        consume_message_batch_max_size=batch,
        pull_batch_size=32,
    )
    consumer.subscribe(topic)
    consumer.register_listener(sync_listener if sync else async_listener)
    t0, c0 = time.perf_counter(), time.process_time()
    await consumer.start()
    await done.wait()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    await consumer.shutdown()
    rate = count / elapsed
    start_s = (first or t0) - t0
    steady = count / (elapsed - start_s) if elapsed > start_s else rate
    print(
        f"consume: {count} msgs ({'sync' if sync else 'async'} listener, batch {batch}): "
        f"{elapsed:.2f}s  {rate:,.0f} msgs/s"
        f"  (this process: {cpu / count * 1e6:.1f} us CPU/msg); first message after "
        f"{start_s:.2f}s (start-up), then {steady:,.0f} msgs/s"
    )
    return rate


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namesrv", help="use a running broker's name server")
    ap.add_argument("--in-process", action="store_true", help="broker on this event loop")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1, help="consume_message_batch_max_size")
    ap.add_argument("--topic", default=f"BenchTopic{os.getpid()}")
    ap.add_argument(
        "--sync-listener", action="store_true", help="a plain function (thread pool) listener"
    )
    args = ap.parse_args(argv)
    body = os.urandom(args.body // 2).hex().encode()[: args.body]
    proc: asyncio.subprocess.Process | None = None
    broker = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.namesrv:
            namesrv = args.namesrv
        elif args.in_process:
            from kairosmq.server.broker import Broker
            from kairosmq.server.config import BrokerConfig

            broker = Broker(
                BrokerConfig(
                    data_dir=Path(tmp),
                    port=0,
                    namesrv_port=0,
                    vip_channel=False,
                    log_messages=False,
                )
            )
            await broker.start()
            namesrv = broker.namesrv_address
        else:
            port, ns_port = _free_port(), _free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "kairosmq.server",
                "broker",
                "--port",
                str(port),
                "--namesrv-port",
                str(ns_port),
                "--data-dir",
                tmp,
                "--no-message-logs",
                "--no-vip-channel",
                "--no-log-file",
                "--log-level",
                "WARNING",
                stdout=asyncio.subprocess.DEVNULL,
            )
            await _wait_port(ns_port)
            await _wait_port(port)
            namesrv = f"127.0.0.1:{ns_port}"
        try:
            await produce(namesrv, args.topic, args.messages, args.inflight, body)
            await consume(namesrv, args.topic, args.messages + 1, args.batch, args.sync_listener)
        finally:
            if broker is not None:
                await broker.stop()
            if proc is not None:
                proc.terminate()
                await proc.wait()


if __name__ == "__main__":
    uvloop.run(main())
