"""Master/slave replication with real processes: a kairosmq ASYNC_MASTER and a kairosmq
SLAVE (server/ha/, docs/replication.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from kairosmq.protocol.codes import ResponseCode

from tests.ha.pair import log_bytes, master, pull_all, slave, status, wait_for
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
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    sp = await RawPeer.connect(s.address)
    try:
        keys = await _send_many(mp, "Rep", 300)

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the slave's log equals the master's")

        async def served() -> bool:
            return sorted(x.msg_id for x in await pull_all(sp, "Rep")) == keys

        await wait_for(served, what="the slave serves every message (topic synced)")
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
        await mp.close()
        await sp.close()
        s.terminate()
        m.terminate()


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

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the slave holds every segment of the master")
        assert [p.name for p in sorted((tmp_path / "s" / "store" / "commitlog").iterdir())] == [
            p.name for p in segs
        ]
        sp = await RawPeer.connect(s.address)
        try:

            async def served() -> bool:
                return sorted(x.msg_id for x in await pull_all(sp, "Old")) == keys

            await wait_for(served, what="the slave serves the messages stored before it")
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
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:
        keys = await _send_many(mp, "K9", 200)

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="replicated before the kill")
        held = len(log_bytes(tmp_path / "s"))
        s.kill()
        keys += await _send_many(mp, "K9", 200, start=200)  # while the slave is down
        await s.start()
        await wait_for(same, what="replicated after the restart")

        async def resumed() -> bool:
            slaves = (await status(mp))["ha"]["slaves"]
            return bool(slaves) and slaves[0]["startOffset"] > 0

        await wait_for(resumed, what="the restarted slave reported its offset")
        slaves = (await status(mp))["ha"]["slaves"]
        assert slaves[0]["startOffset"] == held, "it resumed where its own log ended"
        sp = await RawPeer.connect(s.address)
        try:

            async def served() -> bool:
                return sorted(x.msg_id for x in await pull_all(sp, "K9")) == keys

            await wait_for(served, what="all 400 served by the restarted slave")
        finally:
            await sp.close()
    finally:
        await mp.close()
        s.terminate()
        m.terminate()


async def test_delayed_and_timer_messages_fire_once_on_the_master_only(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
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

        async def delivered(peer: RawPeer) -> bool:
            return sorted(x.msg_id for x in await pull_all(peer, "Due")) == keys

        await wait_for(lambda: delivered(mp), what="every due message delivered on the master")
        await wait_for(lambda: delivered(sp), what="the fired copies replicated to the slave")

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the slave's log is the master's")
        await asyncio.sleep(1.5)  # any firing by the slave itself would show by now
        assert log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")
        got = [x.msg_id for x in await pull_all(sp, "Due")]
        assert sorted(got) == keys, "each message once on the slave"
        got = [x.msg_id for x in await pull_all(mp, "Due")]
        assert sorted(got) == keys, "each message once on the master"
    finally:
        await mp.close()
        await sp.close()
        s.terminate()
        m.terminate()


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

            async def first_caught_up() -> bool:
                return log_bytes(tmp_path / "s1") == log_bytes(tmp_path / "m")

            await wait_for(first_caught_up, what="the running slave replicates")
        finally:
            os.kill(s2.proc.pid, signal.SIGCONT)

        async def second_caught_up() -> bool:
            return log_bytes(tmp_path / "s2") == log_bytes(tmp_path / "m")

        await wait_for(second_caught_up, what="the resumed slave catches up")
        assert len((await status(mp))["ha"]["slaves"]) == 2
    finally:
        await mp.close()
        s1.terminate()
        s2.terminate()
        m.terminate()


async def test_slave_kill9_under_load_cuts_its_torn_tail_and_resumes(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:
        sender = asyncio.ensure_future(_send_many(mp, "Load", 3000, size=60))
        while len(log_bytes(tmp_path / "s")) < 200_000:  # mid-stream, records in flight
            await asyncio.sleep(0.01)
        s.kill()
        held = len(log_bytes(tmp_path / "s"))
        keys = await sender
        await s.start()

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, timeout=40, what="the restarted slave caught up")
        slaves = (await status(mp))["ha"]["slaves"]
        assert 0 < slaves[0]["startOffset"] <= held, (slaves, held)
        sp = await RawPeer.connect(s.address)
        try:

            async def served() -> bool:
                return sorted(x.msg_id for x in await pull_all(sp, "Load")) == keys

            await wait_for(served, what="every message served once by the slave")
        finally:
            await sp.close()
    finally:
        await mp.close()
        s.terminate()
        m.terminate()
