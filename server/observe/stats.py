"""Broker statistics: plain counters the hot paths bump and the metrics endpoint reads.

Owns: ``BrokerStats`` — per-topic counters of stored, delivered (out of the schedule) and
pulled messages, retries, dead letters, failures per background service, and a
fixed-bucket lateness histogram per delay level. Increments are dict/list operations (no
locks, no exporter calls on the hot path); an exporter (Prometheus, the admin CLI)
reads them at scrape time.

Invariant: counters only grow; bucket bounds are fixed at construction. ``BrokerStats``
holds its counters in slots (the native twins read them by offset): no other attribute.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

# lateness histogram bounds, milliseconds
LATENESS_BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)


class LatenessHistogram:
    __slots__ = ("counts", "total", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        self.total = 0
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(LATENESS_BUCKETS_MS, ms)] += 1
        self.total += 1
        self.sum_ms += ms

    def as_json(self) -> dict[str, object]:
        """The buckets for a status answer (KAIROS_GET_SCHEDULE_BACKLOG, 902, per level;
        KAIROS_GET_TIMER_STATUS, 905): ``counts[i]`` fired at most ``boundsMs[i]`` ms late
        (and more than ``boundsMs[i-1]``), the last one later than every bound."""
        return {
            "boundsMs": list(LATENESS_BUCKETS_MS),
            "counts": list(self.counts),
            "total": self.total,
            "sumMs": round(self.sum_ms, 3),
        }


class BrokerStats:
    # slots: the native twins read the counters per message by offset
    __slots__ = (
        "stored",
        "scheduled",
        "delivered",
        "pulled",
        "group_pulled",
        "redelivered",
        "dead_lettered",
        "rejected",
        "service_failures",
        "lateness",
        "timers_scheduled",
        "timers_fired",
        "timer_lateness",
    )

    def __init__(self) -> None:
        self.stored: defaultdict[str, int] = defaultdict(int)
        self.scheduled: defaultdict[int, int] = defaultdict(int)
        self.delivered: defaultdict[str, int] = defaultdict(int)
        self.pulled: defaultdict[str, int] = defaultdict(int)
        # (topic, group) -> messages pulled: GROUP_GET_NUMS (stats_items.py, consumeTps)
        self.group_pulled: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.redelivered: defaultdict[str, int] = defaultdict(int)
        self.dead_lettered: defaultdict[str, int] = defaultdict(int)
        self.rejected = 0
        # background service name -> failures (server/supervise.py)
        self.service_failures: dict[str, int] = {}
        self.lateness: defaultdict[int, LatenessHistogram] = defaultdict(LatenessHistogram)
        # timer messages (server/schedule/timer/): scheduled, fired, lateness of the fire
        self.timers_scheduled = 0
        self.timers_fired = 0
        self.timer_lateness = LatenessHistogram()
