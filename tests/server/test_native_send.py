"""The native send (server/handlers/_send.pyx's ``handle_send``, server/put/_path.pyx's
``put``) against the reference (``send.reference.handle_send``, ``path.reference.put``).

Two brokers' real services (``rig.Services``: store, topic table, stats, logs) in their
own directories, with the same pinned clock and the same topic table, each with its own
``SendMessageProcessor`` wrapped as the handler table wraps it (``ingress.guarded``,
``after_topic_write``): one runs the reference's handler and put path, the other the
twins'. The same requests go to both: the same answer bytes (``encode_command``), the
same log events, the same stats and the same commit-log bytes. The requests are
generated (codes 10/310/320, V1 and V2 headers, known, unknown, system, %RETRY%,
read-only and badly named topics, any queue id, sysFlag, flag, reconsumeTimes and
properties: DELAY of any text, timer properties, TRAN_MSG, broker-internal keys, bodies
over the limit) so that every case the twins hand to the reference happens, and every
captured stock-client send frame in tests/fixtures goes to both. The hot-path log
writer (``configure_logging``'s fast emitter) writes the same lines for both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import random
import time
import types
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: the twins are untyped compiled modules; structlog events

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import headers
from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import PERM_READ, RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import SendMessageRequestHeader
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    KEYS,
    MAX_RECONSUME_TIMES,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
    encode_properties,
)
from kairosmq.protocol.timer import TIMER_DELAY_SEC, TIMER_DELIVER_MS
from kairosmq.server import clock
from kairosmq.server.config import FlushMode
from kairosmq.server.handlers import send
from kairosmq.server.handlers.send import SendMessageProcessor
from kairosmq.server.observe import logs
from kairosmq.server.put import path
from kairosmq.server.put.kind import MessageKind
from kairosmq.server.remoting import transport
from kairosmq.server.remoting.transport import Connection, RemotingServer
from kairosmq.server.store import MessageInner
from structlog.testing import capture_logs

from tests.protocol.captures import entries_with_code, frame_bytes
from tests.server.handlers.rig import Services
from tests.twins import twin

NOW = 1_700_000_000_123
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MAX_BODY = 2048  # small, so that a body over the limit is cheap to make


class Wire:
    """Stands in for the socket under a ``Connection``: keeps the bytes written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def _with(base: type, methods: dict[str, Any]) -> type:
    """A subclass of ``base`` with ``methods`` (the reference's or the twin's)."""
    return type(f"{base.__name__}Under", (base,), dict(methods))


class Side:
    """One broker's services and its send handler: the reference's or the twins'; with
    ``wire`` (the transport's per-request methods), a ``Connection`` of the broker's
    ``RemotingServer`` fed whole frames runs them too."""

    def __init__(
        self,
        tmp: Path,
        handle: Any,
        put: Any,
        entry: Any = None,
        wire: ModuleType | Any = None,
        **overrides: Any,
    ) -> None:
        self.s = s = Services(tmp, max_message_size=MAX_BODY, **overrides)
        s.store.clock_ms = lambda: NOW  # one pinned clock: store, put path, send handler
        pp = s.broker.put_path

        async def wait_flushed(end: int) -> bool:
            s.store.write_out()
            return await asyncio.to_thread(s.store.fsync) >= end

        proc = SendMessageProcessor(
            topics=s.topics,
            config=s.config,
            stats=s.stats,
            log=s.log,
            put=types.MethodType(put, pp),
            offset_msg_id=pp.offset_msg_id,
            wait_flushed=wait_flushed,
            clock_ms=s.store.clock_ms,
            ack_token=s.store.ack_token,
        )
        bound = types.MethodType(handle, proc)
        # the table's wrapping: the Python wrappers, or the twin's entry (GuardedSend)
        self.handler = s.guarded(bound) if entry is None else entry(bound, s.topics, s.stats, s.log)
        self.conn = s.conn()
        s.topics.create("T1", 4)
        s.topics.create("T2", 8)
        s.topics.create("RO", 4, perm=PERM_READ)
        s.topics.create("%RETRY%G1", 1)
        w = transport.reference if wire is None else wire
        server = s.broker.server
        server.__class__ = _with(
            RemotingServer,
            {"dispatch": w.dispatch, "mark_dirty": w.mark_dirty, "_tick": _tick_of(w)},
        )
        conn_cls = _with(
            Connection,
            {
                "data_received": w.data_received,
                "_process": _process_of(w),
                "send": w.send,
                "flush_out": w.flush_out,
            },
        )
        codes = (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
        )
        self.wired = conn_cls(server, {int(c): self.handler for c in codes}, "broker")
        self.wired.peer, self.wired.peer_port = self.conn.peer, self.conn.peer_port
        self.wired.peer_ip, self.wired.born_ip = self.conn.peer_ip, self.conn.born_ip
        self.wire = Wire()
        self.wired.transport = self.wire  # type: ignore[assignment]

    async def frames(self, data: bytes, count: int) -> dict[int, bytes]:
        """``data`` (whole frames) fed to the connection: its ``count`` answers by opaque."""
        self.wired.data_received(data)
        answers: dict[int, bytes] = {}
        for _ in range(2000):
            await asyncio.sleep(0)
            reader = FrameReader(8 << 20)
            reader.feed(bytes(self.wire.data))
            got = [encode_command(c) for c in reader]
            answers = {}
            for frame in got:
                reader = FrameReader(8 << 20)
                reader.feed(frame)
                (cmd,) = list(reader)
                answers[cmd.opaque] = frame
            if len(answers) >= count:
                break
            await asyncio.sleep(0.001)
        self.wire.data.clear()
        return answers

    async def answer(self, cmd: RemotingCommand) -> bytes:
        out = self.handler(self.conn, cmd)
        if inspect.isawaitable(out):
            out = await out
        return encode_command(out)

    def state(self) -> tuple[Any, ...]:
        store, stats = self.s.store, self.s.stats
        store.write_out()
        end = store.commitlog.written_offset
        records = store.commitlog.read(0, end) if end else b""
        return (
            end,
            records,
            dict(stats.stored),
            dict(stats.scheduled),
            stats.rejected,
            stats.timers_scheduled,
            sorted(self.s.topics.topics),
        )


@pytest.fixture(scope="module")
def nat() -> tuple[ModuleType, ModuleType, ModuleType]:
    return twin("server.handlers.send"), twin("server.put.path"), twin("server.remoting.transport")


def _tick_of(w: Any) -> Any:
    return getattr(w, "tick", None) or w._tick


def _process_of(w: Any) -> Any:
    return getattr(w, "process", None) or w._process


def _sides(
    tmp: Path, nat: tuple[ModuleType, ModuleType, ModuleType], **overrides: Any
) -> tuple[Side, Side]:
    send_twin, path_twin, transport_twin = nat
    ref = Side(tmp / "ref", send.reference.handle_send, path.reference.put, **overrides)
    nat_side = Side(
        tmp / "nat",
        send_twin.handle_send,
        path_twin.put,
        send_twin.GuardedSend,
        transport_twin,
        **overrides,
    )
    return ref, nat_side


@pytest.fixture(scope="module")
def sides(
    tmp_path_factory: pytest.TempPathFactory, nat: tuple[ModuleType, ModuleType, ModuleType]
) -> Iterator[tuple[Side, Side, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    ref, nat_side = _sides(tmp_path_factory.mktemp("send"), nat)
    yield ref, nat_side, loop
    ref.s.close()
    nat_side.s.close()
    loop.close()


def _both(
    ref: Side, nat_side: Side, loop: asyncio.AbstractEventLoop, cmd: RemotingCommand, seed: int
) -> None:
    """``cmd`` to both sides (the same random queue choice): the same answer and logs."""

    async def one(side: Side) -> tuple[bytes, list[dict[str, Any]]]:
        random.seed(seed)
        with capture_logs() as events:
            answer = await side.answer(cmd)
        await asyncio.sleep(0)  # the store's write-out
        return answer, events

    got_ref = loop.run_until_complete(one(ref))
    got_nat = loop.run_until_complete(one(nat_side))
    assert got_nat[0] == got_ref[0], (cmd, got_ref[1], got_nat[1])
    assert got_nat[1] == got_ref[1]


KEY = st.sampled_from(
    [DELAY, DELAY, UNIQ_KEY, UNIQ_KEY, WAIT, TAGS, KEYS, TRAN_MSG, TIMER_DELIVER_MS]
    + [TIMER_DELAY_SEC, "KAIROS_X", REAL_TOPIC, REAL_QID, MAX_RECONSUME_TIMES, "user"]
)
VALUE = st.sampled_from(
    ["1", "3", "0", "-1", "x", "99", "true", "false", "", "a b", str(NOW + 5000), "7F00AB"]
    # text int() reads that the twins' ASCII-digit reading leaves to int()
    + [" 2", "+2", "02", "2_0", "\u0663", "-0", "1" * 19, "-" + "9" * 18, "9" * 18]
)
TOPIC = st.sampled_from(
    ["T1", "T1", "T1", "T2", "RO", "%RETRY%G1", "%RETRY%G2", "Fresh", SCHEDULE_TOPIC]
    + ["RMQ_SYS_TRACE_TOPIC", "TBW102", "bad/name", ""]
)
GROUP = st.sampled_from(["PG", "PG", "PG2", "bad group", ""]) | st.text(
    "abcXYZ_-%|09", min_size=1, max_size=8
)
OPT_INT = st.none() | st.sampled_from([0, 1, 3, 16, -1, 2**31, -(2**31) - 1])


@st.composite
def send_requests(draw: st.DrawFn) -> tuple[RemotingCommand, int]:
    code = draw(st.sampled_from([310, 310, 310, 10, 320]))
    props = draw(st.none() | st.dictionaries(KEY, VALUE, max_size=5))
    fields: dict[str, Any] = {
        ("a", "producerGroup"): draw(GROUP),
        ("b", "topic"): draw(TOPIC),
        ("c", "defaultTopic"): draw(st.sampled_from(["TBW102", "Other"])),
        ("d", "defaultTopicQueueNums"): draw(st.sampled_from([4, 1, 16])),
        ("e", "queueId"): draw(st.sampled_from([-1, 0, 1, 3, 4, 7, 100, -5, 2**31, "x1"])),
        ("f", "sysFlag"): draw(
            st.sampled_from([0, 1, 2, 4, 8, 0xC, 0x10, 0x101, 0x300, 0x701])
            | st.integers(0, 0xFFFF)
        ),
        ("g", "bornTimestamp"): draw(st.integers(0, 2**45)),
        ("h", "flag"): draw(st.sampled_from([0, 1, -1, 2**31, -(2**31) - 1])),
        ("i", "properties"): None if props is None else encode_properties(props),
        ("j", "reconsumeTimes"): draw(OPT_INT),
        ("l", "maxReconsumeTimes"): draw(OPT_INT),
        ("m", "batch"): draw(st.sampled_from([None, None, "false", "true"])),
    }
    v2 = code != 10
    ext = {k[0] if v2 else k[1]: str(v) for k, v in fields.items() if v is not None}
    if code == 320 or fields[("m", "batch")] == "true":
        body = draw(
            st.sampled_from([b"", b"not a batch", encode_batch([BatchItem(b"x", 0, "")] * 2)])
        )
    else:
        body = draw(st.sampled_from([b"", b"hello", b"\xab" * 300, b"z" * (MAX_BODY + 1)]))
    return RemotingCommand(
        code=code, opaque=draw(st.integers(0, 2**31 - 1)), ext_fields=ext, body=body
    ), draw(st.integers(0, 2**32))


@PARITY
@given(reqs=st.lists(send_requests(), min_size=1, max_size=4))
def test_generated_sends_are_answered_and_stored_alike(
    sides: tuple[Side, Side, asyncio.AbstractEventLoop],
    reqs: list[tuple[RemotingCommand, int]],
) -> None:
    ref, nat_side, loop = sides
    for cmd, seed in reqs:
        _both(ref, nat_side, loop, cmd, seed)
    assert nat_side.state() == ref.state()


@settings(PARITY, max_examples=25)
@given(reqs=st.lists(send_requests(), min_size=1, max_size=24))
def test_generated_frames_through_the_transport_are_answered_alike(
    sides: tuple[Side, Side, asyncio.AbstractEventLoop],
    reqs: list[tuple[RemotingCommand, int]],
) -> None:
    """The same requests as whole frames in one read (more than FRAMES_PER_TURN at times)
    through each side's ``Connection``: the transport's per-request steps, the send and
    the put of that side: the same answer frames, stats and records."""
    ref, nat_side, loop = sides
    cmds = [dataclasses.replace(cmd, opaque=n) for n, (cmd, _) in enumerate(reqs)]
    data = b"".join(encode_command(c) for c in cmds)
    random.seed(reqs[0][1])
    got_ref = loop.run_until_complete(ref.frames(data, len(cmds)))
    random.seed(reqs[0][1])
    got_nat = loop.run_until_complete(nat_side.frames(data, len(cmds)))
    assert len(got_ref) == len(cmds)
    assert got_nat == got_ref
    assert nat_side.state() == ref.state()


def test_the_common_send_takes_the_twin(
    sides: tuple[Side, Side, asyncio.AbstractEventLoop],
) -> None:
    """Stock-shaped delayed and plain sends to a known topic from a validated group (the
    twins' common case, handled in C without the reference) store the same records,
    counters and answers as the reference's."""
    ref, nat_side, loop = sides
    for i, delay in enumerate(["2", None, "1"]):
        props = {UNIQ_KEY: f"7F00000100002A9F0000{i:012X}", WAIT: "true", TAGS: "tag"}
        if delay:
            props[DELAY] = delay
        ext = {"a": "PG", "b": "T1", "c": "TBW102", "d": "4", "e": "-1", "f": "0",
               "g": str(NOW - 5), "h": "0", "i": encode_properties(props), "j": "0",
               "k": "false", "m": "false"}  # fmt: skip
        _both(ref, nat_side, loop, RemotingCommand(code=310, opaque=i, ext_fields=ext,
                                                   body=b"\xab" * 64), i)  # fmt: skip
    assert nat_side.state() == ref.state()
    assert ref.s.stats.scheduled[2] >= 1 and ref.s.stats.stored["T1"] >= 1


def test_the_decoders_in_c_and_any_other_in_python(
    sides: tuple[Side, Side, asyncio.AbstractEventLoop],
    nat: tuple[ModuleType, ModuleType, ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The send twin decodes through the header and properties twins' C entry points
    (``FROM_EXT``, ``DECODE``) when its decoders are exactly theirs, and through the
    Python call otherwise (here a wrapping ``decode_properties``, which is called): the
    same answers, events and records either way."""
    send_twin = nat[0]
    headers_twin, properties_twin = twin("protocol.headers"), twin("protocol.properties")
    if headers._twin is not None:  # the native core: the C entry points are taken
        assert type(SendMessageRequestHeader._codec(True)[0]) is headers_twin.FromExt
        assert send_twin.decode_properties is properties_twin.decode_properties
    ref, nat_side, loop = sides
    seen: list[str] = []

    def wrapped(text: str) -> dict[str, str]:
        seen.append(text)
        return properties_twin.decode_properties(text)  # type: ignore[no-any-return]

    for i, wrap in enumerate([False, True]):
        if wrap:
            monkeypatch.setattr(send_twin, "decode_properties", wrapped)
        props = {UNIQ_KEY: f"7F00000100002A9F0001{i:012X}", DELAY: "1", TAGS: "tag"}
        ext = {"a": "PG", "b": "T1", "c": "TBW102", "d": "4", "e": "-1", "f": "0",
               "g": str(NOW - 5), "h": "0", "i": encode_properties(props), "j": "0",
               "k": "false", "m": "false"}  # fmt: skip
        _both(ref, nat_side, loop, RemotingCommand(code=310, opaque=i, ext_fields=ext,
                                                   body=b"\xcd" * 32), i)  # fmt: skip
        assert seen == ([encode_properties(props)] if wrap else [])
    assert nat_side.state() == ref.state()


def _stock_sends() -> list[tuple[str, dict[str, Any]]]:
    codes = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    return [e for code in codes for e in entries_with_code(int(code))]


def test_stock_client_send_frames_are_answered_alike(
    sides: tuple[Side, Side, asyncio.AbstractEventLoop],
) -> None:
    ref, nat_side, loop = sides
    sends = _stock_sends()
    assert sends, "no captured send frames in tests/fixtures"
    for n, (client, e) in enumerate(sends):
        reader = FrameReader(8 << 20)
        reader.feed(frame_bytes(client, e["file"]))
        (cmd,) = list(reader)
        ref.s.topics.create(cmd.ext_fields.get("b") or cmd.ext_fields.get("topic") or "T1", 4)
        nat_side.s.topics.create(cmd.ext_fields.get("b") or cmd.ext_fields.get("topic") or "T1", 4)
        _both(ref, nat_side, loop, cmd, n)
    assert nat_side.state() == ref.state()


def test_sync_flush_answers_alike(
    tmp_path: Path, nat: tuple[ModuleType, ModuleType, ModuleType]
) -> None:
    ref, nat_side = _sides(tmp_path, nat, flush_mode=FlushMode.SYNC_FLUSH)
    loop = asyncio.new_event_loop()
    try:
        ext = {"a": "PG", "b": "T1", "e": "1", "f": "0", "g": "1", "h": "0",
               "i": encode_properties({DELAY: "1", UNIQ_KEY: "AB"})}  # fmt: skip
        _both(ref, nat_side, loop, RemotingCommand(code=310, opaque=7, ext_fields=ext,
                                                   body=b"x"), 1)  # fmt: skip
        assert nat_side.state() == ref.state()
    finally:
        loop.close()
        ref.s.close()
        nat_side.s.close()


def test_the_hot_path_writer_writes_the_same_lines(
    tmp_path: Path, nat: tuple[ModuleType, ModuleType, ModuleType]
) -> None:
    """``message.scheduled`` / ``message.stored`` through the fast emitter (the broker's
    logging): the same lines, ``ts`` pinned."""
    ref, nat_side = _sides(tmp_path, nat)
    loop = asyncio.new_event_loop()
    real_time = time.time
    lines: list[list[bytes]] = []
    try:
        time.time = lambda: NOW / 1000  # type: ignore[assignment]
        for name, side in (("ref", ref), ("nat", nat_side)):
            d = tmp_path / f"logs-{name}"
            logs.configure_logging(json=True, level="info", log_dir=d, stdout=False)
            try:
                assert logs._fast_emit is not None
                for i, delay in enumerate(["1", None, "0", "5"]):
                    props = {UNIQ_KEY: f"U{i}"} if i != 1 else {}
                    if delay is not None:
                        props[DELAY] = delay
                    ext = {"a": "PG", "b": "T2", "e": str(i), "f": "0", "g": "9", "h": "0",
                           "i": encode_properties(props), "j": "2"}  # fmt: skip
                    cmd = RemotingCommand(code=310, opaque=i, ext_fields=ext, body=b"b" * i)
                    loop.run_until_complete(side.answer(cmd))
            finally:
                logs.close_sinks()
                structlog.reset_defaults()
            lines.append([ln for f in sorted(d.iterdir()) for ln in f.read_bytes().splitlines()])
    finally:
        time.time = real_time  # type: ignore[assignment]
        loop.close()
        ref.s.close()
        nat_side.s.close()
    events = [json.loads(ln)["event"] for ln in lines[0]]
    assert events.count("message.scheduled") == 2 and events.count("message.stored") == 2
    assert lines[1] == lines[0]


# ------------------------------------------------------------------ the C-only steps

# UNIQ_KEY text for the recall handle: short and long (a handle over the twin's 1 KiB
# buffer goes the reference's way), any code point (a lone surrogate: UTF-8 cannot hold
# it, both raise alike), multi-byte text (its UTF-8 bytes are what base64 encodes)
UNIQ_TEXT = (
    st.text(max_size=40)
    | st.text(min_size=300, max_size=1100)
    | st.sampled_from(["\ud800x", "ü" * 400, "A" * 1010, "A" * 998, "7F0000010000"])
)


@pytest.fixture(scope="module")
def recall_sides(
    tmp_path_factory: pytest.TempPathFactory, nat: tuple[ModuleType, ModuleType, ModuleType]
) -> Iterator[tuple[Side, Side, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    ref, nat_side = _sides(tmp_path_factory.mktemp("recall"), nat, broker_name="bröker-✓")
    yield ref, nat_side, loop
    ref.s.close()
    nat_side.s.close()
    loop.close()


def _outcomes(
    ref: Side, nat_side: Side, loop: asyncio.AbstractEventLoop, cmd: RemotingCommand
) -> None:
    """``cmd`` to both sides: the same answer, or the same exception, and the same logs."""

    async def one(side: Side) -> tuple[Any, list[dict[str, Any]]]:
        with capture_logs() as events:
            try:
                got: Any = await side.answer(cmd)
            except Exception as err:  # noqa: BLE001 - the outcome compared is the exception
                got = (type(err), str(err))
        await asyncio.sleep(0)
        return got, events

    assert loop.run_until_complete(one(nat_side)) == loop.run_until_complete(one(ref))


@settings(PARITY, max_examples=120)
@given(
    uniq=UNIQ_TEXT,
    delay=st.sampled_from(["1", "2", "18", "40", "0"]),
    topic=st.sampled_from(["T1", "T2"]),
)
def test_recall_handles_of_any_text_are_alike(
    recall_sides: tuple[Side, Side, asyncio.AbstractEventLoop], uniq: str, delay: str, topic: str
) -> None:
    """A delayed send's recall handle (base64url of ``v1 topic broker due uniq``, written
    in C by the twin for a handle under 1 KiB): the same answer bytes as the reference's
    ``encode_recall_handle`` for any UNIQ_KEY text and a non-ASCII broker name."""
    ref, nat_side, loop = recall_sides
    ext = {"a": "PG", "b": topic, "e": "1", "f": "0", "g": "9", "h": "0",
           "i": encode_properties({UNIQ_KEY: uniq, DELAY: delay})}  # fmt: skip
    _outcomes(ref, nat_side, loop, RemotingCommand(code=310, opaque=3, ext_fields=ext, body=b"x"))
    assert nat_side.state() == ref.state()


@pytest.fixture(scope="module", params=["twin send, reference put", "reference send, twin entry"])
def mixed_sides(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    nat: tuple[ModuleType, ModuleType, ModuleType],
) -> Iterator[tuple[Side, Side, asyncio.AbstractEventLoop]]:
    """The twins beside reference parts: the send twin over the reference's put (its
    Python call, not the put twin's C one), the twin's entry (``GuardedSend``) over the
    reference's handler (its Python call)."""
    send_twin, path_twin, transport_twin = nat
    loop = asyncio.new_event_loop()
    tmp = tmp_path_factory.mktemp("mixed")
    ref = Side(tmp / "ref", send.reference.handle_send, path.reference.put)
    if request.param == "twin send, reference put":
        mixed = Side(tmp / "mix", send_twin.handle_send, path.reference.put, send_twin.GuardedSend)
    else:
        mixed = Side(tmp / "mix", send.reference.handle_send, path_twin.put, send_twin.GuardedSend)
    yield ref, mixed, loop
    ref.s.close()
    mixed.s.close()
    loop.close()


@settings(PARITY, max_examples=60)
@given(reqs=st.lists(send_requests(), min_size=1, max_size=4))
def test_mixed_cores_answer_alike(
    mixed_sides: tuple[Side, Side, asyncio.AbstractEventLoop],
    reqs: list[tuple[RemotingCommand, int]],
) -> None:
    ref, mixed, loop = mixed_sides
    for cmd, seed in reqs:
        _both(ref, mixed, loop, cmd, seed)
    assert mixed.state() == ref.state()


def test_the_wall_clock_is_read_as_wall_ms(
    tmp_path: Path, nat: tuple[ModuleType, ModuleType, ModuleType]
) -> None:
    """The put twin reads ``clock.wall_ms`` (the store's clock) in C: a delayed message's
    store timestamp and due time lie between two ``wall_ms()`` readings around the put."""
    _, path_twin, _ = nat
    s = Services(tmp_path)
    loop = asyncio.new_event_loop()
    try:
        assert s.store.clock_ms is clock.wall_ms
        s.topics.create("T1", 4)
        level_ms = s.config.delay_levels_ms[2]

        async def put_one() -> tuple[int, MessageInner, int]:
            before = clock.wall_ms()
            msg = MessageInner("T1", 1, b"x", {DELAY: "3", UNIQ_KEY: "U"})
            path_twin.put(s.broker.put_path, msg, MessageKind.DELAYED)
            return before, msg, clock.wall_ms()

        for _ in range(20):
            before, msg, after = loop.run_until_complete(put_one())
            assert msg.store_timestamp is not None
            assert before <= msg.store_timestamp <= after
            assert msg.properties[DELIVER_TIME] == str(msg.store_timestamp + level_ms + 1)
    finally:
        loop.close()
        s.close()
