"""The host control of a latency bench: what this machine does to any process at a moment.

Owns: ``start(t0_ms, seconds, out)`` (a process of its own, started before ``t0_ms``),
``result(proc, out)`` and the control itself: a bare uvloop loop that asks to wake every
1 ms from ``t0_ms`` for ``seconds`` and records how late each wake-up came (ms). It does
nothing else, so its lateness is the host's share (vCPU stalls, steal, the scheduler) of
any lateness a broker shows in the same span; the broker's lateness beyond it is its own.

Invariant: the control sleeps to 20 ms before ``t0_ms`` with ``time.sleep`` (nanosleep,
50 µs of slack), never on its loop: a long epoll timeout ends up to 0.1 % of its length
late (the kernel's slack for poll timeouts, at most 100 ms), which would show as host
lateness at the first instant (docs/performance.md, "Sleeping to a due instant").

    python bench/peers/hostcontrol.py <t0_ms> <seconds> <out.json>
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

TICK_MS = 1
LEAD_S = 0.02  # the blocking sleep ends this long before t0


async def control(t0: int, seconds: float, tick_ms: int = TICK_MS) -> dict[str, Any]:
    """Wake every ``tick_ms`` from ``t0`` (epoch ms) for ``seconds``; the due instants and
    how late each wake-up came (ms). Instants already past at the start are skipped."""
    gc.disable()
    loop = asyncio.get_running_loop()
    offset = time.time() - loop.time()  # epoch s = loop time + offset
    dues: list[int] = []
    late: list[float] = []
    due = max(t0, int((loop.time() + offset) * 1000) + tick_ms)
    end = t0 + int(seconds * 1000)
    while due <= end:
        await asyncio.sleep(max(0.0, due / 1000 - offset - loop.time()))
        dues.append(due)
        late.append((loop.time() + offset) * 1000 - due)
        due += tick_ms
    return {"dues": dues, "lateness": late}


def start(t0: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """The control as a process of its own; its result goes to ``out`` (JSON)."""
    return subprocess.Popen([sys.executable, __file__, str(t0), str(seconds), str(out)])


def result(proc: subprocess.Popen[bytes], out: Path, timeout: float = 60) -> dict[str, Any]:
    """The control's lateness ``p99`` and ``max`` (ms), its worst 250 ms window and the
    ``line`` a bench prints (run from a bench: ``bench.peers.stats`` is importable)."""
    from bench.peers.stats import percentile, worst_windows

    proc.wait(timeout=timeout)
    got = json.loads(out.read_text())
    late = sorted(got["lateness"])
    p99, worst = percentile(late, 99), late[-1] if late else 0.0
    window = worst_windows(got["dues"], got["lateness"], top=1).split(" (")[0]
    return {
        "p99": p99,
        "max": worst,
        "worst": window,
        "line": (
            f"host control (a bare uvloop process waking every {TICK_MS} ms over the span): "
            f"lateness p99 {p99:.1f} ms, max {worst:.1f} ms; worst window {window}"
        ),
    }


def main(argv: list[str]) -> None:
    t0, seconds, out = int(argv[0]), float(argv[1]), Path(argv[2])
    time.sleep(max(0.0, t0 / 1000 - time.time() - LEAD_S))
    out.write_text(json.dumps(uvloop.run(control(t0, seconds))))


if __name__ == "__main__":
    main(sys.argv[1:])
