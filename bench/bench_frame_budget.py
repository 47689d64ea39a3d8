"""Broker RSS while many connections hold unfinished frames (``partial_frame_budget``).

Starts a ``kairosmq broker`` process, then ``--connections`` sockets each send the 8-byte
prefix of a 16 MiB frame and ``--each-mib`` MiB of it, never the rest, before any request
(the audit's row 7 traffic: 16 x 15 MiB took a broker from 159 to 386 MB). Sockets stay
open until the end. A sampler reads the broker's VmRSS from /proc/<pid>/status every
20 ms; printed: RSS before, the peak while the traffic ran, after it, the bytes the
broker reports holding (``kairosmq_partial_frame_bytes``) and the connections the budget
closed. Compare ``--budget`` values (a huge one shows the unbounded growth: keep
``--connections`` small then, 64 x 15 MiB is ~1 GB).

    python bench/bench_frame_budget.py [--connections 1000] [--each-mib 15] [--budget BYTES]
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "_total "):
                return float(line.split()[-1])
    return float("nan")


def attack(port: int, count: int, each: int, out: list[socket.socket]) -> None:
    chunk = b"\x00" * each
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            continue
        try:
            s.sendall(struct.pack(">II", 16 * MIB - 8, 200) + chunk)
        except OSError:
            pass  # closed by the budget
        out.append(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--each-mib", type=float, default=15.0)
    ap.add_argument(
        "--budget",
        type=int,
        default=None,
        help="--partial-frame-budget (default: the broker's default)",
    )
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    port, nport, mport = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="kq-budget-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(port),
            "--namesrv-port",
            str(nport),
            "--no-vip-channel",
            "--data-dir",
            tmp,
            "--no-log-file",
            "--log-level",
            "error",
            "--segment-size-mb",
            "16",
            "--metrics-port",
            str(mport),
        ]
        if args.budget is not None:
            cmd += ["--partial-frame-budget", str(args.budget)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 20
            while time.time() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            time.sleep(0.5)
            base = rss(proc.pid)
            peak = [base]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], rss(proc.pid))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            socks: list[socket.socket] = []
            each = int(args.each_mib * MIB)
            per = -(-args.connections // args.threads)
            t0 = time.monotonic()
            threads = [
                threading.Thread(
                    target=attack, args=(port, min(per, args.connections - i * per), each, socks)
                )
                for i in range(args.threads)
                if args.connections - i * per > 0
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.monotonic() - t0
            time.sleep(1.0)
            done.set()
            sampler.join()
            after = rss(proc.pid)
            held = metric(mport, "kairosmq_partial_frame_bytes")
            closed = metric(mport, "kairosmq_connections_over_budget")
            budget = "default" if args.budget is None else f"{args.budget / MIB:g} MiB"
            print(
                f"budget {budget}: {args.connections} connections x {args.each_mib:g} MiB "
                f"sent in {took:.1f}s; broker RSS {base / MIB:.0f} MiB before, peak "
                f"{peak[0] / MIB:.0f} MiB, {after / MIB:.0f} MiB after; holding "
                f"{held / MIB:.1f} MiB; {closed:.0f} connections closed by the budget"
            )
            for s in socks:
                s.close()
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
