from __future__ import annotations

import asyncio

from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.server.config import FlushMode

from tests.helpers import send
from tests.wire import RawPeer


async def test_sync_flush_acks_after_fsync_and_shares_fsyncs(broker_factory) -> None:
    b = await broker_factory(flush_mode=FlushMode.SYNC_FLUSH)
    peers = [await RawPeer.connect(b.address) for _ in range(4)]
    before = b.store.commitlog.fsyncs
    flushed_at_ack: list[tuple[int, int]] = []

    async def one(peer: RawPeer, i: int) -> None:
        r = await send(peer, "Durable", f"{i}".encode() * 100)
        assert r.code == ResponseCode.SUCCESS, r.remark
        # acked only once the log is fsynced past this record
        _ip, _port, phy = decode_offset_msg_id(r.ext_fields["msgId"])
        flushed_at_ack.append((b.store.commitlog.flushed_offset, phy))

    await asyncio.gather(*(one(peers[i % 4], i) for i in range(400)))
    fsyncs = b.store.commitlog.fsyncs - before
    assert len(flushed_at_ack) == 400
    # the whole record (not just its first byte) was fsynced before its ack
    for flushed, phy in flushed_at_ack:
        record = b.store.read_at(phy)
        assert record is not None
        assert flushed >= phy + len(record), (flushed, phy, len(record))
    assert 1 <= fsyncs < 400, f"{fsyncs} fsyncs for 400 concurrent sends: no group commit"
    assert b.store.commitlog.flushed_offset == b.store.commitlog.max_offset
    for p in peers:
        await p.close()


async def test_async_flush_acks_before_fsync_but_after_the_os_write(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await send(peer, "Fast", b"x")
    assert r.code == ResponseCode.SUCCESS
    # the record is in the OS (written), so a process crash cannot lose it
    assert broker.store.commitlog._pending == bytearray()
    await peer.close()
