"""The native delivery log (server/schedule/_delivered.pyx) against the reference
(``delivered.reference``: ``DeliveryLog.timers_fired`` and ``DeliveryLog.delivered``).

Same rows, same state out: the stats counters, every lateness histogram (its counts,
total and its sum to the last bit), and the same ``timer.fired`` / ``message.delivered``
lines (fields, their order and their types) handed to ``MessageLog.info_many``, or the
same exception with the same state before it. Rows: generated (walls read as floats or
given as ints, due instants around them, UNIQ_KEY present, empty or absent, IPv4 and IPv6
store hosts), with the message log on, off and at debug (the twin hands that batch to
the reference); and through a plain ``MessageLog`` whose batch writer is the native one
(the twin's row entry), the same bytes to each sink as the reference's lines.
"""

from __future__ import annotations

import json
import time
from types import ModuleType, SimpleNamespace
from typing import Any  # Any: log fields compared whole across the two cores

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.properties import UNIQ_KEY
from kairosmq.server.observe import logs
from kairosmq.server.observe.logs import MessageLog
from kairosmq.server.observe.stats import BrokerStats, LatenessHistogram
from kairosmq.server.schedule import delivered
from kairosmq.server.schedule.delivered import DeliveryLog
from kairosmq.server.schedule.reput import Target
from kairosmq.server.store import PutResult, PutStatus

from tests.twins import outcome, twin

ref = delivered.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
HOSTS = [(b"\x7f\x00\x00\x01", 10911), (bytes(range(16)), 30911)]


class Recorded(MessageLog):
    """A message log that keeps what it is handed (the lines a sink would write)."""

    __slots__ = ("calls", "on", "debug_on")

    def __init__(self, on: bool, debug_on: bool) -> None:
        super().__init__("test")
        self.calls: list[tuple[str, str, Any]] = []
        self.on = on
        self.debug_on = debug_on

    def info_many(self, event: str, rows: list[tuple[int, dict[str, Any]]]) -> None:
        # the types too: 5 and 5.0 are different JSON
        self.calls.append(("many", event, [(type(ts), ts, _typed(f)) for ts, f in rows]))

    def debug(self, event: str, **fields: Any) -> None:
        self.calls.append(("debug", event, _typed(fields)))

    @property
    def enabled(self) -> bool:
        return self.on

    @property
    def debug_enabled(self) -> bool:
        return self.debug_on


def _typed(fields: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(k, type(v).__name__, json.dumps(v)) for k, v in fields.items()]


def _log(host: tuple[bytes, int], on: bool, debug_on: bool, log_messages: bool) -> DeliveryLog:
    return DeliveryLog(
        SimpleNamespace(store_host=host),  # type: ignore[arg-type]  # only its host is read
        BrokerStats(),
        Recorded(on, debug_on),
        SimpleNamespace(log_messages=log_messages),  # type: ignore[arg-type]
    )


def _hist(h: LatenessHistogram) -> tuple[object, ...]:
    return (list(h.counts), h.total, h.sum_ms.hex())


def _state(log: DeliveryLog) -> tuple[object, ...]:
    s = log.stats
    return (
        s.timers_fired,
        _hist(s.timer_lateness),
        dict(s.delivered),
        [(level, _hist(h)) for level, h in s.lateness.items()],
        log.msglog.calls,  # type: ignore[attr-defined]
    )


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.schedule.delivered")


uniq = st.one_of(st.none(), st.just(""), st.text("0123456789ABCDEF", min_size=1, max_size=32))
due_ms = st.integers(1_600_000_000_000, 1_900_000_000_000)


@st.composite
def _target_result(draw: st.DrawFn) -> tuple[Target, PutResult]:
    key = draw(uniq)
    props = {"KEYS": "k"} if key is None else {UNIQ_KEY: key, "KEYS": "k"}
    target = Target(
        draw(st.sampled_from(["T", "TopicB", "%RETRY%g"])),
        draw(st.integers(0, 15)),
        props,
        draw(st.integers(0, 16)),
    )
    result = PutResult(
        PutStatus.PUT_OK,
        phy_offset=draw(st.integers(0, 1 << 40)),
        queue_offset=draw(st.integers(0, 1 << 30)),
    )
    return target, result


@st.composite
def _wall(draw: st.DrawFn, due: int) -> float | int:
    late_ms = draw(
        st.one_of(
            st.floats(-50, 10_000, allow_nan=False),
            st.sampled_from([0.0, 0.0005, 1.0, 1.0005, 2.4995, 999.9999, 5000.0]),
        )
    )
    if draw(st.booleans()) and draw(st.booleans()):
        return (due + int(late_ms)) // 1000  # an int wall (the object path)
    return (due + late_ms) / 1000


@st.composite
def _fired_rows(draw: st.DrawFn) -> list[tuple[Target, PutResult, int, float | int]]:
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        target, result = draw(_target_result())
        due = draw(due_ms)
        rows.append((target, result, due, draw(_wall(due))))
    return rows


@st.composite
def _delivered_rows(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        target, result = draw(_target_result())
        due = draw(due_ms)
        rows.append(
            (
                target,
                result,
                draw(st.integers(1, 18)),
                draw(st.integers(0, 1 << 30)),
                due,
                due + draw(st.integers(-5, 50)),
                draw(_wall(due)),
            )
        )
    return rows


modes = st.tuples(st.sampled_from(HOSTS), st.booleans(), st.booleans(), st.booleans())


@PARITY
@given(_fired_rows(), modes, st.integers(0, 2))
def test_timers_fired(nat: ModuleType, rows: list[Any], mode: Any, runs: int) -> None:
    a, b = _log(*mode), _log(*mode)
    for _ in range(runs + 1):  # the histogram's sum carried across batches
        assert outcome(nat.timers_fired, a, rows) == outcome(ref.timers_fired, b, rows)
    assert _state(a) == _state(b)


@PARITY
@given(_delivered_rows(), modes, st.integers(0, 2))
def test_delivered(nat: ModuleType, rows: list[Any], mode: Any, runs: int) -> None:
    a, b = _log(*mode), _log(*mode)
    for _ in range(runs + 1):
        assert outcome(nat.delivered, a, rows) == outcome(ref.delivered, b, rows)
    assert _state(a) == _state(b)


def test_a_broken_row_leaves_the_same_state(nat: ModuleType) -> None:
    """A row that raises halfway: the rows before it (and its own lateness) observed, the
    same exception, no line written, on both."""
    good = (Target("T", 0, {UNIQ_KEY: "A"}, 0), PutResult(PutStatus.PUT_OK, 5, queue_offset=1))
    fired = [(*good, 1_700_000_000_000, 1_700_000_000.0015), (good[0], None, 1, 2.5)]
    level = [
        (*good, 3, 9, 1_700_000_000_000, 0, 1_700_000_000.25),
        (good[0], None, 3, 0, 0, 0, 9.0),
    ]
    for fn, rows in (("timers_fired", fired), ("delivered", level)):
        a, b = _log(HOSTS[0], True, False, True), _log(HOSTS[0], True, False, True)
        got, want = outcome(getattr(nat, fn), a, rows), outcome(getattr(ref, fn), b, rows)
        assert got == want and got[0] == "raised"
        assert _state(a) == _state(b)
        assert b.stats.timer_lateness.total + sum(h.total for h in b.stats.lateness.values()) == 2


def test_a_histogram_subclass_is_the_references(nat: ModuleType) -> None:
    """A histogram the twin does not mirror: the batch goes to the reference (its own
    ``observe`` runs)."""
    seen: list[float] = []

    class Watched(LatenessHistogram):
        __slots__ = ()

        def observe(self, ms: float) -> None:
            seen.append(ms)
            super().observe(ms)

    log = _log(HOSTS[0], True, False, True)
    log.stats.timer_lateness = Watched()
    target = Target("T", 0, {}, 0)
    nat.timers_fired(log, [(target, PutResult(PutStatus.PUT_OK, 7), 1000, 1.25)])
    assert seen == [250.0] and log.stats.timers_fired == 1


def test_the_broker_uses_the_chosen_core() -> None:
    """The class's methods are the twin's exactly when protocol/native.py chose it."""
    from kairosmq.protocol import native

    chosen = native.chosen()["kairosmq.server.schedule.delivered"] == "native"
    assert (DeliveryLog.timers_fired is ref.timers_fired) is not chosen
    assert (DeliveryLog.delivered is ref.delivered) is not chosen


@pytest.mark.parametrize("base_s", [0, 1_700_000_000])
def test_lateness_rounds_as_the_builtin_at_ties(nat: ModuleType, base_s: int) -> None:
    """Walls of whole 1/1024 s make latenesses that are exact multiples of 125/128 ms:
    every sixteenth one is an exact tie at the third decimal (half to even on the exact
    value), the others near ties; below zero too (-0.0 stays -0.0)."""
    target = Target("T", 0, {UNIQ_KEY: "A"}, 0)
    result = PutResult(PutStatus.PUT_OK, 1, queue_offset=0)
    rows = [(target, result, base_s * 1000, base_s + j / 1024) for j in range(-4096, 4096)]
    rows += [(target, result, 0, x / 1000) for x in (-0.0004, -0.0, 0.0, 0.0004, 1e15, -1e-300)]
    a, b = _log(HOSTS[0], True, False, True), _log(HOSTS[0], True, False, True)
    nat.timers_fired(a, rows)
    ref.timers_fired(b, rows)
    assert _state(a) == _state(b)


class _Sink:
    """A sink that keeps the lines it is handed, in order."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    def write_many(self, lines: list[bytes]) -> None:
        self.lines.extend(lines)


def _written(fn: Any, emitter: str, host: Any, rows: list[Any], sinks: int) -> tuple[Any, ...]:
    """What ``fn`` (a ``DeliveryLog`` method) writes through a plain ``MessageLog`` into
    ``sinks`` sinks, the hot-path writer ``emitter``: "pure" (``configure_logging``'s
    ``emit_many``: the reference's line maker) or "native" (``_logs.LineEmitter``)."""
    heads = logs._line_heads(orjson.dumps)
    line_of = logs._line_maker(heads, orjson.dumps)
    each = [_Sink() for _ in range(sinks)]

    def emit_many(event: str, batch: list[tuple[int, dict[str, Any]]]) -> None:
        lines = [line_of(event, f, ts, "info") for ts, f in batch]
        for s in each:
            s.write_many(lines)

    saved = (logs._fast_emit, logs._fast_emit_many, logs._info_enabled, logs._fast_debug)
    if emitter == "native":
        one = each[0].write if sinks == 1 else None
        emit = twin("server.observe.logs").LineEmitter(heads, time.time, one, each)
        logs._fast_emit, logs._fast_emit_many = emit, emit.many
    else:
        logs._fast_emit, logs._fast_emit_many = (lambda *a: None), emit_many
    logs._info_enabled, logs._fast_debug = True, False
    try:
        log = DeliveryLog(
            SimpleNamespace(store_host=host),  # type: ignore[arg-type]  # only its host is read
            BrokerStats(),
            MessageLog("scheduler"),
            SimpleNamespace(log_messages=True),  # type: ignore[arg-type]
        )
        got = outcome(fn, log, rows)
        writer = delivered._twin and delivered._twin.row_writer(log.msglog)
    finally:
        logs._fast_emit, logs._fast_emit_many, logs._info_enabled, logs._fast_debug = saved
    return got, [s.lines for s in each], writer, emitter == "native" and emit


@PARITY
@given(_fired_rows(), _delivered_rows(), st.sampled_from(HOSTS), st.integers(1, 2))
def test_the_lines_are_the_reference_s_bytes(
    nat: ModuleType, fired: list[Any], level: list[Any], host: Any, sinks: int
) -> None:
    """Through a plain ``MessageLog`` whose batch writer is the native ``LineEmitter``
    (the broker's case: the twin hands each row's values to the writer's row entry,
    ``_logs.ROWS``, without a fields dict), the bytes each sink is handed are the
    reference's: its rows through ``configure_logging``'s pure ``emit_many``."""
    for name, rows in (("timers_fired", fired), ("delivered", level)):
        want = _written(getattr(ref, name), "pure", host, rows, sinks)
        got = _written(getattr(nat, name), "native", host, rows, sinks)
        assert got[:2] == want[:2]
        if delivered._twin is not None:  # the native core: the row entry wrote them
            assert got[2] is got[3]
