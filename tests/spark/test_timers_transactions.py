"""Timer messages and transactions in the one pass: exact counts, percentiles and the report,
on a small hand-made log (expectations written out by hand below)."""

from __future__ import annotations

import pytest
from kairosmq.spark import report, tables
from kairosmq.spark import transforms as T
from kairosmq.spark.job import derive_tables, extract

from tests.spark.conftest import T0, ev, write_jsonl
from tests.spark.test_transforms import assert_same_results, separate_results

pytestmark = pytest.mark.spark


def _timer(mid: str, topic: str, at: int, due: int, late: float | None = None) -> list[dict]:
    out = [
        ev(
            "timer.scheduled",
            at,
            msg_id=mid,
            real_topic=topic,
            real_queue_id=0,
            queue_offset=0,
            phy_offset=0,
            deliver_ts=due,
        )
    ]
    if late is not None:
        out.append(
            ev(
                "timer.fired",
                due + late,
                msg_id=mid,
                topic=topic,
                queue_id=0,
                queue_offset=0,
                phy_offset=0,
                deliver_ts=due,
                lateness_ms=late,
            )
        )
    return out


def _operator(event: str, mid: str, topic: str, kind: str, at: int, due: int) -> dict:
    extra = (
        {"from_ts": due, "deliver_ts": due + 30_000, "new_phy_offset": 1, "run_now": False}
        if event == "schedule.rescheduled"
        else {"deliver_ts": due}
    )
    return ev(event, at, msg_id=mid, topic=topic, kind=kind, phy_offset=0, **extra)


def _tx(event: str, mid: str, group: str, at: int, **extra) -> dict:
    if event == "transaction.prepared":
        return ev(
            event,
            at,
            msg_id=mid,
            producer_group=group,
            real_topic="Tx",
            real_queue_id=0,
            queue_offset=0,
            phy_offset=0,
        )
    return ev(
        event, at, msg_id=mid, producer_group=group, topic="Tx", half_offset=0, checks=0, **extra
    )


def records() -> list[dict]:
    r = [
        # a plain message (added delay 20 ms) and a level-1 delivery (lateness 3 ms) on T
        ev("message.stored", T0, msg_id="m0", topic="T", born_ts=T0 - 10, store_ts=T0),
        ev("message.pulled", T0 + 10, msg_id="m0", group="g", topic="T", born_ts=T0 - 10),
        ev(
            "message.scheduled",
            T0,
            msg_id="m1",
            real_topic="T",
            delay_level=1,
            deliver_ts=T0 + 1000,
        ),
        ev(
            "message.delivered",
            T0 + 1003,
            msg_id="m1",
            topic="T",
            delay_level=1,
            deliver_ts=T0 + 1000,
            lateness_ms=3.0,
        ),
    ]
    # timers on T: t1 (late 2, e2e 1015, nominal 1000), t2 (late 4, e2e 2025, nominal 2000),
    # t3 recalled, t4 pending; on U: t5 fired 0.5 ms early, never pulled
    r += _timer("t1", "T", T0, T0 + 1000, 2.0)
    r.append(ev("message.pulled", T0 + 1010, msg_id="t1", group="g", topic="T", born_ts=T0 - 5))
    r += _timer("t2", "T", T0 + 10, T0 + 2010, 4.0)
    r.append(ev("message.pulled", T0 + 2030, msg_id="t2", group="g", topic="T", born_ts=T0 + 5))
    r += _timer("t3", "T", T0 + 20, T0 + 9000)
    r.append(
        ev(
            "timer.recalled",
            T0 + 30,
            msg_id="t3",
            topic="T",
            deliver_ts=T0 + 9000,
            phy_offset=0,
            kind="timer",
        )
    )
    r += _timer("t4", "T", T0 + 40, T0 + 99_000)
    r += _timer("t5", "U", T0 + 50, T0 + 500, -0.5)
    # the recall of a level-delayed message on L
    r.append(
        ev(
            "timer.recalled",
            T0 + 60,
            msg_id="l1",
            topic="L",
            deliver_ts=T0 + 5000,
            phy_offset=0,
            kind="level",
        )
    )
    # an operator's actions (kairosmq admin pending): t6 moved later (a new timer record
    # replaces it, still pending), t7 recalled; the level message l2 moved (now a timer)
    r += _timer("t6", "T", T0 + 70, T0 + 50_000)
    r.append(_operator("schedule.rescheduled", "t6", "T", "timer", T0 + 80, T0 + 50_000))
    r += _timer("t6", "T", T0 + 80, T0 + 90_000)
    r += _timer("t7", "T", T0 + 90, T0 + 60_000)
    r.append(_operator("schedule.recalled", "t7", "T", "timer", T0 + 95, T0 + 60_000))
    r.append(_operator("schedule.rescheduled", "l2", "L", "level", T0 + 96, T0 + 7_000))
    r += _timer("l2", "L", T0 + 96, T0 + 80_000)
    # transactions: PG1 commits h1, rolls back h2, h3 is checked twice then discarded;
    # PG2's h4 is checked once and still pending
    r += [_tx("transaction.prepared", h, "PG1", T0 + i) for i, h in enumerate(("h1", "h2", "h3"))]
    r += [
        _tx("transaction.committed", "h1", "PG1", T0 + 5, from_check=False, peer="p"),
        _tx("transaction.rolled_back", "h2", "PG1", T0 + 6, from_check=True, peer="p"),
        _tx("transaction.checked", "h3", "PG1", T0 + 7, peer="p"),
        _tx("transaction.checked", "h3", "PG1", T0 + 8, peer="p"),
        _tx("transaction.discarded", "h3", "PG1", T0 + 9, reason="check max"),
        _tx("transaction.prepared", "h4", "PG2", T0 + 10),
        _tx("transaction.checked", "h4", "PG2", T0 + 11, peer="p"),
    ]
    return r


@pytest.fixture(scope="module")
def got(spark, tmp_path_factory):
    """The collected aggregates, as ``job.run`` collects them from the one pass (one query,
    ``results_of``), checked against the separate result queries."""
    path = write_jsonl(tmp_path_factory.mktemp("logs") / "broker.jsonl", records())
    agg = (
        extract(spark, [str(path)], "PERMISSIVE")
        .transform(T.lines)
        .transform(T.facts)
        .transform(T.one_pass)
        .cache()
    )

    def rows(df):
        return [r.asDict() for r in df.collect()]

    out = T.split_results(rows(agg.transform(T.results_of, 10)))
    # the single query the job runs gives what the separate result queries give
    assert_same_results(out, separate_results(agg, 10))
    out["lifecycle"] = {r["msg_id"]: r for r in rows(agg.transform(T.lifecycle_of))}
    agg.unpersist()
    return out


def test_timer_lateness_beside_the_levels(got):
    lat = tables.lateness_tables(got["lateness"])
    # the levels' tables hold no timer
    assert [
        (r["delay_level"], r["count"], r["max"], r["early"]) for r in lat["lateness_by_level"]
    ] == [(1, 1, 3.0, 0)]
    assert lat["lateness_overall"][0]["count"] == 1
    # timers: -0.5, 2, 4 -> nearest rank p50 = 2, p90 = p99 = p99.9 = max = 4, one early
    (timer,) = lat["timer_lateness"]
    assert {k: timer[k] for k in ("count", "p50", "p90", "p99", "p999", "max", "early")} == {
        "count": 3,
        "p50": 2.0,
        "p90": 4.0,
        "p99": 4.0,
        "p999": 4.0,
        "max": 4.0,
        "early": 1,
    }
    assert timer["mean"] == pytest.approx(5.5 / 3)
    by_topic = {
        r["topic"]: (r["count"], r["max"], r["early"]) for r in lat["timer_lateness_by_topic"]
    }
    assert by_topic == {"T": (2, 4.0, 0), "U": (1, -0.5, 1)}


def test_timer_lifecycle_and_added_delay(got):
    life = got["lifecycle"]
    t1, t2, t3 = life["t1"], life["t2"], life["t3"]
    assert (
        t1["topic"],
        t1["delay_level"],
        t1["nominal_ms"],
        t1["e2e_ms"],
        t1["added_ms"],
        t1["lateness_ms"],
    ) == ("T", tables.TIMER_LEVEL, 1000, 1015, 15, 2.0)
    assert (t2["nominal_ms"], t2["e2e_ms"], t2["added_ms"]) == (2000, 2025, 25)
    assert (t3["delay_level"], t3["e2e_ms"], t3["lateness_ms"]) == (tables.TIMER_LEVEL, None, None)
    lat = tables.latency_tables(got["latency"])
    # m1 (level 1) was never pulled: only the plain m0 (20 ms) has an added delay
    assert [(r["delay_level"], r["count"], r["max"]) for r in lat["added_delay"]] == [(0, 1, 20.0)]
    (timer,) = lat["timer_added_delay"]
    assert (timer["count"], timer["p50"], timer["max"], timer["mean"]) == (2, 15.0, 25.0, 20.0)
    assert {(r["topic"], r["delay_level"]) for r in lat["added_delay_by_topic"]} == {
        ("T", 0),
        ("T", tables.TIMER_LEVEL),
    }


def test_timer_and_transaction_counts(got):
    counts = got["line_counts"]
    none = {"rescheduled": 0, "operator_recalled": 0, "level_rescheduled": 0}
    assert tables.timer_counts(counts) == [
        {
            **none,
            "topic": "L",
            "scheduled": 1,  # l2, moved by an operator: now a timer
            "fired": 0,
            "recalled": 0,
            "level_recalled": 1,
            "level_rescheduled": 1,
            "pending": 1,
        },
        {
            **none,
            "topic": "T",
            "scheduled": 7,  # t1-t4, t6 and the record replacing it, t7
            "fired": 2,
            "recalled": 1,
            "rescheduled": 1,
            "operator_recalled": 1,
            "level_recalled": 0,
            "pending": 2,  # t4 and t6 (at its new instant)
        },
        {
            **none,
            "topic": "U",
            "scheduled": 1,
            "fired": 1,
            "recalled": 0,
            "level_recalled": 0,
            "pending": 0,
        },
    ]
    assert tables.transaction_counts(counts) == [
        {
            "producer_group": "PG1",
            "prepared": 3,
            "committed": 1,
            "rolled_back": 1,
            "checked": 2,
            "discarded": 1,
            "pending": 0,
        },
        {
            "producer_group": "PG2",
            "prepared": 1,
            "committed": 0,
            "rolled_back": 0,
            "checked": 1,
            "discarded": 0,
            "pending": 1,
        },
    ]
    # the keys added for timers and transactions leave the other count tables as they were
    assert tables.dlq_counts(counts, got["retry_funnel"], T.DEAD_LETTERED) == []
    by_event = {r["event"]: r["lines"] for r in tables.event_counts(counts, [])}
    assert (
        by_event["timer.scheduled"],
        by_event["timer.recalled"],
        by_event["transaction.checked"],
    ) == (9, 2, 3)
    assert (by_event["schedule.rescheduled"], by_event["schedule.recalled"]) == (2, 1)


def test_summary_console_and_html_show_timers_and_transactions(got):
    t = derive_tables(got)
    s = report.summarize(t)
    assert {
        k: s["timers"][k] for k in ("scheduled", "fired", "recalled", "pending", "level_recalled")
    } == {"scheduled": 9, "fired": 3, "recalled": 1, "pending": 3, "level_recalled": 1}
    assert (
        s["timers"]["rescheduled"],
        s["timers"]["operator_recalled"],
        s["timers"]["level_rescheduled"],
    ) == (1, 1, 1)
    assert s["timers"]["lateness_ms"] == {
        "count": 3,
        "p50": 2.0,
        "p90": 4.0,
        "p99": 4.0,
        "p999": 4.0,
        "max": 4.0,
        "early": 1,
    }
    assert s["lateness_ms"]["count"] == 1  # the levels' headline holds no timer
    assert s["transactions"] == {
        "prepared": 4,
        "committed": 1,
        "rolled_back": 1,
        "checked": 3,
        "discarded": 1,
        "pending": 1,
        "by_group": {
            "PG1": {
                "prepared": 3,
                "committed": 1,
                "rolled_back": 1,
                "checked": 2,
                "discarded": 1,
                "pending": 0,
            },
            "PG2": {
                "prepared": 1,
                "committed": 0,
                "rolled_back": 0,
                "checked": 1,
                "discarded": 0,
                "pending": 1,
            },
        },
    }
    console = report.console_summary(t, s)
    assert (
        "timers scheduled 9, fired 3, recalled 1, pending 3 (early 1); "
        "operators rescheduled 2, recalled 1" in console
    )
    assert "transactions prepared 4, committed 1, rolled back 1" in console
    assert any(line.split()[:2] == ["timer", "3"] for line in console.splitlines())
    html = report.render_html(t, s, {})
    assert "<td>timer</td><td>3</td><td>2.0</td><td>4.0</td>" in html  # lateness row
    assert "<td>timer</td><td>2</td><td>15.0</td><td>25.0</td>" in html  # added-delay row
    assert "<td>PG2</td><td>1</td><td>0</td><td>0</td><td>1</td><td>0</td><td>1</td>" in html
    cells = "".join(f"<td>{v}</td>" for v in ("T", 7, 2, 1, 1, 1, 2, 0, 0))
    assert cells in html  # scheduled .. pending, level recalls, level rescheduled
    charts = report.charts(t)
    assert ">timer</text>" in charts["lateness"] and ">timer</text>" in charts["added_delay"]
