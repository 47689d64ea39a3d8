"""A tiny hand-made event log covering every metric, and independent expectations for it.

The expectations are either written out by hand (funnel, lifecycle, DLQ) or computed here in
plain Python from the records (percentiles by nearest rank, per-minute counts) - never with
the code under test.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

from tests.spark.conftest import T0, ev

LEVEL_MS = {1: 1000, 2: 5000, 3: 10000, 4: 30000, 5: 60000}


def _delayed(out: list, mid: str, topic: str, level: int, at: int, late: float, rt: int = 0) -> int:
    """scheduled -> due -> delivered; returns the delivery time."""
    deliver = at + LEVEL_MS[level]
    out.append(
        ev(
            "message.scheduled",
            at,
            msg_id=mid,
            real_topic=topic,
            delay_level=level,
            store_ts=at,
            deliver_ts=deliver,
            reconsume_times=rt,
        )
    )
    out.append(
        ev(
            "message.due",
            deliver,
            msg_id=mid,
            delay_level=level,
            deliver_ts=deliver,
            wake_lag_ms=0.5,
        )
    )
    out.append(
        ev(
            "message.delivered",
            deliver + late,
            msg_id=mid,
            topic=topic,
            delay_level=level,
            deliver_ts=deliver,
            lateness_ms=late,
            reconsume_times=rt,
        )
    )
    return int(deliver + late)


def _pull(mid: str, group: str, topic: str, at: float, born: int, rt: int = 0) -> dict:
    return ev(
        "message.pulled",
        at,
        msg_id=mid,
        group=group,
        topic=topic,
        born_ts=born,
        store_ts=born + 1,
        reconsume_times=rt,
    )


def _back(mid: str, group: str, at: float, rt: int) -> dict:
    return ev(
        "message.redelivered",
        at,
        msg_id=mid,
        group=group,
        topic=f"%RETRY%{group}",
        origin_topic="A",
        origin_msg_id=mid,
        reconsume_times=rt,
        delay_level=2 + rt,
    )


def records() -> list[dict[str, Any] | str]:
    r: list[dict[str, Any] | str] = [
        ev("broker.started", T0, host="127.0.0.1", port=10911, namesrv_port=9876),
        # m1: normal, topic A, consumed first try by g1 (e2e 25 ms)
        ev(
            "message.stored",
            T0 + 10,
            msg_id="m1",
            topic="A",
            born_ts=T0 + 5,
            store_ts=T0 + 10,
            reconsume_times=0,
        ),
        _pull("m1", "g1", "A", T0 + 30, T0 + 5),
    ]
    # m2: level 2 on A, g1 fails once, succeeds on the retry (e2e 5015 ms)
    d = _delayed(r, "m2", "A", 2, T0 + 100, 3.0)
    r += [_pull("m2", "g1", "A", d + 7, T0 + 95), _back("m2", "g1", d + 17, 1)]
    d = _delayed(r, "m2", "%RETRY%g1", 3, d + 18, 7.0, rt=1)
    r.append(_pull("m2", "g1", "%RETRY%g1", d + 2, T0 + 95, rt=1))
    # m3: level 1 on B, fails three times, dead-lettered after reconsume_times 2
    d = _delayed(r, "m3", "B", 1, T0 + 200, 1.0)
    r += [_pull("m3", "g1", "B", d + 1, T0 + 199), _back("m3", "g1", d + 2, 1)]
    d = _delayed(r, "m3", "%RETRY%g1", 3, d + 3, 2.0, rt=1)
    r += [_pull("m3", "g1", "%RETRY%g1", d + 1, T0 + 199, rt=1), _back("m3", "g1", d + 2, 2)]
    d = _delayed(r, "m3", "%RETRY%g1", 4, d + 3, 4.0, rt=2)
    r += [
        _pull("m3", "g1", "%RETRY%g1", d + 1, T0 + 199, rt=2),
        ev(
            "message.stored",
            d + 2,
            msg_id="m3",
            topic="%DLQ%g1",
            born_ts=T0 + 199,
            store_ts=d + 2,
            reconsume_times=3,
        ),  # the broker's copy in the DLQ
        ev(
            "message.dead_lettered",
            d + 2,
            msg_id="m3",
            group="g1",
            topic="%DLQ%g1",
            origin_topic="B",
            origin_msg_id="m3",
            reconsume_times=3,
        ),
    ]
    # m4: normal on B, g1 sends it back, the log ends before the retry is delivered
    r += [
        ev(
            "message.stored",
            T0 + 300,
            msg_id="m4",
            topic="B",
            born_ts=T0 + 299,
            store_ts=T0 + 300,
            reconsume_times=0,
        ),
        _pull("m4", "g1", "B", T0 + 310, T0 + 299),
        _back("m4", "g1", T0 + 311, 1),
    ]
    # m5: normal on A, consumed by g1 and g2 (first consume at +420 -> e2e 20 ms)
    r += [
        ev(
            "message.stored",
            T0 + 401,
            msg_id="m5",
            topic="A",
            born_ts=T0 + 400,
            store_ts=T0 + 401,
            reconsume_times=0,
        ),
        _pull("m5", "g2", "A", T0 + 420, T0 + 400),
        _pull("m5", "g1", "A", T0 + 450, T0 + 400),
    ]
    # c01..c20: level 5 on C, scheduled in minute 1, lateness 1..20 ms, never consumed
    for i in range(1, 21):
        _delayed(r, f"c{i:02d}", "C", 5, T0 + 61_000 + i, float(i))
    r += [
        ev("message.rejected", T0 + 500, topic="SCHEDULE_TOPIC_XXXX", code=14, remark="no"),
        ev("made.up.event", T0 + 501),  # uncatalogued
        '{"timestamp": "2026-01-01T00:00:00Z", "event": ',  # truncated line: malformed
        '{"timestamp": "2026-01-01T00:00:00Z", "event": "message.delivered", "delay_level": "x"}',
        '{"level": "info"}',  # no event
        '{"timestamp": "yesterday", "event": "message.stored", "msg_id": "zz"}',  # malformed
        # a line from a broker newer than this job (format 3): counted, no metric
        '{"ts": 1767225600000, "v": 3, "event": "message.stored", "msg_id": "future"}',
    ]
    return r


def nearest_rank(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(p * len(s)) - 1)]


def lateness_expectations(recs: list) -> dict[Any, dict[str, float]]:
    """Per delay level: count, p50, p90, p99, p999, max (nearest rank) of delivered lateness."""
    by: dict[Any, list[float]] = defaultdict(list)
    for x in recs:
        if isinstance(x, dict) and x["event"] == "message.delivered":
            by[x["delay_level"]].append(x["lateness_ms"])
    return {
        k: {
            "count": len(v),
            "p50": nearest_rank(v, 0.5),
            "p90": nearest_rank(v, 0.9),
            "p99": nearest_rank(v, 0.99),
            "p999": nearest_rank(v, 0.999),
            "max": max(v),
        }
        for k, v in by.items()
    }


def per_minute(recs: list) -> dict[int, Counter]:
    """minute index since T0 -> Counter of event names (well-formed dict records only)."""
    out: dict[int, Counter] = defaultdict(Counter)
    for x in recs:
        if isinstance(x, dict) and x["event"].startswith("message."):
            if x["event"] == "message.stored" and x["topic"].startswith("%DLQ%"):
                continue  # counted as dead_lettered, not as a producer's store
            ms = x["ts"]
            out[(ms - T0) // 60_000][x["event"]] += 1
    return out


FUNNEL = {  # (group, attempts, outcome) -> messages
    ("g1", 1, "succeeded"): 2,  # m1, m5
    ("g1", 2, "succeeded"): 1,  # m2
    ("g1", 3, "dead_lettered"): 1,  # m3
    ("g1", 1, "in_retry"): 1,  # m4
    ("g2", 1, "succeeded"): 1,  # m5
}
LIFECYCLE = {  # msg_id -> (topic, delay_level, e2e_ms, first_pulls)
    "m1": ("A", 0, 25, 1),
    "m2": ("A", 2, 5000 + 3 + 7 + 5, 1),
    "m3": ("B", 1, 1000 + 1 + 1 + 1, 1),
    "m4": ("B", 0, 11, 1),
    "m5": ("A", 0, 20, 2),
    "c07": ("C", 5, None, 0),
}
MALFORMED_LINES = 3  # truncated, a string delay_level, a timestamp that is no time
NEWER_FORMAT_LINES = 1  # "v": 3
