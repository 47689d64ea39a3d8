"""Crash safety against a real broker process: SIGKILL, damage the tail, restart."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.message import decode_record, decode_records

from tests.helpers import pull, send
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


def _walk(path: Path) -> tuple[list, int]:
    """The intact records of one (preallocated) segment and where they end, reading only
    the written bytes: one pread per record, stopping at zeros, a BLANK marker or a bad
    CRC, never the whole file."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + 8 <= size:
            total = int.from_bytes(os.pread(fd, 4, pos), "big")
            if total <= 8 or pos + total > size:
                break
            try:
                m = decode_record(os.pread(fd, total, pos), 0, check_crc=True)
            except Exception:  # noqa: BLE001 - a BLANK marker or the end of data
                break
            out.append(m)
            pos += m.store_size
    finally:
        os.close(fd)
    return out, pos


def _data_end(path: Path) -> int:
    return _walk(path)[1]


def _records(data_dir: Path) -> list:
    """Every record in the commit log, read straight from the files."""
    seg_dir = data_dir / "store" / "commitlog"
    return [m for seg in sorted(seg_dir.iterdir()) for m in _walk(seg)[0]]


async def _drain(
    peer: RawPeer,
    topic: str,
    queues: int,
    idle: float = 1.0,
    expect: set[str] | None = None,
    timeout: float = 30.0,
) -> list:
    """Pull every queue from 0 until ``expect`` (msg ids) is all seen, if given, and then
    until nothing new arrives for ``idle`` seconds (so extra copies would be seen too)."""
    got = []
    offsets = dict.fromkeys(range(queues), 0)
    last = time.monotonic()
    deadline = last + timeout
    while time.monotonic() - last < idle or (
        expect is not None and not expect <= {m.msg_id for m in got} and time.monotonic() < deadline
    ):
        progressed = False
        for q in range(queues):
            r = await pull(peer, topic, queue_id=q, offset=offsets[q], max_n=256)
            if r.code == ResponseCode.SUCCESS:
                msgs = decode_records(r.body)
                got += msgs
                offsets[q] = int(r.ext_fields["nextBeginOffset"])
                progressed = True
        if progressed:
            last = time.monotonic()
        else:
            await asyncio.sleep(0.05)
    return got


async def test_kill9_then_cut_tail_recovers_every_intact_acked_message(tmp_path) -> None:
    bp = BrokerProcess(tmp_path / "d", "--segment-size-mb", "1", "--max-message-size", "65536")
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    acked = []
    for i in range(3000):
        r = await send(peer, "Crash", f"body-{i}".encode() * 30, {"UNIQ_KEY": f"K{i:05d}"})
        assert r.code == ResponseCode.SUCCESS
        acked.append(f"K{i:05d}")
    bp.kill()
    await peer.close()
    segs = sorted((tmp_path / "d" / "store" / "commitlog").iterdir())
    assert len(segs) >= 2, "the test should span a segment rollover"
    last = segs[-1]
    end = _data_end(last)
    os.truncate(last, end - 20)  # tear the last record: cut 20 bytes off its tail
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    got = await _drain(peer, "Crash", 4, idle=0.5)
    ids = [m.msg_id for m in got]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == acked[:-1], "all but the torn last record are served"
    for m in got:
        assert m.body == f"body-{int(m.msg_id[1:])}".encode() * 30
    r = await send(peer, "Crash", b"after", {"UNIQ_KEY": "AFTER"})
    assert r.code == ResponseCode.SUCCESS
    await peer.close()
    assert bp.terminate() == 0
    assert [m.msg_id for m in _records(tmp_path / "d") if m.topic == "Crash"][-1] == "AFTER"


async def test_repeated_kill9_under_delayed_load_delivers_each_message_exactly_once(
    tmp_path,
) -> None:
    # count-based windows (reproducible from the seed, unlike wall-clock ones) on small
    # segments, so the rounds also cross commit-log segment rollovers
    rng = random.Random(20261122)
    bp = BrokerProcess(tmp_path / "d", "--segment-size-mb", "0.25", "--max-message-size", "65536")
    acked: set[str] = set()
    attempted: set[str] = set()
    n = 0

    async def one(peer: RawPeer) -> None:
        nonlocal n
        key = f"D{n:06d}"
        n += 1
        attempted.add(key)
        r = await send(
            peer,
            "Delay",
            key.encode(),
            {"DELAY": str(rng.randint(1, 6)), "UNIQ_KEY": key},
            queue_id=n % 4,
            timeout=5,
        )
        if r.code == ResponseCode.SUCCESS:
            acked.add(key)

    for _round in range(4):
        await bp.start()
        peer = await RawPeer.connect(bp.address)
        for _ in range(rng.randint(150, 400)):
            await one(peer)
        # then a burst left in flight: the kill lands mid-stream, with deliveries due
        # (the first sends of the round) and pending (the last ones)
        burst = [asyncio.ensure_future(one(peer)) for _ in range(rng.randint(1, 32))]
        await asyncio.sleep(0)
        bp.kill()
        await asyncio.gather(*burst, return_exceptions=True)
        await peer.close()
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    got = await _drain(peer, "Delay", 4, expect=acked)
    await peer.close()
    assert bp.terminate() == 0
    counts = Counter(m.msg_id for m in got)
    assert len(acked) > 200, f"the scenario should ack many sends, acked {len(acked)}"
    assert acked <= set(counts), f"lost: {sorted(acked - set(counts))[:5]}"
    assert set(counts) <= attempted
    assert max(counts.values()) == 1, f"duplicated: {[k for k, c in counts.items() if c > 1][:5]}"
    # the same, read from the commit log itself: one re-put record per scheduled message
    segs = sorted((tmp_path / "d" / "store" / "commitlog").iterdir())
    assert len(segs) >= 2, "the rounds should cross a segment rollover"
    reputs = Counter(m.msg_id for m in _records(tmp_path / "d") if m.topic == "Delay")
    assert max(reputs.values()) == 1
    assert set(reputs) == set(counts)
