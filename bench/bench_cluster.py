"""Scale-out on one machine: acked delayed sends/s with 1 vs 2 vs N broker processes.

Usage (from the repository root; the machine is shared, so run it niced)::

    nice -n 10 .venv/bin/python bench/bench_cluster.py                 # brokers 1,2,3; 4 producers
    nice -n 10 .venv/bin/python bench/bench_cluster.py --brokers 1,2,4 --producers 6 --seconds 20

For each broker count N, in the same run: ``kairosmq cluster --brokers N`` on free ports in a
fresh temp dir (name server + N broker processes), topic ``BenchCluster`` created on every
broker (``--queues`` per broker), then M producer processes (``--producers``; each the
bundled ``kairosmq.client.Producer`` with ``--inflight`` sends in flight) send 1 KiB
messages, each with delay level ``--delay-level`` (default 4 = 30 s, so none fires during
the window: this measures the acknowledged delayed-send path), through the cluster's name
server. All producers share one clock window: ``--warmup`` s, then ``--seconds`` s counted.
Prints one row per N (acked sends/s, per broker, ratio to N=1, p50/p99 send latency, failed
sends; with ``--repeat R`` the counts run R times interleaved and the median run is shown) and
the load average before and after: the figures are printed, not asserted.

Owns: this orchestration only (the cluster is the real command; producers are separate
processes: ``--worker`` mode of this script).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOPIC = "BenchCluster"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_base(n: int) -> int:
    for _ in range(200):
        p = _free_port()
        ok = p + 10 * n < 65000
        for i in range(n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p + 10 * i))
                except OSError:
                    ok = False
        if ok:
            return p
    raise RuntimeError("no free port range")


async def _call(addr: str, code: int, ext: dict[str, str]) -> Any:
    from kairosmq.protocol.codec import FrameReader, encode_command
    from kairosmq.protocol.commands import request

    host, port = addr.rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    try:
        w.write(encode_command(request(code, ext, b"", opaque=1)))
        frames = FrameReader()
        while True:
            data = await asyncio.wait_for(r.read(65536), 10)
            if not data:
                raise ConnectionError(f"{addr} closed the connection")
            frames.feed(data)
            for cmd in frames:
                return cmd
    finally:
        w.close()


async def _prepare(namesrv: str, brokers: list[str], queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on every broker, then wait until the route has them all."""
    from kairosmq.protocol.bodies import TopicRouteData
    from kairosmq.protocol.codes import RequestCode, ResponseCode

    for addr in brokers:
        resp = await _call(
            addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": str(queues),
                "writeQueueNums": str(queues),
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            },
        )
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"create topic on {addr}: {resp.remark}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        resp = await _call(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        if resp.code == ResponseCode.SUCCESS:
            route = TopicRouteData.from_json(resp.body)
            if len({q.broker_name for q in route.queue_datas}) == len(brokers):
                return
        await asyncio.sleep(0.2)
    raise RuntimeError("the name server never routed the topic to every broker")


# ---------------------------------------------------------------------- producer worker


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    from kairosmq.client import Message, Producer, SendStatus

    body = os.urandom(args.body // 2).hex().encode()[: args.body]
    t_start = args.start_at + args.warmup
    t_end = t_start + args.seconds
    acked = failed = 0
    lat: list[float] = []
    per_broker: dict[str, int] = {}

    async with Producer(f"bench_cluster_{os.getpid()}", args.namesrv) as p:

        async def loop() -> None:
            nonlocal acked, failed
            while (now := time.time()) < t_end:
                try:
                    r = await p.send(Message(TOPIC, body, delay_level=args.delay_level))
                    good = r.status is SendStatus.SEND_OK
                except Exception:  # noqa: BLE001 - counted as failed
                    good, r = False, None
                done = time.time()
                if t_start <= now and done <= t_end:
                    if good and r is not None:
                        acked += 1
                        lat.append(done - now)
                        b = r.message_queue.broker_name
                        per_broker[b] = per_broker.get(b, 0) + 1
                    else:
                        failed += 1

        await asyncio.sleep(max(0.0, args.start_at - time.time()))
        await asyncio.gather(*(loop() for _ in range(args.inflight)))
    lat.sort()
    return {
        "acked": acked,
        "failed": failed,
        "per_broker": per_broker,
        "lat": lat[:: max(1, len(lat) // 2000)],
    }


# ---------------------------------------------------------------------- orchestration


def _start_cluster(
    n: int, data: Path, extra: list[str]
) -> tuple[subprocess.Popen[bytes], str, list[str]]:
    ns_port, base = _free_port(), _free_base(n)
    cmd = [
        sys.executable,
        "-m",
        "kairosmq.server",
        "cluster",
        "--brokers",
        str(n),
        "--data-dir",
        str(data),
        "--namesrv-port",
        str(ns_port),
        "--base-port",
        str(base),
        "--no-vip-channel",
        "--log-level",
        "warning",
        "--segment-size-mb",
        "256",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    status = data / "cluster.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise RuntimeError(f"cluster exited {proc.returncode}: {out}")
        try:
            st = json.loads(status.read_text())["cluster"]
            if len(st) == n + 1 and all(c["state"] == "running" for c in st):
                return (
                    proc,
                    f"127.0.0.1:{ns_port}",
                    [f"127.0.0.1:{base + 10 * i}" for i in range(n)],
                )
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("cluster did not start")


def _cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (Linux /proc; 0 where unreadable)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _broker_pids(data: Path) -> list[int]:
    st = json.loads((data / "cluster.json").read_text())["cluster"]
    return [int(c["pid"]) for c in st if c["kind"] == "broker"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_one(n: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-cluster-{n}-") as tmp:
        data = Path(tmp) / "data"
        proc, namesrv, brokers = _start_cluster(n, data, args.cluster_arg)
        pids = _broker_pids(data)
        try:
            asyncio.run(_prepare(namesrv, brokers, args.queues))
            start_at = time.time() + 3.0  # every worker connected and routed by then
            workers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        "--namesrv",
                        namesrv,
                        "--start-at",
                        repr(start_at),
                        "--warmup",
                        str(args.warmup),
                        "--seconds",
                        str(args.seconds),
                        "--inflight",
                        str(args.inflight),
                        "--delay-level",
                        str(args.delay_level),
                        "--body",
                        str(args.body),
                    ],
                    stdout=subprocess.PIPE,
                )
                for _ in range(args.producers)
            ]
            time.sleep(max(0.0, start_at + args.warmup - time.time()))
            cpu0 = _cpu_seconds(pids)
            time.sleep(max(0.0, start_at + args.warmup + args.seconds - time.time()))
            broker_cpu = (_cpu_seconds(pids) - cpu0) / args.seconds  # cores busy, summed
            results = []
            for w in workers:
                out, _ = w.communicate(timeout=args.warmup + args.seconds + 120)
                results.append(json.loads(out.decode().strip().splitlines()[-1]))
        finally:
            _stop(proc)
    acked = sum(r["acked"] for r in results)
    lat = sorted(x for r in results for x in r["lat"])
    per: dict[str, int] = {}
    for r in results:
        for b, k in r["per_broker"].items():
            per[b] = per.get(b, 0) + k

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return {
        "brokers": n,
        "producers": args.producers,
        "acked": acked,
        "rate": acked / args.seconds,
        "failed": sum(r["failed"] for r in results),
        "per_broker": {b: round(k / args.seconds) for b, k in sorted(per.items())},
        "broker_cpu": broker_cpu,
        "per_broker_core": acked / args.seconds / broker_cpu if broker_cpu else float("nan"),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="1,2,3", help="broker counts to compare (1,2,3)")
    ap.add_argument("--producers", type=int, default=4, help="producer processes (4)")
    ap.add_argument("--inflight", type=int, default=16, help="sends in flight per producer")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured window per run")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--delay-level", type=int, default=4, help="delay level of every message")
    ap.add_argument("--queues", type=int, default=4, help="write queues per broker")
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument(
        "--cluster-arg",
        action="append",
        default=["--no-message-logs"],
        help="extra `kairosmq cluster` option (repeat; default --no-message-logs)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the broker counts this many times, interleaved (1,2,3,1,2,3,..."
        "); the table shows each count's median run",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        import uvloop

        print(json.dumps(uvloop.run(_worker(args))), flush=True)
        return 0
    counts = [int(x) for x in args.brokers.split(",")]
    load0 = os.getloadavg()
    print(
        f"# {platform.node()} cpus={os.cpu_count()} python={platform.python_version()} "
        f"loadavg at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}"
    )
    print(
        f"# {args.producers} producer processes x {args.inflight} in flight, "
        f"{args.body} B bodies, delay level {args.delay_level}, {args.seconds:.0f} s window"
    )
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for rep in range(args.repeat):
        for n in counts:
            row = run_one(n, args)
            row["loadavg"] = os.getloadavg()[0]
            runs[n].append(row)
            print(
                f"#   run {rep + 1}, brokers={n}: {row['rate']:.0f} acked delayed sends/s "
                f"(load {row['loadavg']:.2f})",
                flush=True,
            )
    rows = [sorted(runs[n], key=lambda r: r["rate"])[(len(runs[n]) - 1) // 2] for n in counts]
    base = rows[0]["rate"] or float("nan")
    print()
    print(
        f"{'brokers':>7} {'sends/s':>9} {'x vs 1':>7} {'failed':>6} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'brk CPU':>7} {'/core':>7} {'load1':>6}  per broker sends/s"
    )
    for r in rows:
        print(
            f"{r['brokers']:>7} {r['rate']:>9.0f} {r['rate'] / base:>7.2f} {r['failed']:>6} "
            f"{r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['broker_cpu']:>7.2f} "
            f"{r['per_broker_core']:>7.0f} {r['loadavg']:>6.2f}  "
            f"{' '.join(f'{b}={k}' for b, k in r['per_broker'].items())}"
        )
    print(
        "# brk CPU: cores the broker processes used together in the window (utime+stime);"
        " /core: acked sends per broker CPU-second"
    )
    load1 = os.getloadavg()
    print(f"# loadavg at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "runs": runs,
                    "loadavg_start": load0,
                    "loadavg_end": load1,
                    "args": {
                        k: v for k, v in vars(args).items() if isinstance(v, int | float | str)
                    },
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
