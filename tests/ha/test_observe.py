"""Seeing replication (real processes: a kairosmq name server, master and slave):
``kairosmq admin status`` shows the role, the HA address and the lag in bytes and ms;
the master's Prometheus endpoint exports ``kairosmq_ha_slave_lag_bytes`` and the acked
offset (scraped over HTTP); Apache RocketMQ 4.9.8's own ``mqadmin clusterList`` lists
both brokerIds with their addresses (skipped, with the reason, without the Apache build)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kairosmq.protocol.codes import ResponseCode

from tests.ha.pair import log_bytes, status, wait_for
from tests.ha.test_promote import admin
from tests.helpers import send
from tests.integration.procs import BrokerProcess, free_port
from tests.namesrv.procs import NamesrvProcess
from tests.registration.conftest import APACHE_MISSING, mqadmin
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


@dataclass
class Pair:
    ns: NamesrvProcess
    m: BrokerProcess
    s: BrokerProcess
    metrics_port: int
    ha_port: int
    data: Path


@pytest.fixture
async def pair(tmp_path) -> AsyncIterator[Pair]:  # type: ignore[no-untyped-def]
    ns = NamesrvProcess(tmp_path / "ns")
    await ns.start()
    common = ("--namesrv", ns.address, "--register-period", "1", "--broker-name", "bk")
    mport, haport = free_port(), free_port()
    m = BrokerProcess(
        tmp_path / "m",
        *common,
        "--broker-ip",
        "127.0.0.1",
        "--ha-listen-port",
        str(haport),
        "--metrics-port",
        str(mport),
    )
    s = BrokerProcess(
        tmp_path / "s",
        *common,
        "--broker-ip",
        "127.0.0.1",
        "--broker-role",
        "SLAVE",
        "--slave-sync-interval",
        "0.5",
    )
    await m.start()
    await s.start()
    try:
        yield Pair(ns, m, s, mport, haport, tmp_path)
    finally:
        for bp in (s, m):
            if bp.proc is not None and bp.proc.poll() is None:
                os.kill(bp.proc.pid, signal.SIGCONT)
                bp.terminate()
        ns.proc.terminate()
        ns.proc.wait(20)


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kairosmq_ha_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def _status_text(pair: Pair, broker: str) -> str:
    p = await asyncio.to_thread(admin, "--namesrv", pair.ns.address, "--broker", broker, "status")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


async def test_status_and_metrics_show_role_address_and_lag(pair: Pair) -> None:
    mp = await RawPeer.connect(pair.m.address)
    try:
        for i in range(50):
            r = await send(mp, "Seen", b"x" * 500, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark

        async def caught_up() -> bool:
            return log_bytes(pair.data / "s") == log_bytes(pair.data / "m") and (
                (await status(mp))["ha"]["lagBytes"] == 0
            )

        await wait_for(caught_up, timeout=30, what="the slave caught up")
        text = await _status_text(pair, pair.m.address)
        assert "ha.role: ASYNC_MASTER" in text, text
        assert f"ha.address: 127.0.0.1:{pair.ha_port}" in text, text
        assert "ha.lag: 0 bytes, 0 ms" in text, text
        text = await _status_text(pair, pair.s.address)
        assert "ha.role: SLAVE" in text, text
        assert f"ha.master: 127.0.0.1:{pair.ha_port} (connected)" in text, text
        got = await asyncio.to_thread(_scrape, pair.metrics_port)
        assert got["kairosmq_ha_slaves"] == 1
        assert got["kairosmq_ha_slave_lag_bytes"] == 0
        assert got["kairosmq_ha_slave_lag_seconds"] == 0
        assert got["kairosmq_ha_slave_ack_offset_bytes"] == len(log_bytes(pair.data / "m"))
        # a stopped slave: the lag grows in bytes and in time
        assert pair.s.proc is not None
        os.kill(pair.s.proc.pid, signal.SIGSTOP)
        for i in range(20):
            r = await send(mp, "Seen", b"y" * 500, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark
        first = await asyncio.to_thread(_scrape, pair.metrics_port)
        await asyncio.sleep(1.0)
        later = await asyncio.to_thread(_scrape, pair.metrics_port)
        behind = len(log_bytes(pair.data / "m")) - int(first["kairosmq_ha_slave_ack_offset_bytes"])
        assert behind > 20 * 500
        assert first["kairosmq_ha_slave_lag_bytes"] == behind
        assert later["kairosmq_ha_slave_lag_seconds"] >= 1.0
        text = await _status_text(pair, pair.m.address)
        lag = re.search(r"ha\.lag: (\d+) bytes, (\d+) ms", text)
        assert lag is not None and int(lag[1]) == behind and int(lag[2]) >= 1000, text
        os.kill(pair.s.proc.pid, signal.SIGCONT)

        async def back() -> bool:
            got = await asyncio.to_thread(_scrape, pair.metrics_port)
            return got["kairosmq_ha_slave_lag_bytes"] == 0 == got["kairosmq_ha_slave_lag_seconds"]

        await wait_for(back, timeout=30, what="the lag back to 0 once the slave runs again")
    finally:
        await mp.close()


@pytest.mark.skipif(APACHE_MISSING is not None, reason=f"mqadmin: {APACHE_MISSING}")
async def test_mqadmin_cluster_list_shows_both_broker_ids(pair: Pair) -> None:
    async def listed() -> bool:
        text = await asyncio.to_thread(
            mqadmin, pair.data / "adm", "clusterList", "-n", pair.ns.address
        )
        rows = {
            (cols[1], cols[2], cols[3])
            for line in text.splitlines()
            if len(cols := line.split()) > 3 and cols[1] == "bk"
        }
        return rows == {("bk", "0", pair.m.address), ("bk", "1", pair.s.address)}

    await wait_for(listed, timeout=60, what="clusterList lists brokerId 0 and 1 of bk")
