"""The report's small tables, derived on the driver from the few aggregates Spark returns.

Owns: ``summary_rows`` (percentiles from log-bucket histograms), ``lateness_tables``,
``latency_tables`` (both split timer messages, ``TIMER_LEVEL``, from the levels),
``event_counts``, ``throughput_per_minute``, ``dlq_counts``, ``timer_counts`` and
``transaction_counts`` (from ``transforms.line_counts``). Pure functions of plain rows
(``list[dict]``): no Spark, no files, so they are tested without a JVM.

Invariants:
* Percentiles are nearest-rank over the histogram: ``pXX`` is the largest value seen in the
  bucket that holds the value of rank ``ceil(XX % * count)``. Buckets are 1 % wide, so a
  percentile is never below the exact nearest-rank value and at most 1 % above it (exact when
  no two values of the group are within 1 % of each other). ``count``, ``max`` and ``mean``
  are exact.
* Histograms merge by adding counts per bucket (``by`` any subset of the keys, or none).
* Times are timezone-aware UTC ``datetime``s.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Rows = list[dict[str, Any]]
TIMER_LEVEL = -1  # the delay_level of a timer message in the Spark aggregates
TIMER_EVENTS = (
    ("scheduled", "timer.scheduled"),
    ("fired", "timer.fired"),
    ("recalled", "timer.recalled"),
    # an operator's actions on pending timers (a level message's: the <level ...> labels)
    ("rescheduled", "schedule.rescheduled"),
    ("operator_recalled", "schedule.recalled"),
)
_LEVEL_LABELS = {"schedule.rescheduled": "<level reschedule>"}  # else "<level recall>"
TRANSACTION_EVENTS = (
    ("prepared", "transaction.prepared"),
    ("committed", "transaction.committed"),
    ("rolled_back", "transaction.rolled_back"),
    ("checked", "transaction.checked"),
    ("discarded", "transaction.discarded"),
)
QUANTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p999", 0.999),
)
STATS = ("count", *(name for name, _ in QUANTILES), "max", "mean")


def _summary(buckets: Mapping[int, list[float]]) -> dict[str, Any]:
    """``count, p50 .. p999, max, mean`` of one merged histogram {bucket: [n, hi, total]}."""
    order = sorted(buckets)
    count = int(sum(buckets[b][0] for b in order))
    out: dict[str, Any] = {"count": count}
    cum, i = 0.0, 0
    for name, p in QUANTILES:
        rank = max(1, math.ceil(p * count - 1e-9))
        while cum + buckets[order[i]][0] < rank:
            cum += buckets[order[i]][0]
            i += 1
        out[name] = float(buckets[order[i]][1])
    out["max"] = float(max(buckets[b][1] for b in order))
    out["mean"] = sum(buckets[b][2] for b in order) / count
    return out


def summary_rows(hist: Iterable[Mapping[str, Any]], by: Sequence[str]) -> Rows:
    """Merge histogram rows (``*keys, bucket, n, hi, total``) per ``by``; one summary each
    (plus ``early``, the sum of the rows' ``early`` counts, when they have one)."""
    groups: dict[tuple[Any, ...], dict[int, list[float]]] = defaultdict(dict)
    early: dict[tuple[Any, ...], int] = {}
    for r in hist:
        key = tuple(r[k] for k in by)
        cell = groups[key].setdefault(r["bucket"], [0, -math.inf, 0.0])
        cell[0] += r["n"]
        cell[1] = max(cell[1], r["hi"])
        cell[2] += r["total"]
        if "early" in r:
            early[key] = early.get(key, 0) + (r["early"] or 0)
    rows = [
        {
            **dict(zip(by, key, strict=True)),
            **_summary(b),
            **({"early": early[key]} if key in early else {}),
        }
        for key, b in groups.items()
        if b
    ]
    return sorted(rows, key=lambda r: [(r[k] is None, r[k] if r[k] is not None else 0) for k in by])


def _split(hist: Rows) -> tuple[Rows, Rows]:
    """(level rows, timer rows) of a histogram keyed by ``delay_level``."""
    return (
        [r for r in hist if r["delay_level"] != TIMER_LEVEL],
        [r for r in hist if r["delay_level"] == TIMER_LEVEL],
    )


def lateness_tables(hist: Rows) -> dict[str, Rows]:
    """``lateness_by_level``, ``lateness_by_topic``, ``lateness_overall`` (delay levels only)
    and ``timer_lateness`` (one row), ``timer_lateness_by_topic`` from one histogram."""
    levels, timers = _split(hist)
    return {
        "lateness_by_level": summary_rows(levels, ["delay_level"]),
        "lateness_by_topic": summary_rows(levels, ["topic"]),
        "lateness_overall": summary_rows(levels, []),
        "timer_lateness": summary_rows(timers, []),
        "timer_lateness_by_topic": summary_rows(timers, ["topic"]),
    }


def latency_tables(hist: Rows) -> dict[str, Rows]:
    """``e2e_latency`` (per topic and level) and ``added_delay`` (per level; per topic and
    level in ``added_delay_by_topic``) from ``transforms.e2e_histogram`` rows; the timer
    messages' added delay is ``timer_added_delay`` (one row), and they are level
    ``TIMER_LEVEL`` in the per-topic tables."""
    e2e = [r for r in hist if r["kind"] == "e2e"]
    added = [r for r in hist if r["kind"] == "added"]
    levels, timers = _split(added)
    return {
        "e2e_latency": summary_rows(e2e, ["topic", "delay_level"]),
        "added_delay": summary_rows(levels, ["delay_level"]),
        "timer_added_delay": summary_rows(timers, []),
        "added_delay_by_topic": summary_rows(added, ["topic", "delay_level"]),
    }


def event_counts(counts: Rows, catalogue: Iterable[str]) -> Rows:
    """``event, catalogued, lines`` from ``transforms.line_counts`` rows."""
    known = set(catalogue)
    lines: dict[str, int] = defaultdict(int)
    for r in counts:
        lines[r["label"]] += r["lines"]
    return [{"event": e, "catalogued": e in known, "lines": n} for e, n in sorted(lines.items())]


def throughput_per_minute(counts: Rows, events: Sequence[tuple[str, str]]) -> Rows:
    """Per UTC ``minute``: one count column per ``(column, event)`` (the DLQ copy of a
    ``message.stored`` is not counted: it is counted as dead_lettered)."""
    column = {event: col for col, event in events}
    per: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(column.values(), 0))
    for r in counts:
        col = column.get(r["label"])
        if col is None or r["minute"] is None or r["dlq_copy"]:
            continue
        per[r["minute"]][col] += r["lines"]
    return [
        {"minute": dt.datetime.fromtimestamp(m * 60, dt.UTC), **c} for m, c in sorted(per.items())
    ]


def dlq_counts(counts: Rows, funnel: Rows, dead_lettered: str) -> Rows:
    """Per group: ``dead_lettered`` events, distinct ``messages`` (from the retry funnel),
    ``first_at`` and ``last_at`` (UTC)."""
    per: dict[str, dict[str, Any]] = {}
    for r in counts:
        if r["label"] != dead_lettered:
            continue
        g = per.setdefault(
            r["group"],
            {
                "group": r["group"],
                "dead_lettered": 0,
                "messages": 0,
                "first_ms": None,
                "last_ms": None,
            },
        )
        g["dead_lettered"] += r["lines"]
        for key, pick in (("first_ms", min), ("last_ms", max)):
            if r[key] is not None:
                g[key] = r[key] if g[key] is None else pick(g[key], r[key])
    for r in funnel:
        if r["outcome"] == "dead_lettered" and r["group"] in per:
            per[r["group"]]["messages"] += r["messages"]
    out = []
    for g in per.values():
        first, last = g.pop("first_ms"), g.pop("last_ms")
        out.append({**g, "first_at": utc(first), "last_at": utc(last)})
    return sorted(out, key=lambda r: (r["group"] is None, r["group"] or ""))


def _per_key(
    counts: Rows, events: Sequence[tuple[str, str]], key: str
) -> dict[Any, dict[str, Any]]:
    column = {event: col for col, event in events}
    per: dict[Any, dict[str, Any]] = {}
    for r in counts:
        col = column.get(r["label"])
        if col is None:
            continue
        row = per.setdefault(r["group"], {key: r["group"], **dict.fromkeys(column.values(), 0)})
        row[col] += r["lines"]
    return per


def timer_counts(counts: Rows) -> Rows:
    """Per real ``topic``: timers ``scheduled``, ``fired``, ``recalled`` (timer recalls by a
    producer's handle), ``rescheduled`` and ``operator_recalled`` (an operator's actions
    on timers), ``pending`` (scheduled - fired - recalled - operator_recalled -
    rescheduled, at least 0: the logs may begin after some were scheduled; a reschedule
    is a new timer.scheduled replacing a timer that never fires), ``level_recalled``
    (recalls of level-delayed messages, whoever made them) and ``level_rescheduled``
    (level-delayed messages an operator moved: each became a timer)."""
    relabelled = [
        {**r, "label": _LEVEL_LABELS.get(r["label"], "<level recall>")}
        if r.get("level_recall")
        else r
        for r in counts
    ]
    per = _per_key(
        relabelled,
        (
            *TIMER_EVENTS,
            ("level_recalled", "<level recall>"),
            ("level_rescheduled", "<level reschedule>"),
        ),
        "topic",
    )
    out = [
        {
            **r,
            "pending": max(
                0,
                r["scheduled"]
                - r["fired"]
                - r["recalled"]
                - r["operator_recalled"]
                - r["rescheduled"],
            ),
        }
        for r in per.values()
    ]
    return sorted(out, key=lambda r: (r["topic"] is None, r["topic"] or ""))


def transaction_counts(counts: Rows) -> Rows:
    """Per ``producer_group``: half messages ``prepared``, ``committed``, ``rolled_back``,
    ``checked`` (CHECK_TRANSACTION_STATE requests sent), ``discarded`` and ``pending``
    (prepared - committed - rolled back - discarded, at least 0)."""
    out = [
        {**r, "pending": max(0, r["prepared"] - r["committed"] - r["rolled_back"] - r["discarded"])}
        for r in _per_key(counts, TRANSACTION_EVENTS, "producer_group").values()
    ]
    return sorted(out, key=lambda r: (r["producer_group"] is None, r["producer_group"] or ""))


def utc(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
