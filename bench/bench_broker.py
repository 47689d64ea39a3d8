"""Acked send throughput of the broker vs. a null server with the same codec (the ceiling).

Usage:  python bench/bench_broker.py [--total 200000] [--concurrency 256] [--connections 4]
                                     [--rss-messages 1000000] [--message-logs]
Starts each server as its own process (the load generator runs in this one), prints
msgs/s, p50/p99 latency, the ratio broker/ceiling, and the broker's RSS before and after
storing ``--rss-messages`` small messages. Figures, not assertions: machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
from loadgen import run_load  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_broker(data: Path, port: int, message_logs: bool) -> subprocess.Popen[bytes]:
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
        "--log-format",
        "json",
    ]
    if not message_logs:
        cmd.append("--no-message-logs")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def report(name: str, r: dict[str, float]) -> None:
    print(
        f"{name:<28} {r['rate']:>10,.0f} msg/s   p50 {r['p50_ms']:6.2f} ms   "
        f"p99 {r['p99_ms']:6.2f} ms   acked {int(r['acked'])} errors {int(r['errors'])}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=200_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--rss-messages", type=int, default=1_000_000)
    ap.add_argument(
        "--binary",
        action="store_true",
        help="ROCKETMQ binary headers (default: JSON, what stock clients send)",
    )
    ap.add_argument(
        "--message-logs",
        action="store_true",
        help="keep per-message log events on (the default broker setting)",
    )
    args = ap.parse_args()
    kw = dict(
        total=args.total,
        concurrency=args.concurrency,
        connections=args.connections,
        body_size=args.body,
        topic="BenchTopic",
        binary=args.binary,
    )

    port = free_port()
    null = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "null_server.py"), str(port)],
        stdout=subprocess.PIPE,
    )
    wait_port(port)
    ceiling = uvloop.run(run_load("127.0.0.1", port, **kw))
    stop(null)
    report("null server (ceiling)", ceiling)

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_broker(Path(tmp) / "data", port, args.message_logs)
        try:
            result = uvloop.run(run_load("127.0.0.1", port, **kw))
            report("broker ASYNC_FLUSH" + (" +msglogs" if args.message_logs else ""), result)
            print(f"ratio broker/ceiling: {result['rate'] / ceiling['rate']:.1%}")
            if args.rss_messages:
                before = rss_mb(proc.pid)
                uvloop.run(
                    run_load(
                        "127.0.0.1",
                        port,
                        total=args.rss_messages,
                        concurrency=args.concurrency,
                        connections=args.connections,
                        body_size=100,
                        topic="RssTopic",
                    )
                )
                after = rss_mb(proc.pid)
                print(
                    f"broker RSS: {before:.1f} MB before, {after:.1f} MB after storing "
                    f"{args.rss_messages:,} more 100-byte messages"
                )
        finally:
            stop(proc)
    os.environ.pop("KAIROS_BENCH", None)


if __name__ == "__main__":
    main()
