"""The native pull (server/handlers/_pull.pyx, and the read it makes through
server/store/_reads.pyx's ``get``) against the reference (``pull.reference``,
``reads.reference``).

One real broker's services (store, topic table, offsets, stats, message log) with tagged
messages in small queue files and segments; generated PULL_MESSAGE headers (any group,
topic, queue, offset, count, sysFlag, commit offset, TAG / SQL92 / no subscription and
expression type) are answered by a processor on the reference and by one on the twin:
the same answer bytes (or the same refusal raised), the same committed offset, the same
stats and the same ``message.pulled`` events; so are the captured stock-client pull
frames (tests/fixtures/real-client-frames). Held pulls are compared too (the same hold,
woken by a put or by its deadline, answered alike).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any  # Any: the twins are untyped compiled modules

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import PullMessageRequestHeader
from kairosmq.server.handlers import pull
from kairosmq.server.handlers.pull import PullMessageProcessor
from kairosmq.server.observe import logs
from kairosmq.server.put.kind import MessageKind
from kairosmq.server.store import MessageInner, PutStatus, reads
from kairosmq.server.store.reads import StoreReads

from tests.server.handlers.rig import Services, req
from tests.server.handlers.test_pull import _processor as processor
from tests.twins import outcome, twin

PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=250,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TAGS = ["A", "B", "C"]


@pytest.fixture(scope="module")
def nat() -> Any:
    return twin("server.handlers.pull")


@pytest.fixture(scope="module")
def nat_reads() -> Any:
    return twin("server.store.reads")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Services]:
    s = Services(
        tmp_path,
        consumequeue_units_per_file=16,
        commitlog_segment_size=64 << 10,
        max_message_size=32 << 10,
    )
    yield s
    s.close()


def _cores(nat: Any) -> dict[str, type[PullMessageProcessor]]:
    """A processor class per core: the reference's pull methods and the twin's."""

    class Reference(PullMessageProcessor):
        handle_pull = pull.reference.handle_pull
        _answer = pull.reference._answer
        _hold = pull.reference._hold

    class Native(PullMessageProcessor):
        handle_pull = nat.handle_pull
        _answer = nat.answer
        _hold = nat.hold

    return {"ref": Reference, "nat": Native}


def _processor(cls: type[PullMessageProcessor], s: Services, running: bool) -> PullMessageProcessor:
    return processor(s, running, cls=cls, subscriptions=True)


def _state(s: Services) -> tuple[Any, ...]:
    return (
        dict(s.stats.pulled),
        dict(s.stats.group_pulled),
        s.stats.rejected,
        {q: s.offsets.query("G", "P", q) for q in range(5)},
    )


def _change(before: tuple[Any, ...], after: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a pull changed: the counters' increments, the committed offsets now."""
    grown = [
        {k: v - b.get(k, 0) for k, v in a.items() if v != b.get(k, 0)}
        for b, a in zip(before[:2], after[:2], strict=True)
    ]
    return (*grown, after[2] - before[2], after[3])


async def _fill(s: Services) -> None:
    for i in range(120):
        q = i % 3
        props = {"TAGS": TAGS[i % 3 if i % 7 else 1]} if i % 5 else {}
        s.store_message("P", b"m%d" % i * (1 + i % 4), queue_id=q, props=props)
    s.store.write_out()
    subs = s.broker.subscriptions
    subs.update(dataclasses.replace(subs.new_config("Off"), consume_enable=False))


def _ext(draw: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "consumerGroup": draw(st.sampled_from(["G", "G", "G", "Off", "New", "bad group!"])),
        "topic": draw(st.sampled_from(["P", "P", "P", "Missing", "bad/topic"])),
        "queueId": draw(st.integers(-1, 4)),
        "queueOffset": draw(st.integers(-1, 45)),
        "maxMsgNums": draw(st.integers(-1, 40)),
        "sysFlag": draw(st.integers(0, 15)),
        "commitOffset": draw(st.integers(-2, 40)),
        "suspendTimeoutMillis": 50,
        "subVersion": 0,
    }
    sub = draw(st.sampled_from([None, "*", "", "A", "B || C", " C ", "A" * 300, "a > 1"]))
    if sub is not None:
        ext["subscription"] = sub
    kind = draw(st.sampled_from([None, "TAG", "tag", "SQL92"]))
    if kind is not None:
        ext["expressionType"] = kind
    return ext


def _answer(s: Services, proc: PullMessageProcessor, cmd: RemotingCommand) -> Any:
    handler = s.guarded(proc.handle_pull)
    got = outcome(handler, s.conn(), cmd)
    if got[0] == "ok" and isinstance(got[1], RemotingCommand):
        return ("ok", encode_command(got[1]))
    return got


async def test_generated_pulls_answer_alike(  # type: ignore[no-untyped-def]
    rig, nat, nat_reads, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(rig)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        logs, "_fast_emit", lambda event, fields, level="info": events.append((event, dict(fields)))
    )
    gets = {"ref": reads.reference.get, "nat": nat_reads.get}
    procs = {name: _processor(cls, rig, False) for name, cls in _cores(nat).items()}

    @PARITY
    @given(st.data())
    def run(data: Any) -> None:
        cmd = req(RequestCode.PULL_MESSAGE, data.draw(st.builds(dict)) | _ext(data.draw))
        seen = []
        for name, proc in procs.items():
            with monkeypatch.context() as mp:
                mp.setattr(StoreReads, "get", gets[name])
                before = _state(rig)
                del events[:]
                got = _answer(rig, proc, cmd)
                seen.append((got, _change(before, _state(rig)), list(events)))
        assert seen[0] == seen[1]
        if seen[0][2]:
            pulled.append(len(seen[0][2]))

    pulled: list[int] = []
    run()
    assert len(pulled) > 40  # many of the generated pulls found messages (and logged them)


async def test_held_pulls_wake_and_answer_alike(rig, nat) -> None:  # type: ignore[no-untyped-def]
    """A caught-up pull with the suspend flag is held on both cores and answered alike
    when a message lands in its queue; one with a short timeout, at its timeout."""
    import asyncio

    from kairosmq.protocol.codes import PULL_SUBSCRIPTION, PULL_SUSPEND

    await _fill(rig)
    answers: dict[str, list[bytes]] = {}
    conns = {}
    for name, cls in _cores(nat).items():
        proc = _processor(cls, rig, True)
        conns[name] = conn = rig.conn()
        for q, sub in ((0, "*"), (1, "B || C"), (2, "A")):
            at_end = (
                rig.store.get_max_offset("P", q) if hasattr(rig.store, "get_max_offset") else None
            )
            end = at_end if at_end is not None else rig.store.queues[("P", q)].max_offset
            cmd = req(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "G",
                    "topic": "P",
                    "queueId": q,
                    "queueOffset": end,
                    "maxMsgNums": 32,
                    "sysFlag": PULL_SUSPEND | PULL_SUBSCRIPTION,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 50 if q == 2 else 5000,
                    "subscription": sub,
                    "subVersion": 0,
                    "expressionType": "TAG",
                },
            )
            assert rig.guarded(proc.handle_pull)(conn, cmd) is None  # held
    assert rig.broker.pull_holds.held == 6
    rig.store_message("P", b"wake0", queue_id=0, props={"TAGS": "A"})
    rig.store_message("P", b"wake1", queue_id=1, props={"TAGS": "C"})
    rig.store.write_out()
    for _ in range(50):
        await asyncio.sleep(0.01)
        if rig.broker.pull_holds.held == 0:
            break
    assert rig.broker.pull_holds.held == 0
    for name, conn in conns.items():
        answers[name] = list(conn._out)
    assert len(answers["ref"]) == 3 and answers["ref"] == answers["nat"]


async def test_captured_stock_client_pulls_answer_alike(  # type: ignore[no-untyped-def]
    rig, nat, nat_reads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every captured stock-client PULL_MESSAGE frame (tests/fixtures), as sent (its own
    topic and group) and pointed at the test's queues at a few offsets: the same answer
    bytes, changes and events from both cores."""
    from kairosmq.protocol.codec import decode_frame

    from tests.protocol.captures import entries_with_code, frame_bytes

    await _fill(rig)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        logs,
        "_fast_emit",
        lambda event, fields, level="info": events.append((event, dict(fields))),
    )
    gets = {"ref": reads.reference.get, "nat": nat_reads.get}
    procs = {name: _processor(cls, rig, False) for name, cls in _cores(nat).items()}
    captured = entries_with_code(RequestCode.PULL_MESSAGE)
    assert captured
    found = 0
    for folder, e in captured:
        sent = decode_frame(frame_bytes(folder, e["file"]))
        for retarget in (None, 0, 7, 39):
            ext = dict(sent.ext_fields)
            if retarget is not None:
                ext.update(topic="P", consumerGroup="G", queueId="1", queueOffset=str(retarget))
            cmd = dataclasses.replace(sent, ext_fields=ext)
            seen = []
            for name, proc in procs.items():
                with monkeypatch.context() as mp:
                    mp.setattr(StoreReads, "get", gets[name])
                    before = _state(rig)
                    del events[:]
                    got = _answer(rig, proc, cmd)
                    seen.append((got, _change(before, _state(rig)), list(events)))
            assert seen[0] == seen[1], (folder, e["file"], retarget)
            found += bool(seen[0][2])
    assert found  # some captured pulls found messages


async def test_found_answers_alike_for_any_offsets(  # type: ignore[no-untyped-def]
    rig, nat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FOUND read answered by both cores: the response header's offsets (any ``int``,
    beyond 64 bits too, written as their decimal digits), one chunk or several, the same
    answer bytes, stats and ``message.pulled`` events."""
    await _fill(rig)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        logs, "_fast_emit", lambda event, fields, level="info": events.append((event, dict(fields)))
    )
    procs = {name: _processor(cls, rig, False) for name, cls in _cores(nat).items()}
    answer = {"ref": pull.reference._answer, "nat": nat.answer}
    found = reads.reference.get(rig.store, "P", 1, 3, 6)
    assert found.units
    cmd = req(RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "P", "queueId": 1})
    h = PullMessageRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "topic": "P", "queueId": "1", "queueOffset": "3"}
    )
    offsets = st.integers(-(2**70), 2**70) | st.integers(-(2**63), 2**63 - 1) | st.integers(0, 99)

    @PARITY
    @given(offsets, offsets, offsets, st.integers(1, 3))
    def run(next_begin: int, lo: int, hi: int, pieces: int) -> None:
        body = b"".join(found.chunks)
        cut = [len(body) * i // pieces for i in range(pieces + 1)]
        result = dataclasses.replace(
            found,
            next_begin_offset=next_begin,
            min_offset=lo,
            max_offset=hi,
            chunks=[body[a:b] for a, b in zip(cut, cut[1:], strict=False)],
        )
        seen = []
        for name, proc in procs.items():
            before = _state(rig)
            del events[:]
            got = outcome(answer[name], proc, cmd, h, result)
            if got[0] == "ok":
                got = ("ok", encode_command(got[1]))
            seen.append((got, _change(before, _state(rig)), list(events)))
        assert seen[0] == seen[1]
        assert seen[0][0][0] == "ok" and len(seen[0][2]) == len(found.units)

    run()


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO])
async def test_held_pull_event_alike_at_each_level(  # type: ignore[no-untyped-def]
    rig, nat, level: int
) -> None:
    """``pull.held`` reaches a debug-level logger with the same fields from both cores;
    an info-level logger (whose ``debug`` is structlog's no-op) gets no call from either."""
    import asyncio

    import structlog
    from kairosmq.protocol.codes import PULL_SUSPEND
    from structlog.testing import CapturingLogger

    await _fill(rig)
    calls = {}
    for name, cls in _cores(nat).items():
        proc = _processor(cls, rig, True)
        sink = CapturingLogger()
        proc.log = structlog.wrap_logger(
            sink, wrapper_class=structlog.make_filtering_bound_logger(level), processors=[]
        )
        end = rig.store.queues[("P", 2)].max_offset
        cmd = req(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "G",
                "topic": "P",
                "queueId": 2,
                "queueOffset": end,
                "sysFlag": PULL_SUSPEND,
                "suspendTimeoutMillis": 20,
            },
        )
        assert rig.guarded(proc.handle_pull)(rig.conn(), cmd) is None  # held
        calls[name] = [(c.method_name, c.args, c.kwargs) for c in sink.calls]
    for _ in range(50):
        await asyncio.sleep(0.01)
        if rig.broker.pull_holds.held == 0:
            break
    assert rig.broker.pull_holds.held == 0
    assert calls["ref"] == calls["nat"]
    assert len(calls["ref"]) == (1 if level == logging.DEBUG else 0)


async def test_the_hot_path_writer_writes_the_same_pulled_lines(  # type: ignore[no-untyped-def]
    rig, nat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``message.pulled`` through the broker's own hot-path writer (``configure_logging``
    into a real file; the twin hands its values to the writer without a fields dict):
    the same lines as the reference's, ``ts`` pinned, for records with and without
    reconsume times."""
    import time

    import structlog

    await _fill(rig)
    again = MessageInner("P", 1, b"again", {"TAGS": "A"}, reconsume_times=3)
    assert rig.put(again, MessageKind.NORMAL).status is PutStatus.PUT_OK
    rig.store.write_out()
    monkeypatch.setattr(time, "time", lambda: 1_767_225_600.123)
    procs = {name: _processor(cls, rig, False) for name, cls in _cores(nat).items()}
    answer = {"ref": pull.reference._answer, "nat": nat.answer}
    cmd = req(RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "P", "queueId": 1})
    lines = {}
    for name, proc in procs.items():
        d = tmp_path / f"logs-{name}"
        logs.configure_logging(json=True, level="info", log_dir=d, stdout=False)
        try:
            for offset in (0, 7, 36):
                h = PullMessageRequestHeader.from_ext_fields(
                    {"consumerGroup": "G", "topic": "P", "queueId": "1", "queueOffset": str(offset)}
                )
                found = reads.reference.get(rig.store, "P", 1, offset, 8)
                assert found.units
                answer[name](proc, cmd, h, found)
        finally:
            logs.close_sinks()
            structlog.reset_defaults()
        lines[name] = [ln for f in sorted(d.iterdir()) for ln in f.read_bytes().splitlines()]
    assert len(lines["ref"]) >= 17 and b'"reconsume_times":3' in lines["ref"][-1]
    assert lines["nat"] == lines["ref"]


async def test_a_field_a_subclass_redefines_is_read_as_it_says(  # type: ignore[no-untyped-def]
    rig, nat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twin reads the processor's fields in their slots only for classes that keep
    them (``_laid_out``): a subclass whose ``config`` is a property is read through it,
    on both cores (its ``log_messages`` off: no ``message.pulled``), while the plain
    classes log."""
    await _fill(rig)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        logs, "_fast_emit", lambda event, fields, level="info": events.append((event, dict(fields)))
    )
    cmd = req(RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "P", "queueId": 1})
    h = PullMessageRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "topic": "P", "queueId": "1", "queueOffset": "3"}
    )
    found = reads.reference.get(rig.store, "P", 1, 3, 4)
    answer = {"ref": pull.reference._answer, "nat": nat.answer}
    for name, cls in _cores(nat).items():

        class Quiet(cls):  # type: ignore[valid-type,misc]
            @property
            def config(self) -> Any:
                return dataclasses.replace(self.__dict__["cfg"], log_messages=False)

            @config.setter
            def config(self, value: Any) -> None:
                self.__dict__["cfg"] = value
                PullMessageProcessor.config.__set__(self, value)  # the slot logs

        for klass, logged in ((cls, len(found.units)), (Quiet, 0)):
            del events[:]
            proc = _processor(klass, rig, False)
            got = answer[name](proc, cmd, h, found)
            assert got.code == 0 and len(events) == logged, (name, klass)
