"""SYNC_MASTER with real processes: a send is acked once the slave holds it
(FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE otherwise), and pulls serve only what the
slave acked (the confirm offset), so nothing a consumer saw can be lost by a failover."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.ha.pair import log_bytes, master, pull_all, slave, status, wait_for
from tests.helpers import pull, send, send_ext
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


async def test_sync_master_without_slave_answers_slave_not_available_and_serves_nothing(
    tmp_path,
) -> None:
    m = master(tmp_path / "m", role="SYNC_MASTER")
    await m.start()
    mp = await RawPeer.connect(m.address)
    s = None
    try:
        started = time.monotonic()
        r = await send(mp, "Sync", b"alone", {"UNIQ_KEY": "ALONE"})
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, r.remark
        assert time.monotonic() - started < 2, "answered at once, not after a timeout"
        assert "no slave is attached" in r.remark
        assert r.ext_fields["msgId"], "the send's header: the message is stored"
        assert await pull_all(mp, "Sync", 1) == [], "not served before a slave holds it"
        # a slave attaches: it takes the stored message, and then the master serves it
        s = slave(tmp_path / "s", m)
        await s.start()

        async def served() -> bool:
            return [x.msg_id for x in await pull_all(mp, "Sync", 1)] == ["ALONE"]

        await wait_for(served, what="served once the slave acked it")
        r = await send(mp, "Sync", b"paired", {"UNIQ_KEY": "PAIRED"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        # a delayed message fires on the SYNC_MASTER and is served once the slave holds it
        r = await send(mp, "Sync", b"later", {"UNIQ_KEY": "LATER", "DELAY": "3"})
        assert r.code == ResponseCode.SUCCESS, r.remark

        async def fired() -> bool:
            got = [x.msg_id for x in await pull_all(mp, "Sync", 1)]
            return got == ["ALONE", "PAIRED", "LATER"]

        await wait_for(fired, what="the delayed message fired and was served")

        async def on_slave() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(on_slave, what="the fired copy is on the slave")
        st = await status(mp)
        assert st["ha"]["slaveAckOffset"] >= len(log_bytes(tmp_path / "m"))
    finally:
        await mp.close()
        if s is not None:
            s.terminate()
        m.terminate()


async def test_sync_master_times_out_a_stalled_slave_then_a_held_pull_wakes_on_its_ack(
    tmp_path,
) -> None:
    m = master(tmp_path / "m", role="SYNC_MASTER")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    try:

        async def attached() -> bool:
            r = await send(mp, "Sync", b"first", {"UNIQ_KEY": "FIRST"})
            return r.code == ResponseCode.SUCCESS

        await wait_for(attached, what="the slave attached")
        first = await pull(mp, "Sync", queue_id=0, offset=0, max_n=32)
        assert first.code == ResponseCode.SUCCESS
        nxt = int(first.ext_fields["nextBeginOffset"])
        os.kill(s.proc.pid, signal.SIGSTOP)  # attached, but acks nothing
        try:
            started = time.monotonic()
            r = await mp.call(  # answered after syncFlushTimeout (5 s): wait longer
                RequestCode.SEND_MESSAGE_V2,
                send_ext("Sync", {"UNIQ_KEY": "STALLED"}),
                b"stalled",
                timeout=15,
            )
            took = time.monotonic() - started
            assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, r.remark
            assert 4.5 <= took < 12, took  # syncFlushTimeout: 5 s
            # a send-back appends too: the same wait, the same answer
            m0 = decode_records(first.body)[0]
            r = await mp.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": m0.commit_log_offset,
                    "group": "G",
                    "delayLevel": 0,
                    "originMsgId": m0.msg_id,
                    "originTopic": m0.topic,
                },
                timeout=15,
            )
            assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, r.remark
            # a long-polling pull is held: the record is stored but not acked
            held = asyncio.ensure_future(
                pull(
                    mp,
                    "Sync",
                    queue_id=0,
                    offset=nxt,
                    sys_flag=0x2,  # PULL_SUSPEND
                    suspend_ms=15000,
                    timeout=20,
                )
            )
            await asyncio.sleep(1.0)
            assert not held.done(), "nothing the slave has not acked is served"
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        woke = time.monotonic()
        r = await held
        assert r.code == ResponseCode.SUCCESS
        assert [x.msg_id for x in decode_records(r.body)] == ["STALLED"]
        waited = time.monotonic() - woke
        assert waited < 10, f"woken by the ack, not by its 15 s suspend timeout ({waited:.1f} s)"
    finally:
        await mp.close()
        s.terminate()
        m.terminate()
