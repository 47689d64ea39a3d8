"""Promotion (`kairosmq admin --broker <slave> promote`): after the master is killed -9,
its slave becomes an ASYNC_MASTER on the state it derived: it takes sends, and the timer
messages still pending fire there, exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.ha.pair import log_bytes, master, pull_all, slave, status, wait_for
from tests.helpers import send
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


def admin(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kairosmq.server", "admin", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_promoted_slave_takes_sends_and_fires_pending_timers_once(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:
        plain, timers = [], []
        for i in range(40):
            r = await send(mp, "Fail", f"p{i}".encode(), {"UNIQ_KEY": f"P{i:03d}"}, queue_id=0)
            assert r.code == ResponseCode.SUCCESS
            plain.append(f"P{i:03d}")
        for i in range(20):
            key = f"T{i:03d}"
            r = await send(mp, "Fail", b"t", {"UNIQ_KEY": key, "TIMER_DELAY_MS": "6000"})
            assert r.code == ResponseCode.SUCCESS
            timers.append(key)

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="replicated before the master dies")
        held = len(log_bytes(tmp_path / "s"))
        m.kill()
    finally:
        await mp.close()
    # a master refuses it; the slave takes it
    done = await asyncio.to_thread(admin, "--broker", s.address, "promote", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["brokerRole"] == "ASYNC_MASTER" and answer["epoch"] == 1
    assert answer["startOffset"] == held and answer["cutBytes"] == 0
    again = await asyncio.to_thread(admin, "--broker", s.address, "promote", "--json")
    assert again.returncode != 0 and "already a master" in again.stdout + again.stderr
    sp = await RawPeer.connect(s.address)
    try:
        r = await send(sp, "Fail", b"after", {"UNIQ_KEY": "AFTER"}, queue_id=0)
        assert r.code == ResponseCode.SUCCESS, r.remark
        want = sorted([*plain, *timers, "AFTER"])

        async def all_once() -> bool:
            return sorted(x.msg_id for x in await pull_all(sp, "Fail", 1)) == want

        await wait_for(all_once, timeout=30, what="the pending timers fired on the new master")
        await asyncio.sleep(1.0)
        assert sorted(x.msg_id for x in await pull_all(sp, "Fail", 1)) == want, "once each"
        st = await status(sp)
        assert st["ha"]["role"] == "ASYNC_MASTER" and st["ha"]["epoch"] == {
            "epoch": 1,
            "startOffset": held,
        }
        assert {"transaction-check", "timer"} <= {x["name"] for x in st["services"]}
        epochs = orjson.loads((tmp_path / "s" / "store" / "epoch.json").read_bytes())
        assert epochs == [{"epoch": 1, "startOffset": held}]
        r = await sp.call(RequestCode.KAIROS_PROMOTE, {})
        assert r.code == ResponseCode.SYSTEM_ERROR
    finally:
        await sp.close()
        s.terminate()


async def test_old_master_rejoins_as_slave_cutting_its_unreplicated_tail(tmp_path) -> None:
    m = master(tmp_path / "m")  # becomes the old master
    await m.start()
    s = master(tmp_path / "s")  # ports paired (its HA port at + 1 once promoted) ...
    s.extra = (
        *s.extra,
        "--broker-role",
        "SLAVE",
        "--ha-master-address",
        f"127.0.0.1:{m.ha_port}",
        "--slave-sync-interval",
        "0.5",
    )  # ... a slave now
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:
        both = [f"B{i:03d}" for i in range(30)]
        for key in both:
            assert (await send(mp, "Re", key.encode(), {"UNIQ_KEY": key}, queue_id=0)).code == 0

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="replicated")
        s.kill()  # the slave misses what follows: the old master's unreplicated tail
        for i in range(10):
            r = await send(mp, "Re", b"lost", {"UNIQ_KEY": f"L{i:03d}"}, queue_id=0)
            assert r.code == 0
        m.kill()
    finally:
        await mp.close()
    await s.start()
    done = await asyncio.to_thread(admin, "--broker", s.address, "promote", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    start = json.loads(done.stdout)["startOffset"]
    sp = await RawPeer.connect(s.address)
    try:
        newer = [f"N{i:03d}" for i in range(15)]
        for key in newer:
            r = await send(sp, "Re", b"new-" + key.encode(), {"UNIQ_KEY": key}, queue_id=0)
            assert r.code == 0, r.remark
        assert len(log_bytes(tmp_path / "m")) > start, "the old master holds a diverging tail"
        # the old master comes back as a slave of the new one
        m.extra = (
            *m.extra,
            "--broker-role",
            "SLAVE",
            "--ha-master-address",
            f"127.0.0.1:{s.port + 1}",
            "--slave-sync-interval",
            "0.5",
        )
        await m.start()

        async def rejoined() -> bool:
            return log_bytes(tmp_path / "m") == log_bytes(tmp_path / "s")

        await wait_for(rejoined, timeout=30, what="the old master holds the new master's log")
        (ev,) = m.events("ha.rejoined")
        assert (ev["epoch"], ev["start_offset"]) == (1, start) and ev["cut_bytes"] > 0
        mp = await RawPeer.connect(m.address)
        try:

            async def served() -> bool:
                got = sorted(x.msg_id for x in await pull_all(mp, "Re", 1))
                return got == sorted([*both, *newer])

            await wait_for(served, what="the rejoined slave serves the new master's messages only")
        finally:
            await mp.close()
        epochs = orjson.loads((tmp_path / "m" / "store" / "epoch.json").read_bytes())
        assert epochs == [{"epoch": 1, "startOffset": start}]
    finally:
        await sp.close()
        s.terminate()
        m.terminate()


async def test_promote_refused_on_a_slave_still_replicating_from_a_live_master(tmp_path) -> None:
    # the bad-input case "a promote on a slave that is behind": while its master is alive
    # the slave is behind by whatever the master holds next; promoting it would make two
    # masters. Refused with the reason; the slave goes on replicating; once the master is
    # gone the same request promotes it
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:
        for i in range(200):
            r = await send(mp, "Behind", b"z" * 2000, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark
        refused = await asyncio.to_thread(admin, "--broker", s.address, "promote", "--json")
        text = refused.stdout + refused.stderr
        assert refused.returncode != 0
        assert "still connected to its master" in text and "two masters" in text, text
        for i in range(50):
            r = await send(mp, "Behind", b"after" * 100, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the refused slave keeps replicating")
        sp = await RawPeer.connect(s.address)
        try:
            st = await status(sp)
            assert st["ha"]["role"] == "SLAVE" and st["ha"]["connected"] is True
            assert (
                not (tmp_path / "s" / "store" / "epoch.json").exists()
                or orjson.loads((tmp_path / "s" / "store" / "epoch.json").read_bytes()) == []
            )
            m.kill()
            r = await sp.call(RequestCode.KAIROS_PROMOTE, {}, timeout=20)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert orjson.loads(r.body)["startOffset"] == len(log_bytes(tmp_path / "m"))
        finally:
            await sp.close()
    finally:
        await mp.close()
        s.terminate()
        if m.proc is not None and m.proc.poll() is None:
            m.terminate()
