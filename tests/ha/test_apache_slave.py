"""A kairosmq master with a REAL Apache RocketMQ 4.9.8 slave (brokerRole=SLAVE,
brokerId=1, haMasterAddress): the Java HAClient copies the kairosmq commit log byte for
byte up to the offset it acked. Skipped when the Apache build or java is absent."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from kairosmq.protocol.codes import ResponseCode

from tests.ha.pair import LoggedBroker, log_bytes, master, pull_all, status, wait_for
from tests.helpers import (
    APACHE_BROKER_MISSING,
    APACHE_JAVA_OPT_EXT,
    START_BROKER,
    free_broker_port,
    send,
)
from tests.namesrv.procs import NamesrvProcess
from tests.wire import RawPeer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        APACHE_BROKER_MISSING is not None, reason=f"Apache broker: {APACHE_BROKER_MISSING}"
    ),
]
SEGMENT = 16 * 1024 * 1024  # both ends (the kairosmq test broker's --segment-size-mb 16)


def apache_log(store: Path) -> bytes:
    seg_dir = store / "store" / "commitlog"
    if not seg_dir.exists():
        return b""
    return b"".join(p.read_bytes() for p in sorted(seg_dir.iterdir())).rstrip(b"\x00")


async def test_apache_slave_copies_a_kairosmq_master_byte_for_byte(tmp_path) -> None:
    ns = NamesrvProcess(tmp_path / "ns")  # the slave learns masterAddr there (its sync)
    await ns.start()
    # an Apache slave reads GET_ALL_TOPIC_CONFIG on the VIP channel (port - 2)
    m = master(
        tmp_path / "m", "--namesrv", ns.address, "--register-period", "1", port=free_broker_port()
    )
    await m.start()
    mp = await RawPeer.connect(m.address)
    port = free_broker_port()
    store = tmp_path / "apache"
    env = {
        **os.environ,
        "STORE_DIR": str(store),
        "BROKER_PORT": str(port),
        "NAMESRV": ns.address,
        "BROKER_ROLE": "SLAVE",
        "BROKER_EXTRA_CONF": (
            f"brokerId=1\nhaMasterAddress=127.0.0.1:{m.ha_port}\n"  # type: ignore[attr-defined]
            f"mappedFileSizeCommitLog={SEGMENT}"
        ),
        "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
    }
    java = await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        keys = []
        for i in range(200):
            r = await send(
                mp, "ToJava", f"java-{i}".encode() * 10, {"UNIQ_KEY": f"J{i:04d}"}, queue_id=i % 4
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            keys.append(f"J{i:04d}")
        end = len(log_bytes(tmp_path / "m"))

        async def acked() -> bool:
            slaves = (await status(mp))["ha"]["slaves"]
            return bool(slaves) and slaves[0]["ackOffset"] >= end

        await wait_for(acked, timeout=120, what="the Apache slave acked the whole log")
        st = (await status(mp))["ha"]["slaves"][0]
        assert st["kairosmq"] is False and st["startOffset"] == 0
        ack = st["ackOffset"]
        assert apache_log(store)[:ack] == log_bytes(tmp_path / "m")[:ack]
        # more after it caught up: the stream goes on
        for i in range(200, 260):
            r = await send(mp, "ToJava", b"more" * 30, {"UNIQ_KEY": f"J{i:04d}"})
            assert r.code == ResponseCode.SUCCESS
        end = len(log_bytes(tmp_path / "m"))
        await wait_for(acked, timeout=60, what="the Apache slave acked the later messages")
        assert apache_log(store)[:end] == log_bytes(tmp_path / "m")
        # its SlaveSynchronize read our GET_ALL_TOPIC_CONFIG: it serves the topic
        sp = await RawPeer.connect(f"127.0.0.1:{port}")
        try:

            async def served() -> bool:
                got = [x.msg_id for x in await pull_all(sp, "ToJava")]
                return len(got) == 260

            await wait_for(served, timeout=60, what="the Apache slave serves the kairosmq messages")
        finally:
            await sp.close()
    finally:
        ns.proc.terminate()
        ns.proc.wait(20)
        await mp.close()
        if java.returncode is None:
            os.killpg(java.pid, signal.SIGKILL)
            await java.wait()
        m.terminate()


async def test_kairosmq_slave_of_an_apache_master(tmp_path) -> None:
    port = free_broker_port()
    store = tmp_path / "apache"
    env = {
        **os.environ,
        "STORE_DIR": str(store),
        "BROKER_PORT": str(port),
        "NAMESRV": "127.0.0.1:1",  # none: the pair needs no name server
        "BROKER_EXTRA_CONF": f"mappedFileSizeCommitLog={SEGMENT}",
        "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
    }
    java = await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    s = LoggedBroker(
        tmp_path / "s",
        "--broker-role",
        "SLAVE",
        "--ha-master-address",
        f"127.0.0.1:{port + 1}",
        "--slave-sync-interval",
        "0.5",
    )
    ap: RawPeer | None = None
    try:

        async def up() -> bool:
            nonlocal ap
            try:
                ap = await RawPeer.connect(f"127.0.0.1:{port}")
                return True
            except OSError:
                return False

        await wait_for(up, timeout=120, what="the Apache master listens")
        assert ap is not None
        keys = []
        for i in range(100):
            for _ in range(50):  # the first sends may race the broker's start
                r = await send(ap, "FromJava", b"j" * 300, {"UNIQ_KEY": f"A{i:04d}"}, queue_id=0)
                if r.code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.2)
            assert r.code == ResponseCode.SUCCESS, r.remark
            keys.append(f"A{i:04d}")
        await s.start()
        sp = await RawPeer.connect(s.address)
        try:

            async def same() -> bool:
                theirs = apache_log(store)
                return bool(theirs) and log_bytes(tmp_path / "s") == theirs

            await wait_for(same, timeout=60, what="the kairosmq slave holds the Apache log")

            async def served() -> bool:
                return sorted(x.msg_id for x in await pull_all(sp, "FromJava", 1)) == keys

            await wait_for(served, what="served from the kairosmq slave (topics synced)")
            st = await status(sp)
            assert st["ha"]["masterSegmentSize"] is None, "an Apache master: no segment header"
        finally:
            await sp.close()
    finally:
        if ap is not None:
            await ap.close()
        if java.returncode is None:
            os.killpg(java.pid, signal.SIGKILL)
            await java.wait()
        if s.proc is not None:
            s.terminate()
