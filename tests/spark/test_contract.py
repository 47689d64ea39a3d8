"""Contract: a real in-process broker's JSON logs, read by the job in FAILFAST mode.

The scenario (sends, delays on four levels, one retry, one dead letter) runs against
``kairosmq.server.broker.Broker`` with ``configure_logging`` writing to a temp dir with tiny
rotation (so rotated ``.jsonl.gz`` files are read too). The job then runs in FAILFAST mode,
which fails on any line the schema cannot hold; its tables must show exactly what the
scenario did, and lateness/latency within bounds.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import kairosmq.client as client
import pytest
import structlog
from kairosmq.server import logs
from kairosmq.server.broker import Broker
from kairosmq.spark.job import main

from tests.helpers import fast_config

pytestmark = pytest.mark.spark
GROUP = "CG-contract"
LEVELS = (1, 2, 3, 4)
PER_LEVEL = 5
PLAIN = 8  # plus one message retried once and one dead-lettered, all on CtNormal
LATENESS_BOUND_MS = 1000.0  # "late by milliseconds"; generous for a shared CI box


async def _scenario(data_dir: Path) -> dict[str, object]:
    """Run the traffic; return what was sent (msg ids by kind)."""
    broker = Broker(fast_config(data_dir, max_reconsume_times=1))
    await broker.start()
    sent: dict[str, object] = {}
    seen: list[tuple[str, int]] = []

    def listener(msgs, _ctx):
        m = msgs[0]
        seen.append((m.msg_id, m.reconsume_times))
        if m.msg_id == sent.get("dlq") or (m.msg_id == sent.get("retry")
                                           and m.reconsume_times == 0):
            return client.ConsumeStatus.RECONSUME_LATER
        return client.ConsumeStatus.CONSUME_SUCCESS

    try:
        async with client.Producer("PG-contract", broker.namesrv_address) as p:
            plain = [await p.send(client.Message("CtNormal", b"p%d" % i)) for i in range(PLAIN)]
            sent["retry"] = (await p.send(client.Message("CtNormal", b"retry"))).msg_id
            sent["dlq"] = (await p.send(client.Message("CtNormal", b"dlq"))).msg_id
            sent["plain"] = [r.msg_id for r in plain]
            sent["delayed"] = {(await p.send(client.Message(
                "CtDelay", b"d", delay_level=level))).msg_id: level
                for level in LEVELS for _ in range(PER_LEVEL)}
        consumer = client.PushConsumer(
            GROUP, broker.namesrv_address, rebalance_interval=0.5, max_reconsume_times=1,
            consume_from_where=client.ConsumeFromWhere.FIRST_OFFSET,
            pull_time_delay_millis_when_exception=50, persist_consumer_offset_interval=0.2)
        consumer.subscribe("CtNormal")
        consumer.subscribe("CtDelay")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            expected_calls = PLAIN + PER_LEVEL * len(LEVELS) + 2 + 2
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
    logs.configure_logging(json=True, log_dir=log_dir, stdout=False, rotate_bytes=16 * 1024,
                           gzip_rotated=True)
    try:
        yield log_dir
    finally:
        logs.close_sinks()
        structlog.reset_defaults()


async def test_job_reports_what_a_real_broker_did(spark, broker_logs, tmp_path):
    sent = await _scenario(tmp_path / "data")
    logs.close_sinks()  # drain and close: every line is on disk
    assert len(sent["calls"]) == PLAIN + PER_LEVEL * len(LEVELS) + 4, "scenario incomplete"
    files = sorted(p.name for p in broker_logs.iterdir())
    lines = [json.loads(line) for f in broker_logs.iterdir()
             for line in (gzip.decompress(f.read_bytes()) if f.suffix == ".gz"
                          else f.read_bytes()).decode().splitlines()]
    assert lines and all(r["v"] == logs.LOG_FORMAT and isinstance(r["ts"], int) for r in lines)
    assert all("component" not in r for r in lines if r["event"] in logs.LEAN_EVENTS)
    assert any(n.endswith(".jsonl.gz") for n in files), f"no rotated gzip file: {files}"

    out = tmp_path / "report"
    rc = await asyncio.to_thread(main, [str(broker_logs), "-o", str(out), "--mode", "FAILFAST",
                                        "-q", "--shuffle-partitions", "2", "--messages"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    n_delayed = PER_LEVEL * len(LEVELS)
    assert s["malformed_lines"] == 0 and s["uncatalogued_events"] == 0
    assert s["events"]["stored"] == PLAIN + 2  # the DLQ copy is not a producer's store
    assert s["events"]["scheduled"] == n_delayed + 2  # + the two retries
    assert s["events"]["delivered"] == n_delayed + 2
    assert s["events"]["consumed"] == PLAIN + n_delayed + 4
    assert (s["events"]["redelivered"], s["events"]["dead_lettered"]) == (2, 1)
    assert s["funnel"] == {"succeeded_first_try": PLAIN + n_delayed, "succeeded_after_retry": 1,
                           "in_retry": 0, "dead_lettered": 1}
    assert s["dead_lettered_by_group"] == {GROUP: 1}
    assert 0 <= s["lateness_ms"]["p50"] <= s["lateness_ms"]["max"] < LATENESS_BOUND_MS
    levels = {r["delay_level"]: r for r in map(
        json.loads, (out / "lateness_by_level.jsonl").read_text().splitlines())}
    assert {lv: r["count"] for lv, r in levels.items()} == {1: 5, 2: 5, 3: 5 + 2, 4: 5}
    messages = {r["msg_id"]: r for r in spark.read.parquet(str(out / "messages")).collect()}
    assert set(messages) == {*sent["plain"], sent["retry"], sent["dlq"], *sent["delayed"]}
    levels_ms = fast_config(tmp_path / "unused").delay_levels_ms
    for mid, level in sent["delayed"].items():
        m = messages[mid]
        assert (m["topic"], m["delay_level"], m["first_pulls"]) == ("CtDelay", level, 1)
        assert 0 <= m["lateness_ms"] < LATENESS_BOUND_MS
        assert levels_ms[level - 1] - 5 <= m["e2e_ms"] < levels_ms[level - 1] + 10_000
        assert abs(m["nominal_ms"] - levels_ms[level - 1]) <= 5  # deliver_ts - store time
        assert -5 <= m["added_ms"] < 10_000
    for mid in sent["plain"]:
        assert (messages[mid]["topic"], messages[mid]["delay_level"]) == ("CtNormal", 0)
