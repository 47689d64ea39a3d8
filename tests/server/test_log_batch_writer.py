"""The broker's hot-path log writer, one line and a batch (``server/observe/logs.py``).

* The line maker (``_line_maker``: pre-made ``{"ts":..,"v":2,"event":..`` head bytes and
  one ``orjson.dumps`` of the fields) writes, byte for byte, the line ``record`` + one
  ``orjson.dumps`` makes, for every catalogued event at every level, with fields as
  callers pass them and fields that touch the head (hypothesis).
* ``MessageLog.info_many`` (a batch of one event: the scheduler's ``timer.fired`` and
  ``message.delivered``) writes into a real file sink the same bytes as one
  ``MessageLog.info`` per row, the wall clock pinned to each row's ``ts``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from kairosmq.server.observe import logs

from tests.server.test_lean_log_writer import lean_cases

_TEXT = st.text(max_size=12)
_VALUE: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 63), 1 << 63), st.floats(allow_nan=False), _TEXT
)
_EVENTS = sorted(logs.CATALOGUE)
_HEAD = ["ts", "v", "event", "level", "component", "uncatalogued", "reconsume_times"]


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], int, str]:
    event = draw(st.sampled_from(_EVENTS))
    names = list(logs.CATALOGUE[event]) + list(logs.LEAN_EVENTS.get(event, ()))
    keys = draw(st.lists(st.sampled_from(names + _HEAD + ["extra"]), unique=True, max_size=12))
    fields = {
        k: (draw(st.integers(0, 3)) if k == "reconsume_times" else draw(_VALUE)) for k in keys
    }
    level = draw(st.sampled_from(["info", "info", "debug", "warning", "error"]))
    return event, fields, draw(st.integers(0, 1 << 45)), level


@settings(max_examples=400, deadline=None)
@given(calls())
def test_the_line_maker_writes_record_s_line(call: tuple[str, dict[str, Any], int, str]) -> None:
    event, fields, ts, level = call
    heads = logs._line_heads(orjson.dumps)
    line = logs._line_maker(heads, orjson.dumps)(event, dict(fields), ts, level)
    assert line == orjson.dumps(logs.record(event, dict(fields), ts, level), default=str)
    if logs._twin is not None:  # the native writer, from the same heads: the same line
        one, each = _Capture(), _Capture()
        wall = lambda: (ts + 0.5) / 1000  # noqa: E731  # read once per line, cut to ms
        logs._twin.LineEmitter(heads, wall, one.write, [one])(event, dict(fields), level)
        logs._twin.LineEmitter(heads, wall, None, [each, each])(event, dict(fields), level)
        assert one.lines == [line] and each.lines == [line, line]
        if level == "info":
            batch = _Capture()
            logs._twin.LineEmitter(heads, wall, None, [batch]).many(event, [(ts, dict(fields))])
            assert batch.lines == [line]


class _Capture:
    """A sink that keeps the lines it is handed."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    def write_many(self, lines: list[bytes]) -> None:
        self.lines.extend(lines)


def _fired(i: int) -> dict[str, Any]:
    return {
        "msg_id": f"AC11000100002A9F{i:016X}",
        "topic": "T\u00e9st",
        "queue_id": i % 4,
        "queue_offset": i,
        "phy_offset": 1 << 40 | i,
        "deliver_ts": 1_767_225_600_000 + i,
        "lateness_ms": round(i * 0.731, 3),
    }


def test_info_many_writes_one_info_per_row(tmp_path: Path) -> None:
    cases = [(e, f) for e, f in lean_cases(seed=11, per_event=12)]
    cases += [("timer.fired", _fired(i)) for i in range(30)]
    by_event: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, (event, fields) in enumerate(cases):
        by_event.setdefault(event, []).append((1_767_225_600_000 + 7 * i, fields))
    got: list[bytes] = []
    real_time = time.time
    now = [0.0]
    time.time = lambda: now[0]  # type: ignore[assignment]  # the writer reads it per line
    try:
        for sub in ("one", "many"):
            d = tmp_path / sub
            logs.configure_logging(json=True, level="info", log_dir=d, stdout=False)
            try:
                msglog = logs.MessageLog("scheduler")
                for event, rows in by_event.items():
                    if sub == "many":
                        msglog.info_many(event, [(ts, dict(f)) for ts, f in rows])
                        continue
                    for ts, fields in rows:
                        now[0] = ts / 1000 + 0.0004
                        msglog.info(event, **dict(fields))
            finally:
                logs.close_sinks()
                structlog.reset_defaults()
            got.append(b"".join(f.read_bytes() for f in sorted(d.iterdir())))
    finally:
        time.time = real_time  # type: ignore[assignment]
    assert got[0].count(b"\n") == len(cases)
    assert got[0] == got[1]
