"""Store durability against a real broker (issue 10): hostile offsets and host bits, a
failing commit-log write, a full disk.

The kill -9 tests run ``kairosmq broker`` as a process (tests/integration/procs.py). The
write-failure test injects EIO at the file layer (the commit log's ``os.pwrite``) in an
in-process broker, because no real file system fails a write inside an allocated
segment on demand; the disk-full test runs an in-process broker on a real 32 MiB tmpfs
mounted for it (skipped, and saying so, where mounting is not allowed).
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import decode_records, encode_record
from kairosmq.protocol.schema import MESSAGE_MAGIC_CODE
from kairosmq.server.store import commitlog as commitlog_mod

from tests.helpers import pull_all, send, small_tmpfs
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

HOST = (b"\x7f\x00\x00\x01", 1)


def _phy(r: Any) -> int:
    return decode_offset_msg_id(r.ext_fields["msgId"].split(",")[0])[2]


@pytest.mark.slow
async def test_v6_sysflag_send_then_kill9_keeps_every_acked_message(tmp_path: Path) -> None:
    """The issue's first row: sysFlag 0x10/0x20 from an IPv4 client, then ordinary sends,
    kill -9, restart: every acked message is served, exactly once."""
    bp = BrokerProcess(tmp_path / "d")
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    acked: list[str] = []
    for i, flag in enumerate([0x10, 0x20, 0x30, 0x10 | 0x1]):
        r = await send(
            peer, "HostBits", b"odd-%d" % i, {"UNIQ_KEY": f"ODD{i}"}, f=flag, queue_id=i % 4
        )
        if r.code == ResponseCode.SUCCESS:  # the ingress may also refuse the bits
            acked.append(f"ODD{i}")
    for i in range(60):
        r = await send(peer, "HostBits", b"after-%d" % i, {"UNIQ_KEY": f"K{i:03d}"}, queue_id=i % 4)
        assert r.code == ResponseCode.SUCCESS
        acked.append(f"K{i:03d}")
    bp.kill()
    await peer.close()
    await bp.start()
    try:
        peer = await RawPeer.connect(bp.address)
        got = await pull_all(peer, "HostBits")
        ids = [m.msg_id for m in got]
        assert sorted(ids) == sorted(acked) and len(ids) == len(set(ids))
        assert all(m.sys_flag & 0x30 == 0 for m in got)  # the stored bits tell the truth
        await peer.close()
    finally:
        bp.kill()


@pytest.mark.slow
async def test_hostile_offsets_are_refused_and_the_broker_restarts(tmp_path: Path) -> None:
    """CONSUMER_SEND_MSG_BACK and VIEW_MESSAGE_BY_ID at offsets inside a body (a fake,
    CRC-valid record; a 4-byte size claiming 2 GiB), past the log, and negative: each
    answers SYSTEM_ERROR with a remark, nothing is re-put, and after kill -9 the broker
    starts and serves every acked message."""
    bp = BrokerProcess(tmp_path / "d")
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    fake = encode_record(
        topic=b"Victim",
        body=b"stolen",
        properties=b"",
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=HOST,
        store_timestamp=2,
        store_host=HOST,
        reconsume_times=0,
    )
    huge = struct.pack(">iI", 0x7FFFFFF0, MESSAGE_MAGIC_CODE)
    body = b"prefix--" + fake + huge + b"tail"
    r = await send(peer, "Carrier", body, {"UNIQ_KEY": "CARRIER"})
    assert r.code == ResponseCode.SUCCESS
    carrier = _phy(r)
    fake_at = carrier + 88 + 8  # IPv4 record head is 88 bytes, then "prefix--"
    for offset in (fake_at, fake_at + len(fake), carrier + 1, 1 << 40, -1):
        back = await peer.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": offset,
                "group": "G",
                "delayLevel": 0,
                "originTopic": "Carrier",
                "maxReconsumeTimes": 16,
            },
        )
        assert back.code != ResponseCode.SUCCESS, offset
        assert back.remark, offset
        view = await peer.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        assert view.code != ResponseCode.SUCCESS and view.remark, offset
    # the real record still answers both
    view = await peer.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": carrier})
    assert view.code == ResponseCode.SUCCESS
    assert decode_records(view.body)[0].msg_id == "CARRIER"
    assert await pull_all(peer, "%RETRY%G", 1) == []  # nothing was re-put
    bp.kill()
    await peer.close()
    await bp.start()
    try:
        peer = await RawPeer.connect(bp.address)
        assert [m.msg_id for m in await pull_all(peer, "Carrier")] == ["CARRIER"]
        await peer.close()
    finally:
        bp.kill()


async def test_failed_write_answers_errors_and_the_broker_recovers(
    broker_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO on the commit-log write (injected at the file layer): the sends whose records
    it dropped get SYSTEM_ERROR, not SUCCESS; pulls are answered meanwhile; sends succeed
    again after ``disk_check_interval``; every acked message is served once."""
    broker = await broker_factory(disk_check_interval=0.2)
    peer = await RawPeer.connect(broker.address)
    acked: list[str] = []
    for i in range(5):
        r = await send(peer, "Faulty", b"ok", {"UNIQ_KEY": f"A{i}"})
        assert r.code == ResponseCode.SUCCESS
        acked.append(f"A{i}")
    real = os.pwrite
    failing = {"on": True}

    def pwrite(fd: int, data: Any, pos: int) -> int:
        if failing["on"] and len(data) > 0:
            failing["on"] = False
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, data, pos)

    monkeypatch.setattr(commitlog_mod.os, "pwrite", pwrite)
    answers = await asyncio.gather(
        *(send(peer, "Faulty", b"x", {"UNIQ_KEY": f"B{i}"}) for i in range(10))
    )
    failed = [a for a in answers if a.code != ResponseCode.SUCCESS]
    assert failed, "the injected write failure answered nothing with an error"
    assert all(
        a.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE) and a.remark
        for a in failed
    )
    assert any("write failed" in (a.remark or "") for a in failed)
    acked += [f"B{i}" for i, a in enumerate(answers) if a.code == ResponseCode.SUCCESS]
    # reads go on while writes are held
    assert sorted(m.msg_id for m in await pull_all(peer, "Faulty")) == sorted(acked)
    deadline = time.monotonic() + 10
    while True:
        r = await send(peer, "Faulty", b"again", {"UNIQ_KEY": "C0"})
        if r.code == ResponseCode.SUCCESS:
            acked.append("C0")
            break
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and r.remark
        assert time.monotonic() < deadline, "writes never resumed"
        await asyncio.sleep(0.05)
    monkeypatch.undo()
    got = sorted(m.msg_id for m in await pull_all(peer, "Faulty"))
    assert got == sorted(acked)
    await peer.close()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own, so the disk really fills (needs root and mount)."""
    with small_tmpfs(tmp_path, "32m") as mnt:
        yield mnt


async def test_full_disk_refuses_sends_with_code_14_while_pulls_continue(
    broker_factory: Any, small_fs: Path
) -> None:
    broker = await broker_factory(
        data_dir=small_fs / "b",
        disk_check_interval=0.05,
        commitlog_segment_size=1 << 20,
        max_message_size=65536,
    )
    peer = await RawPeer.connect(broker.address)
    assert (await send(peer, "Disk", b"before", {"UNIQ_KEY": "BEFORE"})).code == 0
    st = os.statvfs(small_fs)
    filler = small_fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize - (st.f_blocks * st.f_frsize) // 20)
    os.close(fd)
    await asyncio.sleep(0.1)
    r = await send(peer, "Disk", b"refused")
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE == 14
    assert "disk is full" in (r.remark or "") and "> 90%" in (r.remark or "")
    assert [m.msg_id for m in await pull_all(peer, "Disk")] == ["BEFORE"]
    filler.unlink()
    await asyncio.sleep(0.1)
    assert (await send(peer, "Disk", b"after", {"UNIQ_KEY": "AFTER"})).code == 0
    assert sorted(m.msg_id for m in await pull_all(peer, "Disk")) == ["AFTER", "BEFORE"]
    await peer.close()
