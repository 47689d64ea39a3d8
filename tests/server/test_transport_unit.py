"""Unit tests of the remoting server (server/remoting/transport.py) on its own: a RemotingServer on
port 0 with a small handler table of its own (no broker), talked to over real TCP by
``tests/wire.py``'s raw peer. Framing, dispatch (``handler(conn, cmd)``), error answers,
one-way requests, answers in completion order, the outbox (``before_write`` runs before
any answer leaves), frames per loop turn, and write backpressure.
(Broker-level bad input is tests/integration/test_bad_input.py's.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.server.observe.logs import get_logger
from kairosmq.server.remoting.transport import (
    FRAMES_PER_TURN,
    Connection,
    Handler,
    RemotingServer,
    RequestRefused,
)

from tests.helpers import wait_until
from tests.wire import RawPeer

ECHO, BOOM, REFUSE, BAD_VALUE, HELD, SILENT, BIG, COUNT = range(1, 9)


class Rig:
    """A RemotingServer with a table of test handlers; records what the server did."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []  # (code, conn.peer)
        self.writes = 0  # before_write calls (outbox ticks)
        self.written_at_answer: list[int] = []
        self.release = asyncio.Event()
        self.turn_snapshots: list[int] = []
        self.lost: list[Connection] = []
        self.server = RemotingServer(
            log=get_logger("transport"),
            before_write=self._before,
            on_connection_lost=self.lost.append,
            max_frame=16 * 1024 * 1024,
        )
        self.address = ""

    def _before(self) -> None:
        self.writes += 1

    def table(self) -> dict[int, Handler]:
        def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            self.calls.append((cmd.code, conn.peer))
            self.written_at_answer.append(self.writes)
            return cmd.response(ext_fields={"peerPort": str(conn.peer_port), **cmd.ext_fields})

        def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            self.calls.append((cmd.code, conn.peer))
            raise RuntimeError("boom")

        def refuse(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            raise RequestRefused("too many", ResponseCode.SYSTEM_BUSY)

        def bad_value(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            raise ValueError("body is not JSON")

        async def held(cmd: RemotingCommand) -> RemotingCommand:
            await self.release.wait()
            return cmd.response(ext_fields={"held": "1"})

        def hold(conn: Connection, cmd: RemotingCommand) -> Any:
            return held(cmd)

        def silent(conn: Connection, cmd: RemotingCommand) -> None:
            self.calls.append((cmd.code, conn.peer))

        def big(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            self.calls.append((cmd.code, conn.peer))
            return cmd.response(body=b"x" * 256 * 1024)

        def count(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            if not self.calls:  # runs after the rest of this loop turn's callbacks
                asyncio.get_running_loop().call_soon(
                    lambda: self.turn_snapshots.append(len(self.calls))
                )
            self.calls.append((cmd.code, conn.peer))
            return cmd.response()

        return {
            ECHO: echo,
            BOOM: boom,
            REFUSE: refuse,
            BAD_VALUE: bad_value,
            HELD: hold,
            SILENT: silent,
            BIG: big,
            COUNT: count,
        }

    async def start(self) -> None:
        port = await self.server.listen("127.0.0.1", 0, self.table(), "test")
        self.address = f"127.0.0.1:{port}"


@pytest_asyncio.fixture
async def rig() -> AsyncIterator[Rig]:
    r = Rig()
    await r.start()
    yield r
    r.release.set()
    await r.server.close()


def _frame(code: int, opaque: int, oneway: bool = False, **ext: str) -> bytes:
    return encode_command(request(code, ext, opaque=opaque, oneway=oneway))


async def test_dispatch_passes_the_connection_with_the_peer_port(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        resp = await peer.call(ECHO, {"k": "v"})
        local_port = peer.writer.get_extra_info("sockname")[1]
        assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["k"] == "v"
        assert resp.ext_fields["peerPort"] == str(local_port)  # not reset to 0
        assert rig.calls == [(ECHO, f"127.0.0.1:{local_port}")]
    finally:
        await peer.close()


async def test_error_answers(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        unknown = await peer.call(999)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "999" in (unknown.remark or "")
        boom = await peer.call(BOOM)
        assert boom.code == ResponseCode.SYSTEM_ERROR and boom.remark == "RuntimeError: boom"
        refused = await peer.call(REFUSE)
        assert refused.code == ResponseCode.SYSTEM_BUSY and refused.remark == "too many"
        bad = await peer.call(BAD_VALUE)
        assert bad.code == ResponseCode.SYSTEM_ERROR and "not JSON" in (bad.remark or "")
        assert (await peer.call(ECHO)).code == ResponseCode.SUCCESS  # the connection lives
    finally:
        await peer.close()


async def test_oneway_is_never_answered_even_on_failure(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        peer.send_raw(
            _frame(BOOM, 101, oneway=True)
            + _frame(999, 102, oneway=True)
            + _frame(ECHO, 103, oneway=True)
        )
        resp = await peer.call(ECHO)  # answered after the three one-ways were handled
        assert resp.code == ResponseCode.SUCCESS
        assert [c for c, _ in rig.calls] == [BOOM, ECHO, ECHO]
        await asyncio.sleep(0.05)
        assert peer.requests.empty() and not peer.pending  # nothing for 101..103
    finally:
        await peer.close()


async def test_none_gets_no_answer_and_awaitables_answer_in_completion_order(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        held = asyncio.ensure_future(peer.call(HELD))
        silent = asyncio.ensure_future(peer.call(SILENT, timeout=0.3))
        assert (await peer.call(ECHO)).code == ResponseCode.SUCCESS  # not behind HELD
        assert not held.done()
        rig.release.set()
        assert (await held).ext_fields == {"held": "1"}
        try:
            await silent
            raise AssertionError("a handler returning None was answered")
        except TimeoutError:
            pass
    finally:
        await peer.close()


async def test_framing_split_and_coalesced(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        frames = b"".join(_frame(ECHO, n, i=str(n)) for n in (201, 202, 203))
        futs = {n: asyncio.get_running_loop().create_future() for n in (201, 202, 203)}
        peer.pending.update(futs)
        for i in range(0, len(frames), 7):  # byte chunks that cut headers and lengths
            peer.send_raw(frames[i : i + 7])
            await peer.writer.drain()
            await asyncio.sleep(0)
        answers = [await asyncio.wait_for(futs[n], 5) for n in (201, 202, 203)]
        assert [a.ext_fields["i"] for a in answers] == ["201", "202", "203"]
    finally:
        await peer.close()


async def test_answers_leave_through_the_outbox_after_before_write(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        before = rig.writes
        await peer.call(ECHO)
        # the handler ran before this tick's before_write; the answer left after it
        assert rig.written_at_answer == [before] and rig.writes == before + 1
    finally:
        await peer.close()


async def test_at_most_frames_per_turn_then_the_loop_runs(rig: Rig) -> None:
    peer = await RawPeer.connect(rig.address)
    try:
        n = 3 * FRAMES_PER_TURN
        futs = [asyncio.get_running_loop().create_future() for _ in range(n)]
        peer.pending.update({300 + i: f for i, f in enumerate(futs)})
        peer.send_raw(b"".join(_frame(COUNT, 300 + i) for i in range(n)))
        await asyncio.wait_for(asyncio.gather(*futs), 5)
        # the callback queued while the first frame ran saw only that turn's frames
        assert rig.turn_snapshots == [FRAMES_PER_TURN]
    finally:
        await peer.close()


async def test_a_peer_not_reading_stops_its_requests_being_handled(rig: Rig) -> None:
    r, w = await asyncio.open_connection(*rig.address.rsplit(":", 1))
    try:
        n = 400  # 100 MiB of answers if they were all produced
        w.write(b"".join(_frame(BIG, i + 1) for i in range(n)))
        await w.drain()
        await wait_until(lambda: len(rig.calls) >= FRAMES_PER_TURN)
        await asyncio.sleep(0.3)
        stalled = len(rig.calls)
        await asyncio.sleep(0.3)
        assert len(rig.calls) == stalled < n // 4  # paused, not buffering every answer
        got = 0
        while got < n * 256 * 1024:  # read everything: the rest is handled
            chunk = await asyncio.wait_for(r.read(1 << 20), 5)
            assert chunk
            got += len(chunk)
        assert len(rig.calls) == n
    finally:
        w.close()
