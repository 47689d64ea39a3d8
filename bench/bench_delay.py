"""Delayed-delivery precision: messages become due at a sustained rate R per second.

Usage:  python bench/bench_delay.py --rate 1000 --seconds 10 [--level 1] [--delay-levels "1s 2s"]
        python bench/bench_delay.py --rss-pending 1000000   # RSS and restart time with a backlog

A broker process (fresh data dir, default logging) and this process (paced sender +
long-poll consumer on every queue of the real topic) share the machine. Lateness is
reported two ways:
  broker   = the broker's own ``message.delivered.lateness_ms`` (re-put time - due time,
             sub-millisecond), read from its JSON log after the run
  observed = time the consumer received it - due time (includes the pull round trip and
             this process's decoding)
Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
from bench_broker import free_port, rss_mb, wait_port  # noqa: E402
from kairosmq.protocol.codec import FrameReader, encode_command  # noqa: E402
from kairosmq.protocol.codes import PULL_SUSPEND, RequestCode, SerializeType  # noqa: E402
from kairosmq.protocol.commands import request  # noqa: E402
from kairosmq.protocol.message import summarize_records  # noqa: E402
from kairosmq.protocol.properties import encode_properties  # noqa: E402
from loadgen import run_load  # noqa: E402

QUEUES = 4
_DUE = b"KAIROS_DELIVER_MS\x01"


def pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


class Peer(asyncio.Protocol):
    def __init__(self) -> None:
        self.frames = FrameReader()
        self.waiters: dict[int, asyncio.Future] = {}
        self.opaque = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.frames.feed(data)
        for cmd in self.frames:
            fut = self.waiters.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)

    def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> asyncio.Future:
        self.opaque += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiters[self.opaque] = fut
        assert self.transport is not None
        self.transport.write(
            encode_command(
                request(code, ext, body, opaque=self.opaque, serialize_type=SerializeType.ROCKETMQ)
            )
        )
        return fut


async def connect(port: int) -> Peer:
    _t, p = await asyncio.get_running_loop().create_connection(Peer, "127.0.0.1", port)
    return p


async def sender(port: int, topic: str, rate: int, seconds: float, level: int) -> int:
    peer = await connect(port)
    sent = 0
    pending: list[asyncio.Future] = []
    t0 = time.perf_counter()
    tick = 0.005
    while time.perf_counter() - t0 < seconds:
        due = int((time.perf_counter() - t0) * rate) - sent
        for _ in range(max(0, due)):
            props = encode_properties({"DELAY": str(level), "UNIQ_KEY": f"B{sent:08d}"})
            pending.append(
                peer.call(
                    RequestCode.SEND_MESSAGE_V2,
                    {
                        "a": "bench",
                        "b": topic,
                        "c": "TBW102",
                        "d": "4",
                        "e": str(sent % QUEUES),
                        "f": "0",
                        "g": str(int(time.time() * 1000)),
                        "h": "0",
                        "i": props,
                    },
                    b"x" * 1024,
                )
            )
            sent += 1
        if len(pending) > 5000:
            await asyncio.gather(*pending)
            pending.clear()
        await asyncio.sleep(tick)
    await asyncio.gather(*pending)
    return sent


async def consumer(
    port: int,
    topic: str,
    queue: int,
    expect: list[int],
    broker_late: list[float],
    observed_late: list[float],
) -> None:
    peer = await connect(port)
    offset = 0
    while len(broker_late) < expect[0]:
        r = await peer.call(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "bench",
                "topic": topic,
                "queueId": str(queue),
                "queueOffset": str(offset),
                "maxMsgNums": "64",
                "sysFlag": str(PULL_SUSPEND),
                "commitOffset": "0",
                "suspendTimeoutMillis": "1000",
                "subVersion": "0",
            },
        )
        now = time.time() * 1000
        if r.code == 0:
            body = r.body  # lean: find the due time in each record, no full decode
            pos = 0
            for s in summarize_records(body):
                i = body.find(_DUE, pos, pos + s.size)
                j = body.find(b"\x02", i, pos + s.size)
                due = int(body[i + len(_DUE) : pos + s.size if j < 0 else j])
                broker_late.append(s.store_timestamp - due)
                observed_late.append(now - due)
                pos += s.size
            offset = int(r.ext_fields["nextBeginOffset"])
        elif r.code in (20, 21):
            offset = int(r.ext_fields["nextBeginOffset"])


def start_broker(
    data: Path, port: int, levels: str, message_logs: bool = False
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "kairosmq.server",
        "broker",
        "--port",
        str(port),
        "--namesrv-port",
        str(free_port()),
        "--data-dir",
        str(data),
        "--no-vip-channel",
        "--delay-levels",
        levels,
        "--log-format",
        "json",
    ]
    if not message_logs:
        cmd.append("--no-message-logs")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


async def precision(
    port: int, rate: int, seconds: float, level: int
) -> tuple[int, float, list[float], list[float]]:
    topic = "DelayBench"
    broker_late: list[float] = []
    observed_late: list[float] = []
    expect = [10**12]
    consumers = [
        asyncio.ensure_future(consumer(port, topic, q, expect, broker_late, observed_late))
        for q in range(QUEUES)
    ]
    t0 = time.perf_counter()
    sent = await sender(port, topic, rate, seconds, level)
    expect[0] = sent
    send_elapsed = time.perf_counter() - t0
    deadline = time.monotonic() + 60
    while len(broker_late) < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for c in consumers:
        c.cancel()
    return sent, send_elapsed, sorted(observed_late), sorted(broker_late)


def broker_lateness(log_dir: Path) -> list[float]:
    import orjson

    out = []
    for f in sorted(log_dir.glob("broker*.jsonl")):
        for line in f.read_bytes().splitlines():
            if b'"message.delivered"' in line:
                out.append(float(orjson.loads(line)["lateness_ms"]))
    return sorted(out)


def report(rate: int, sent: int, send_elapsed: float, b: list[float], o: list[float]) -> None:
    print(
        f"rate target {rate}/s: sent {sent} in {send_elapsed:.1f}s "
        f"({sent / send_elapsed:,.0f}/s), delivered {len(b)}"
    )
    early = sum(1 for x in b if x < 0)
    print(
        f"  broker   lateness ms: p50 {pct(b, 0.5):.2f}  p99 {pct(b, 0.99):.2f}  "
        f"p99.9 {pct(b, 0.999):.2f}  max {b[-1] if b else float('nan'):.2f}  early {early}"
    )
    print(
        f"  observed lateness ms: p50 {pct(o, 0.5):.2f}  p99 {pct(o, 0.99):.2f}  "
        f"p99.9 {pct(o, 0.999):.2f}  max {o[-1] if o else float('nan'):.2f}"
    )


def backlog(count: int, levels: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        data = Path(tmp) / "data"
        proc = start_broker(data, port, levels)
        base = rss_mb(proc.pid)
        n_levels = len(levels.split())
        t0 = time.perf_counter()
        r = uvloop.run(
            run_load(
                "127.0.0.1",
                port,
                total=count,
                concurrency=256,
                connections=4,
                body_size=100,
                topic="Backlog",
                props=f"DELAY\x01{n_levels}",
            )
        )
        print(
            f"stored {int(r['acked']):,} delayed messages in {time.perf_counter() - t0:.1f}s "
            f"({r['rate']:,.0f}/s)"
        )
        print(f"broker RSS: {base:.1f} MB empty, {rss_mb(proc.pid):.1f} MB with {count:,} pending")
        for how in ("SIGTERM", "SIGKILL"):
            if how == "SIGTERM":
                proc.terminate()
            else:
                proc.kill()
            proc.wait()
            t1 = time.perf_counter()
            proc = start_broker(data, port, levels)
            print(
                f"restart after {how} to serving: {time.perf_counter() - t1:.2f}s, "
                f"RSS {rss_mb(proc.pid):.1f} MB"
            )
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--delay-levels", default="1s 2s 5s 10s 2h")
    ap.add_argument("--rss-pending", type=int, default=0)
    ap.add_argument(
        "--no-message-logs",
        action="store_true",
        help="broker without per-message log events (lateness in whole ms)",
    )
    args = ap.parse_args()
    if args.rss_pending:
        backlog(args.rss_pending, args.delay_levels)
        return
    for rate in args.rate:
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            data = Path(tmp) / "data"
            logs = not args.no_message_logs
            proc = start_broker(data, port, args.delay_levels, message_logs=logs)
            try:
                sent, elapsed, observed, from_records = uvloop.run(
                    precision(port, rate, args.seconds, args.level)
                )
            finally:
                proc.terminate()
                proc.wait()
            # without message logs: whole-ms lateness from the re-put records' store times
            broker = broker_lateness(data / "logs") if logs else from_records
            report(rate, sent, elapsed, broker, observed)


if __name__ == "__main__":
    main()
