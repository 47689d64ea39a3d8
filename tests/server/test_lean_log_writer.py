"""The per-message log writer (``configure_logging``'s fast emitter for ``LEAN_EVENTS``)
writes the same JSON line as structlog's processor chain (``record`` + one
``orjson.dumps``): same keys, same values, key order aside.

Both writers run into one real file sink (``broker.jsonl``) with the wall clock pinned,
fed the same generated fields: every catalogued field, format-1 fields the line drops,
``reconsume_times`` 0 and not, ``None``, floats, text needing JSON escapes, a field the
catalogue does not know, ``component``. The Spark side of the contract (the job's parser
reads both files into the same rows) is ``tests/spark/test_lean_lines.py``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kairosmq.server.observe import logs

PINNED_S = 1_767_225_600.123  # 2026-01-01T00:00:00.123Z


def _value(kind: str, rng: random.Random) -> Any:
    if kind == "long":
        return rng.choice([0, 1, rng.randrange(1 << 62)])
    if kind in ("int", "integer"):
        return rng.choice([0, 3, rng.randrange(1 << 31)])
    if kind == "double":
        return rng.choice([0.0, 12.5, rng.random() * 1e4])
    if kind == "boolean":
        return rng.choice([True, False])
    return rng.choice(["", 'T\u00e9st "q" \\ \n', "AC11000100002A9F0000000000000001", None])


def lean_cases(seed: int = 7, per_event: int = 40) -> list[tuple[str, dict[str, Any]]]:
    """(event, fields) calls for every ``LEAN_EVENTS`` event, as callers may make them."""
    rng = random.Random(seed)
    out: list[tuple[str, dict[str, Any]]] = []
    for event, dropped in logs.LEAN_EVENTS.items():
        catalogued = logs.CATALOGUE[event]
        for i in range(per_event):
            fields = {k: _value(kind, rng) for k, kind in catalogued.items()}
            if i % 3 == 0:  # format-1 fields the line drops
                for k in dropped:
                    fields[k] = _value(logs.FORMAT_1_FIELDS[k], rng)
            if i % 5 == 1 and "reconsume_times" in fields:
                fields["reconsume_times"] = 0
            if i % 7 == 2:
                fields.pop("reconsume_times", None)
            if i % 11 == 3:
                fields["extra_field"] = "x"  # not catalogued: kept, as record keeps it
            if i % 13 == 4:
                fields["component"] = "scheduler"
            keys = list(fields)
            rng.shuffle(keys)
            out.append((event, {k: fields[k] for k in keys}))
    return out


def write_both(
    log_dir: Path, cases: list[tuple[str, dict[str, Any]]]
) -> tuple[list[bytes], list[bytes]]:
    """Each case through ``MessageLog.info`` (the fast emitter) into ``log_dir/lean``, and
    through a structlog bound logger (the processor chain) into ``log_dir/chain``, with
    ``time.time`` pinned: the raw lines of each."""
    got: list[list[bytes]] = []
    real_time = time.time
    time.time = lambda: PINNED_S  # type: ignore[assignment]
    try:
        for sub, fast in (("lean", True), ("chain", False)):
            d = log_dir / sub
            logs.configure_logging(json=True, level="info", log_dir=d, stdout=False)
            try:
                assert (logs._fast_emit is not None) is True
                msglog = logs.MessageLog("scheduler")
                chain = logs.get_logger("scheduler")
                for event, fields in cases:
                    if fast:
                        msglog.info(event, **dict(fields))
                    else:
                        chain.info(event, **dict(fields))
            finally:
                logs.close_sinks()
                structlog.reset_defaults()
            got.append(
                [ln for f in sorted(d.iterdir()) for ln in f.read_bytes().splitlines() if ln]
            )
    finally:
        time.time = real_time  # type: ignore[assignment]
    return got[0], got[1]


@pytest.fixture
def both(tmp_path: Path) -> Iterator[tuple[list[bytes], list[bytes]]]:
    yield write_both(tmp_path, lean_cases())


def test_lean_writer_writes_the_chain_s_line(both: tuple[list[bytes], list[bytes]]) -> None:
    lean, chain = both
    cases = lean_cases()
    assert len(lean) == len(chain) == len(cases)
    for (event, fields), a, b in zip(cases, lean, chain, strict=True):
        ra, rb = json.loads(a), json.loads(b)
        assert ra == rb, (event, fields, a, b)
        assert list(ra)[:3] == ["ts", "v", "event"]  # the format's leading keys
        assert ra["ts"] == int(PINNED_S * 1000) and ra["v"] == logs.LOG_FORMAT
        expected = logs.record(event, dict(fields), int(PINNED_S * 1000))
        assert ra == json.loads(json.dumps(expected))


def test_lean_writer_drops_what_the_format_drops(both: tuple[list[bytes], list[bytes]]) -> None:
    lean, _ = both
    recs = [json.loads(x) for x in lean]
    for rec in recs:
        assert "component" not in rec and "level" not in rec
        assert not set(logs.LEAN_EVENTS[rec["event"]]) & rec.keys()
        assert rec.get("reconsume_times", 1) != 0
    # the generated calls did carry what is dropped, and 0 retries
    assert any(f.get("reconsume_times") == 0 for _, f in lean_cases())
    assert any("offset_msg_id" in f for _, f in lean_cases())


def test_not_lean_and_not_info_still_go_through_record(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    logs.configure_logging(json=True, level="debug", log_dir=d, stdout=False)
    try:
        m = logs.MessageLog("put")
        m.info("timer.scheduled", msg_id="a", real_topic="T", real_queue_id=0)
        m.debug("message.due", msg_id="b", delay_level=1, queue_offset=0, deliver_ts=1)
        m.info("message.stored", event_extra=1, reconsume_times=0, msg_id="c")
    finally:
        logs.close_sinks()
        structlog.reset_defaults()
    recs = [json.loads(x) for f in sorted(d.iterdir()) for x in f.read_bytes().splitlines() if x]
    assert [r["event"] for r in recs] == ["timer.scheduled", "message.due", "message.stored"]
    assert recs[0]["level"] == "info" and "component" not in recs[0]
    assert recs[1]["level"] == "debug"
    assert recs[2] == {
        "ts": recs[2]["ts"],
        "v": 2,
        "event": "message.stored",
        "event_extra": 1,
        "msg_id": "c",
    }
