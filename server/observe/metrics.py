"""Prometheus metrics endpoint (optional extra ``metrics``: prometheus-client).

Owns: ``MetricsSources`` (the narrow view a scrape reads: the stats counters and the few
live values, built by ``server/broker.py``; this module knows nothing else of the broker),
``BrokerCollector`` (a custom collector: every value is read from the sources at scrape
time; the hot paths only bump plain counters, no prometheus calls per message),
``take_snapshot``, ``serve_metrics`` (the endpoint and its thread, bound to the given host:
the broker passes ``--metrics-host``, 127.0.0.1 unless asked, whatever its ``--host``: the
endpoint has no authentication), ``MetricsEndpoint`` (its lifecycle in the broker: start,
supervised watch, stop) and ``start_metrics(sources, port)``.

Invariants:
* The HTTP server runs in prometheus-client's daemon thread, but broker state is only
  read on the event loop: a scrape schedules ``take_snapshot`` on the loop with
  ``call_soon_threadsafe`` and waits (bounded) for the copy. A busy or stopped loop makes
  the scrape answer ``kairosmq_up 0`` instead of reading dicts being mutated.
* Metric names and labels are stable (dashboards depend on them); lateness is exported
  in seconds with the buckets of ``stats.LATENESS_BUCKETS_MS``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator, Mapping, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol  # Any: JSON snapshots; prometheus_client objects

from .stats import LATENESS_BUCKETS_MS

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from .stats import BrokerStats

SNAPSHOT_TIMEOUT = 2.0
_INSTALL_HINT = (
    "the metrics endpoint needs prometheus-client: "
    "pip install 'kairosmq[metrics]' (or pip install prometheus-client)"
)


class ListenerCounters(Protocol):
    """What a scrape reads of the transport (``RemotingServer``)."""

    refused: int
    timed_out: int
    unknown_peer: int
    over_budget: int
    buffered: int

    @property
    def connections(self) -> Sized: ...


class HeldPulls(Protocol):
    """What a scrape reads of the held pulls (``longpoll.PullHolds``)."""

    held: int
    refused: int


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """Everything a scrape reads, and nothing else (built by ``server/broker.py``)."""

    stats: BrokerStats
    listeners: ListenerCounters
    pull_holds: HeldPulls
    log_range: Callable[[], tuple[int, int]]  # the commit log's (min, max) offsets
    clock_ms: Callable[[], int]  # the broker's clock
    timer_next_due: Callable[[], int | None]
    schedule_backlog: Callable[[], dict[int, tuple[int, int | None]]]
    services: Callable[[], list[dict[str, Any]]]  # the supervisor's status
    uptime_ms: Callable[[], float]
    acl_denied: Callable[[], Mapping[str, int]]  # refusals by reason ({} without --acl)
    # a master's replication (server/ha/master.py): slaves, ackOffset, lagBytes, lagMs
    # (None: no slave attached); {} on a slave or without an HA listener
    replication: Callable[[], Mapping[str, int | None]]


def take_snapshot(src: MetricsSources) -> dict[str, Any]:
    """Copy everything a scrape exports (call on the broker's event loop)."""
    st = src.stats
    log_min, log_max = src.log_range()
    server = src.listeners
    return {
        "stored": dict(st.stored),
        "scheduled": dict(st.scheduled),
        "delivered": dict(st.delivered),
        "pulled": dict(st.pulled),
        "retried": dict(st.redelivered),
        "dead": dict(st.dead_lettered),
        "rejected": st.rejected,
        "acl_denied": dict(src.acl_denied()),
        "lateness": {lv: (list(h.counts), h.total, h.sum_ms) for lv, h in st.lateness.items()},
        "timer_lateness": (list(st.timer_lateness.counts), st.timer_lateness.sum_ms),
        "timers_scheduled": st.timers_scheduled,
        "timers_fired": st.timers_fired,
        "timer_next_due": src.timer_next_due(),
        "backlog": src.schedule_backlog(),
        "now_ms": src.clock_ms(),
        "held": src.pull_holds.held,
        "pulls_not_held": src.pull_holds.refused,
        "connections": len(server.connections),
        "conn_refused": server.refused,
        "conn_timed_out": server.timed_out,
        "conn_unknown_peer": server.unknown_peer,
        "conn_over_budget": server.over_budget,
        "partial_frame_bytes": server.buffered,
        "service_failures": dict(st.service_failures),
        "services_degraded": {s["name"]: s["state"] == "degraded" for s in src.services()},
        "log_min": log_min,
        "log_max": log_max,
        "uptime_s": src.uptime_ms() / 1000,
        "replication": dict(src.replication()),
    }


class BrokerCollector:
    """Yields the broker's metric families at each scrape (see module docstring)."""

    def __init__(self, sources: MetricsSources, loop: asyncio.AbstractEventLoop) -> None:
        self.sources = sources
        self.loop = loop

    def _snapshot(self) -> dict[str, Any] | None:
        fut: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def take() -> None:
            try:
                fut.set_result(take_snapshot(self.sources))
            except Exception as err:  # noqa: BLE001 - handed to the scraping thread
                fut.set_exception(err)

        try:
            self.loop.call_soon_threadsafe(take)
            return fut.result(SNAPSHOT_TIMEOUT)
        except (RuntimeError, concurrent.futures.TimeoutError):
            return None  # loop closed or too busy to answer

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self._snapshot()
        yield GaugeMetricFamily(
            "kairosmq_up", "1 if the broker answered this scrape", value=0 if snap is None else 1
        )
        if snap is None:
            return
        per_topic = (
            ("stored", "kairosmq_messages_stored", "Messages stored (not delayed) per topic"),
            (
                "delivered",
                "kairosmq_messages_delivered",
                "Delayed messages moved from the schedule to their topic",
            ),
            ("pulled", "kairosmq_messages_consumed", "Messages handed to consumers by PULL"),
        )
        for key, name, doc in per_topic:
            c = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, n in sorted(snap[key].items()):
                c.add_metric([topic], n)
            yield c
        for key, name, doc in (
            ("retried", "kairosmq_messages_retried", "Messages sent back for retry per group"),
            ("dead", "kairosmq_messages_dead_lettered", "Messages moved to a DLQ per group"),
        ):
            c = CounterMetricFamily(name, doc, labels=["group"])
            for group, n in sorted(snap[key].items()):
                c.add_metric([group], n)
            yield c
        c = CounterMetricFamily(
            "kairosmq_messages_scheduled", "Delayed messages accepted", labels=["level"]
        )
        for level, n in sorted(snap["scheduled"].items()):
            c.add_metric([str(level)], n)
        yield c
        yield CounterMetricFamily(
            "kairosmq_messages_rejected", "Sends refused", value=snap["rejected"]
        )
        c = CounterMetricFamily(
            "kairosmq_acl_denied",
            "Requests refused by the ACL (--acl), by reason",
            labels=["reason"],
        )
        for reason, n in sorted(snap["acl_denied"].items()):
            c.add_metric([reason], n)
        yield c
        c = CounterMetricFamily(
            "kairosmq_service_failures",
            "Failures of a supervised background service (each is restarted with backoff)",
            labels=["service"],
        )
        for name, n in sorted(snap["service_failures"].items()):
            c.add_metric([name], n)
        yield c
        g = GaugeMetricFamily(
            "kairosmq_service_degraded",
            "1 while a background service is failing (see admin status)",
            labels=["service"],
        )
        for name, bad in sorted(snap["services_degraded"].items()):
            g.add_metric([name], 1 if bad else 0)
        yield g
        for key, name, doc in (
            (
                "conn_refused",
                "kairosmq_connections_refused",
                "Connections closed at once: max_connections reached",
            ),
            (
                "conn_timed_out",
                "kairosmq_connections_timed_out",
                "Connections closed for idleness or a stalled partial frame",
            ),
            (
                "conn_unknown_peer",
                "kairosmq_connections_unknown_peer",
                "Connections closed unread: their peer address could not be read",
            ),
            (
                "conn_over_budget",
                "kairosmq_connections_over_budget",
                "Connections closed because unfinished frames exceeded partial_frame_budget",
            ),
            (
                "pulls_not_held",
                "kairosmq_pulls_not_held",
                "Pulls answered at once because a held-pull limit was reached",
            ),
        ):
            yield CounterMetricFamily(name, doc, value=snap[key])
        pending = GaugeMetricFamily(
            "kairosmq_delayed_pending", "Delayed messages waiting per level", labels=["level"]
        )
        due = GaugeMetricFamily(
            "kairosmq_delayed_next_due_seconds",
            "Seconds until the level's next message is due (<0: late)",
            labels=["level"],
        )
        for level, (n, next_ms) in sorted(snap["backlog"].items()):
            pending.add_metric([str(level)], n)
            if next_ms is not None:
                due.add_metric([str(level)], (next_ms - snap["now_ms"]) / 1000)
        yield pending
        yield due
        hist = HistogramMetricFamily(
            "kairosmq_delivery_lateness_seconds",
            "Store time of a delivered delayed message minus its due time",
            labels=["level"],
        )
        bounds = [f"{b / 1000:g}" for b in LATENESS_BUCKETS_MS] + ["+Inf"]
        for level, (counts, _total, sum_ms) in sorted(snap["lateness"].items()):
            hist.add_metric([str(level)], _cumulative(bounds, counts), sum_ms / 1000)
        yield hist
        timer_hist = HistogramMetricFamily(
            "kairosmq_timer_lateness_seconds",
            "Store time of a fired timer message minus its due time",
        )
        counts, sum_ms = snap["timer_lateness"]
        timer_hist.add_metric([], _cumulative(bounds, counts), sum_ms / 1000)
        yield timer_hist
        for name, doc, value in (
            ("kairosmq_timers_scheduled_total", "Timer messages stored", snap["timers_scheduled"]),
            ("kairosmq_timers_fired_total", "Timer messages fired", snap["timers_fired"]),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        if snap["timer_next_due"] is not None:
            yield GaugeMetricFamily(
                "kairosmq_timer_next_due_seconds",
                "Seconds until the next timer message is due (<0: late)",
                value=(snap["timer_next_due"] - snap["now_ms"]) / 1000,
            )
        for name, doc, value in (
            ("kairosmq_pull_held", "PULL requests held by long polling", snap["held"]),
            ("kairosmq_connections", "Open client connections", snap["connections"]),
            (
                "kairosmq_partial_frame_bytes",
                "Bytes of unfinished frames held across connections (partial_frame_budget)",
                snap["partial_frame_bytes"],
            ),
            (
                "kairosmq_commitlog_size_bytes",
                "Commit-log bytes retained (max - min offset)",
                snap["log_max"] - snap["log_min"],
            ),
            ("kairosmq_commitlog_max_offset_bytes", "Commit-log end offset", snap["log_max"]),
            ("kairosmq_uptime_seconds", "Seconds since the broker started", snap["uptime_s"]),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        yield from _replication(snap["replication"])


def _replication(rep: Mapping[str, int | None]) -> Iterator[Any]:
    """A master's replication gauges (docs/replication.md); the lag ones only while a
    slave is attached."""
    from prometheus_client.core import GaugeMetricFamily

    if not rep:
        return
    for name, doc, key, scale in (
        ("kairosmq_ha_slaves", "Slaves connected to the HA port", "slaves", 1),
        (
            "kairosmq_ha_slave_ack_offset_bytes",
            "Highest commit-log offset a slave acked (push2SlaveMaxOffset)",
            "ackOffset",
            1,
        ),
        (
            "kairosmq_ha_slave_lag_bytes",
            "Commit-log bytes written on the master and not acked by a slave",
            "lagBytes",
            1,
        ),
        (
            "kairosmq_ha_slave_lag_seconds",
            "How long the master has held bytes not acked by a slave",
            "lagMs",
            1000,
        ),
    ):
        value = rep.get(key)
        if value is not None:
            yield GaugeMetricFamily(name, doc, value=value / scale)


def make_registry(sources: MetricsSources, loop: asyncio.AbstractEventLoop) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    collector: Collector = BrokerCollector(sources, loop)
    registry.register(collector)
    return registry


def serve_metrics(sources: MetricsSources, port: int, addr: str) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; call on the broker's loop.

    Returns (server, thread): ``server.shutdown()`` stops it, ``server.server_address``
    is the bound address. Raises ``RuntimeError`` with an install hint when
    prometheus-client is missing, ``OSError`` when the address cannot be bound.
    """
    try:
        from prometheus_client import start_http_server
    except ImportError as err:
        raise RuntimeError(_INSTALL_HINT) from err
    registry = make_registry(sources, asyncio.get_running_loop())
    started = start_http_server(port, addr=addr, registry=registry)
    if not isinstance(started, tuple):  # prometheus-client < 0.19 returned nothing useful
        raise RuntimeError("prometheus-client >= 0.19 is required for the metrics endpoint")
    return started[0], started[1]


def start_metrics(sources: MetricsSources, port: int, addr: str = "127.0.0.1") -> Any:
    """``serve_metrics`` returning only the server object (tests, embedding)."""
    return serve_metrics(sources, port, addr)[0]


class MetricsEndpoint:
    """The broker's ``/metrics`` HTTP endpoint: started with the broker (a bind failure
    fails the start), watched by a supervised service that restarts it if its thread
    died, stopped with the broker. ``port`` 0 binds any free port (``address`` says which);
    a restart binds the same port again."""

    def __init__(self, sources: MetricsSources, host: str, port: int | None) -> None:
        self.sources = sources
        self.host = host
        self.port = port
        self._served: tuple[Any, threading.Thread] | None = None

    def start(self) -> None:
        assert self.port is not None
        self._served = serve_metrics(self.sources, self.port, self.host)
        self.port = int(self._served[0].server_address[1])

    def stop(self) -> None:
        if self._served is not None:
            httpd, _thread = self._served
            self._served = None
            httpd.shutdown()
            httpd.server_close()

    @property
    def address(self) -> str | None:
        if self._served is None:
            return None
        host, port = self._served[0].server_address[:2]
        return f"{host}:{port}"

    async def watch(self, st: Any) -> None:
        """Supervised: restart the endpoint if its HTTP thread died."""
        while True:
            if self._served is None:
                self.start()
            st.ok()
            await asyncio.sleep(1.0)
            if self._served is not None and not self._served[1].is_alive():
                self.stop()
                raise RuntimeError("the metrics HTTP thread stopped")


def check_available() -> str | None:
    """None if prometheus-client is importable, else the message to show the operator."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return _INSTALL_HINT
    return None


def _cumulative(bounds: list[str], counts: list[int]) -> list[tuple[str, int]]:
    """Prometheus histogram buckets: (upper bound, count at or below it)."""
    acc, out = 0, []
    for bound, n in zip(bounds, counts, strict=True):
        acc += n
        out.append((bound, acc))
    return out
