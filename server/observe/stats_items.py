"""Per-minute / hour / day rates of the broker's counters, as RocketMQ's ``BrokerStatsManager``
answers them (``StatsItem.getStatsDataInMinute/Hour/Day``: sum, tps, avgpt).

Owns: ``BrokerStatsManager``: samples of named cumulative counters (``TOPIC_PUT_NUMS`` by
topic, ``GROUP_GET_NUMS`` by ``topic@group``, ``BROKER_PUT_NUMS`` / ``BROKER_GET_NUMS`` by
cluster name), ``snapshot`` (VIEW_BROKER_STATS_DATA's ``BrokerStatsData``) and ``tps``
(GET_CONSUME_STATS' ``consumeTps``).

Invariants:
* The counters are ``BrokerStats``' own (the hot paths bump dicts, nothing more); this
  module only reads them. ``sample`` (every ``SAMPLE_INTERVAL`` s from the broker's
  housekeeping, and at most that often on each read) keeps, per item, RocketMQ's three
  short lists: 7 samples 10 s apart, 7 samples 10 min apart, 25 samples 1 h apart (39
  tuples per item, whatever the uptime).
* A window's ``sum`` is the counter's growth since the newest sample at least the window
  old (or since boot, when the broker is younger than the window: every counter starts at
  0 at boot), so it spans the window plus up to one sample spacing, as RocketMQ's;
  ``tps`` is that sum per second over the time actually covered. ``avgpt`` is
  0 (no per-put timing is kept).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any  # Any: BrokerStats (duck-typed); JSON values of a stats snapshot

SAMPLE_INTERVAL = 10.0  # seconds (RocketMQ samples its minute list every 10 s)
WINDOWS = {"statsMinute": 60.0, "statsHour": 3600.0, "statsDay": 86400.0}

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"

Source = Callable[[], dict[str, int]]


def counter_sources(stats: Any, cluster_name: str) -> dict[str, Source]:
    """The stats names VIEW_BROKER_STATS_DATA answers, over ``BrokerStats``' counters."""

    def topic_put() -> dict[str, int]:
        out = dict(stats.stored)
        for topic, n in stats.delivered.items():  # delayed messages arriving in their topic
            out[topic] = out.get(topic, 0) + n
        return out

    def group_get() -> dict[str, int]:
        return {f"{t}@{g}": n for (t, g), n in getattr(stats, "group_pulled", {}).items()}

    return {
        TOPIC_PUT_NUMS: topic_put,
        GROUP_GET_NUMS: group_get,
        BROKER_PUT_NUMS: lambda: {cluster_name: sum(topic_put().values())},
        BROKER_GET_NUMS: lambda: {cluster_name: sum(stats.pulled.values())},
    }


# per window: (spacing of its samples, samples kept) as RocketMQ's StatsItem lists
# (csListMinute: 10 s x 7, csListHour: 10 min x 7, csListDay: 1 h x 25)
_TIERS = {"statsMinute": (SAMPLE_INTERVAL, 7), "statsHour": (600.0, 7), "statsDay": (3600.0, 25)}


class BrokerStatsManager:
    def __init__(
        self,
        sources: dict[str, Source],
        boot: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sources = sources
        self.clock = clock
        self.boot = clock() if boot is None else boot
        # (name, key) -> window -> samples (time, value), oldest first
        self._samples: dict[tuple[str, str], dict[str, deque[tuple[float, int]]]] = {}
        self._last = float("-inf")

    def sample(self, now: float | None = None) -> None:
        """Record every item's current value (at most once per ``SAMPLE_INTERVAL``; into a
        window's list only when its spacing has passed since that list's newest sample)."""
        now = self.clock() if now is None else now
        if now - self._last < SAMPLE_INTERVAL:
            return
        self._last = now
        for name, source in self.sources.items():
            for key, value in source().items():
                tiers = self._samples.get((name, key))
                if tiers is None:
                    tiers = self._samples[(name, key)] = {
                        w: deque(maxlen=n) for w, (_, n) in _TIERS.items()
                    }
                for window, (spacing, _) in _TIERS.items():
                    q = tiers[window]
                    if not q or now - q[-1][0] >= spacing - 1e-6:
                        q.append((now, value))

    def current(self, name: str, key: str) -> int | None:
        source = self.sources.get(name)
        return None if source is None else source().get(key)

    def _window(
        self, name: str, key: str, value: int, window: str, now: float
    ) -> tuple[int, float]:
        span = WINDOWS[window]
        samples = self._samples.get((name, key), {}).get(window, ())
        base: tuple[float, int] | None = None
        for t, v in samples:  # the newest sample at least the window old
            if now - t >= span:
                base = (t, v)
        if base is None:  # a broker younger than the window counts from boot (all 0)
            base = (self.boot, 0) if now - self.boot <= span or not samples else samples[0]
        dt = max(now - base[0], 1.0)
        return value - base[1], (value - base[1]) / dt

    def snapshot(self, name: str, key: str, now: float | None = None) -> dict[str, Any] | None:
        """``BrokerStatsData`` of one item, or None if no such item (RocketMQ: not exist)."""
        now = self.clock() if now is None else now
        self.sample(now)
        value = self.current(name, key)
        if value is None:
            return None
        out: dict[str, Any] = {}
        for window in WINDOWS:
            total, tps = self._window(name, key, value, window, now)
            out[window] = {"avgpt": 0.0, "sum": total, "tps": round(tps, 2)}
        return out

    def tps(self, name: str, key: str, now: float | None = None) -> float:
        """The item's per-minute rate (0 if it does not exist)."""
        snap = self.snapshot(name, key, now)
        return 0.0 if snap is None else float(snap["statsMinute"]["tps"])

    def consume_tps(self, group: str, topic: str) -> float:
        """GET_CONSUME_STATS' ``consumeTps``: the group's pull rate on the topic (msgs/s)."""
        return self.tps(GROUP_GET_NUMS, f"{topic}@{group}")
