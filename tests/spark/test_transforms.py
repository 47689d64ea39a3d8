"""The metric transforms on the hand-made scenario (expectations: tests/spark/scenario.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from kairosmq.spark import transforms as T
from kairosmq.spark.job import extract

from tests.spark import scenario
from tests.spark.conftest import T0, write_jsonl

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def parsed(spark, tmp_path_factory):
    path = write_jsonl(tmp_path_factory.mktemp("logs") / "broker.jsonl", scenario.records())
    df = extract(spark, [str(path)], "PERMISSIVE").cache()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def events(parsed):
    return parsed.transform(T.message_events)


def rows(df):
    return [r.asDict() for r in df.collect()]


def test_event_counts_report_malformed_and_uncatalogued_lines(parsed):
    got = {r["event"]: (r["catalogued"], r["lines"]) for r in rows(T.event_counts(parsed))}
    recs = scenario.records()
    expected = Counter(x["event"] for x in recs if isinstance(x, dict))
    assert got.pop(T.MALFORMED) == (False, scenario.MALFORMED_LINES)
    assert got.pop(T.NO_EVENT) == (False, 1)
    assert got.pop("made.up.event") == (False, 1)
    expected.pop("made.up.event")
    assert got == {name: (True, n) for name, n in expected.items()}


def test_lateness_percentiles_per_level_and_topic(events):
    expected = scenario.lateness_expectations(scenario.records())
    got = {r.pop("delay_level"): r for r in rows(T.lateness_by_level(events))}
    assert set(got) == set(expected) == {1, 2, 3, 4, 5}
    for level, exp in expected.items():
        for key, value in exp.items():
            assert got[level][key] == pytest.approx(value), (level, key)
    # level 5 is lateness 1..20: p50 = 10, p90 = 18, p99 = p99.9 = max = 20
    assert [got[5][k] for k in ("p50", "p90", "p99", "p999", "max")] == [10, 18, 20, 20, 20]
    by_topic = {r["topic"]: r for r in rows(T.lateness_by_topic(events))}
    assert set(by_topic) == {"A", "B", "C", "%RETRY%g1"}
    assert by_topic["%RETRY%g1"]["count"] == 3 and by_topic["%RETRY%g1"]["max"] == 7.0
    assert by_topic["C"]["mean"] == pytest.approx(10.5)
    overall = rows(T.lateness_overall(events))
    assert overall[0]["count"] == 25 and overall[0]["max"] == 20.0


def test_retry_funnel_and_dead_letters(events):
    funnel = {(r["group"], r["attempts"], r["outcome"]): r["messages"]
              for r in rows(events.transform(T.consumer_outcomes).transform(T.retry_funnel))}
    assert funnel == scenario.FUNNEL
    dlq = rows(T.dlq_counts(events))
    assert [(r["group"], r["dead_lettered"], r["messages"]) for r in dlq] == [("g1", 1, 1)]


def test_lifecycle_joins_store_schedule_deliver_consume(events):
    life = {r["msg_id"]: r for r in rows(T.message_lifecycle(events))}
    assert len(life) == 5 + 20
    for mid, (topic, level, e2e, groups) in scenario.LIFECYCLE.items():
        r = life[mid]
        assert (r["topic"], r["delay_level"], r["e2e_ms"], r["consumer_groups"]) == (
            topic, level, e2e, groups), mid
    assert life["m2"]["lateness_ms"] == 3.0  # the first delivery, not the retry's 7.0
    assert life["m2"]["deliver_ts"] == T0 + 100 + 5000
    e2e = {(r["topic"], r["delay_level"]): r
           for r in rows(T.e2e_latency(T.message_lifecycle(events)))}
    assert e2e[("A", 0)]["count"] == 2 and e2e[("A", 0)]["max"] == 25.0
    assert e2e[("A", 0)]["p50"] == 20.0
    assert ("C", 5) not in e2e  # never consumed


def test_throughput_per_minute_and_top_late(events):
    got = rows(T.throughput_per_minute(events))
    expected = scenario.per_minute(scenario.records())
    assert [int((r["minute"].timestamp() * 1000 - T0) // 60_000) for r in got] == sorted(expected)
    for r in got:
        minute = int((r["minute"].timestamp() * 1000 - T0) // 60_000)
        for col, name in T.THROUGHPUT_EVENTS:
            assert r[col] == expected[minute][name], (minute, col)
    top = rows(T.top_late(events, 3))
    assert [(r["rank"], r["msg_id"], r["lateness_ms"]) for r in top] == [
        (1, "c20", 20.0), (2, "c19", 19.0), (3, "c18", 18.0)]
