"""RemotingClient against a small real TCP peer that speaks the frame codec."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kairosmq.client import ConnectionClosed, RequestTimeout
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.headers import ConsumerGroupRequestHeader, GetRouteInfoRequestHeader

from tests.helpers import wait_until
from tests.wire import ServerPeer


@pytest_asyncio.fixture
async def peer() -> AsyncIterator[ServerPeer]:
    p = ServerPeer()
    await p.start()
    yield p
    await p.stop()


def _dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


async def test_request_response_and_oneway(peer: ServerPeer) -> None:
    c = RemotingClient(peer.address)
    resp = await c.invoke(RequestCode.HEART_BEAT, {"k": "v"}, b"body", timeout=1)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {"echo": "34"}
    await c.invoke_oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {"a": "1"}, timeout=1)
    await c.invoke(RequestCode.HEART_BEAT, timeout=1)
    assert [cmd.code for cmd in peer.received] == [34, 15, 34]
    assert peer.received[1].is_oneway and peer.received[0].body == b"body"
    c.close()


async def test_responses_out_of_order_reach_their_callers(peer: ServerPeer) -> None:
    held: list[tuple[RemotingCommand, asyncio.StreamWriter]] = []

    def hold_then_reverse(cmd: RemotingCommand, w: asyncio.StreamWriter) -> None:
        held.append((cmd, w))
        if len(held) == 3:
            for c, wr in reversed(held):
                wr.write(encode_command(c.response(ext_fields={"n": c.ext_fields["n"]})))

    peer.on_cmd = hold_then_reverse
    c = RemotingClient(peer.address)
    resps = await asyncio.gather(*(c.invoke(11, {"n": str(i)}, timeout=2) for i in range(3)))
    assert [r.ext_fields["n"] for r in resps] == ["0", "1", "2"]
    c.close()


async def test_timeout_fires_and_late_response_is_dropped(peer: ServerPeer) -> None:
    late: list[RemotingCommand] = []
    peer.on_cmd = lambda cmd, w: late.append(cmd)
    c = RemotingClient(peer.address)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout, match="timed out after 0.200s"):
        await c.invoke(11, timeout=0.2)
    # fires at its deadline: not early, and not at some later default (generous bound)
    assert 0.19 <= time.monotonic() - t0 < 0.2 + 1.5
    peer.writers[0].write(encode_command(late[0].response()))  # too late: ignored
    peer.on_cmd = ServerPeer.echo
    assert (await c.invoke(34, timeout=1)).code == 0
    c.close()


async def test_connection_drop_fails_every_pending_request(peer: ServerPeer) -> None:
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
    peer.on_cmd = ServerPeer.echo
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
        await c.invoke(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            GetRouteInfoRequestHeader("T").to_ext_fields(),
            timeout=0.3,
        )
    assert time.monotonic() - t0 < 0.3 + 1.5  # its own timeout, not a longer default
    c.close()
    server.close()
    await server.wait_closed()


async def test_server_initiated_requests_go_to_the_callback(peer: ServerPeer) -> None:
    seen: list[RemotingCommand] = []

    def on_request(_client: RemotingClient, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        return None

    answers: list[RemotingCommand] = []
    c = RemotingClient(peer.address, on_request=on_request)
    await c.invoke(34, timeout=1)
    w = peer.writers[0]
    peer.on_cmd = lambda cmd, _w: answers.append(cmd)
    notify = ConsumerGroupRequestHeader("CG").to_ext_fields()
    w.write(
        encode_command(
            request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notify, oneway=True, opaque=900)
        )
    )
    w.write(encode_command(request(307, opaque=901)))  # GET_CONSUMER_RUNNING_INFO
    await wait_until(lambda: not (len(answers) < 1), 5.0)
    assert [s.code for s in seen] == [40, 307]
    assert ConsumerGroupRequestHeader.from_ext_fields(seen[0].ext_fields).consumer_group == "CG"
    # one-way: no answer; two-way unknown: REQUEST_CODE_NOT_SUPPORTED with its opaque
    assert len(answers) == 1
    assert answers[0].is_response and answers[0].opaque == 901
    assert answers[0].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    c.close()


async def test_close_fails_pending_and_refuses_new_requests(peer: ServerPeer) -> None:
    peer.on_cmd = lambda cmd, w: None
    c = RemotingClient(peer.address)
    fut = asyncio.ensure_future(c.invoke(11, timeout=5))
    await wait_until(lambda: not (not peer.received), 5.0)
    c.close()
    with pytest.raises(ConnectionClosed, match="client closed"):
        await fut
    with pytest.raises(ConnectionClosed, match="client is closed"):
        await c.invoke(34, timeout=1)
