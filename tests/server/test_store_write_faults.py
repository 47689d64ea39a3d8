"""MessageStore under disk faults (issue 10, durability): failed writes, a full disk.

Real files on tmp_path; the disk-full cases run on a real small tmpfs mounted for the test
(``mount -t tmpfs -o size=...``: needs root, else those tests skip and say so); a failing
``pwrite`` (EIO) cannot be produced on demand by a real file system, so those tests
inject the errno at the file layer (``os.pwrite`` as the commit log calls it). Hostile
content (host bits, replay, checked reads) is in test_store_faults.py.

What these catch: a full disk answered with anything but SERVICE_NOT_AVAILABLE (or not
recovering), a failed write whose senders would be told SUCCESS, a consume-queue offset
reused after rollback, and scheduler progress kept for a dropped re-put.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.schedule.delay.service import ScheduleService
from kairosmq.server.store import MessageInner, PutStatus
from kairosmq.server.store import commitlog as commitlog_mod
from kairosmq.server.store.consumequeue import HOLE

from tests.helpers import small_tmpfs
from tests.server.store_fault_helpers import bodies_of, make_msg, open_store, reopen


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


# ---------------------------------------------------------------- write failures


def _fail_pwrite(
    monkeypatch: pytest.MonkeyPatch, *, after_bytes: int = 0, err: int = errno.EIO
) -> list[int]:
    """Make the commit log's next pwrite write ``after_bytes`` then fail with ``err``
    (once). Injected at the file layer: no real file system fails on demand."""
    real = os.pwrite
    calls: list[int] = []

    def pwrite(fd: int, data: Any, pos: int) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            if after_bytes:
                return real(fd, bytes(data[:after_bytes]), pos)
            raise OSError(err, os.strerror(err))
        if len(calls) == 2 and after_bytes:
            raise OSError(err, os.strerror(err))
        return real(fd, data, pos)

    monkeypatch.setattr(commitlog_mod.os, "pwrite", pwrite)
    return calls


async def test_failed_write_rolls_back_and_turns_acks_into_errors(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_store(root, disk_check_interval=0.05)
    try:
        ok = s.put(make_msg(b"written"))
        s.write_out()
        token_ok = s.ack_token()
        a = s.put(make_msg(b"lost-a"))
        token_a = s.ack_token()
        b = s.put(make_msg(b"lost-b"))
        token_b = s.ack_token()
        assert (a.status, b.status) == (PutStatus.PUT_OK, PutStatus.PUT_OK)
        _fail_pwrite(monkeypatch)
        s.write_out()  # never raises: rolls back instead
        monkeypatch.undo()
        assert s.ack_problem(token_ok) is None
        for token in (token_a, token_b):
            assert "write failed" in (s.ack_problem(token) or "")
        assert s.commitlog.max_offset == ok.phy_offset + ok.size
        # the dropped units are holes: offsets 1 and 2 are never reused
        cq = s.find_queue("T", 0)
        assert cq is not None and [cq.get(1), cq.get(2)] == [HOLE, HOLE]
        assert bodies_of(s) == [b"written"]
        refused = s.put(make_msg(b"too-soon"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "write failed" in refused.remark
        await asyncio.sleep(0.06)  # the retry interval passed: writes resume
        again = s.put(make_msg(b"again"))
        assert again.status is PutStatus.PUT_OK and again.queue_offset == 3
        assert again.phy_offset == ok.phy_offset + ok.size  # the log continues where it was
        s.write_out()
        assert s.ack_problem(s.ack_token()) is None
        assert s.write_failure is None
        assert bodies_of(s) == [b"written", b"again"]
        s2, summary = reopen(s, root, disk_check_interval=0.05)
        s = s2
        assert summary["truncated_bytes"] == 0
        assert bodies_of(s) == [b"written", b"again"]
    finally:
        s.close()


async def test_partial_write_keeps_whole_records_and_drops_the_rest(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_store(root, disk_check_interval=0.0)
    try:
        first = s.put(make_msg(b"first"))
        t_first = s.ack_token()
        s.put(make_msg(b"second"))
        t_second = s.ack_token()
        _fail_pwrite(monkeypatch, after_bytes=first.size + 10, err=errno.ENOSPC)
        s.write_out()
        monkeypatch.undo()
        assert s.ack_problem(t_first) is None  # written whole: its ack stands
        assert "No space left" in (s.ack_problem(t_second) or "")
        assert s.commitlog.written_offset == first.size
        assert bodies_of(s) == [b"first"]
        s2, _summary = reopen(s, root)
        s = s2
        assert bodies_of(s) == [b"first"]  # the torn tail of "second" was cut at recovery
    finally:
        s.close()


async def test_failed_write_undoes_scheduler_progress(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_store(root, disk_check_interval=0.0)
    notifier = ArrivalNotifier()
    sched = ScheduleService(s, notifier, (1000,), clock_ms=lambda: 10_000)
    s.dispatchers.append(sched.on_dispatch)
    try:
        s.put(
            MessageInner(
                topic="SCHEDULE_TOPIC_XXXX",
                queue_id=0,
                body=b"due",
                properties={
                    "KAIROS_DELIVER_MS": "5000",
                    "REAL_TOPIC": "T",
                    "REAL_QID": "0",
                    "DELAY": "1",
                },
            )
        )
        s.write_out()
        cq = s.find_queue("SCHEDULE_TOPIC_XXXX", 0)
        assert sched._drain(1, cq) and sched.progress[1] == 1  # re-put, pending
        _fail_pwrite(monkeypatch)
        s.write_out()
        monkeypatch.undo()
        assert sched.progress[1] == 0  # the re-put was dropped: it must be made again
        assert sched._drain(1, cq) and sched.progress[1] == 1
        s.write_out()
        assert bodies_of(s) == [b"due"]
    finally:
        s.close()


# ---------------------------------------------------------------- disk full (tmpfs)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own, so the disk really fills (needs root and mount)."""
    with small_tmpfs(tmp_path, "4m", "; the errno-injection tests cover the write path") as mnt:
        yield mnt


def _fill(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


async def test_watermark_refuses_sends_reads_go_on_and_writes_resume(small_fs: Path) -> None:
    s = open_store(
        small_fs / "store",
        segment_size=256 * 1024,
        disk_max_used_ratio=0.90,
        disk_check_interval=0.05,
    )
    try:
        assert s.put(make_msg(b"before")).status is PutStatus.PUT_OK
        st = os.statvfs(small_fs)
        total = st.f_blocks * st.f_frsize
        _fill(small_fs / "filler", st.f_bavail * st.f_frsize - total // 20)  # ~95 % used
        await asyncio.sleep(0.06)
        r = s.put(make_msg(b"refused"))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "disk is full" in r.remark and "> 90%" in r.remark
        assert bodies_of(s) == [b"before"]  # pulls continue
        (small_fs / "filler").unlink()
        await asyncio.sleep(0.06)
        assert s.put(make_msg(b"after")).status is PutStatus.PUT_OK
        s.write_out()
        assert bodies_of(s) == [b"before", b"after"]
    finally:
        s.close()


async def test_full_disk_fails_segment_allocation_cleanly(small_fs: Path) -> None:
    """Segments are allocated for real: when the next one does not fit, the put is
    SERVICE_NOT_AVAILABLE, no short (sparse) segment is left, every acked message stays,
    and puts resume once space returns."""
    root = small_fs / "store"
    seg = 1024 * 1024
    s = open_store(root, segment_size=seg, disk_max_used_ratio=1.0, disk_check_interval=0.05)
    st = os.statvfs(small_fs)
    _fill(small_fs / "filler", st.f_bavail * st.f_frsize - seg - 256 * 1024)  # < 2 segments
    acked: list[bytes] = []
    refused = None
    try:
        for i in range(2000):
            body = b"%05d" % i + b"." * 2000
            r = s.put(make_msg(body))
            if r.status is not PutStatus.PUT_OK:
                refused = r
                break
            acked.append(body)
        assert refused is not None, "the disk never filled"
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "No space left" in refused.remark
        s.write_out()
        names = sorted(p.name for p in (root / "commitlog").iterdir())
        assert names == [f"{0:020d}"]  # the failed segment left no file behind
        assert bodies_of(s) == acked
        (small_fs / "filler").unlink()
        await asyncio.sleep(0.06)
        assert s.put(make_msg(b"resumed")).status is PutStatus.PUT_OK
        s.write_out()
        assert (root / "commitlog" / f"{seg:020d}").stat().st_blocks * 512 >= seg  # real
        s, _summary = reopen(s, root, segment_size=seg, disk_max_used_ratio=1.0)
        assert bodies_of(s) == [*acked, b"resumed"]
    finally:
        s.close()


def test_preallocate_never_leaves_a_sparse_file(small_fs: Path) -> None:
    from kairosmq.server.store.files import create_allocated

    path = small_fs / "big"
    with pytest.raises(OSError) as info:
        create_allocated(path, 64 * 1024 * 1024)
    assert info.value.errno == errno.ENOSPC
    assert not path.exists()
