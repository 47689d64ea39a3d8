"""Helpers for replication tests: a kairosmq master and slave as real processes
(server/ha/, docs/replication.md)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.message import decode_records

from tests.helpers import pull
from tests.integration.procs import BrokerProcess, free_port
from tests.wire import RawPeer


def free_pair() -> int:
    """A port p with p + 1 free too (a master's broker and HA ports, RocketMQ's pairing)."""
    for _ in range(200):
        p = free_port()
        if p < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
            return p
    raise RuntimeError("no two consecutive free ports")


class LoggedBroker(BrokerProcess):
    """A broker process whose JSON log lines (info and up, no per-message events) go to
    ``<data>.log``: ``events(name)`` reads them."""

    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        vip_channel: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        super().__init__(
            data_dir,
            "--log-level",
            "info",
            "--no-message-logs",
            *extra,
            stdout=self.log_path,
            vip_channel=vip_channel,
            env=env,
        )

    def events(self, name: str) -> list[dict]:
        out = []
        if self.log_path.exists():
            for line in self.log_path.read_bytes().splitlines():
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if rec.get("event") == name:
                    out.append(rec)
        return out


def master(
    data: Path, *extra: str, role: str = "ASYNC_MASTER", port: int | None = None
) -> BrokerProcess:
    """A master on ``port`` (default: a free one with port + 1 free) with its HA port at
    port + 1; with a ``port`` given, its VIP channel (port - 2) too."""
    vip = port is not None
    port = port or free_pair()
    bp = LoggedBroker(data, "--broker-role", role, *extra, vip_channel=vip)
    bp.port = port
    bp.ha_port = port + 1  # type: ignore[attr-defined]
    return bp


def slave(
    data: Path, m: BrokerProcess, *extra: str, env: dict[str, str] | None = None
) -> BrokerProcess:
    return LoggedBroker(
        data,
        "--broker-role",
        "SLAVE",
        "--ha-master-address",
        f"127.0.0.1:{m.ha_port}",  # type: ignore[attr-defined]
        "--slave-sync-interval",
        "0.5",
        *extra,
        env=env,
    )


def log_bytes(data: Path) -> bytes:
    """The commit log's written bytes (segments concatenated, trailing zeros cut)."""
    seg_dir = data / "store" / "commitlog"
    out = b"".join(p.read_bytes() for p in sorted(seg_dir.iterdir()))
    return out.rstrip(b"\x00")


async def wait_for(pred, timeout: float = 20.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out: {what}")


async def wait_replicated(
    slave_dir: Path, master_dir: Path, what: str, timeout: float = 20.0
) -> None:
    """Wait until the slave's commit log is the master's, byte for byte."""

    async def same() -> bool:
        return log_bytes(slave_dir) == log_bytes(master_dir)

    await wait_for(same, timeout, what)


async def wait_served(
    peer: RawPeer, topic: str, keys: Sequence[str], what: str, queues: int = 4
) -> None:
    """Wait until ``peer`` serves exactly ``keys`` (each once) from ``topic``'s queues."""
    want = sorted(keys)

    async def served() -> bool:
        return sorted(x.msg_id for x in await pull_all(peer, topic, queues)) == want

    await wait_for(served, what=what)


@contextlib.asynccontextmanager
async def running_pair(
    root: Path, master_args: Sequence[str] = (), slave_args: Sequence[str] = ()
) -> AsyncIterator[tuple[BrokerProcess, BrokerProcess, RawPeer]]:
    """A started ASYNC_MASTER in ``root/m``, its started slave in ``root/s`` and a peer
    connected to the master; on exit the peer is closed and both are terminated."""
    m = master(root / "m", *master_args)
    await m.start()
    s = slave(root / "s", m, *slave_args)
    try:
        await s.start()
        mp = await RawPeer.connect(m.address)
        try:
            yield m, s, mp
        finally:
            await mp.close()
    finally:
        s.terminate()
        m.terminate()


async def status(peer: RawPeer) -> dict:
    import orjson
    from kairosmq.protocol.codes import RequestCode

    r = await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return orjson.loads(r.body)


async def pull_all(peer: RawPeer, topic: str, queues: int = 4) -> list:
    """Every message of the topic's queues, pulled as a stock consumer does (the
    subscription in the request: an Apache broker serves a group it has no heartbeat of)."""
    got = []
    for q in range(queues):
        off = 0
        while True:
            r = await pull(
                peer, topic, queue_id=q, offset=off, max_n=256, sys_flag=0x4, subscription="*"
            )
            if r.code != ResponseCode.SUCCESS:
                break
            msgs = decode_records(r.body)
            got += msgs
            off = int(r.ext_fields["nextBeginOffset"])
    return got
