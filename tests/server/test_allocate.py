"""FileAllocator (server/store/allocate.py): next files made off the loop, zero-filled,
renamed into place only when ready; a full disk raises and leaves no file behind; the
consume queue and the key index use it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import ResponseCode
from kairosmq.server.store.allocate import SUFFIX, FileAllocator, create_zeroed
from kairosmq.server.store.consumequeue import UNIT_SIZE, ConsumeQueue

from tests.helpers import send, small_tmpfs, wait_until
from tests.wire import RawPeer


def _content(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    os.close(fd)
    return data


def test_a_prepared_file_is_renamed_into_place_zero_filled(tmp_path: Path) -> None:
    a = FileAllocator()
    target = tmp_path / "00000000000000000100"
    a.prepare(target, 1 << 20)
    a.prepare(target, 1 << 20)  # asked twice: one job
    tmp = tmp_path / (target.name + SUFFIX)
    futures.wait([a._jobs[target]], timeout=10)
    assert tmp.exists() and not target.exists()  # never under the store's name while made
    assert _content(a.take(target, 1 << 20)) == bytes(1 << 20)
    assert a.prepared == 1 and not tmp.exists() and target.stat().st_size == 1 << 20
    other = tmp_path / "other"
    assert _content(a.take(other, 4096)) == bytes(4096)  # not prepared: made now
    a.prepare(tmp_path / "unused", 4096)
    a.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, "other"])


def test_take_while_the_job_runs_makes_the_file_itself(tmp_path: Path) -> None:
    a = FileAllocator()
    target = tmp_path / "big"
    a.prepare(target, 256 << 20)  # still being written when taken
    fd = a.take(target, 1 << 20)
    assert os.fstat(fd).st_size >= 1 << 20
    os.close(fd)
    a.close()  # the job's file is removed when the job ends
    time.sleep(0.05)
    assert not (tmp_path / ("big" + SUFFIX)).exists()


def test_create_zeroed_tops_up_a_short_file(tmp_path: Path) -> None:
    p = tmp_path / "short"
    p.write_bytes(b"abc")
    assert _content(create_zeroed(p, 8)) == b"abc" + bytes(5)


def test_consume_queue_files_come_from_the_allocator(tmp_path: Path) -> None:
    a = FileAllocator()
    cq = ConsumeQueue(tmp_path, "T", 0, 8, a)
    for i in range(5):  # past half of the first file: the second is prepared
        cq.ensure_room()
        cq.append(1000 + i, 100, 0)
    second = cq.directory / f"{8 * UNIT_SIZE:020d}"
    futures.wait([a._jobs[second]], timeout=10)
    for i in range(5, 9):
        cq.ensure_room()
        cq.append(1000 + i, 100, 0)
    assert a.prepared == 1 and second.exists() and cq.max_offset == 9
    assert [u[0] for u in cq.units(0, 8)] == [1000 + i for i in range(8)]
    (cq.directory / ("x" + SUFFIX)).write_bytes(b"leftover of a crash")
    cq.close()
    a.close()
    again = ConsumeQueue(tmp_path, "T", 0, 8, None)
    again.load()
    assert again.max_offset == 9 and not list(cq.directory.glob("*" + SUFFIX))
    again.close()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own, so the disk really fills (needs root and mount)."""
    with small_tmpfs(tmp_path, "4m") as mnt:
        yield mnt


def test_a_full_disk_raises_and_leaves_no_file(small_fs: Path) -> None:
    with pytest.raises(OSError):
        create_zeroed(small_fs / "f", 8 << 20)
    assert list(small_fs.iterdir()) == []
    a = FileAllocator()
    a.prepare(small_fs / "g", 8 << 20)  # fails in the background
    futures.wait([a._jobs[small_fs / "g"]], timeout=10)
    with pytest.raises(OSError):
        a.take(small_fs / "g", 8 << 20)  # falls back to making it now: fails the same way
    a.close()
    assert list(small_fs.iterdir()) == []


async def test_a_timer_target_queue_file_is_made_before_the_fire(broker_factory: Any) -> None:
    """A timer's real topic/queue gets its first consume-queue file off the loop while the
    timer waits; the fire takes it ready-made (no file created on the loop)."""
    broker = await broker_factory()
    peer = await RawPeer.connect(broker.address)
    due = int(time.time() * 1000) + 400
    r = await send(peer, "FreshTimerTopic", b"t", props={"TIMER_DELIVER_MS": str(due)})
    assert r.code == ResponseCode.SUCCESS
    cq = broker.store.find_queue("FreshTimerTopic", 0)
    assert cq is not None and not cq.files  # nothing landed yet, the file is being made
    before = broker.store.allocator.prepared
    await wait_until(lambda: broker.stats.timers_fired >= 1, 5.0, what="the fire")
    assert broker.store.allocator.prepared == before + 1 and cq.files and cq.max_offset == 1
    await peer.close()
