"""What one wake-up costs a process on this machine, in CPU time charged to it.

An event-driven server at a low message rate blocks between messages and wakes for each
send, each due timer and each pull; the CPU it is charged per message then includes what
every wake-up costs on this machine, besides its own work. This prints that cost for a
thread that blocks for ``gap`` and wakes, N times per gap, three ways:

* ``nanosleep``: ``time.sleep`` (the kernel's bare block and wake-up);
* ``epoll``: ``epoll.poll(gap)`` on an idle socket (what an event loop blocks in);
* ``uvloop``: ``await asyncio.sleep(gap)`` on uvloop (the broker's loop: the wake-up plus
  the loop's timer and task step, 2-3 µs when nothing blocks, the ``floor`` row). Gaps
  below 1 ms do not block on uvloop (libuv's poll timeout is in whole milliseconds: it
  spins), hence the 1 ms minimum.

And in two modes: ``idle`` (nothing else runs; the vCPU idles during each sleep, and the
host may run another guest on it) and ``busy`` (one spinning process per CPU at nice 19
keeps every vCPU busy; they yield to the sleeper when it wakes).

Per row: the sleeper's own thread CPU per wake-up (``time.thread_time_ns``, the figure
``/proc`` sums into a process's CPU), mean and p50/p90. A wake-up that costs tens of µs
when the same code costs 2-3 µs back to back is mostly cache misses: caches go cold while
the thread sleeps. Compare with ``bench_peers.py``'s ``wakes/msg`` column: a server's CPU per
message at a low rate includes its wake-ups per message times this cost, and its own work
runs on cold caches too.

    .venv/bin/python bench/bench_wake.py [--n 1000] [--gaps 1,2,5]

Owns: this measurement only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import uvloop


async def _loop_wakes(gap_s: float, n: int) -> list[int]:
    """Thread CPU ns of each of ``n`` ``asyncio.sleep(gap_s)`` turns."""
    out = []
    for _ in range(n):
        t = time.thread_time_ns()
        await asyncio.sleep(gap_s)
        out.append(time.thread_time_ns() - t)
    return out


def _wakes(block: Callable[[float], object], gap_s: float, n: int) -> list[int]:
    """Thread CPU ns of each of ``n`` ``block(gap_s)`` calls."""
    out = []
    for _ in range(n):
        t = time.thread_time_ns()
        block(gap_s)
        out.append(time.thread_time_ns() - t)
    return out


def _row(label: str, ns: list[int]) -> str:
    s = sorted(ns)
    mean = sum(s) / len(s) / 1000

    def q(p: float) -> float:
        return s[int(p * (len(s) - 1))] / 1000

    return f"  {label:<26} {mean:8.1f} {q(0.5):8.1f} {q(0.9):8.1f}"


def _spinners() -> list[subprocess.Popen[bytes]]:
    """One spinning process per CPU at nice 19: every vCPU stays busy."""
    code = "import os; os.nice(19)\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="wake-ups per row")
    p.add_argument("--gaps", default="1,2,5", help="sleep gaps in ms (>= 1), comma list")
    a = p.parse_args(argv)
    gaps = [max(1.0, float(g)) for g in a.gaps.split(",")]
    ep = select.epoll()
    idle_r, idle_w = socket.socketpair()  # registered, never written: epoll times out
    ep.register(idle_r.fileno(), select.EPOLLIN)
    print(
        f"thread CPU µs per wake-up, {a.n} wake-ups per row (load average {os.getloadavg()[0]:.2f})"
    )
    print(f"  {'mode, way, gap':<26} {'mean':>8} {'p50':>8} {'p90':>8}")
    print(_row("uvloop, never blocks", uvloop.run(_loop_wakes(0, a.n))))
    for mode in ("idle", "busy"):
        spin = _spinners() if mode == "busy" else []
        try:
            if spin:
                time.sleep(0.5)  # let the spinners start
            for gap in gaps:
                g = gap / 1000
                print(_row(f"{mode}, nanosleep, {gap:g} ms", _wakes(time.sleep, g, a.n)))
                print(_row(f"{mode}, epoll, {gap:g} ms", _wakes(ep.poll, g, a.n)))
                print(
                    _row(f"{mode}, uvloop, {gap:g} ms", uvloop.run(_loop_wakes(g, a.n))), flush=True
                )
        finally:
            for proc in spin:
                proc.kill()
                proc.wait()
    ep.close()
    idle_r.close()
    idle_w.close()


if __name__ == "__main__":
    main()
