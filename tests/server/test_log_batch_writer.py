"""The broker's hot-path log writer, one line and a batch (``server/observe/logs.py``).

* The line maker (``_line_maker``: pre-made ``{"ts":..,"v":2,"event":..`` head bytes and
  one ``orjson.dumps`` of the fields) writes, byte for byte, the line ``record`` + one
  ``orjson.dumps`` makes, for every catalogued event at every level, with fields as
  callers pass them and fields that touch the head (hypothesis).
* The native writer (``_logs.pyx``, which writes the common values itself) writes
  orjson's bytes for any key and value (escapes, non-ASCII, ints past 64 bits, floats
  of every shape, nested values, objects written as ``str``) or refuses what orjson
  refuses (hypothesis, and a seeded sweep of floats).
* ``MessageLog.info_many`` (a batch of one event: the scheduler's ``timer.fired`` and
  ``message.delivered``) writes into a real file sink the same bytes as one
  ``MessageLog.info`` per row, the wall clock pinned to each row's ``ts``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
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
    left = dict(fields)  # what the writer leaves of the fields (the lean drops)
    line = logs._line_maker(heads, orjson.dumps)(event, left, ts, level)
    assert line == orjson.dumps(logs.record(event, dict(fields), ts, level), default=str)
    if logs._twin is not None:  # the native writer, from the same heads: the same line
        one, each = _Capture(), _Capture()
        wall = lambda: (ts + 0.5) / 1000  # noqa: E731  # read once per line, cut to ms
        twin_left = dict(fields)
        logs._twin.LineEmitter(heads, wall, one.write, [one])(event, twin_left, level)
        assert twin_left == left and list(twin_left) == list(left)
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


# the values orjson writes: text of every kind (escapes, control characters, non-ASCII,
# lone surrogates it refuses), ints past 64 bits, floats of every shape (exponents, tiny,
# huge, -0.0, inf, nan), nested values, and objects it writes as ``str(value)``
_ANY_TEXT = st.one_of(
    st.text(alphabet=st.characters(codec="ascii"), max_size=16),
    st.text(max_size=16),
    st.text(alphabet=st.sampled_from('a"\\\x00\x1f\x7f\u00e9\u2028\U0001f600\ud800'), max_size=8),
)
_ANY_FLOAT = st.one_of(
    st.floats(),
    st.floats(width=32),
    st.builds(
        lambda m, e: float(f"{m}e{e}"), st.integers(-(10**17), 10**17), st.integers(-340, 310)
    ),
    st.sampled_from([0.0, -0.0, 1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 5e-324, 1e308]),
)
_ANY_VALUE: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(1 << 64), 1 << 64),
        _ANY_FLOAT,
        _ANY_TEXT,
        st.binary(max_size=4),
        st.builds(Path, st.sampled_from(["/a", "b c"])),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=6,
)


def _line_or_error(make: Any) -> bytes | str:
    try:
        line: bytes = make()
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
        return type(exc).__name__
    return line


@pytest.mark.twin_parity
@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from(_EVENTS),
    st.dictionaries(st.one_of(_ANY_TEXT, st.integers(0, 3)), _ANY_VALUE, max_size=8),
    st.integers(0, 1 << 45),
)
def test_the_native_writer_writes_orjson_s_bytes_for_any_value(
    event: str, fields: dict[Any, Any], ts: int
) -> None:
    """The twin writes the common values itself (``_logs.pyx``): every value, key and
    float shape gives the reference's bytes, or the same refusal."""
    heads = logs._line_heads(orjson.dumps)
    want = _line_or_error(
        lambda: logs._line_maker(heads, orjson.dumps)(event, dict(fields), ts, "info")
    )
    if logs._twin is None:
        return
    got = _Capture()
    emitter = logs._twin.LineEmitter(heads, lambda: (ts + 0.5) / 1000, got.write, [got])
    assert _line_or_error(lambda: emitter(event, dict(fields)) or got.lines[0]) == want


def test_the_native_writer_writes_orjson_s_floats() -> None:
    """The floats the twin writes from their integer millionths (``round(x, 3)``
    latenesses, multiples of 1e-6 up to 1e9) and by ``repr``, swept: orjson's bytes."""
    import random

    rnd = random.Random(32)
    values = [0.0, -0.0, 0.001, -0.001, 0.0009995, 999999999.999999, 1e9, 0.1 + 0.2]
    for _ in range(20000):
        x = rnd.choice([-1, 1]) * 10 ** rnd.uniform(-6, 10)
        values += [x, round(x, 3), round(x, 6), round(x, rnd.randint(0, 9))]
    fields = {f"f{i}": v for i, v in enumerate(values)}
    heads = logs._line_heads(orjson.dumps)
    want = logs._line_maker(heads, orjson.dumps)("message.delivered", dict(fields), 1, "info")
    assert want.count(b",") == len(values) + 2  # the head's two and one per field
    if logs._twin is not None:
        got = _Capture()
        logs._twin.LineEmitter(heads, lambda: 0.0015, got.write, [got])(
            "message.delivered", dict(fields)
        )
        assert got.lines == [want]


@settings(max_examples=200, deadline=None)
@given(calls())
def test_the_native_writer_reads_time_time_as_the_reference_does(
    call: tuple[str, dict[str, Any], int, str],
) -> None:
    """With ``time.time`` itself as its clock (as ``configure_logging`` gives it) the
    twin reads the clock in C: the line is the reference's at a ``ts`` between the two
    ``int(time.time() * 1000)`` read around the call."""
    event, fields, _, level = call
    if logs._twin is None:
        return
    heads = logs._line_heads(orjson.dumps)
    got = _Capture()
    emitter = logs._twin.LineEmitter(heads, time.time, got.write, [got])
    before = int(time.time() * 1000)
    try:
        emitter(event, dict(fields), level)
    except Exception as err:  # noqa: BLE001 - the refusal compared is the reference's
        with pytest.raises(type(err)):
            logs._line_maker(heads, orjson.dumps)(event, dict(fields), before, level)
        return
    after = int(time.time() * 1000)
    make = logs._line_maker(heads, orjson.dumps)
    assert got.lines[0] in {make(event, dict(fields), ts, level) for ts in range(before, after + 1)}


def test_the_native_clock_is_time_time_s_float() -> None:
    """``_logs.pyx``'s C clock gives the milliseconds ``int(time.time() * 1000)`` gives:
    read alternately many times, each C reading lies between its neighbours."""
    if logs._twin is None:
        return
    heads = logs._line_heads(orjson.dumps)
    got = _Capture()
    emitter = logs._twin.LineEmitter(heads, time.time, got.write, [got])
    readings = []
    for _ in range(2000):
        readings.append(int(time.time() * 1000))
        emitter("message.delivered", {"topic": "T"})
        readings.append(orjson.loads(got.lines[-1])["ts"])
    readings.append(int(time.time() * 1000))
    assert readings == sorted(readings)


@settings(max_examples=400, deadline=None)
@given(calls())
def test_the_native_row_writes_its_fields_line(call: tuple[str, dict[str, Any], int, str]) -> None:
    """``LineEmitter.row`` (the values of distinct keys handed over without a dict, as
    ``put/_path.pyx`` and ``handlers/_pull.pyx`` log ``message.*``): the line the
    emitter writes for ``dict(zip(keys, values))``, which is the reference's."""
    event, fields, ts, _level = call
    heads = logs._line_heads(orjson.dumps)
    want = logs._line_maker(heads, orjson.dumps)(event, dict(fields), ts, "info")
    if logs._twin is None:
        return
    wall = lambda: (ts + 0.5) / 1000  # noqa: E731
    got = _Capture()
    logs._twin.LineEmitter(heads, wall, got.write, [got]).row(
        event, tuple(fields), tuple(fields.values())
    )
    each = _Capture()
    logs._twin.LineEmitter(heads, wall, None, [each, each]).row(
        event, tuple(fields), tuple(fields.values())
    )
    assert got.lines == [want] and each.lines == [want, want]
    with pytest.raises(ValueError):
        logs._twin.LineEmitter(heads, wall, got.write, [got]).row(event, ("a", "a"), (1, 2))
    # one long-lived emitter, the same keys tuple again and again (as the twins hand
    # theirs): what it worked out for the pair the first time, then more pairs than it
    # keeps, gives the same lines
    keys = _SAME_KEYS.setdefault((event, tuple(fields)), tuple(fields))
    _SHARED_CLOCK[0] = ts
    if _SHARED_EMITTER[:1] == []:
        _SHARED_EMITTER.append(
            logs._twin.LineEmitter(heads, lambda: (_SHARED_CLOCK[0] + 0.5) / 1000, None, [_SHARED])
        )
    del _SHARED.lines[:]
    for _ in range(2):
        _SHARED_EMITTER[0].row(event, keys, tuple(fields.values()))
    assert _SHARED.lines == [want, want]


_SAME_KEYS: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = {}
_SHARED_CLOCK = [0]
_SHARED = _Capture()
_SHARED_EMITTER: list[Any] = []


def test_the_per_message_rows_are_the_reference_s_keywords() -> None:
    """The key tuples the twins hand to ``row`` are the keywords of the reference's
    ``msglog.info`` calls, in their order (the lines' bytes follow that order)."""
    import ast
    import inspect
    import textwrap

    from kairosmq.server.handlers import pull
    from kairosmq.server.put import path

    def keywords(fn: Any, event: str) -> tuple[str, ...]:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == event
            ):
                return tuple(k.arg for k in node.keywords if k.arg is not None)
        raise AssertionError(event)

    if path._twin is None or pull._twin is None:
        return
    put = path.reference.put
    assert path._twin.SCHEDULED_KEYS == keywords(put, "message.scheduled")
    assert path._twin.STORED_KEYS == keywords(put, "message.stored")
    assert pull._twin.PULLED_KEYS == keywords(pull.reference._answer, "message.pulled")


def test_a_sink_s_write_is_the_reference_s(tmp_path: Path) -> None:
    """``BufferedSink.write`` on either core (the twin reads the lock, the pending lines
    and the count in their slots for the sink classes of ``logsink.py``, through the
    attributes for any other): the same lines pending, the same count, the lock free
    after; the native writer hands its lines to such a sink in C: the same file."""
    from kairosmq.server.observe import logsink

    class Other(logsink.BufferedSink):  # another class: read through its attributes
        pass

    files = iter(range(100))
    makers: list[Any] = [
        lambda: logsink.BufferedSink(60.0),  # never started: nothing drains it
        lambda: logsink.StreamSink(open(tmp_path / f"o{next(files)}", "wb"), 60.0),  # noqa: SIM115
        lambda: logsink.RotatingJsonSink(tmp_path / f"r{next(files)}", interval=60.0),
        lambda: Other(60.0),
    ]
    for make in makers:
        sinks = [make(), make()]
        for line in (b"a", b"bb", b"{}"):
            sinks[0].write(line)  # the chosen core's
            logsink.reference.write(sinks[1], line)
        for s in sinks:
            assert s._pending == [b"a", b"bb", b"{}"] and s._enqueued == 3
            assert not s._lock.locked()
            if s._writer_thread.is_alive():
                s.close()
    if logs._twin is None:
        return
    heads = logs._line_heads(orjson.dumps)
    out = []
    for name in ("c", "py"):
        sink = logsink.RotatingJsonSink(tmp_path / name)
        write = sink.write if name == "c" else (lambda line, s=sink: s.write(line))
        emitter = logs._twin.LineEmitter(heads, lambda: 1.5, write, [sink])
        emitter("message.pulled", {"msg_id": "M", "group": "G", "queue_id": 1})
        emitter.row("message.pulled", ("msg_id", "topic"), ("N", "T"))
        sink.close()
        out.append((tmp_path / name / logsink.ACTIVE_NAME).read_bytes())
    assert out[0] == out[1] and out[0].count(b"\n") == 2


def test_the_native_writer_checks_every_byte_of_long_text() -> None:
    """The twin checks plain text 8 bytes at a time: every byte orjson escapes (and
    its neighbours, which it does not) at every place of a key or value of up to 20
    characters gives the reference's bytes."""
    heads = logs._line_heads(orjson.dumps)
    make = logs._line_maker(heads, orjson.dumps)
    if logs._twin is None:
        return
    got = _Capture()
    emitter = logs._twin.LineEmitter(heads, lambda: 0.0015, got.write, [got])
    special = [*range(0x20), 0x22, 0x5C, 0x7F, 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7E, 0x80, 0xE9]
    for n in (1, 7, 8, 9, 15, 16, 17, 20):
        for at in range(n):
            for c in special:
                text = "a" * at + chr(c) + "b" * (n - at - 1)
                fields = {"topic": text, text: n}
                del got.lines[:]
                emitter("message.stored", dict(fields))
                assert got.lines == [make("message.stored", dict(fields), 1, "info")], text
