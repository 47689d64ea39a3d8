"""Parity of the transport's native twin (server/remoting/_transport.pyx) with the
reference (server/remoting/transport.py): the same frames fed to a ``Connection`` whose
per-request methods are the reference's and to one whose methods are the twin's give
the same bytes on the wire, the same counters and the same events.

Covers what the twin makes in C: the slotted fields read and written by offset, the
``ingress.guarded`` wrapper's body (an answer, a refusal counted and logged, an exception, no
answer, a one-way request), the calls between its own steps (and an instance attribute
that replaces one of them, which it must call as the reference does), an unknown code,
a response frame, a malformed frame. Runs on both cores (the twin imported directly).
"""

from __future__ import annotations

import asyncio
import types
from types import ModuleType
from typing import Any  # Any: the twin is an untyped compiled module; structlog events

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.observe.logs import get_logger
from kairosmq.server.observe.stats import BrokerStats
from kairosmq.server.remoting import transport
from kairosmq.server.remoting.ingress import Rejected, guarded
from kairosmq.server.remoting.transport import Connection, RemotingServer
from structlog.testing import capture_logs

from tests.twins import twin

OK, REJECT, BOOM, SILENT, PLAIN, VALUE = 1, 2, 3, 4, 5, 6
UNKNOWN = 99


class Wire:
    """Stands in for the socket under a ``Connection``: keeps the bytes written."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _with(base: type, methods: dict[str, Any]) -> type:
    """A subclass of ``base`` with ``methods`` (the reference's or the twin's)."""
    return type(f"{base.__name__}Under", (base,), dict(methods))


class Side:
    """A ``RemotingServer`` and one ``Connection`` running ``w``'s per-request steps."""

    def __init__(self, w: Any) -> None:
        self.stats = BrokerStats()
        self.writes = 0
        log = get_logger("transport")
        server_cls = _with(
            RemotingServer,
            {
                "dispatch": w.dispatch,
                "mark_dirty": w.mark_dirty,
                "_tick": getattr(w, "tick", None) or w._tick,
            },
        )
        self.server = server_cls(
            log=log, before_write=self._before, on_connection_lost=lambda c: None, max_frame=1 << 20
        )
        conn_cls = _with(
            Connection,
            {
                "data_received": w.data_received,
                "_process": getattr(w, "process", None) or w._process,
                "send": w.send,
                "flush_out": w.flush_out,
            },
        )
        self.conn = conn_cls(self.server, self.table(log), "test")
        self.conn.peer, self.conn.peer_ip, self.conn.peer_port = "127.0.0.1:1", "127.0.0.1", 1
        self.server.connections.add(self.conn)
        self.wire = Wire()
        self.conn.transport = self.wire  # type: ignore[assignment]

    def _before(self) -> None:
        self.writes += 1

    def table(self, log: Any) -> dict[int, Any]:
        def ok(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(ext_fields={"n": str(conn.frames_in), **cmd.ext_fields})

        def reject(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"topic: {cmd.ext_fields.get('t')!r} bad")

        def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            raise RuntimeError("boom")

        def silent(conn: Connection, cmd: RemotingCommand) -> None:
            return None

        def value(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            raise ValueError("body is not JSON")

        def plain(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(remark="plain")

        table: dict[int, Any] = {
            code: guarded(h, self.stats, log)
            for code, h in ((OK, ok), (REJECT, reject), (BOOM, boom), (SILENT, silent))
        }
        table[VALUE] = guarded(value, self.stats, log)
        table[PLAIN] = plain  # not wrapped: called as it is
        return table

    async def feed(self, data: bytes) -> tuple[Any, ...]:
        """``data`` fed in one read; what left on the wire and the counters, once the
        outbox ticked."""
        self.conn.data_received(data)
        for _ in range(5):
            await asyncio.sleep(0)
        out = bytes(self.wire.data)
        self.wire.data.clear()
        c = self.conn
        return (
            out,
            self.stats.rejected,
            c.frames_in,
            c.bytes_in,
            c.closed,
            c.authorized,
            c.counted,
            self.server.buffered,
            self.writes,
            self.wire.closed,
        )


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.remoting.transport")


def _frame(code: int, opaque: int, flag: int = 0, **ext: str) -> bytes:
    return encode_command(RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=ext))


def _events(logs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        tuple(
            sorted(
                (k, str(v)) for k, v in e.items() if k not in ("exc_info", "timestamp", "conn_id")
            )
        )
        for e in logs
    ]


def _run(w: Any, feeds: list[bytes]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    loop = asyncio.new_event_loop()
    try:
        side = Side(w)
        with capture_logs() as logs:
            got = [loop.run_until_complete(side.feed(f)) for f in feeds]
        return got, _events(logs)
    finally:
        loop.close()


FRAMES = st.one_of(
    st.builds(
        _frame,
        st.sampled_from([OK, REJECT, BOOM, SILENT, PLAIN, VALUE, UNKNOWN]),
        st.integers(0, (1 << 31) - 1),
        st.sampled_from([0, FLAG_ONEWAY]),
        t=st.text(max_size=8),
    ),
    st.builds(_frame, st.just(OK), st.integers(0, 100), st.just(FLAG_RESPONSE)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads=st.lists(st.lists(FRAMES, min_size=1, max_size=20), min_size=1, max_size=4))
def test_frames_answer_alike(nat: ModuleType, reads: list[list[bytes]]) -> None:
    """Answers, refusals (counted, ``request.rejected``), failures (``request.failed``),
    one-way requests, unknown codes and response frames, up to FRAMES_PER_TURN and over
    it, in one read or several: the same on the wire, in the counters and the events."""
    feeds = [b"".join(r) for r in reads]
    assert _run(nat, feeds) == _run(transport.reference, feeds)


def test_split_and_malformed_frames_alike(nat: ModuleType) -> None:
    """A frame split over reads, then a malformed one (the connection aborted)."""
    whole = _frame(OK, 7, t="x") + _frame(REJECT, 8, t="y")
    feeds = [whole[:5], whole[5:30], whole[30:], b"\x00\x00\x00\x02\x00\x00"]
    ref = _run(transport.reference, feeds)
    assert _run(nat, feeds) == ref
    assert ref[0][-1][4]  # closed by the malformed frame
    assert any(dict(e).get("event") == "frame.rejected" for e in ref[1])


def test_guarded_wrapper_is_what_the_twin_reads(nat: ModuleType) -> None:
    """The twin makes ``guarded``'s wrapper in C by reading its closure (told by its
    code): the cells it reads are the handler, the log and the stats, in that order, and
    the wrapper still carries the handler's name and doc (``functools.wraps``)."""

    def handle_x(conn: Connection, cmd: RemotingCommand) -> None:
        """Doc of x."""

    stats, log = BrokerStats(), get_logger("t")
    g: Any = guarded(handle_x, stats, log)
    assert g.__code__.co_freevars == ("handler", "log", "stats")
    assert [c.cell_contents for c in g.__closure__] == [handle_x, log, stats]
    assert g.__name__ == "handle_x" and g.__doc__ == "Doc of x." and g.__wrapped__ is handle_x


def _calls_with_spy(w: Any, method: str) -> list[str]:
    """What is called when ``method`` (and the server's ``mark_dirty``) is replaced on the
    instance, for one frame answered."""
    side = Side(w)
    calls: list[str] = []
    target = side.server if method in ("dispatch", "_tick") else side.conn
    original = getattr(target, method)

    def spy(*args: Any) -> Any:
        calls.append(method)
        return original(*args)

    setattr(target, method, spy)
    mark = side.server.mark_dirty

    def mark_spy(self: RemotingServer, c: Connection) -> None:
        calls.append("mark_dirty")
        mark(c)

    side.server.mark_dirty = types.MethodType(mark_spy, side.server)  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()
    try:
        out = loop.run_until_complete(side.feed(_frame(OK, 1, t="z")))
    finally:
        loop.close()
    assert out[0]  # answered
    return calls


@pytest.mark.parametrize("method", ["send", "flush_out", "_process", "dispatch", "_tick"])
def test_an_instance_method_is_called_as_the_reference_calls_it(
    nat: ModuleType, method: str
) -> None:
    """A method replaced on the instance (a connection's, the server's ``dispatch`` or
    ``_tick``) is what the twin calls, as the reference (an attribute lookup) does; so is
    the server's ``mark_dirty``."""
    ref = _calls_with_spy(transport.reference, method)
    assert sorted(ref) == sorted([method, "mark_dirty"])
    assert _calls_with_spy(nat, method) == ref
