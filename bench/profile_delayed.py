"""Broker CPU per delayed message, and where it goes: kairosmq alone under bench_peers' load.

Runs ``bench_peers.py``'s delayed workload (1 KiB, 1 s delay, producer and consumer in
their own processes) against one fresh kairosmq broker per rate and prints the broker's
CPU µs per message (utime + stime from /proc over the run, the figure issue 12 targets)
with the load average. With ``--py-spy DIR`` it also samples the broker with py-spy for
the whole run and prints the top functions by own and total share of samples (the
flame-graph input is kept in DIR as ``<rate>.collapsed``). py-spy's sampling costs the
broker some CPU: take CPU figures from a run without it.

    .venv/bin/pip install py-spy
    .venv/bin/python bench/profile_delayed.py --rates 500,2000 --n 10000 --repeat 3
    .venv/bin/python bench/profile_delayed.py --rates 2000 --py-spy /tmp/prof

``--threads`` splits the broker's CPU per thread (user and system µs per message, from
``/proc/<pid>/task``); ``--perf DIR`` samples the broker with ``perf record`` (on-CPU
time only, kernel included) and prints the share per shared object (interpreter, kernel,
uvloop, libc, ...). py-spy counts a thread as busy while it is runnable but descheduled,
so a call that wakes another process (a socket write to the client on this box) looks
far dearer in py-spy than in perf: take CPU shares from perf, call stacks from py-spy.

``--kairos-arg=--no-message-logs`` passes broker options, as in bench_peers.py. The
broker is imported from this checkout (or from ``PYTHONPATH`` when set, for A/B runs of
two trees).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_peers  # noqa: E402


def top_functions(collapsed: Path, n: int = 25) -> list[tuple[str, float, float]]:
    """(function, own %, total %) from py-spy's collapsed stacks, by own share."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        k = int(count)
        frames = [
            f.split(" (")[0] + " " + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1]
            if " (" in f
            else f
            for f in stack.split(";")
        ]
        samples += k
        own[frames[-1]] += k
        for f in set(frames):
            total[f] += k
    if not samples:
        return []
    return [(f, 100 * c / samples, 100 * total[f] / samples) for f, c in own.most_common(n)]


def thread_cpu(pid: int) -> dict[str, tuple[str, int, int]]:
    """Per thread of ``pid``: (name, utime ticks, stime ticks)."""
    out: dict[str, tuple[str, int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (stat[stat.index("(") + 1 : stat.rindex(")")], int(fields[11]), int(fields[12]))
    return out


def perf_dsos(data: Path, n: int = 8) -> list[str]:
    """The ``perf report`` lines: share of on-CPU samples per shared object."""
    rep = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(data),
            "--stdio",
            "--no-children",
            "--sort",
            "dso",
            "-g",
            "none",
        ],
        capture_output=True,
        text=True,
    )
    return [ln.strip() for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")][
        :n
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="500,2000", help="comma list; max = unthrottled")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--py-spy", dest="pyspy", help="profile into this directory")
    ap.add_argument("--perf", help="perf record the broker into this directory")
    ap.add_argument("--threads", action="store_true", help="broker CPU per thread")
    ap.add_argument("--kairos-arg", action="append")
    ap.add_argument(
        "--kairos-python",
        default=str(bench_peers.REPO / ".venv" / "bin" / "python")
        if (bench_peers.REPO / ".venv" / "bin" / "python").exists()
        else sys.executable,
    )
    ap.add_argument("--bench-venv", default=str(Path.home() / ".cache" / "kairosmq-bench-venv"))
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp"))
    a = ap.parse_args()
    ns = argparse.Namespace(
        n=a.n,
        body=1024,
        delay_ms=1000,
        window=256,
        max_send_s=120.0,
        kairos_python=a.kairos_python,
        kairos_arg=a.kairos_arg or [],
        workdir=a.workdir,
        keep=False,
        rocketmq_dir="",
    )
    py = bench_peers.ensure_venv(Path(a.bench_venv))
    spy = shutil.which("py-spy") or str(Path(a.kairos_python).parent / "py-spy")
    out = Path(a.pyspy) if a.pyspy else None
    perf_dir = Path(a.perf) if a.perf else None
    for d in (out, perf_dir):
        if d:
            d.mkdir(parents=True, exist_ok=True)
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    make = bench_peers.make_server

    for rnd in range(a.repeat):
        for raw in a.rates.split(","):
            rate = 0.0 if raw in ("max", "0") else float(raw)
            prof: dict[str, Any] = {}
            target = out / f"{raw}.collapsed" if out else None

            perf_data = perf_dir / f"{raw}.data" if perf_dir else None

            def make_profiled(
                system: str,
                args: argparse.Namespace,
                _t: Any = target,
                _p: dict[str, Any] = prof,
                _pd: Any = perf_data,
            ) -> Any:
                server = make(system, args)
                start, stop = server.start, server.stop

                def start_and_attach() -> dict[str, str]:
                    opts = start()
                    pid = str(server.pids[0])
                    if _t is not None:
                        _p["proc"] = subprocess.Popen(
                            [
                                spy,
                                "record",
                                "--pid",
                                pid,
                                "--rate",
                                "250",
                                "--format",
                                "raw",
                                "--output",
                                str(_t),
                                "--nonblocking",
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                    if _pd is not None:
                        _p["perf"] = subprocess.Popen(
                            ["perf", "record", "-F", "999", "-g", "-o", str(_pd), "-p", pid],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                    if a.threads:
                        _p["t0"] = thread_cpu(server.pids[0])
                    return opts

                def read_threads_and_stop() -> None:
                    if a.threads and server.pids:
                        _p["t1"] = thread_cpu(server.pids[0])
                    stop()

                server.start, server.stop = start_and_attach, read_threads_and_stop
                return server

            bench_peers.make_server = make_profiled
            try:
                row = bench_peers.run_one("kairosmq", rate, ns, py)
            finally:
                bench_peers.make_server = make
                for key in ("proc", "perf"):
                    if key in prof:
                        prof[key].send_signal(signal.SIGINT)
                        prof[key].wait(60)
            print(
                f"round {rnd + 1} rate {raw}: send/s {row['send_rate']:,.0f} "
                f"p50 {row['lateness_ms']['p50']:.1f} ms p99 {row['lateness_ms']['p99']:.1f} ms "
                f"lost {row['lost']} early {row['early']} | broker CPU "
                f"{row['broker_cpu_us_per_msg']:.0f} µs/msg | RSS {row['broker_rss_mb']} MB "
                f"| load "
                f"{row['loadavg_1m_at_start']}",
                flush=True,
            )
            if "t1" in prof:
                delivered = max(1, a.n)
                for tid, (name, u, st) in sorted(prof["t1"].items()):
                    _, u0, s0 = prof["t0"].get(tid, (name, 0, 0))
                    if u - u0 or st - s0:
                        print(
                            f"  thread {name} ({tid}): user {(u - u0) * tick_us / delivered:.0f}"
                            f" + system {(st - s0) * tick_us / delivered:.0f} µs/msg"
                        )
            if perf_data is not None and perf_data.exists():
                print(f"  perf: on-CPU samples per shared object at {raw}/s:")
                for line in perf_dsos(perf_data):
                    print(f"    {line}")
            if target is not None and target.exists():
                print(f"  py-spy top functions at {raw}/s (own %, total %):")
                for fn, o, t in top_functions(target):
                    print(f"    {o:5.1f} {t:5.1f}  {fn}")


if __name__ == "__main__":
    main()
