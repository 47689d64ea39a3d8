"""Consume-queue files grow in zero-written steps and are mapped on use (issue 29):
store/allocate.py (steps), store/mapped.py (the bounded set of open mappings),
store/consumequeue.py and the store around them, on real files (a tmpfs of its own for
the full-disk cases)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import pytest
from kairosmq.server.store import MessageStore, PutStatus
from kairosmq.server.store.allocate import (
    GROWTH_MAX,
    GROWTH_MIN,
    FileAllocator,
    first_size,
    next_size,
)
from kairosmq.server.store.consumequeue import UNIT_SIZE, ConsumeQueue
from kairosmq.server.store.mapped import MappedFiles

from tests.helpers import small_tmpfs
from tests.server.store_fault_helpers import HOST, bodies_of, make_msg, open_store

SEEK_HOLE = getattr(os, "SEEK_HOLE", None)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _no_hole(path: Path | str) -> int:
    """The file's size, after checking every byte of it is allocated (no hole before its
    end, and at least as many blocks as bytes). The allocator's thread may be extending
    the file meanwhile: the first hole then lies at or past the size read first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if SEEK_HOLE is not None:
            assert os.lseek(fd, 0, SEEK_HOLE) >= st.st_size, f"{path} has a hole"
        assert st.st_blocks * 512 >= st.st_size, f"{path} is sparse"
        return st.st_size
    finally:
        os.close(fd)


def _unit(i: int) -> tuple[int, int, int]:
    return (1000 + 100 * i, 100, i)


def test_step_sizes() -> None:
    full = 300_000 * UNIT_SIZE
    sizes = [first_size(full)]
    while sizes[-1] < full:
        sizes.append(next_size(sizes[-1], full))
    assert sizes[0] == GROWTH_MIN == 4096 and sizes[-1] == full
    steps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert max(steps) == GROWTH_MAX and all(s > 0 for s in steps)
    assert len(sizes) < 20  # a full 6 MB file is mapped again fewer than 20 times
    assert first_size(160) == 160  # a small (test) file is made whole at once


def test_a_queue_file_grows_in_zeroed_steps_to_its_full_size(tmp_path: Path) -> None:
    """Every size the newest file goes through is written (no hole), the mapping never
    covers more than the file, the steps come from the allocator's thread ahead of need,
    and a full file is RocketMQ's size; a restart reads the same units back."""
    alloc = FileAllocator()
    maps = MappedFiles(4)
    upf = 2000  # 40,000-byte files: 4 KiB, 8, 16, 32, then 40,000
    cq = ConsumeQueue(tmp_path, "T", 0, upf, alloc, maps)
    sizes: set[int] = set()
    for i in range(upf + 10):
        cq.ensure_room()
        f = cq.files[-1]
        assert f.mm is not None and len(f.mm) <= _no_hole(f.path)
        assert len(f.mm) >= (i - f.base + 1) * UNIT_SIZE  # room for the unit to come
        sizes.add(len(f.mm))
        cq.append(*_unit(i))
        if f.growing is not None:  # the step being made: let it finish now and then
            futures.wait([f.growing], timeout=10)
        if i == upf - 2:  # the next file is being made: let it finish before it is due
            futures.wait(list(alloc._jobs.values()), timeout=10)  # (busy box: slow thread)
    first = cq.files[0]
    assert len(cq.files) == 2 and os.path.getsize(first.path) == upf * UNIT_SIZE
    assert {4096, 8192, 16384, 32768, upf * UNIT_SIZE} <= sizes
    assert alloc.grown >= 4 and alloc.prepared == 1  # steps and the next file, off the loop
    assert os.path.getsize(cq.files[1].path) == 4096  # the next file: its first step
    units = cq.units(0, upf) + cq.units(upf, 10)
    assert units == [_unit(i) for i in range(upf + 10)]
    cq.close()
    alloc.close()
    again = ConsumeQueue(tmp_path, "T", 0, upf, None, MappedFiles(4))
    again.load()
    assert again.max_offset == upf + 10
    assert again.units(0, upf) + again.units(upf, 10) == units
    again.close()


def test_the_loop_grows_the_file_itself_when_the_step_is_not_ready(tmp_path: Path) -> None:
    """The allocator's thread is busy (a long job queued first): the unit that needs the
    next step gets it written on the caller's thread, the queued job is cancelled (never
    two writers), and nothing past the file's end is mapped."""
    alloc = FileAllocator()
    futures.wait([alloc.grow(tmp_path / "absent", 1)])  # starts the worker
    gate = threading.Event()
    assert alloc._pool is not None
    alloc._pool.submit(gate.wait, 10)  # keeps the worker busy until the end
    cq = ConsumeQueue(tmp_path, "T", 0, 300_000, alloc, MappedFiles(4))
    for i in range(204):  # one page holds 204 units
        cq.ensure_room()
        cq.append(*_unit(i))
    f = cq.files[0]
    job = f.growing
    assert job is not None and not job.done()  # asked at half, still queued
    cq.ensure_room()  # unit 204 does not fit in 4 KiB
    assert job.cancelled() and f.growing is not job  # a new step is asked: half used
    assert len(f.mm or b"") == _no_hole(f.path) == 8192
    cq.append(*_unit(204))
    assert cq.get(204) == _unit(204) and cq.get(0) == _unit(0)
    gate.set()
    cq.close()
    alloc.close()


async def test_descriptors_stay_bounded_whatever_the_number_of_queues(tmp_path: Path) -> None:
    """Hundreds of queues written round-robin and read back: at most ``capacity``
    mappings open (one descriptor each), evicted files are mapped again on use."""
    s = MessageStore(tmp_path, store_host=HOST, segment_size=1 << 20, max_open_queue_files=8)
    s.open()
    before = _fds()
    try:
        for rnd in range(2):
            for q in range(300):
                r = s.put(make_msg(b"%d-%d" % (rnd, q), topic=f"T{q % 3}", qid=q))
                assert r.status is PutStatus.PUT_OK
        s.write_out()
        assert s.maps.open_count <= 8
        assert _fds() - before <= 8 + 2  # the mappings, a segment, the allocator's thread
        for q in range(300):
            assert bodies_of(s, f"T{q % 3}", q) == [b"0-%d" % q, b"1-%d" % q]
        assert s.maps.open_count <= 8 and s.maps.evictions >= 600
        disk = sum(os.stat(f.path).st_blocks * 512 for cq in s.queues.values() for f in cq.files)
        assert disk <= 300 * 4096  # one page per queue (it was 6 MB each)
    finally:
        s.close()
    assert _fds() <= before


async def test_a_restart_opens_no_queue_file_and_a_rollback_reads_none(tmp_path: Path) -> None:
    """The start reads each queue's newest file once and keeps nothing open; recovery and
    a write-failure rollback pass over queues whose last unit is below the point without
    mapping them."""
    s = open_store(tmp_path, segment_size=1 << 20, units_per_file=300_000)
    for q in range(200):
        assert s.put(make_msg(b"m%d" % q, topic="Many", qid=q)).status is PutStatus.PUT_OK
    s.write_out()
    s.persist_checkpoint(s.checkpoint_snapshot())
    s.close()
    before = _fds()
    s = MessageStore(tmp_path, store_host=HOST, segment_size=1 << 20, units_per_file=300_000)
    try:
        s.open()
        assert len(s.queues) == 200 and s.maps.maps == 0 and _fds() - before <= 2
        assert sum(cq.void_from_phy(s.commitlog.max_offset) for cq in s.queues.values()) == 0
        assert s.maps.maps == 0
        assert bodies_of(s, "Many", 7) == [b"m7"] and s.maps.maps == 1
    finally:
        s.close()


async def test_dirty_files_are_synced_by_the_checkpoint_after_their_mapping_closed(
    tmp_path: Path,
) -> None:
    """A mapping closed by the LRU keeps its file dirty until a checkpoint syncs it by
    path; past SYNCFS_OVER files one syncfs stands for them; both empty the dirty set."""
    from kairosmq.server.store.message_store import SYNCFS_OVER

    s = MessageStore(tmp_path, store_host=HOST, segment_size=1 << 20, max_open_queue_files=4)
    s.open()
    try:
        for n in (3, SYNCFS_OVER + 5):
            for q in range(n):
                assert s.put(make_msg(b"x", topic="D", qid=q)).status is PutStatus.PUT_OK
            assert len(s.maps.dirty) == n and s.maps.open_count <= 4  # closed, still dirty
            s.persist_checkpoint(s.checkpoint_snapshot())
            assert not s.maps.dirty
    finally:
        s.close()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own, so the disk really fills (needs root and mount)."""
    with small_tmpfs(tmp_path, "8m") as mnt:
        yield mnt


def _fill_to(fs: Path, free: int) -> None:
    """Leave about ``free`` bytes free on ``fs``."""
    st = os.statvfs(fs)
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, max(4096, st.f_bavail * st.f_frsize - free))
    finally:
        os.close(fd)


async def test_a_full_disk_refuses_the_send_that_needs_the_next_step(small_fs: Path) -> None:
    """With the disk full, the send whose unit needs the file's next step is refused with
    SERVICE_NOT_AVAILABLE before anything is appended (no SIGBUS: every mapped byte was
    written first); acked ones stay, and sends resume when space returns."""
    root = small_fs / "store"
    s = open_store(
        root,
        segment_size=1 << 20,
        units_per_file=300_000,
        disk_max_used_ratio=1.0,
        disk_check_interval=0.05,
    )
    acked: list[bytes] = []
    try:
        assert s.put(make_msg(b"first")).status is PutStatus.PUT_OK
        acked.append(b"first")
        _fill_to(small_fs, 0)  # not one block left: the next step cannot be written
        refused = None
        for i in range(5000):
            r = s.put(make_msg(b"%d" % i))
            if r.status is not PutStatus.PUT_OK:
                refused = r
                break
            acked.append(b"%d" % i)
        assert refused is not None, "the queue file never needed a step it could not get"
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "cannot allocate store files" in refused.remark
        assert "No space left" in refused.remark
        cq = s.queues[("T", 0)]
        assert cq.max_offset == len(acked)
        assert len(cq.files[0].mm or b"") <= _no_hole(cq.files[0].path)
        s.write_out()
        assert bodies_of(s) == acked
        (small_fs / "filler").unlink()
        await asyncio.sleep(0.06)
        assert s.put(make_msg(b"resumed")).status is PutStatus.PUT_OK
        s.write_out()
        assert bodies_of(s) == [*acked, b"resumed"]
    finally:
        s.close()


@pytest.mark.slow  # a child process
def test_no_sigbus_when_the_disk_fills_under_a_growing_queue(small_fs: Path) -> None:
    """A child process fills a queue until the disk is full (the store's own path: steps
    off the loop and on it): it must end with a refusal, never killed by SIGBUS."""
    code = f"""
import asyncio, os
from pathlib import Path
from kairosmq.server.store import MessageStore, MessageInner, PutStatus
fs = Path({str(small_fs)!r})

async def main() -> None:
    s = MessageStore(fs / "store", store_host=(b"\\x7f\\x00\\x00\\x01", 1),
                     segment_size=4 << 20, units_per_file=300_000, disk_max_used_ratio=1.0)
    s.open()
    s.put(MessageInner(topic="T", queue_id=0, body=b"x", properties={{}}))  # the segment
    st = os.statvfs(fs)
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize - (64 << 10))
    os.close(fd)
    for i in range(200_000):
        r = s.put(MessageInner(topic="T", queue_id=i % 4, body=b"x", properties={{}}))
        if r.status is not PutStatus.PUT_OK:
            print("refused", i, r.remark, flush=True)
            break
        if i % 64 == 0:
            await asyncio.sleep(0)  # the loop writes the log out
    s.close()

asyncio.run(main())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert p.returncode != -signal.SIGBUS, "SIGBUS: a mapping covered unallocated bytes"
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert p.stdout.startswith(b"refused"), p.stdout
    # the queues grew past their first page before the disk ran out
    assert int(p.stdout.split()[1]) > 4 * 4096 // 20, p.stdout


def test_the_allocators_growth_never_recreates_a_deleted_file(tmp_path: Path) -> None:
    alloc = FileAllocator()
    job = alloc.grow(tmp_path / "gone", 8192)
    futures.wait([job], timeout=10)
    assert isinstance(job.exception(), FileNotFoundError)
    assert not (tmp_path / "gone").exists()
    alloc.close()


def test_a_queue_loads_files_of_the_older_full_size_and_short_newest_ones(tmp_path: Path) -> None:
    """Files written by the older broker (full size, zeros) and a newest file cut short
    by a crash mid-step load alike: the valid prefix is found either way."""
    upf = 1000
    d = tmp_path / "T" / "0"
    d.mkdir(parents=True)
    full = bytearray(upf * UNIT_SIZE)
    for i in range(upf):
        full[i * UNIT_SIZE : (i + 1) * UNIT_SIZE] = _pack(_unit(i))
    (d / f"{0:020d}").write_bytes(full)
    short = bytearray(5000)  # 250 units of room, 3 used, not a multiple of a page
    for i in range(3):
        short[i * UNIT_SIZE : (i + 1) * UNIT_SIZE] = _pack(_unit(upf + i))
    (d / f"{upf * UNIT_SIZE:020d}").write_bytes(short)
    cq = ConsumeQueue(tmp_path, "T", 0, upf, None, MappedFiles(4))
    cq.load()
    assert cq.max_offset == upf + 3 and cq.get(upf + 2) == _unit(upf + 2)
    for i in range(3, 400):  # past the short file's end: it grows
        cq.ensure_room()
        cq.append(*_unit(upf + i))
    assert cq.units(upf, 400) == [_unit(upf + i) for i in range(400)]
    assert _no_hole(cq.files[-1].path) >= 400 * UNIT_SIZE
    cq.close()


def _pack(unit: tuple[int, int, int]) -> bytes:
    from kairosmq.server.store.consumequeue import UNIT

    return UNIT.pack(*unit)


def test_a_hot_queue_is_mapped_again_only_at_each_step(tmp_path: Path) -> None:
    """Appends to a mapped file do not map it again: 20,000 units (400 KB) cost one
    mapping per growth step (4 KiB doubling: 8 steps), not one per unit."""
    maps = MappedFiles(4)
    cq = ConsumeQueue(tmp_path, "T", 0, 300_000, None, maps)
    for i in range(20_000):
        cq.ensure_room()
        cq.append(i, 1, 0)
    assert maps.maps == 8 and len(cq.files[0].mm or b"") == 4096 << 7
    cq.close()
