"""RemotingClient against a small real TCP peer that speaks the frame codec."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from kairosmq.client import ConnectionClosed, RequestTimeout
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request

from tests.helpers import wait_until


class Peer:
    """A tiny remoting server; ``on_cmd(cmd, writer)`` decides what to answer."""

    def __init__(self) -> None:
        self.received: list[RemotingCommand] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.on_cmd: Callable[[RemotingCommand, asyncio.StreamWriter], None] = self.echo
        self.server: asyncio.Server | None = None
        self.address = ""

    @staticmethod
    def echo(cmd: RemotingCommand, w: asyncio.StreamWriter) -> None:
        if not cmd.is_oneway:
            w.write(encode_command(cmd.response(ext_fields={"echo": str(cmd.code)})))

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.writers.append(w)
        reader = FrameReader()
        while data := await r.read(65536):
            reader.feed(data)
            for cmd in reader:
                self.received.append(cmd)
                self.on_cmd(cmd, w)
        w.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()


@pytest_asyncio.fixture
async def peer() -> AsyncIterator[Peer]:
    p = Peer()
    await p.start()
    yield p
    await p.stop()


def _dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


async def test_request_response_and_oneway(peer: Peer) -> None:
    c = RemotingClient(peer.address)
    resp = await c.invoke(RequestCode.HEART_BEAT, {"k": "v"}, b"body", timeout=1)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {"echo": "34"}
    await c.invoke_oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {"a": "1"}, timeout=1)
    await c.invoke(RequestCode.HEART_BEAT, timeout=1)
    assert [cmd.code for cmd in peer.received] == [34, 15, 34]
    assert peer.received[1].is_oneway and peer.received[0].body == b"body"
    c.close()


async def test_responses_out_of_order_reach_their_callers(peer: Peer) -> None:
    held: list[tuple[RemotingCommand, asyncio.StreamWriter]] = []

    def hold_then_reverse(cmd: RemotingCommand, w: asyncio.StreamWriter) -> None:
        held.append((cmd, w))
        if len(held) == 3:
            for c, wr in reversed(held):
                wr.write(encode_command(c.response(ext_fields={"n": c.ext_fields["n"]})))

    peer.on_cmd = hold_then_reverse
    c = RemotingClient(peer.address)
    resps = await asyncio.gather(
        *(c.invoke(11, {"n": str(i)}, timeout=2) for i in range(3))
    )
    assert [r.ext_fields["n"] for r in resps] == ["0", "1", "2"]
    c.close()


async def test_timeout_fires_and_late_response_is_dropped(peer: Peer) -> None:
    late: list[RemotingCommand] = []
    peer.on_cmd = lambda cmd, w: late.append(cmd)
    c = RemotingClient(peer.address)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout, match="timed out after 0.200s"):
        await c.invoke(11, timeout=0.2)
    # fires at its deadline: not early, and not at some later default (generous bound)
    assert 0.19 <= time.monotonic() - t0 < 0.2 + 1.5
    peer.writers[0].write(encode_command(late[0].response()))  # too late: ignored
    peer.on_cmd = Peer.echo
    assert (await c.invoke(34, timeout=1)).code == 0
    c.close()


async def test_connection_drop_fails_every_pending_request(peer: Peer) -> None:
    peer.on_cmd = lambda cmd, w: None
    c = RemotingClient(peer.address)
    pending = [asyncio.ensure_future(c.invoke(11, timeout=5)) for _ in range(3)]
    await wait_until(lambda: not (len(peer.received) < 3), 5.0)
    t0 = time.monotonic()
    peer.writers[0].close()
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert time.monotonic() - t0 < 2.5  # on the drop, not at the requests' 5 s timeout
    assert all(isinstance(r, ConnectionClosed) for r in results), results
    # the next request reconnects
    peer.on_cmd = Peer.echo
    assert (await c.invoke(34, timeout=1)).code == 0
    assert len(peer.writers) == 2
    c.close()


async def test_dead_address_fails_fast_then_backs_off() -> None:
    c = RemotingClient(_dead_address(), backoff_base=0.5, backoff_max=0.5)
    t0 = time.monotonic()
    with pytest.raises(ConnectionClosed, match="connect failed"):
        await c.invoke(34, timeout=3)
    assert time.monotonic() - t0 < 2  # refused at once, not at the 3 s timeout
    # within the backoff window a request with a shorter deadline fails at once
    with pytest.raises(ConnectionClosed, match="next connect attempt in"):
        await c.invoke(34, timeout=0.1)
    c.close()


async def test_silent_peer_times_out_within_the_timeout() -> None:
    async def swallow(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read()
        w.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    c = RemotingClient(addr)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout):
        await c.invoke(105, {"topic": "T"}, timeout=0.3)
    assert time.monotonic() - t0 < 0.3 + 1.5  # its own timeout, not a longer default
    c.close()
    server.close()
    await server.wait_closed()


async def test_server_initiated_requests_go_to_the_callback(peer: Peer) -> None:
    seen: list[RemotingCommand] = []

    def on_request(_client: RemotingClient, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        return None

    answers: list[RemotingCommand] = []
    c = RemotingClient(peer.address, on_request=on_request)
    await c.invoke(34, timeout=1)
    w = peer.writers[0]
    peer.on_cmd = lambda cmd, _w: answers.append(cmd)
    w.write(encode_command(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                   {"consumerGroup": "CG"}, oneway=True, opaque=900)))
    w.write(encode_command(request(307, opaque=901)))  # GET_CONSUMER_RUNNING_INFO
    await wait_until(lambda: not (len(answers) < 1), 5.0)
    assert [s.code for s in seen] == [40, 307]
    assert seen[0].ext_fields == {"consumerGroup": "CG"}
    # one-way: no answer; two-way unknown: REQUEST_CODE_NOT_SUPPORTED with its opaque
    assert len(answers) == 1
    assert answers[0].is_response and answers[0].opaque == 901
    assert answers[0].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    c.close()


async def test_close_fails_pending_and_refuses_new_requests(peer: Peer) -> None:
    peer.on_cmd = lambda cmd, w: None
    c = RemotingClient(peer.address)
    fut = asyncio.ensure_future(c.invoke(11, timeout=5))
    await wait_until(lambda: not (not peer.received), 5.0)
    c.close()
    with pytest.raises(ConnectionClosed, match="client closed"):
        await fut
    with pytest.raises(ConnectionClosed, match="client is closed"):
        await c.invoke(34, timeout=1)
