"""Process accounting from /proc and the figures of one run.

Owns: ``ProcTree`` (CPU seconds, wake-ups and RSS of a server's process tree), ``percentile`` and
``summarize`` (one result row from the producer's and consumer's reports and the records),
``HostSteal`` (the CPU time the VM's host took from this machine, over time), and the
timer bench's ``worst_windows`` and ``fire_lateness`` (the broker's own histogram).

Invariants: CPU = utime + stime from ``/proc/<pid>/stat`` of every process in the tree,
measured as a delta over the run (a process that appears during the run counts from 0);
wake-ups = the voluntary context switches (a thread blocked, then woke) of every thread
of the tree, ``/proc/<pid>/task/*/status``, as a delta over the run, read at every sample
(a thread that ends during the run counts up to its last sample); RSS = the sum over the
tree of ``VmRSS`` sampled during the run (peak) and of ``VmHWM``;
percentiles are nearest-rank on the sorted lateness, in milliseconds.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
import time
import urllib.request
from typing import Any

REC = struct.Struct("<Qdd")
_TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(d))
    return out


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def voluntary_switches(pid: int) -> dict[int, int]:
    """Per thread of ``pid``: its voluntary context switches so far (each one a block and,
    later, a wake-up)."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        out[int(tid)] = int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return out


def status_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":")
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


class ProcTree:
    """The process tree under the given root pids, for CPU and RSS accounting."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.cpu0: dict[int, float] = {}
        self.switches0: dict[int, int] = {}
        self.switches_seen: dict[int, int] = {}
        self.rss_peak_kib = 0
        self.hwm_kib = 0

    def pids(self) -> list[int]:
        kids = _children()
        out, todo = [], list(self.roots)
        while todo:
            p = todo.pop()
            if os.path.exists(f"/proc/{p}"):
                out.append(p)
            todo.extend(kids.get(p, []))
        return out

    def begin(self) -> None:
        pids = self.pids()
        self.cpu0 = {p: cpu_seconds(p) for p in pids}
        self.switches0 = {t: n for p in pids for t, n in voluntary_switches(p).items()}
        self.switches_seen = dict(self.switches0)
        self.rss_peak_kib = self.hwm_kib = 0
        self.sample()

    def sample(self) -> None:
        rss = hwm = 0
        for p in self.pids():
            self.switches_seen.update(voluntary_switches(p))
            s = status_kib(p)
            rss += s.get("VmRSS", 0)
            hwm += s.get("VmHWM", 0)
        self.rss_peak_kib = max(self.rss_peak_kib, rss)
        self.hwm_kib = max(self.hwm_kib, hwm)

    def cpu_used(self) -> float:
        return sum(cpu_seconds(p) - self.cpu0.get(p, 0.0) for p in self.pids())

    def wakes(self) -> int:
        """Voluntary context switches of the tree's threads since ``begin``, as of the last
        ``sample`` (a thread's count is kept after it ends)."""
        return sum(n - self.switches0.get(t, 0) for t, n in self.switches_seen.items())


def percentile(sorted_vals: list[float], p: float) -> float | None:
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, -(-len(sorted_vals) * p // 100) - 1))
    return sorted_vals[int(k)]


def summarize(
    system: str,
    rate: float,
    prod: dict[str, Any],
    cons: dict[str, Any],
    records: bytes,
    delay_ms: int,
    cpu_s: float,
    tree: ProcTree,
) -> dict[str, Any]:
    d = delay_ms / 1000.0
    recs = list(REC.iter_unpack(records))
    late = sorted((r - (s + d)) * 1000.0 for _, s, r in recs)
    # lateness by second of send time, [second, count, p50, max]: a growing backlog shows here
    by_sec: dict[int, list[float]] = {}
    for _, s, r in recs:
        by_sec.setdefault(int(s - prod["first_send"]), []).append((r - (s + d)) * 1000.0)
    timeline = [
        [sec, len(v), round(percentile(sorted(v), 50) or 0.0, 2), round(max(v), 2)]
        for sec, v in sorted(by_sec.items())
    ]
    acked, received = prod["acked"], cons["received"]
    span = prod["last_ack"] - prod["first_send"]
    dspan = cons["last_recv"] - cons["first_recv"]
    return {
        "system": system,
        "rate": int(rate) if rate else "max",
        "sent": prod["sent"],
        "acked": acked,
        "send_errors": prod["errors"],
        "last_send_error": prod["last_error"],
        "send_rate": acked / span if acked > 1 and span > 0 else 0.0,
        "delivery_rate": received / dspan if received > 1 and dspan > 0 else 0.0,
        "received": received,
        "lost": max(0, acked - received),
        "duplicates": cons["duplicates"],
        "early": sum(1 for x in late if x < 0),
        "early_over_1ms": sum(1 for x in late if x < -1.0),
        "lateness_ms": {
            k: percentile(late, p)
            for k, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9))
        }
        | {"max": late[-1] if late else None, "min": late[0] if late else None},
        "broker_rss_mb": round(tree.rss_peak_kib / 1024, 1),
        "broker_vmhwm_mb": round(tree.hwm_kib / 1024, 1),
        "broker_cpu_s": round(cpu_s, 3),
        "broker_cpu_us_per_msg": round(cpu_s * 1e6 / received, 1) if received else None,
        "broker_wakes_per_msg": round(tree.wakes() / received, 2) if received else None,
        "consumer_errors": cons.get("errors", []),
        "timeline_by_send_second": timeline,
    }


def _first(sample: tuple[float, int]) -> float:
    return sample[0]


class HostSteal:
    """Steal time of this virtual machine (``/proc/stat``, the ``cpu`` line's 8th value):
    CPU time the hypervisor gave to other guests while this one had work, sampled every
    ``every`` seconds in a thread. A burst of it stalls every process here at once, which
    no broker change can avoid: the benches print it beside their latency tails."""

    def __init__(self, every: float = 0.02) -> None:
        self.every = every
        self.samples: list[tuple[float, int]] = []  # (epoch ms, cumulative steal ticks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def ticks() -> int:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])

    def _run(self) -> None:
        while True:
            self.samples.append((time.time() * 1000, self.ticks()))
            if self._stop.wait(self.every):
                self.samples.append((time.time() * 1000, self.ticks()))
                return

    def start(self) -> HostSteal:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def ms(self, start_ms: float, end_ms: float) -> float:
        """vCPU-milliseconds stolen between two instants (epoch ms; the nearest samples
        at or before ``start_ms`` and at or after ``end_ms``, so never an undercount)."""
        if not self.samples:
            return 0.0
        at = self.samples
        i = max(0, bisect.bisect_right(at, start_ms, key=_first) - 1)
        j = min(len(at) - 1, bisect.bisect_left(at, end_ms, key=_first))
        return (at[j][1] - at[i][1]) * 1000 / _TICK

    def total_ms(self) -> float:
        """vCPU-milliseconds stolen from the first sample to the last."""
        return self.ms(self.samples[0][0], self.samples[-1][0]) if self.samples else 0.0


def worst_windows(
    dues: list[int],
    lateness: list[float],
    span_ms: int = 250,
    top: int = 3,
    steal: HostSteal | None = None,
) -> str:
    """The ``top`` due-time windows of ``span_ms`` with the highest max lateness, as
    ``+<ms from the first due>: max/p99`` (where the tail comes from), with the host's
    steal time from the window's start to its last delivery (``steal``)."""
    if not dues:
        return ""
    first = min(dues)
    by: dict[int, list[float]] = {}
    for due, late in zip(dues, lateness, strict=True):
        by.setdefault((due - first) // span_ms, []).append(late)
    rows = sorted(by.items(), key=lambda kv: -max(kv[1]))[:top]
    boundary = -(-first // 60_000) * 60_000 - first

    def stolen(k: int, worst: float) -> str:
        if steal is None:
            return ""
        start = first + k * span_ms
        return f" steal {steal.ms(start, start + span_ms + worst):.0f}"

    return ", ".join(
        f"+{k * span_ms}ms: {max(v):.1f}/{percentile(sorted(v), 99):.1f}" + stolen(k, max(v))
        for k, v in rows
    ) + (f" (minute-bucket boundary at +{boundary}ms; steal in vCPU-ms)")


def fire_lateness(metrics_port: int) -> dict[float, float]:
    """The broker's own lateness of the fires (store time - due; its Prometheus histogram
    ``kairosmq_timer_lateness_seconds``): the share of fires at or under each bound (ms).
    The consumer's figures add the delivery: held pull answer, socket, its own loop."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    counts: dict[float, float] = {}
    total = 0.0
    for line in text.splitlines():
        if line.startswith("kairosmq_timer_lateness_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            if le != "+Inf":
                counts[float(le) * 1000] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("kairosmq_timer_lateness_seconds_count"):
            total = float(line.rsplit(" ", 1)[1])
    return {b: 100 * c / total for b, c in sorted(counts.items()) if total and b <= 10}
