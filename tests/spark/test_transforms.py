"""The aggregates on the hand-made scenario (expectations: tests/spark/scenario.py), and the
driver-side tables made from them."""

from __future__ import annotations

from collections import Counter

import pytest
from kairosmq.server.observe.logs import CATALOGUE
from kairosmq.spark import tables
from kairosmq.spark import transforms as T
from kairosmq.spark.job import extract

from tests.spark import scenario
from tests.spark.conftest import T0, ev_v1, write_jsonl

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lines(spark, tmp_path_factory):
    path = write_jsonl(tmp_path_factory.mktemp("logs") / "broker.jsonl", scenario.records())
    df = extract(spark, [str(path)], "PERMISSIVE").transform(T.lines).cache()
    yield df
    df.unpersist()


def rows(df):
    return [r.asDict() for r in df.collect()]


def test_event_counts_report_malformed_newer_and_uncatalogued_lines(lines):
    got = {
        r["event"]: (r["catalogued"], r["lines"])
        for r in tables.event_counts(rows(T.line_counts(lines)), CATALOGUE)
    }
    recs = scenario.records()
    expected = Counter(x["event"] for x in recs if isinstance(x, dict))
    assert got.pop(T.MALFORMED) == (False, scenario.MALFORMED_LINES)
    assert got.pop(T.NO_EVENT) == (False, 1)
    assert got.pop("<format v3>") == (False, scenario.NEWER_FORMAT_LINES)
    assert got.pop("made.up.event") == (False, 1)
    expected.pop("made.up.event")
    assert got == {name: (True, n) for name, n in expected.items()}


def test_lateness_percentiles_per_level_and_topic(lines):
    expected = scenario.lateness_expectations(scenario.records())
    lat = tables.lateness_tables(rows(T.lateness_histogram(lines)))
    got = {r.pop("delay_level"): r for r in lat["lateness_by_level"]}
    assert set(got) == set(expected) == {1, 2, 3, 4, 5}
    for level, exp in expected.items():
        for key, value in exp.items():
            assert got[level][key] == pytest.approx(value), (level, key)
    # level 5 is lateness 1..20: p50 = 10, p90 = 18, p99 = p99.9 = max = 20
    assert [got[5][k] for k in ("p50", "p90", "p99", "p999", "max")] == [10, 18, 20, 20, 20]
    by_topic = {r["topic"]: r for r in lat["lateness_by_topic"]}
    assert set(by_topic) == {"A", "B", "C", "%RETRY%g1"}
    assert by_topic["%RETRY%g1"]["count"] == 3 and by_topic["%RETRY%g1"]["max"] == 7.0
    assert by_topic["C"]["mean"] == pytest.approx(10.5)
    overall = lat["lateness_overall"]
    assert overall[0]["count"] == 25 and overall[0]["max"] == 20.0


def test_retry_funnel_and_dead_letters(lines):
    funnel = rows(lines.transform(T.consumer_outcomes).transform(T.retry_funnel))
    assert {
        (r["group"], r["attempts"], r["outcome"]): r["messages"] for r in funnel
    } == scenario.FUNNEL
    dlq = tables.dlq_counts(rows(T.line_counts(lines)), funnel, T.DEAD_LETTERED)
    assert [(r["group"], r["dead_lettered"], r["messages"]) for r in dlq] == [("g1", 1, 1)]
    assert dlq[0]["first_at"] == dlq[0]["last_at"] and dlq[0]["first_at"].year == 2026


def test_lifecycle_joins_store_schedule_deliver_consume(lines):
    life = {r["msg_id"]: r for r in rows(T.message_lifecycle(lines))}
    assert len(life) == 5 + 20
    for mid, (topic, level, e2e, pulls) in scenario.LIFECYCLE.items():
        r = life[mid]
        assert (r["topic"], r["delay_level"], r["e2e_ms"], r["first_pulls"]) == (
            topic,
            level,
            e2e,
            pulls,
        ), mid
    assert life["m2"]["lateness_ms"] == 3.0  # the first delivery, not the retry's 7.0
    assert life["m2"]["deliver_ts"] == T0 + 100 + 5000
    assert (life["m2"]["nominal_ms"], life["m2"]["added_ms"]) == (5000, 15)
    assert (life["m1"]["nominal_ms"], life["m1"]["added_ms"]) == (0, 25)
    lat = tables.latency_tables(rows(T.e2e_histogram(T.message_lifecycle(lines))))
    e2e = {(r["topic"], r["delay_level"]): r for r in lat["e2e_latency"]}
    assert e2e[("A", 0)]["count"] == 2 and e2e[("A", 0)]["max"] == 25.0
    assert e2e[("A", 0)]["p50"] == 20.0
    assert ("C", 5) not in e2e  # never consumed
    added = {r["delay_level"]: r for r in lat["added_delay"]}
    assert added[2]["max"] == 15.0 and added[1]["max"] == 3.0  # m3: 1000 + 3 - 1000
    assert added[0]["count"] == 3 and added[0]["max"] == 25.0


def test_throughput_per_minute_and_top_late(lines):
    got = tables.throughput_per_minute(rows(T.line_counts(lines)), T.THROUGHPUT_EVENTS)
    expected = scenario.per_minute(scenario.records())
    minutes = [int((r["minute"].timestamp() * 1000 - T0) // 60_000) for r in got]
    assert minutes == sorted(expected)
    for r, minute in zip(got, minutes, strict=True):
        for col, name in T.THROUGHPUT_EVENTS:
            assert r[col] == expected[minute][name], (minute, col)
    top = rows(T.top_late(lines, 3))
    assert [(r["rank"], r["msg_id"], r["lateness_ms"]) for r in top] == [
        (1, "c20", 20.0),
        (2, "c19", 19.0),
        (3, "c18", 18.0),
    ]


def test_format_1_lines_read_like_format_2(spark, tmp_path):
    """Old logs (ISO timestamp, level, component, the dropped fields) give the same numbers."""
    v2 = [r for r in scenario.records() if isinstance(r, dict)]
    v1 = []
    for r in v2:
        fields = {
            k: v
            for k, v in r.items()
            if k not in ("ts", "v", "event", "level", "component", "uncatalogued")
        }
        v1.append(
            ev_v1(r["event"], r["ts"], store_ts=r["ts"], **fields)
            if r["event"] in ("message.stored", "message.pulled")
            else ev_v1(r["event"], r["ts"], **fields)
        )
    both = {}
    for name, recs in (("v1", v1), ("v2", v2)):
        path = write_jsonl(tmp_path / name / "broker.jsonl", recs)
        df = extract(spark, [str(path)], "FAILFAST").transform(T.lines)
        both[name] = (
            sorted(tables.event_counts(rows(T.line_counts(df)), CATALOGUE), key=str),
            sorted(rows(T.message_lifecycle(df)), key=lambda r: r["msg_id"]),
            tables.lateness_tables(rows(T.lateness_histogram(df))),
        )
    assert both["v1"] == both["v2"]
    assert "timestamp" in v1[0] and "ts" not in v1[0]


def separate_results(agg, top_n: int) -> dict:
    """The results as the earlier layout collected them: one query per result."""
    return {
        "latency": rows(agg.transform(T.lifecycle_of).transform(T.e2e_histogram)),
        "retry_funnel": rows(agg.transform(T.outcomes_of).transform(T.retry_funnel)),
        "line_counts": rows(agg.transform(T.counts_of)),
        "lateness": rows(agg.transform(T.lateness_of)),
        "top_late": rows(agg.transform(T.top_late_of, top_n)),
    }


def assert_same_results(got: dict, expected: dict) -> None:
    """Equal tables: ordered ones (funnel, top late) in order, the others as sets of rows."""
    assert set(got) == set(expected)
    for name in ("retry_funnel", "top_late"):
        assert got[name] == expected[name], name
    for name in ("latency", "line_counts", "lateness"):
        # repr holds the column order too
        assert sorted(map(repr, got[name])) == sorted(map(repr, expected[name])), name


def test_one_query_gives_the_results_of_the_separate_queries(lines):
    """``results_of`` (the job's single query over the one pass) yields exactly the rows,
    columns and order of the five separate result queries, on the scenario with retries,
    dead letters, malformed and newer-format lines; the latency rows are not empty."""
    agg = lines.transform(T.facts).transform(T.one_pass).cache()
    try:
        got = T.split_results(rows(agg.transform(T.results_of, 3)))
        expected = separate_results(agg, 3)
    finally:
        agg.unpersist()
    assert_same_results(got, expected)
    assert got["latency"] and got["retry_funnel"] and len(got["top_late"]) == 3
