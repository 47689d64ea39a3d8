"""A big batch is stored over several loop turns and stays "acked means written".

A batch of more than ``BATCH_SLICE`` messages is stored ``BATCH_SLICE`` per loop turn
(server/handlers/send.py), so the outbox writes the commit log between its parts. If one
of those writes fails (EIO injected at the file layer) and the part it carried is rolled
back, the batch must not be answered SUCCESS, even when later parts were stored after the
write guard let sends through again: the answer is checked against the ack token of every
part (``transport.AckedAnswer``). Other connections are answered between the parts.
"""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Any

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.handlers.send import BATCH_SLICE
from kairosmq.server.store import commitlog as commitlog_mod

from tests.helpers import pull_all, send, send_ext
from tests.wire import RawPeer

N = BATCH_SLICE * 12


def _batch(tag: str) -> bytes:
    return encode_batch(
        [
            BatchItem(
                f"{tag}-{i}".encode().ljust(1024, b"."),
                0,
                encode_properties({"UNIQ_KEY": f"{tag}{i:05d}"}),
            )
            for i in range(N)
        ]
    )


async def _keep_sending(peer: RawPeer, stop: asyncio.Event, acked: list[str]) -> None:
    i = 0
    while not stop.is_set():
        r = await send(peer, "Bystander", b"small", {"UNIQ_KEY": f"S{i}"})
        if r.code == ResponseCode.SUCCESS:
            acked.append(f"S{i}")
        i += 1


async def test_batch_parts_rolled_back_are_never_acked(
    broker_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the write guard holds sends for only 1 ms after a failed write: the batch's later
    # parts are stored again, so only the per-part ack tokens can tell
    broker = await broker_factory(disk_check_interval=0.001, commitlog_segment_size=64 << 20)
    peer, other = await RawPeer.connect(broker.address), await RawPeer.connect(broker.address)
    real = os.pwrite
    fired: list[int] = []

    def pwrite(fd: int, data: Any, pos: int) -> int:
        if not fired and len(data) > 32 * 1024:  # a part of the batch (64 x 1 KiB)
            fired.append(len(data))
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, data, pos)

    monkeypatch.setattr(commitlog_mod.os, "pwrite", pwrite)
    stop, acked = asyncio.Event(), []
    bystander = asyncio.create_task(_keep_sending(other, stop, acked))
    r = await peer.call(
        RequestCode.SEND_BATCH_MESSAGE, send_ext("Parts", batch="true"), _batch("P"), timeout=60
    )
    stop.set()
    await bystander
    monkeypatch.undo()
    assert fired, "no write of a batch part failed: the test did not exercise the rollback"
    assert r.code != ResponseCode.SUCCESS and r.remark, "a batch with a rolled-back part was acked"
    assert acked, "the other connection was not answered while the batch was stored"
    served = {m.msg_id for m in await pull_all(peer, "Bystander", 4)}
    assert set(acked) <= served
    # the broker goes on: the same batch again is stored whole and acked
    r = await peer.call(
        RequestCode.SEND_BATCH_MESSAGE, send_ext("Again", batch="true"), _batch("Q"), timeout=60
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    got = await pull_all(peer, "Again", 1)
    assert [m.msg_id for m in got] == [f"Q{i:05d}" for i in range(N)]
    await peer.close()
    await other.close()
