"""Connection and table limits (issue 10) on real in-process brokers and raw sockets.

Each test starts a broker on port 0 with small limits and tiny timeouts and drives it
with ``tests.wire.RawPeer`` (or plain sockets for byte-level misbehaviour).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import urllib.request
from typing import Any

import pytest
from kairosmq.client import Message, Producer
from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueData,
    SubscriptionData,
    decode_consumer_list,
    decode_lock_response,
)
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import PULL_SUSPEND, RequestCode, ResponseCode
from kairosmq.protocol.commands import request
from kairosmq.protocol.message import decode_records
from kairosmq.server.cli import _broker_parser, build_config

from tests.helpers import pull, send
from tests.wire import RawPeer


async def _until(cond: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def _alive(peer: RawPeer) -> bool:
    """The connection answers a request (any code: the name server has no GET_MAX_OFFSET)."""
    try:
        await peer.call(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0}, timeout=3)
    except (ConnectionError, TimeoutError):
        return False
    return True


# ---------------------------------------------------------------- connections


async def test_max_connections_refuses_beyond_the_limit(broker_factory) -> None:
    broker = await broker_factory(max_connections=2)
    a = await RawPeer.connect(broker.address)
    b = await RawPeer.connect(broker.namesrv_address)  # every listener counts
    await _until(lambda: len(broker.server.connections) == 2, what="2 connections")
    c = await RawPeer.connect(broker.address)
    assert await c.closed(3.0), "the third connection must be closed at once"
    assert broker.server.refused == 1 and len(broker.server.connections) == 2
    assert await _alive(a) and await _alive(b)
    await a.close()
    await _until(lambda: len(broker.server.connections) == 1, what="a's close seen")
    d = await RawPeer.connect(broker.address)  # room again
    assert await _alive(d)
    for p in (b, c, d):
        await p.close()


@pytest.mark.slow  # idle timeouts in real time, about 1 s
async def test_idle_connection_is_closed_and_a_talking_one_is_not(broker_factory) -> None:
    broker = await broker_factory(idle_timeout=0.4)
    silent = await RawPeer.connect(broker.address)
    talker = await RawPeer.connect(broker.address)
    t0 = time.monotonic()
    for _ in range(12):  # 1.2 s of traffic every 0.1 s
        assert await _alive(talker)
        await asyncio.sleep(0.1)
    assert await silent.closed(3.0)
    assert time.monotonic() - t0 >= 0.4
    assert not talker._task.done() and await _alive(talker)
    assert broker.server.timed_out == 1
    await talker.close()
    await silent.close()


@pytest.mark.slow  # idle timeouts in real time, about 1 s
async def test_idle_close_happens_after_the_timeout_not_before(broker_factory) -> None:
    broker = await broker_factory(idle_timeout=0.6)
    t0 = time.monotonic()
    peer = await RawPeer.connect(broker.address)
    assert await peer.closed(5.0)
    elapsed = time.monotonic() - t0
    assert 0.6 <= elapsed < 3.0, elapsed
    await peer.close()


@pytest.mark.slow  # 2 s of idle periods
async def test_bundled_client_heartbeats_keep_its_connections_open(broker_factory) -> None:
    """The producer heartbeats (and polls routes) more often than idle_timeout: its
    connections survive idle periods several times longer than the timeout."""
    broker = await broker_factory(idle_timeout=0.5)
    async with Producer(
        "PG", broker.namesrv_address, heartbeat_broker_interval=0.1, poll_name_server_interval=0.1
    ) as p:
        await p.send(Message("KeepAlive", b"one"))
        before = {c.conn_id for c in broker.server.connections}
        await asyncio.sleep(2.0)
        await p.send(Message("KeepAlive", b"two"))
        assert {c.conn_id for c in broker.server.connections} == before
        assert broker.server.timed_out == 0


def test_default_idle_timeout_leaves_room_for_default_heartbeats() -> None:
    from kairosmq.client.options import ProducerOptions, PushConsumerOptions
    from kairosmq.server.config import BrokerConfig

    idle = BrokerConfig().idle_timeout
    for cls in (ProducerOptions, PushConsumerOptions):
        assert cls().heartbeat_broker_interval * 3 <= idle, cls


@pytest.mark.slow  # real timeouts, about 1.5 s
async def test_partial_frame_held_too_long_is_closed(broker_factory) -> None:
    """A peer that trickles bytes of one frame (so it is never idle) but never
    completes it is closed after partial_frame_timeout."""
    broker = await broker_factory(partial_frame_timeout=0.4, idle_timeout=60)
    frame = encode_command(request(RequestCode.HEART_BEAT, body=b"{" + b" " * 500 + b"}"))
    reader, writer = await asyncio.open_connection(*broker.address.rsplit(":", 1))
    t0 = time.monotonic()
    closed_at = None
    for i in range(40):  # one byte every 50 ms: 2 s, far below the frame's length
        try:
            writer.write(frame[i : i + 1])
            await writer.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.05)
        if reader.at_eof() or await _eof(reader):
            closed_at = time.monotonic()
            break
    assert closed_at is not None, "the connection holding a partial frame stayed open"
    assert closed_at - t0 >= 0.4
    assert broker.server.timed_out == 1
    writer.close()
    # a peer sending whole frames with a partial tail in between is not closed
    good = await RawPeer.connect(broker.address)
    for _ in range(10):
        good.send_raw(frame[:10])
        await asyncio.sleep(0.1)
        good.send_raw(frame[10:])
        await asyncio.sleep(0.0)
    assert await _alive(good)
    await good.close()


async def _eof(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(TimeoutError):
        data = await asyncio.wait_for(reader.read(1), 0.001)
        return data == b""
    return False


async def test_header_above_max_header_bytes_closes_the_connection(broker_factory) -> None:
    broker = await broker_factory(max_header_bytes=1024)
    bad = await RawPeer.connect(broker.address)
    fut = asyncio.ensure_future(
        bad.call(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0, "pad": "p" * 2000})
    )
    with pytest.raises(ConnectionError):
        await fut
    assert await bad.closed(3.0)
    ok = await RawPeer.connect(broker.address)  # a header under the cap is fine
    r = await ok.call(
        RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0, "pad": "p" * 500}
    )
    assert r.code == ResponseCode.SUCCESS
    await ok.close()
    await bad.close()


# ---------------------------------------------------------------- held pulls


async def test_held_pulls_are_limited_per_connection_and_in_total(broker_factory) -> None:
    broker = await broker_factory(max_held_pulls_per_connection=2, max_held_pulls=3)
    a = await RawPeer.connect(broker.address)
    b = await RawPeer.connect(broker.address)
    assert (await send(a, "Held", b"seed", queue_id=1)).code == 0  # creates the topic

    def held(peer: RawPeer, qid: int) -> asyncio.Future[Any]:
        return asyncio.ensure_future(
            pull(peer, "Held", queue_id=qid, sys_flag=PULL_SUSPEND, suspend_ms=5000, timeout=10)
        )

    a1, a2 = held(a, 0), held(a, 0)
    await _until(lambda: broker.pull_holds.held == 2, what="2 held")
    t0 = time.monotonic()
    r = await pull(a, "Held", queue_id=0, sys_flag=PULL_SUSPEND, suspend_ms=5000)
    assert r.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 < 2
    b1 = held(b, 0)
    await _until(lambda: broker.pull_holds.held == 3, what="3 held")
    t0 = time.monotonic()
    r = await pull(b, "Held", queue_id=0, sys_flag=PULL_SUSPEND, suspend_ms=5000)
    assert r.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 < 2  # total
    assert not (a1.done() or a2.done() or b1.done())
    assert broker.pull_holds.refused == 2
    assert (await send(b, "Held", b"wake", queue_id=0)).code == 0
    for f in (a1, a2, b1):
        assert (await f).code == ResponseCode.SUCCESS
    assert broker.pull_holds.held == 0
    assert all(c.held_pulls == 0 for c in broker.server.connections)
    # slots are free again
    again = held(a, 2)
    await _until(lambda: broker.pull_holds.held == 1, what="held again")
    await send(b, "Held", b"wake2", queue_id=2)
    assert (await again).code == ResponseCode.SUCCESS
    await a.close()
    await b.close()


# ---------------------------------------------------------------- client tables


def _heartbeat(client_id: str, group: str = "CG") -> bytes:
    sub = SubscriptionData.build("T", "*", 0)
    return HeartbeatData(client_id, [], [ConsumerData(group, [sub])]).to_json()


def _lock_body(client_id: str, qids: list[int], group: str = "CG") -> bytes:
    return LockBatchRequest(
        group, client_id, [MessageQueueData("T", "broker-a", q) for q in qids]
    ).to_json()


async def test_tables_cleaned_when_a_connection_drops(broker_factory) -> None:
    broker = await broker_factory()
    a = await RawPeer.connect(broker.address)
    b = await RawPeer.connect(broker.address)
    assert (await send(a, "T", b"creates the topic")).code == 0  # locks need real queues
    assert (await a.call(RequestCode.HEART_BEAT, body=_heartbeat("cid-a"))).code == 0
    assert (await b.call(RequestCode.HEART_BEAT, body=_heartbeat("cid-b"))).code == 0
    r = await a.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-a", [0, 1]))
    assert [m.queue_id for m in decode_lock_response(r.body)] == [0, 1]
    r = await b.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-b", [0, 1]))
    assert decode_lock_response(r.body) == []  # held by a
    while not b.requests.empty():  # notifications from the joins
        b.requests.get_nowait()
    await a.close()  # a drops its socket: no UNREGISTER_CLIENT, no UNLOCK_BATCH_MQ
    note = await asyncio.wait_for(b.requests.get(), 5)
    assert note.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert note.ext_fields["consumerGroup"] == "CG"
    r = await b.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
    assert decode_consumer_list(r.body) == ["cid-b"]
    r = await b.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-b", [0, 1]))
    assert [m.queue_id for m in decode_lock_response(r.body)] == [0, 1]  # released
    await b.close()
    await _until(lambda: not broker.clients.consumers, what="group removed")
    assert broker.clients.registrations == 0 and len(broker.locks) == 0


async def test_unregister_client_releases_the_consumers_locks(broker_factory) -> None:
    """UNREGISTER_CLIENT frees the leaving consumer's queue locks in that group at once
    (another member takes them without waiting for the 60 s lock expiry), and only there."""
    broker = await broker_factory()
    a = await RawPeer.connect(broker.address)
    assert (await send(a, "T", b"creates the topic")).code == 0
    for group in ("CG", "OTHER"):
        assert (await a.call(RequestCode.HEART_BEAT, body=_heartbeat("cid-a", group))).code == 0
        r = await a.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-a", [0, 1], group))
        assert [m.queue_id for m in decode_lock_response(r.body)] == [0, 1]
    r = await a.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "cid-a", "consumerGroup": "CG"})
    assert r.code == 0
    b = await RawPeer.connect(broker.address)
    r = await b.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-b", [0, 1]))
    assert [m.queue_id for m in decode_lock_response(r.body)] == [0, 1]  # freed in CG
    r = await b.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("cid-b", [0, 1], "OTHER"))
    assert decode_lock_response(r.body) == []  # still held by cid-a in OTHER
    await a.close()
    await b.close()


async def test_client_table_is_bounded_by_max_clients(broker_factory) -> None:
    broker = await broker_factory(max_clients=2)
    peer = await RawPeer.connect(broker.address)
    for cid in ("c1", "c2"):
        assert (await peer.call(RequestCode.HEART_BEAT, body=_heartbeat(cid))).code == 0
    r = await peer.call(RequestCode.HEART_BEAT, body=_heartbeat("c3"))
    assert r.code == ResponseCode.SYSTEM_BUSY and "max_clients" in (r.remark or "")
    assert (await peer.call(RequestCode.HEART_BEAT, body=_heartbeat("c1"))).code == 0  # known
    r = await peer.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
    assert decode_consumer_list(r.body) == ["c1", "c2"]
    await peer.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c2", "consumerGroup": "CG"})
    assert (await peer.call(RequestCode.HEART_BEAT, body=_heartbeat("c3"))).code == 0
    await peer.close()


# ---------------------------------------------------------------- born host, metrics


async def test_born_host_carries_the_peer_port(broker_factory) -> None:
    broker = await broker_factory()
    peer = await RawPeer.connect(broker.address)
    local_port = peer.writer.get_extra_info("sockname")[1]
    assert (await send(peer, "Born", b"x")).code == 0
    r = await pull(peer, "Born")
    assert r.code == ResponseCode.SUCCESS
    (m,) = decode_records(r.body)
    assert m.born_host == (b"\x7f\x00\x00\x01", local_port)
    assert local_port != 0
    await peer.close()


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def _connect_refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return True
    return False


async def test_metrics_bind_loopback_unless_metrics_host(broker_factory, tmp_path) -> None:
    b1 = await broker_factory(data_dir=tmp_path / "b1", host="0.0.0.0", metrics_port=0)
    host, port = b1.metrics_address.rsplit(":", 1)
    assert host == "127.0.0.1"  # not the broker's --host 0.0.0.0: no authentication there
    text = await asyncio.to_thread(_scrape, f"http://127.0.0.1:{port}/metrics")
    assert "kairosmq_up 1.0" in text and "kairosmq_service_failures" in text
    assert await asyncio.to_thread(_connect_refused, "127.0.0.2", int(port))
    b2 = await broker_factory(
        data_dir=tmp_path / "b2", host="127.0.0.1", metrics_port=0, metrics_host="127.0.0.2"
    )
    host, port = b2.metrics_address.rsplit(":", 1)
    assert host == "127.0.0.2"
    assert "kairosmq_up 1.0" in await asyncio.to_thread(_scrape, f"http://127.0.0.2:{port}/metrics")
    assert await asyncio.to_thread(_connect_refused, "127.0.0.1", int(port))
    assert b2.supervisor.services["metrics"].state == "running"


def test_cli_limit_options_reach_the_config_with_defaults_in_help(capsys) -> None:
    import argparse

    from kairosmq.server.config import BrokerConfig

    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command")
    _broker_parser(sub)
    cfg = build_config(ap.parse_args(["broker"]))
    d = BrokerConfig()
    names = (
        "max_connections",
        "idle_timeout",
        "partial_frame_timeout",
        "max_header_bytes",
        "max_held_pulls_per_connection",
        "max_held_pulls",
        "max_groups_per_heartbeat",
        "max_subscriptions_per_heartbeat",
        "partial_frame_budget",
        "max_clients",
        "disk_max_used_ratio",
        "disk_check_interval",
        "metrics_host",
    )
    assert {n: getattr(cfg, n) for n in names} == {n: getattr(d, n) for n in names}
    cfg = build_config(
        ap.parse_args(
            [
                "broker",
                "--max-connections",
                "7",
                "--idle-timeout",
                "9.5",
                "--max-header-bytes",
                "100",
                "--max-held-pulls",
                "3",
                "--max-clients",
                "5",
                "--disk-max-used-ratio",
                "0.5",
                "--metrics-host",
                "127.0.0.9",
                "--metrics-port",
                "0",
                "--partial-frame-budget",
                "2",
            ]
        )
    )
    assert (
        cfg.max_connections,
        cfg.idle_timeout,
        cfg.max_header_bytes,
        cfg.max_held_pulls,
        cfg.max_clients,
        cfg.disk_max_used_ratio,
        cfg.metrics_host,
        cfg.metrics_port,
        cfg.partial_frame_budget,
    ) == (7, 9.5, 100, 3, 5, 0.5, "127.0.0.9", 0, 2)
    with pytest.raises(SystemExit):
        ap.parse_args(["broker", "--help"])
    helptext = capsys.readouterr().out
    for opt, default in (
        ("--max-connections", "None"),
        ("--idle-timeout", "120.0"),
        ("--partial-frame-timeout", "30.0"),
        ("--max-header-bytes", "1048576"),
        ("--max-held-pulls-per-connection", "16384"),
        ("--max-held-pulls", "65536"),
        ("--max-clients", "262144"),
        ("--max-groups-per-heartbeat", "None"),
        ("--max-subscriptions-per-heartbeat", "None"),
        ("--partial-frame-budget", str(256 << 20)),
        ("--disk-max-used-ratio", "0.9"),
        ("--disk-check-interval", "1.0"),
    ):
        assert opt in helptext
        seg = helptext.rsplit(f"\n  {opt} ", 1)[1].split("\n  --", 1)[0]
        assert f"(default {default})" in " ".join(seg.split()), opt
    assert "--metrics-host" in helptext


@pytest.mark.slow  # a broker process
def test_broker_command_prints_the_metrics_url_it_bound(tmp_path) -> None:
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kairosmq.server.cli",
            "broker",
            "--port",
            "0",
            "--namesrv-port",
            "0",
            "--no-vip-channel",
            "--data-dir",
            str(tmp_path / "d"),
            "--no-log-file",
            "--log-format",
            "json",
            "--metrics-port",
            "0",
            "--metrics-host",
            "127.0.0.2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("kairosmq metrics on http://127.0.0.2:"), line
        url = line.split()[-1]
        assert "kairosmq_up 1.0" in _scrape(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


async def test_default_max_connections_follows_the_fd_limit(broker) -> None:
    # RocketMQ's only connection bound is the file-descriptor limit (its JVM raises the
    # soft limit to the hard one; the broker does too): the connections get what the
    # broker's other parts leave of it (server/fdbudget.py)
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    budget = broker.fd_budget
    assert broker.config.max_connections is None
    assert budget.fits and budget.limit == soft
    assert (
        broker.server.limits.max_connections
        == budget.connections
        == (soft - (budget.total - budget.connections))
    )
