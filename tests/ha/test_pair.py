"""Master/slave replication with real processes: a kairosmq ASYNC_MASTER and a kairosmq
SLAVE (server/ha/, docs/replication.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from kairosmq.protocol.codes import ResponseCode

from tests.ha.pair import (
    log_bytes,
    master,
    pull_all,
    running_pair,
    slave,
    status,
    wait_for,
    wait_replicated,
    wait_served,
)
from tests.helpers import send
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


async def _send_many(
    peer: RawPeer, topic: str, n: int, start: int = 0, size: int = 20
) -> list[str]:
    keys = []
    for i in range(start, start + n):
        key = f"K{i:05d}"
        r = await send(peer, topic, f"body-{i}".encode() * size, {"UNIQ_KEY": key}, queue_id=i % 4)
        assert r.code == ResponseCode.SUCCESS, r.remark
        keys.append(key)
    return keys


async def test_async_master_slave_replicates_bytes_serves_pulls_refuses_sends(tmp_path) -> None:
    async with running_pair(tmp_path) as (_m, s, mp):
        sp = await RawPeer.connect(s.address)
        try:
            keys = await _send_many(mp, "Rep", 300)
            await wait_replicated(tmp_path / "s", tmp_path / "m", "the slave's log is the master's")
            await wait_served(sp, "Rep", keys, "the slave serves every message (topic synced)")
            r = await send(sp, "Rep", b"to the slave")
            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "the broker role is slave" in (r.remark or "")
            st = await status(mp)
            assert st["ha"]["role"] == "ASYNC_MASTER"
            assert len(st["ha"]["slaves"]) == 1 and st["ha"]["slaves"][0]["kairosmq"] is True
            assert st["ha"]["slaveAckOffset"] == len(log_bytes(tmp_path / "m"))
            sst = await status(sp)
            assert sst["ha"]["role"] == "SLAVE" and sst["ha"]["connected"] is True
            assert sst["ha"]["masterSegmentSize"] == 16 * 1024 * 1024
            # the slave fires nothing and runs no transaction check
            names = {svc["name"] for svc in sst["services"]}
            assert {"ha-client", "slave-sync"} <= names
            assert not {"transaction-check", "timer"} & names
            assert not any(n.startswith("schedule-level") for n in names)
        finally:
            await sp.close()


async def test_new_slave_gets_the_whole_retained_log_across_segments(tmp_path) -> None:
    # 1 MiB segments and ~2.5 MiB of messages: the master has 3 segments before the
    # slave exists; an Apache slave asking for 0 would get the last one only
    m = master(tmp_path / "m", "--segment-size-mb", "1", "--max-message-size", "65536")
    await m.start()
    mp = await RawPeer.connect(m.address)
    s = None
    try:
        keys = await _send_many(mp, "Old", 2500, size=100)
        segs = sorted((tmp_path / "m" / "store" / "commitlog").iterdir())
        assert len(segs) >= 3
        s = slave(tmp_path / "s", m, "--segment-size-mb", "1", "--max-message-size", "65536")
        await s.start()
        await wait_replicated(tmp_path / "s", tmp_path / "m", "the slave holds every segment")
        assert [p.name for p in sorted((tmp_path / "s" / "store" / "commitlog").iterdir())] == [
            p.name for p in segs
        ]
        sp = await RawPeer.connect(s.address)
        try:
            await wait_served(sp, "Old", keys, "the slave serves the messages stored before it")
        finally:
            await sp.close()
        st = await status(mp)
        assert st["ha"]["slaves"][0]["startOffset"] == 0
    finally:
        await mp.close()
        if s is not None:
            s.terminate()
        m.terminate()


async def test_slave_kill9_restarts_from_its_own_max_offset(tmp_path) -> None:
    async with running_pair(tmp_path) as (m, s, mp):
        keys = await _send_many(mp, "K9", 200)
        await wait_replicated(tmp_path / "s", tmp_path / "m", "replicated before the kill")
        held = len(log_bytes(tmp_path / "s"))
        s.kill()
        keys += await _send_many(mp, "K9", 200, start=200)  # while the slave is down
        await s.start()
        await wait_replicated(tmp_path / "s", tmp_path / "m", "replicated after the restart")

        async def resumed() -> bool:
            slaves = (await status(mp))["ha"]["slaves"]
            return bool(slaves) and slaves[0]["startOffset"] > 0

        await wait_for(resumed, what="the restarted slave reported its offset")
        slaves = (await status(mp))["ha"]["slaves"]
        assert slaves[0]["startOffset"] == held, "it resumed where its own log ended"
        sp = await RawPeer.connect(s.address)
        try:
            await wait_served(sp, "K9", keys, "all 400 served by the restarted slave")
        finally:
            await sp.close()


async def test_delayed_and_timer_messages_fire_once_on_the_master_only(tmp_path) -> None:
    async with running_pair(tmp_path) as (_m, s, mp):
        sp = await RawPeer.connect(s.address)
        try:
            keys = []
            for i in range(60):
                key = f"D{i:03d}"
                props = {"UNIQ_KEY": key}
                if i % 2:
                    props["DELAY"] = str(1 + i % 5)
                else:
                    props["TIMER_DELAY_MS"] = str(100 + 10 * i)
                r = await send(mp, "Due", key.encode(), props, queue_id=0)
                assert r.code == ResponseCode.SUCCESS, r.remark
                keys.append(key)
            await wait_served(mp, "Due", keys, "every due message delivered on the master")
            await wait_served(sp, "Due", keys, "the fired copies replicated to the slave")
            await wait_replicated(tmp_path / "s", tmp_path / "m", "the slave's log is the master's")
            await asyncio.sleep(1.5)  # any firing by the slave itself would show by now
            assert log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")
            got = [x.msg_id for x in await pull_all(sp, "Due")]
            assert sorted(got) == keys, "each message once on the slave"
            got = [x.msg_id for x in await pull_all(mp, "Due")]
            assert sorted(got) == keys, "each message once on the master"
        finally:
            await sp.close()


async def test_second_slave_and_a_stopped_slave_leave_the_master_serving(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s1 = slave(tmp_path / "s1", m)
    s2 = slave(tmp_path / "s2", m, "--broker-id", "2")
    await s1.start()
    await s2.start()
    mp = await RawPeer.connect(m.address)
    try:
        os.kill(s2.proc.pid, signal.SIGSTOP)  # a slave that stops reading
        try:
            started = time.monotonic()
            await _send_many(mp, "Two", 300)
            assert time.monotonic() - started < 10, "sends to an ASYNC_MASTER never wait"
            await wait_replicated(tmp_path / "s1", tmp_path / "m", "the running slave replicates")
        finally:
            os.kill(s2.proc.pid, signal.SIGCONT)
        await wait_replicated(tmp_path / "s2", tmp_path / "m", "the resumed slave catches up")
        assert len((await status(mp))["ha"]["slaves"]) == 2
    finally:
        await mp.close()
        s1.terminate()
        s2.terminate()
        m.terminate()


async def test_slave_kill9_under_load_cuts_its_torn_tail_and_resumes(tmp_path) -> None:
    async with running_pair(tmp_path) as (_m, s, mp):
        sender = asyncio.ensure_future(_send_many(mp, "Load", 3000, size=60))
        while len(log_bytes(tmp_path / "s")) < 200_000:  # mid-stream, records in flight
            await asyncio.sleep(0.01)
        s.kill()
        held = len(log_bytes(tmp_path / "s"))
        keys = await sender
        await s.start()
        await wait_replicated(
            tmp_path / "s", tmp_path / "m", "the restarted slave caught up", timeout=40
        )
        slaves = (await status(mp))["ha"]["slaves"]
        assert 0 < slaves[0]["startOffset"] <= held, (slaves, held)
        sp = await RawPeer.connect(s.address)
        try:
            await wait_served(sp, "Load", keys, "every message served once by the slave")
        finally:
            await sp.close()
