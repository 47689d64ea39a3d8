"""The console's HTTP API and auth against a real broker (in-process on port 0) and, in
the last test, ``kairosmq console`` as its own process.

Login (scrypt hashes, throttled), the login cookie (HttpOnly, SameSite=Strict), CSRF
on every change, cross-origin refusals, roles (a viewer reads, an operator acts), the
routes reaching the broker calls 907-912, broker refusals as 422, and hostile HTTP
(oversized, chunked, short, malformed requests) answered with 4xx without stopping the
server.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from kairosmq.client.remoting import RemotingPool
from kairosmq.console.api import Brokers, ConsoleApi
from kairosmq.console.auth import MAX_FAILURES, Users
from kairosmq.console.http import HttpServer
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.timer import decode_recall_handle

from tests.console.harness import Http, Log, users_file
from tests.helpers import pull_all, send, wait_until
from tests.integration.procs import free_port
from tests.security.certs import make_certs, openssl_missing
from tests.wire import RawPeer


async def timer(peer: RawPeer, topic: str, delay_ms: int) -> tuple[str, int]:
    uniq = uuid.uuid4().hex.upper()
    r = await send(peer, topic, uniq.encode(), {"UNIQ_KEY": uniq, "TIMER_DELAY_MS": str(delay_ms)})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return uniq, decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms


async def test_login_login_cookie_and_throttle(console) -> None:
    _broker, port, log = console
    anon = Http(port)
    assert (await anon.call("GET", "/api/pending"))[0] == 401
    assert (await anon.login("vera", "wrong"))[0] == 401
    assert (await anon.login("nobody", "view-pw"))[0] == 401
    assert (await anon.login("vera", "view-pw"))[0] == 200
    cookie = anon.last_headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    vera = Http(port)
    status, out = await vera.login("vera", "view-pw")
    assert status == 200 and out["role"] == "viewer" and len(out["csrf"]) >= 32
    status, me = await vera.call("GET", "/api/me")
    assert (status, me["user"], me["csrf"]) == (200, "vera", out["csrf"])
    assert ("console.login_failed", {"user": "nobody", "peer": log.lines[1][1]["peer"]}) in [
        (e, kw) for e, kw in log.lines
    ]
    assert not any("view-pw" in str(kw) for _e, kw in log.lines)  # no password logged
    # repeated failures lock the name out, even with the right password then
    otto = Http(port)
    for _ in range(MAX_FAILURES):
        assert (await otto.login("otto", "guess"))[0] == 401
    assert (await otto.login("otto", "op-pw"))[0] == 429
    # logout ends the login
    assert (await vera.call("POST", "/api/logout"))[0] == 200
    assert (await vera.call("GET", "/api/me"))[0] == 401


async def test_roles_csrf_and_origin_guard_the_actions(console) -> None:
    broker, port, log = console
    peer = await RawPeer.connect(broker.address)
    uniq, _due = await timer(peer, "ConT", 30_000)
    vera, otto = Http(port), Http(port)
    await vera.login("vera", "view-pw")
    await otto.login("otto", "op-pw")
    status, page = await vera.call("GET", "/api/pending?topic=ConT&limit=10")
    assert status == 200 and [r["msgId"] for r in page["rows"]] == [uniq]
    ref = page["rows"][0]["ref"]
    status, hist = await vera.call("GET", "/api/pending/histogram?unit=day")
    assert status == 200 and hist["timers"] == 1
    assert (await vera.call("POST", "/api/pending/run-now", {"ref": ref}))[0] == 403  # role
    assert (await otto.call("POST", "/api/pending/run-now", {"ref": ref}, csrf=False))[0] == 403
    bad = {"X-CSRF-Token": "x" * 43}
    assert (await otto.call("POST", "/api/pending/run-now", {"ref": ref}, headers=bad))[0] == 403
    evil = {"Origin": "https://evil.example"}
    assert (await otto.call("POST", "/api/pending/run-now", {"ref": ref}, headers=evil))[0] == 403
    assert broker.stats.timers_fired == 0  # nothing above reached the broker
    status, out = await otto.call("POST", "/api/pending/run-now", {"ref": ref})
    assert status == 200 and out["results"][0]["outcome"] == "rescheduled", out
    await wait_until(lambda: broker.stats.timers_fired == 1, timeout=5)
    assert [m.body.decode() for m in await pull_all(peer, "ConT")] == [uniq]
    # the broker's refusal comes back as 422 with its remark
    status, out = await otto.call("POST", "/api/pending/recall", {"ref": ref})
    assert status == 422 and "no pending" in out["error"] and out["brokerCode"] == 604
    status, out = await vera.call("GET", "/api/pending?kind=weird")
    assert status == 422 and "kind" in out["error"]
    actions = [kw for e, kw in log.lines if e == "console.action"]
    assert [(a["user"], a["route"], a["code"]) for a in actions] == [
        ("otto", "/api/pending/run-now", 0),
        ("otto", "/api/pending/recall", 604),
    ]
    # the other routes reach their broker calls
    status, tx = await vera.call("GET", "/api/transactions")
    assert status == 200 and tx["pending"] == 0
    status, out = await vera.call("GET", "/api/dlq?consumerGroup=NoSuch")
    assert status == 422 and out["brokerCode"] == ResponseCode.TOPIC_NOT_EXIST
    status, out = await otto.call(
        "POST", "/api/transactions/end", {"commitLogOffset": 0, "action": "commit"}
    )
    assert status == 422 and "no pending half" in out["error"]
    status, brokers = await vera.call("GET", "/api/brokers")
    assert status == 200 and brokers == [{"name": "broker", "address": broker.address}]
    assert (await vera.call("GET", "/api/pending?broker=other"))[0] == 404
    assert (await vera.call("GET", "/api/nope"))[0] == 404
    assert (await vera.call("POST", "/api/pending"))[0] == 405
    await peer.close()


async def test_hostile_http_is_refused_and_the_server_goes_on(console) -> None:
    _broker, port, _log = console
    h = Http(port)
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"a" * 20_000 + b"\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(80)) + b"\r\n", 431),
        (b"POST /api/login HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"POST /api/login HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /api/login HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", 413),
        (b"POST /api/login HTTP/1.1\r\n\r\n", 411),
        (b"POST /api/login HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 400),
        (b"POST /api/login HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 415),
        (
            b"POST /api/login HTTP/1.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 3\r\n\r\n[1]",
            400,
        ),
        (b"GET http://other/ HTTP/1.1\r\n\r\n", 400),
        (b"GET /?" + b"&".join(b"a%d=1" % i for i in range(50)) + b" HTTP/1.1\r\n\r\n", 400),
    ]
    for data, want in cases:
        status, headers, _ = await h.raw(data, eof=True)
        assert status == want, (data[:60], status)
        assert headers.get("x-content-type-options") == "nosniff"
    # a slow client is dropped, others are served meanwhile
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /api/me HTTP/1.1\r\n")
    assert (await h.login("vera", "view-pw"))[0] == 200
    w.close()


@pytest.mark.slow
async def test_kairosmq_console_process(broker, tmp_path: Path) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "kairosmq.server",
            "console",
            "--broker",
            broker.address,
            "--users",
            str(users_file(tmp_path)),
            "--port",
            str(port),
        ],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        h = Http(port)
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _ = await h.login("otto", "op-pw")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.returncode is None, "not up"
                await asyncio.sleep(0.1)
        assert status == 200
        peer = await RawPeer.connect(broker.address)
        uniq, _ = await timer(peer, "ConP", 60_000)
        status, out = await h.call("POST", "/api/pending/recall", {"msgId": uniq})
        assert status == 200 and out["results"][0]["outcome"] == "recalled"
        await peer.close()
        os.kill(proc.pid, signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert proc.stderr is not None
        err = await proc.stderr.read()
        lines = [orjson.loads(x) for x in err.splitlines() if x.startswith(b"{")]
        events = [x["event"] for x in lines]
        assert events[:2] == ["console.started", "console.login"] and "console.action" in events
        assert all(isinstance(x["ts"], int) and x["v"] == 2 for x in lines)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # with a users file that cannot be created (no such directory) it does not start
    bad = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "kairosmq.server",
            "console",
            "--users",
            str(tmp_path / "none" / "users.yml"),
        ],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, why = await asyncio.wait_for(bad.communicate(), 30)
    assert bad.returncode == 2 and b"none" in why


async def test_https_with_a_secure_cookie(broker, tmp_path: Path) -> None:
    reason = openssl_missing()
    if reason:
        pytest.skip(reason)
    certs = make_certs(tmp_path / "certs")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs.server_cert, certs.server_key)
    pool = RemotingPool()
    api = ConsoleApi(
        Users.load(users_file(tmp_path)),
        Brokers(pool, namesrv=None, broker=broker.address),
        log=Log(),
        secure_cookie=True,
    )
    server = HttpServer(api.handle, "127.0.0.1", 0, ssl_context=tls)
    await server.start()
    try:
        h = Http(server.port, ssl=certs.client_context())
        assert (await h.login("vera", "view-pw"))[0] == 200
        assert "Secure" in h.last_headers["set-cookie"]
        assert (await h.call("GET", "/api/pending"))[0] == 200
        with pytest.raises((OSError, asyncio.IncompleteReadError, TimeoutError)):
            await Http(server.port).raw(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", eof=True)
    finally:
        await server.stop()
        pool.close()


async def test_an_unreachable_name_server_answers_502(tmp_path: Path) -> None:
    pool = RemotingPool()
    api = ConsoleApi(
        Users.load(users_file(tmp_path)),
        Brokers(pool, namesrv=f"127.0.0.1:{free_port()}", broker=None, timeout=2),
        log=Log(),
    )
    server = HttpServer(api.handle, "127.0.0.1", 0)
    await server.start()
    try:
        h = Http(server.port)
        await h.login("vera", "view-pw")
        status, out = await h.call("GET", "/api/pending")
        assert status == 502 and "cannot be reached" in out["error"], out
    finally:
        await server.stop()
        pool.close()


async def _first_start(
    broker_address: str, users: Path, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, int, Http]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "kairosmq.server", "console", "--broker", broker_address]
        + ["--users", str(users), "--port", str(port)],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    h = Http(port)
    deadline = time.monotonic() + 20
    while True:
        try:
            await h.call("GET", "/api/me")
            return proc, port, h
        except OSError:
            assert time.monotonic() < deadline and proc.returncode is None, "not up"
            await asyncio.sleep(0.1)


async def _stop(proc: asyncio.subprocess.Process) -> bytes:
    os.kill(proc.pid, signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 20) == 0
    assert proc.stderr is not None
    return await proc.stderr.read()


@pytest.mark.slow
async def test_first_start_creates_the_users_file_with_an_admin(broker, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAIROSMQ_CONSOLE_ADMIN_PASSWORD"}
    # no password given: one is generated and printed once, outside the JSON log
    users = tmp_path / "gen" / "users.yml"
    users.parent.mkdir()
    proc, _port, h = await _first_start(broker.address, users, env)
    try:
        assert users.stat().st_mode & 0o777 == 0o600
        err_head = await asyncio.wait_for(proc.stderr.readline(), 10)  # type: ignore[union-attr]
        m = re.search(rb"user admin, password (\S+) ", err_head)
        assert m, err_head
        password = m.group(1).decode()
        assert len(password) >= 20
        assert (await h.login("admin", "wrong"))[0] == 401
        status, out = await h.login("admin", password)
        assert status == 200 and out["role"] == "admin"
        status, _ = await h.call("POST", "/api/topics/create", {"topic": "FirstT"})
        assert status == 200 and broker.topics.get("FirstT") is not None
    finally:
        rest = await _stop(proc)
    lines = [orjson.loads(x) for x in rest.splitlines() if x.startswith(b"{")]
    assert [x["event"] for x in lines][:2] == ["console.started", "console.login_failed"]
    assert password.encode() not in rest  # printed once, never in the JSON log
    assert password not in users.read_text()  # only its hash
    # a second start keeps the file (and its password)
    proc, _port, h = await _first_start(broker.address, users, env)
    try:
        assert (await h.login("admin", password))[0] == 200
    finally:
        again = await _stop(proc)
    assert password.encode() not in again and b"created" not in again
    # the password from the environment: nothing printed
    users2 = tmp_path / "env-users.yml"
    proc, _port, h = await _first_start(
        broker.address, users2, {**env, "KAIROSMQ_CONSOLE_ADMIN_PASSWORD": "From-Env-pw1"}
    )
    try:
        assert (await h.login("admin", "From-Env-pw1"))[0] == 200
        assert users2.stat().st_mode & 0o777 == 0o600
    finally:
        out = await _stop(proc)
    assert b"From-Env-pw1" not in out and b"KAIROSMQ_CONSOLE_ADMIN_PASSWORD" in out
