"""Event-loop stalls of a broker under steady sends, and how many fall inside a checkpoint.

The broker runs in this process (its defaults, message logs on into a file sink, the
garbage-collector settings of ``kairosmq broker``) with a checkpoint every
``--checkpoint-interval`` seconds; one ``Connection`` is fed plain 1 KiB sends
(``--rate`` per second, over 16 topics) and a probe task sleeps 1 ms in a loop, recording
how late each wake-up is. A stall is a wake-up more than 5 ms late; it is counted "in a
checkpoint" when it overlaps the checkpoint thread's persist call, which syncs the commit
log, the consume queues and the key index. A timer firing on this loop is late by as
much as the loop stalls, so this is the part of timer lateness the broker's own
background work causes, measured without the network or a consumer. Compare two trees
with ``PYTHONPATH`` (docs/performance.md, "How it is measured"), alternating runs; a bare-loop line
(no broker) gives this machine's own floor at the time.

    python bench/bench_loop_stalls.py [--seconds 12] [--rate 1000] [--checkpoint-interval 1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from bench_broker_cpu import CountingTransport, send_frame
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig
from kairosmq.server.observe.logs import close_sinks, configure_logging
from kairosmq.server.remoting.transport import Connection

STALL_S = 0.005


async def probe(lags: list[float], stalls: list[tuple[float, float]], until: float) -> None:
    """Sleep 1 ms at a time until ``until``; record each wake-up's lateness."""
    while time.perf_counter() < until:
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        lags.append(now - t - 0.001)
        if now - t - 0.001 > STALL_S:
            stalls.append((t, now))


def summary(
    name: str,
    lags: list[float],
    stalls: list[tuple[float, float]],
    spans: list[tuple[float, float]] | None,
) -> str:
    lags.sort()
    n = len(lags)
    line = (
        f"{name:10s} wake-ups {n}  late p50 {lags[n // 2] * 1e3:.2f}  p99 "
        f"{lags[int(n * 0.99)] * 1e3:.2f}  max {lags[-1] * 1e3:.1f} ms  stalls > 5 ms "
        f"{len(stalls)} (> 10 ms {sum(1 for x in lags if x > 0.01)})"
    )
    if spans is not None:
        inside = sum(1 for a, z in stalls if any(a < s1 and z > s0 for s0, s1 in spans))
        line += f", {inside} in a checkpoint ({len(spans)} checkpoints)"
    return line


async def with_broker(data: Path, seconds: float, rate: int, interval: float) -> str:
    configure_logging(json=True, log_dir=data / "logs", stdout=False)
    broker = Broker(
        BrokerConfig(
            data_dir=data / "store",
            port=0,
            namesrv_port=0,
            vip_channel=False,
            checkpoint_interval=interval,
        )
    )
    await broker.start()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)  # as ``kairosmq broker`` (server/cli.py)
    spans: list[tuple[float, float]] = []
    persist = broker._persist

    def timed_persist(*args: Any) -> None:  # in the checkpoint thread
        t0 = time.perf_counter()
        try:
            persist(*args)
        finally:
            spans.append((t0, time.perf_counter()))

    broker._persist = timed_persist  # type: ignore[method-assign]
    conn = Connection(broker.server, broker.broker_handlers, "bench")
    conn.connection_made(CountingTransport())  # type: ignore[arg-type]
    lags: list[float] = []
    stalls: list[tuple[float, float]] = []
    until = time.perf_counter() + seconds
    task = asyncio.ensure_future(probe(lags, stalls, until))
    i, batch = 0, 4
    start = time.perf_counter()
    while time.perf_counter() < until:
        for _ in range(batch):
            conn.data_received(send_frame(i, topic=f"StallTopic{i % 16}", delay=False))
            i += 1
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
    await task
    await broker.stop("bench done")
    close_sinks()
    return summary("broker", lags, stalls, spans) + f"; {i / seconds:.0f} sends/s"


async def bare(seconds: float) -> str:
    lags: list[float] = []
    stalls: list[tuple[float, float]] = []
    await probe(lags, stalls, time.perf_counter() + seconds)
    return summary("bare loop", lags, stalls, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--rate", type=int, default=1000, help="plain sends per second")
    ap.add_argument("--checkpoint-interval", type=float, default=1.0)
    ap.add_argument("--workdir", type=Path, default=None, help="parent of the data dir")
    a = ap.parse_args()
    print(uvloop.run(bare(a.seconds / 2)))
    with tempfile.TemporaryDirectory(dir=a.workdir) as d:
        print(uvloop.run(with_broker(Path(d), a.seconds, a.rate, a.checkpoint_interval)))


if __name__ == "__main__":
    main()
