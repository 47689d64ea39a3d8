"""Rendering of the collected metric tables: the summary numbers, the console table, the HTML page.

Owns: ``summarize`` (headline numbers from the small metric tables), ``console_summary``
(a short plain-text table for the terminal), ``charts`` (every chart of the page, by name, as
SVG) and ``render_html`` (one self-contained page: inline CSS and inline SVG charts from
``svg.py``, ``<details>`` folds for the per-topic tables, no scripts, no external requests).
Timer messages (``tables.TIMER_LEVEL``) show as a "timer" row and series after the delay
levels; transactions as one table per producer group.

Invariants: pure functions of plain Python rows (``list[dict]``, as collected from Spark);
nothing here touches Spark or files, so it is tested without a JVM. Every text that comes
from the logs is HTML-escaped. Table names are the keys of ``TABLES`` in ``job.py``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from kairosmq.spark.svg import band_chart, bar_chart, line_chart
from kairosmq.spark.tables import TIMER_LEVEL
from kairosmq.spark.transforms import MALFORMED, NO_EVENT, THROUGHPUT_EVENTS

Rows = list[dict[str, Any]]
PCTS = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))
OUTCOMES = ("succeeded", "in_retry", "dead_lettered")
LATENESS_KEYS = ("count", "p50", "p90", "p99", "p999", "max")
TX_KEYS = ("prepared", "committed", "rolled_back", "checked", "discarded", "pending")


def summarize(tables: Mapping[str, Rows]) -> dict[str, Any]:
    """Headline numbers: line and event counts, overall lateness (delay levels), the retry
    funnel's totals, timers (counts, lateness) and transactions (totals and per group)."""
    lines = {r["event"]: r["lines"] for r in tables.get("event_counts", [])}
    events = {
        col: sum(r[col] for r in tables.get("throughput_per_minute", []))
        for col, _ in THROUGHPUT_EVENTS
    }
    newer = sum(
        r["lines"] for r in tables.get("event_counts", []) if r["event"].startswith("<format v")
    )
    uncatalogued = sum(
        r["lines"]
        for r in tables.get("event_counts", [])
        if not r["catalogued"]
        and r["event"] not in (MALFORMED, NO_EVENT)
        and not r["event"].startswith("<format v")
    )
    funnel: dict[str, int] = defaultdict(int)
    for r in tables.get("retry_funnel", []):
        key = r["outcome"]
        if key == "succeeded":
            key = "succeeded_first_try" if r["attempts"] == 1 else "succeeded_after_retry"
        funnel[key] += r["messages"]
    overall = (tables.get("lateness_overall") or [{}])[0]
    timer = (tables.get("timer_lateness") or [{}])[0]
    return {
        "lines": sum(lines.values()),
        "malformed_lines": lines.get(MALFORMED, 0),
        "lines_without_event": lines.get(NO_EVENT, 0),
        "uncatalogued_events": uncatalogued,
        "newer_format_lines": newer,
        "events": events,
        "lateness_ms": {k: overall.get(k) for k in LATENESS_KEYS},
        "consumed_messages": sum(funnel.values()),
        "funnel": {
            k: funnel.get(k, 0)
            for k in ("succeeded_first_try", "succeeded_after_retry", "in_retry", "dead_lettered")
        },
        "max_attempts": max((r["attempts"] for r in tables.get("retry_funnel", [])), default=0),
        "dead_lettered_by_group": {r["group"]: r["messages"] for r in tables.get("dlq_counts", [])},
        "timers": _totals(
            tables.get("timer_counts", []),
            (
                "scheduled",
                "fired",
                "recalled",
                "pending",
                "level_recalled",
                "rescheduled",
                "operator_recalled",
                "level_rescheduled",
            ),
        )
        | {"lateness_ms": {k: timer.get(k) for k in (*LATENESS_KEYS, "early")}},
        "transactions": _totals(tables.get("transaction_counts", []), TX_KEYS)
        | {
            "by_group": {
                r["producer_group"]: {k: r[k] for k in TX_KEYS}
                for r in tables.get("transaction_counts", [])
            }
        },
    }


def _totals(rows: Rows, keys: Sequence[str]) -> dict[str, Any]:
    return {k: sum(r.get(k) or 0 for r in rows) for k in keys}


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [list(header)] + [[_num(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]


def console_summary(tables: Mapping[str, Rows], summary: Mapping[str, Any]) -> str:
    """A short plain-text summary for the terminal (a few dozen lines at most)."""
    ev = summary["events"]
    out = [
        f"lines {summary['lines']:,}  malformed {summary['malformed_lines']:,}  "
        f"uncatalogued {summary['uncatalogued_events']:,}",
        "events  " + "  ".join(f"{k} {v:,}" for k, v in ev.items()),
        "",
    ]
    levels = tables.get("lateness_by_level", [])
    out += _text_table(
        ["delay level", "delivered", *(label + " ms" for _, label in PCTS)],
        [[r["delay_level"], r["count"], *(r[k] for k, _ in PCTS)] for r in levels[:18]]
        + [
            ["timer", r["count"], *(r[k] for k, _ in PCTS)]
            for r in tables.get("timer_lateness", [])
        ],
    )
    f = summary["funnel"]
    out += [
        "",
        f"consumed (group, message) {summary['consumed_messages']:,}: "
        f"first try {f['succeeded_first_try']:,}, after retry {f['succeeded_after_retry']:,}, "
        f"in retry {f['in_retry']:,}, dead-lettered {f['dead_lettered']:,} "
        f"(max attempts {summary['max_attempts']})",
    ]
    tm, tx = summary["timers"], summary["transactions"]
    if tm["scheduled"] or tm["fired"] or tm["recalled"]:
        out.append(
            f"timers scheduled {tm['scheduled']:,}, fired {tm['fired']:,}, recalled "
            f"{tm['recalled']:,}, pending {tm['pending']:,} (early "
            f"{tm['lateness_ms']['early'] or 0:,})"
            + (
                f"; operators rescheduled {tm['rescheduled'] + tm['level_rescheduled']:,}, "
                f"recalled {tm['operator_recalled']:,}"
                if tm["rescheduled"] or tm["level_rescheduled"] or tm["operator_recalled"]
                else ""
            )
        )
    if any(tx[k] for k in TX_KEYS):
        out.append("transactions " + ", ".join(f"{k.replace('_', ' ')} {tx[k]:,}" for k in TX_KEYS))
    return "\n".join(out)


def _html_table(rows: Rows, columns: Sequence[tuple[str, str]], limit: int = 200) -> str:
    if not rows:
        return '<p class="empty">none</p>'
    head = "".join(f"<th>{escape(label)}</th>" for _, label in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_num(r.get(key)))}</td>" for key, _ in columns) + "</tr>"
        for r in rows[:limit]
    )
    more = (
        f'<p class="empty">{len(rows) - limit:,} more rows in parquet</p>'
        if len(rows) > limit
        else ""
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _minutes(rows: Rows) -> tuple[list[str], dict[str, list[float | None]]]:
    """Throughput rows with missing minutes filled with zero (up to a week of minutes)."""
    by_minute = {r["minute"]: r for r in rows if r.get("minute") is not None}
    if not by_minute:
        return [], {}
    first, last = min(by_minute), max(by_minute)
    span = int((last - first).total_seconds() // 60) + 1
    keys = (
        [first + dt.timedelta(minutes=i) for i in range(span)]
        if span <= 7 * 1440
        else sorted(by_minute)
    )
    labels = [
        k.strftime("%H:%M") if i and k.minute + k.hour else k.strftime("%m-%d %H:%M")
        for i, k in enumerate(keys)
    ]
    series = {
        name: [float(by_minute[k][name]) if k in by_minute else 0.0 for k in keys]
        for name in ("stored", "scheduled", "delivered", "consumed")
    }
    return labels, series


def _funnel_chart(rows: Rows) -> str:
    counts: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for r in rows:
        counts[r["attempts"]][r["outcome"]] += r["messages"]
    cats = sorted(counts)
    series = {o: [float(counts[a][o]) for a in cats] for o in OUTCOMES}
    return bar_chart(
        [str(a) for a in cats],
        series,
        y_label="messages (log scale)",
        log=True,
        title="Retry funnel: (group, message) pairs by attempts and outcome",
    )


LAT_COLS = [("count", "count")] + [(k, label + " ms") for k, label in PCTS] + [("mean", "mean ms")]
STYLE = (
    "body{font:14px sans-serif;margin:24px;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;"
    "padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
    ".empty{color:#888}.kpi{display:inline-block;margin:0 24px 12px 0}"
    ".kpi b{display:block;font-size:20px}svg{display:block;margin:8px 0 16px}"
    "details{margin:4px 0}summary{cursor:pointer;padding:2px 0}"
)


def _stats_label(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "none"
    return f"{r['count']:,} messages, p50 {_num(r['p50'])} ms, p99 {_num(r['p99'])} ms"


def _e2e_by_topic(tables: Mapping[str, Rows]) -> str:
    """One ``<details>`` fold per topic: end-to-end and added delay per delay level."""
    e2e: dict[Any, Rows] = defaultdict(list)
    for r in tables.get("e2e_latency", []):
        e2e[r["topic"]].append(r)
    added = {(r["topic"], r["delay_level"]): r for r in tables.get("added_delay_by_topic", [])}
    if not e2e:
        return '<p class="empty">none</p>'
    parts = []
    for topic in sorted(e2e, key=lambda t: (t is None, str(t))):
        rows = [
            {
                **r,
                "delay_level": _cell(r["delay_level"]),
                **{
                    f"a_{k}": added.get((topic, r["delay_level"]), {}).get(k)
                    for k in ("p50", "p99", "max")
                },
            }
            for r in e2e[topic]
        ]
        total = sum(r["count"] for r in rows)
        worst = max((r["a_p99"] for r in rows if r["a_p99"] is not None), default=None)
        parts.append(
            f"<details><summary><b>{escape(str(topic))}</b>: {total:,} messages, added delay "
            f"p99 up to {escape(_num(worst))} ms</summary>"
            + _html_table(
                rows,
                [
                    ("delay_level", "level"),
                    ("count", "messages"),
                    ("p50", "e2e p50 ms"),
                    ("p99", "e2e p99 ms"),
                    ("max", "e2e max ms"),
                    ("a_p50", "added p50 ms"),
                    ("a_p99", "added p99 ms"),
                    ("a_max", "added max ms"),
                ],
            )
            + "</details>"
        )
    return "".join(parts)


def _with_timer(tables: Mapping[str, Rows], levels: str, timer: str) -> Rows:
    """A per-level table with the timer messages' row (``delay_level`` "timer") last."""
    return [
        *tables.get(levels, []),
        *({**r, "delay_level": "timer"} for r in tables.get(timer, [])),
    ]


def _level(v: Any) -> str:
    return "timer" if v in ("timer", TIMER_LEVEL) else f"L{v}"


def _cell(level: Any) -> Any:
    """A ``delay_level`` table cell: the level, or "timer" for a timer message."""
    return "timer" if level == TIMER_LEVEL else level


def charts(tables: Mapping[str, Rows]) -> dict[str, str]:
    """Every chart of the report as an SVG string, by file-friendly name."""
    levels = _with_timer(tables, "lateness_by_level", "timer_lateness")
    added = _with_timer(tables, "added_delay", "timer_added_delay")
    labels, series = _minutes(tables.get("throughput_per_minute", []))
    return {
        "added_delay": band_chart(
            [_level(r["delay_level"]) for r in added],
            added,
            y_label="ms (log scale)",
            title="Added delay (end-to-end minus nominal delay) by delay level; L0 = not "
            "delayed, timer = timer messages",
        ),
        "lateness": bar_chart(
            [_level(r["delay_level"]) for r in levels],
            {label: [r[k] for r in levels] for k, label in PCTS},
            title="Schedule lateness (delivery minus due time) by delay level and for timers",
            y_label="ms (log scale)",
            log=True,
        ),
        "throughput": line_chart(
            labels, series, title="Throughput per minute (UTC)", y_label="events / minute"
        ),
        "retry_funnel": _funnel_chart(tables.get("retry_funnel", [])),
    }


def render_html(
    tables: Mapping[str, Rows], summary: Mapping[str, Any], meta: Mapping[str, Any]
) -> str:
    """The whole report page as one string (write it with UTF-8)."""
    svgs = charts(tables)
    levels = _with_timer(tables, "lateness_by_level", "timer_lateness")
    f = summary["funnel"]
    top = [{**r, "delay_level": _cell(r["delay_level"])} for r in tables.get("top_late", [])]
    added_all = {r["delay_level"]: r for r in tables.get("added_delay", [])}
    delayed_p99 = max((r["p99"] for lv, r in added_all.items() if lv), default=None)
    kpis = [
        ("lines read", summary["lines"]),
        ("malformed lines", summary["malformed_lines"]),
        ("delivered from schedule", summary["events"]["delivered"]),
        ("added delay p99 ms (worst level)", delayed_p99),
        ("lateness p99 ms", summary["lateness_ms"]["p99"]),
        ("lateness max ms", summary["lateness_ms"]["max"]),
        ("consumed first try", f["succeeded_first_try"]),
        ("after retry", f["succeeded_after_retry"]),
        ("dead-lettered", f["dead_lettered"]),
    ]
    if summary["timers"]["fired"]:
        kpis += [
            ("timers fired", summary["timers"]["fired"]),
            ("timer lateness p99 ms", summary["timers"]["lateness_ms"]["p99"]),
        ]
    if summary["transactions"]["prepared"]:
        kpis += [
            ("transactions committed", summary["transactions"]["committed"]),
            ("rolled back", summary["transactions"]["rolled_back"]),
        ]
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>kairosmq delivery "
        f"report</title><style>{STYLE}</style></head><body><h1>kairosmq delivery-quality "
        "report</h1>",
        f"<p>Generated {escape(str(meta.get('generated_at', '')))} from "
        f"{escape(str(meta.get('inputs', '')))} (mode {escape(str(meta.get('mode', '')))}).</p>",
        "".join(f'<div class="kpi"><b>{escape(_num(v))}</b>{escape(k)}</div>' for k, v in kpis),
        "<h2>Added delay: how much later than asked</h2>",
        "<p>Per message, producer send to first consume minus the delay it asked for (its "
        "level's nominal delay; 0 for messages that were not delayed). Bands: p50-p90, p90-p99, "
        "p99-p99.9; the dot is the median, the teal tick the maximum.</p>",
        svgs["added_delay"],
        _html_table(
            _with_timer(tables, "added_delay", "timer_added_delay"),
            [("delay_level", "level"), *LAT_COLS],
        ),
        "<h3>End-to-end and added delay per topic</h3>",
        _e2e_by_topic(tables),
        "<h2>Schedule lateness</h2>",
        "<p>Time from a delayed message's due time to its transfer out of the schedule "
        "(retries included, on <code>%RETRY%</code> topics); for timer messages, from the "
        "instant asked for to the transfer out of the timer topic. <i>early</i>: deliveries "
        "before their due time (should be 0).</p>",
        svgs["lateness"],
        _html_table(levels, [("delay_level", "level"), *LAT_COLS, ("early", "early")]),
        "<details><summary>By real topic</summary>",
        _html_table(tables.get("lateness_by_topic", []), [("topic", "topic"), *LAT_COLS]),
        "<p>Timer messages:</p>",
        _html_table(
            tables.get("timer_lateness_by_topic", []),
            [("topic", "topic"), *LAT_COLS, ("early", "early")],
        ),
        "</details>",
        "<h3>Timer messages per topic</h3>",
        "<p>Scheduled (accepted with a delivery time), fired (transferred to the real topic), "
        "recalled (cancelled with RECALL_MESSAGE before firing), rescheduled and operator "
        "recalls (<code>kairosmq admin pending</code>), pending (scheduled - fired - recalled "
        "- operator recalls - rescheduled, within these logs). <i>level recalls</i> and "
        "<i>level rescheduled</i>: the same for level-delayed messages.</p>",
        _html_table(
            tables.get("timer_counts", []),
            [
                ("topic", "topic"),
                ("scheduled", "scheduled"),
                ("fired", "fired"),
                ("recalled", "recalled"),
                ("rescheduled", "rescheduled"),
                ("operator_recalled", "operator recalls"),
                ("pending", "pending"),
                ("level_recalled", "level recalls"),
                ("level_rescheduled", "level rescheduled"),
            ],
        ),
        "<h2>Throughput</h2>",
        svgs["throughput"],
        "<h2>Retries and dead letters</h2>",
        svgs["retry_funnel"],
        _html_table(
            tables.get("retry_funnel", []),
            [
                ("group", "group"),
                ("attempts", "attempts"),
                ("outcome", "outcome"),
                ("messages", "messages"),
            ],
        ),
        "<h3>Dead-letter queue per group</h3>",
        _html_table(
            tables.get("dlq_counts", []),
            [
                ("group", "group"),
                ("messages", "messages"),
                ("dead_lettered", "events"),
                ("first_at", "first"),
                ("last_at", "last"),
            ],
        ),
        "<h2>Transactions per producer group</h2>",
        "<p>Half messages prepared, ended with commit or rollback (by the producer or after a "
        "check), CHECK_TRANSACTION_STATE requests sent, half messages discarded after "
        "<code>transactionCheckMax</code> checks, and pending (prepared - committed - rolled "
        "back - discarded, within these logs).</p>",
        _html_table(
            tables.get("transaction_counts", []),
            [
                ("producer_group", "producer group"),
                ("prepared", "prepared"),
                ("committed", "committed"),
                ("rolled_back", "rolled back"),
                ("checked", "checks sent"),
                ("discarded", "discarded"),
                ("pending", "pending"),
            ],
        ),
        "<h2>Latest transfers out of the schedule</h2>",
        "<details><summary>Top rows</summary>",
        _html_table(
            top,
            [
                ("rank", "#"),
                ("msg_id", "msg id"),
                ("topic", "topic"),
                ("delay_level", "level"),
                ("reconsume_times", "reconsume"),
                ("lateness_ms", "lateness ms"),
                ("delivered_at", "delivered at"),
            ],
            limit=50,
        ),
        "</details>",
        "<h2>Input</h2>",
        _html_table(
            tables.get("event_counts", []),
            [("event", "event"), ("catalogued", "catalogued"), ("lines", "lines")],
        ),
        f"<p>Job time {escape(_num(meta.get('elapsed_s')))} s; parquet tables in "
        f"{escape(str(meta.get('output', '')))}. Percentiles are nearest-rank, at most 1 % "
        "above the exact value (log-bucket histograms).</p></body></html>",
    ]
    return "\n".join(parts)
