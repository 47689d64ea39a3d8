"""Contract: a real in-process broker's JSON logs, read by the job in FAILFAST mode.

The scenario (sends, delays on four levels, one retry, one dead letter; three timer messages,
one of them recalled, over raw frames; transactions: one committed, one rolled back, one
checked until discarded) runs against
``kairosmq.server.broker.Broker`` with ``configure_logging`` writing to a temp dir with tiny
rotation (so rotated ``.jsonl.gz`` files are read too). The job then runs in FAILFAST mode,
which fails on any line the schema cannot hold; its tables must show exactly what the
scenario did, and lateness/latency within bounds.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path

import kairosmq.client as client
import pytest
import structlog
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.server.broker import Broker
from kairosmq.server.observe import logs
from kairosmq.spark.job import main
from kairosmq.spark.tables import TIMER_LEVEL

from tests.helpers import fast_config, send, wait_until
from tests.transaction.txpeer import FAST, end, half, register_producer
from tests.wire import RawPeer

pytestmark = pytest.mark.spark
GROUP = "CG-contract"
LEVELS = (1, 2, 3, 4)
PER_LEVEL = 5
PLAIN = 8  # plus one message retried once and one dead-lettered, all on CtNormal
LATENESS_BOUND_MS = 1000.0  # "late by milliseconds"; generous for a shared CI box
TIMER_MS = 300  # TIMER_DELAY_MS of the timer messages (topic CtTimer, consumed too)
LOG_SLACK_MS = 50  # receipt -> the scheduled log line's ts, on a loaded machine


async def _timers_and_transactions(broker: Broker, sent: dict[str, object]) -> None:
    """Raw frames: three timers (one recalled), and transactions committed, rolled back and
    checked (never answered) until discarded."""
    peer = await RawPeer.connect(broker.address)
    try:
        handles = []
        for i in range(3):
            r = await send(
                peer,
                "CtTimer",
                b"t%d" % i,
                {"UNIQ_KEY": f"TIMER-{i}", "TIMER_DELAY_MS": str(TIMER_MS)},
                g=int(time.time() * 1000),
            )  # born time, for e2e and added delay
            assert r.code == ResponseCode.SUCCESS, r.remark
            handles.append(r.ext_fields["recallHandle"])
        rc = await peer.call(
            RequestCode.RECALL_MESSAGE,
            {"producerGroup": "PG", "topic": "CtTimer", "recallHandle": handles[2]},
        )
        assert rc.code == ResponseCode.SUCCESS, rc.remark
        sent["timers"] = ["TIMER-0", "TIMER-1", "TIMER-2"]
        await register_producer(peer)  # group PG: it gets the checks and never answers
        commit, rollback = (
            await half(peer, "CtTx", "TX-COMMIT"),
            await half(peer, "CtTx", "TX-ROLLBACK"),
        )
        assert (await end(peer, commit, 8)).code == ResponseCode.SUCCESS
        assert (await end(peer, rollback, 12)).code == ResponseCode.SUCCESS
        await half(peer, "CtTx", "TX-UNKNOWN")
        await wait_until(lambda: broker.transactions.counters["discarded"] == 1, 10)
    finally:
        await peer.close()


async def _scenario(data_dir: Path) -> dict[str, object]:
    """Run the traffic; return what was sent (msg ids by kind)."""
    broker = Broker(fast_config(data_dir, max_reconsume_times=1, **FAST))
    await broker.start()
    sent: dict[str, object] = {}
    seen: list[tuple[str, int]] = []

    def listener(msgs, _ctx):
        m = msgs[0]
        seen.append((m.msg_id, m.reconsume_times))
        if m.msg_id == sent.get("dlq") or (
            m.msg_id == sent.get("retry") and m.reconsume_times == 0
        ):
            return client.ConsumeStatus.RECONSUME_LATER
        return client.ConsumeStatus.CONSUME_SUCCESS

    try:
        async with client.Producer("PG-contract", broker.namesrv_address) as p:
            plain = [await p.send(client.Message("CtNormal", b"p%d" % i)) for i in range(PLAIN)]
            sent["retry"] = (await p.send(client.Message("CtNormal", b"retry"))).msg_id
            sent["dlq"] = (await p.send(client.Message("CtNormal", b"dlq"))).msg_id
            sent["plain"] = [r.msg_id for r in plain]
            sent["delayed"] = {
                (await p.send(client.Message("CtDelay", b"d", delay_level=level))).msg_id: level
                for level in LEVELS
                for _ in range(PER_LEVEL)
            }
        await _timers_and_transactions(broker, sent)
        consumer = client.PushConsumer(
            GROUP,
            broker.namesrv_address,
            rebalance_interval=0.5,
            max_reconsume_times=1,
            consume_from_where=client.ConsumeFromWhere.FIRST_OFFSET,
            pull_time_delay_millis_when_exception=50,
            persist_consumer_offset_interval=0.2,
        )
        consumer.subscribe("CtNormal")
        consumer.subscribe("CtDelay")
        consumer.subscribe("CtTimer")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            expected_calls = PLAIN + PER_LEVEL * len(LEVELS) + 2 + 2 + 2
            for _ in range(400):
                dlq_done = broker.store.max_offset(f"%DLQ%{GROUP}", 0) >= 1
                if len(seen) >= expected_calls and dlq_done:
                    break
                await asyncio.sleep(0.025)
        finally:
            await consumer.shutdown()
    finally:
        await broker.stop("contract test")
    sent["calls"] = sorted(seen)
    return sent


@pytest.fixture
def broker_logs(tmp_path):
    log_dir = tmp_path / "logs"
    logs.configure_logging(
        json=True, log_dir=log_dir, stdout=False, rotate_bytes=16 * 1024, gzip_rotated=True
    )
    try:
        yield log_dir
    finally:
        logs.close_sinks()
        structlog.reset_defaults()


async def test_job_reports_what_a_real_broker_did(spark, broker_logs, tmp_path):
    sent = await _scenario(tmp_path / "data")
    logs.close_sinks()  # drain and close: every line is on disk
    assert len(sent["calls"]) == PLAIN + PER_LEVEL * len(LEVELS) + 6, "scenario incomplete"
    files = sorted(p.name for p in broker_logs.iterdir())
    lines = [
        json.loads(line)
        for f in broker_logs.iterdir()
        for line in (gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes())
        .decode()
        .splitlines()
    ]
    assert lines and all(r["v"] == logs.LOG_FORMAT and isinstance(r["ts"], int) for r in lines)
    assert all("component" not in r for r in lines if r["event"] in logs.LEAN_EVENTS)
    assert any(n.endswith(".jsonl.gz") for n in files), f"no rotated gzip file: {files}"

    out = tmp_path / "report"
    rc = await asyncio.to_thread(
        main,
        [
            str(broker_logs),
            "-o",
            str(out),
            "--mode",
            "FAILFAST",
            "-q",
            "--shuffle-partitions",
            "2",
            "--messages",
        ],
    )
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    n_delayed = PER_LEVEL * len(LEVELS)
    assert s["malformed_lines"] == 0 and s["uncatalogued_events"] == 0
    # + the committed transaction; the DLQ copy is not a producer's store
    assert s["events"]["stored"] == PLAIN + 2 + 1
    assert s["events"]["scheduled"] == n_delayed + 2  # + the two retries
    assert s["events"]["delivered"] == n_delayed + 2
    assert s["events"]["consumed"] == PLAIN + n_delayed + 4 + 2
    assert (s["events"]["redelivered"], s["events"]["dead_lettered"]) == (2, 1)
    assert s["funnel"] == {
        "succeeded_first_try": PLAIN + n_delayed + 2,
        "succeeded_after_retry": 1,
        "in_retry": 0,
        "dead_lettered": 1,
    }
    assert s["dead_lettered_by_group"] == {GROUP: 1}
    assert 0 <= s["lateness_ms"]["p50"] <= s["lateness_ms"]["max"] < LATENESS_BOUND_MS
    levels = {
        r["delay_level"]: r
        for r in map(json.loads, (out / "lateness_by_level.jsonl").read_text().splitlines())
    }
    assert {lv: r["count"] for lv, r in levels.items()} == {1: 5, 2: 5, 3: 5 + 2, 4: 5}
    messages = {r["msg_id"]: r for r in spark.read.parquet(str(out / "messages")).collect()}
    assert set(messages) == {
        *sent["plain"],
        sent["retry"],
        sent["dlq"],
        *sent["delayed"],
        *sent["timers"],
        "TX-COMMIT",
    }
    levels_ms = fast_config(tmp_path / "unused").delay_levels_ms
    for mid, level in sent["delayed"].items():
        m = messages[mid]
        assert (m["topic"], m["delay_level"], m["first_pulls"]) == ("CtDelay", level, 1)
        assert 0 <= m["lateness_ms"] < LATENESS_BOUND_MS
        assert levels_ms[level - 1] - 5 <= m["e2e_ms"] < levels_ms[level - 1] + 10_000
        # deliver_ts - the scheduled line's ts: that line is written after the store, so a
        # loaded machine (a GIL switch, 5 ms in a test process) puts ms in between
        assert -LOG_SLACK_MS <= m["nominal_ms"] - levels_ms[level - 1] <= 5
        assert -5 <= m["added_ms"] < 10_000
    for mid in sent["plain"]:
        assert (messages[mid]["topic"], messages[mid]["delay_level"]) == ("CtNormal", 0)
    # timers beside the levels: lateness, counts, lifecycle
    t = s["timers"]
    assert {k: t[k] for k in ("scheduled", "fired", "recalled", "pending")} == {
        "scheduled": 3,
        "fired": 2,
        "recalled": 1,
        "pending": 0,
    }
    assert t["lateness_ms"]["count"] == 2 and t["lateness_ms"]["early"] == 0
    assert 0 <= t["lateness_ms"]["p50"] <= t["lateness_ms"]["max"] < LATENESS_BOUND_MS
    for mid in sent["timers"][:2]:
        m = messages[mid]
        assert (m["topic"], m["delay_level"], m["first_pulls"]) == ("CtTimer", TIMER_LEVEL, 1)
        assert -LOG_SLACK_MS <= m["nominal_ms"] - TIMER_MS <= 5
        assert -5 <= m["added_ms"] < 10_000
    assert messages["TIMER-2"]["first_consume_ts"] is None  # recalled: never delivered
    timer_rows = [json.loads(x) for x in (out / "timer_counts.jsonl").read_text().splitlines()]
    assert [(r["topic"], r["scheduled"], r["fired"], r["recalled"]) for r in timer_rows] == [
        ("CtTimer", 3, 2, 1)
    ]
    # transactions per producer group
    assert s["transactions"]["by_group"] == {
        "PG": {
            "prepared": 3,
            "committed": 1,
            "rolled_back": 1,
            "checked": FAST["transaction_check_max"],
            "discarded": 1,
            "pending": 0,
        }
    }
    html = (out / "report.html").read_text()
    assert "<h2>Transactions per producer group</h2>" in html and "<td>timer</td>" in html
