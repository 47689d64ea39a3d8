"""ConsumeQueue: 20-byte units in fixed-size mmap'd files, reload, truncate, retention."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kairosmq.protocol.schema import CqUnit
from kairosmq.server.store.consumequeue import UNIT_SIZE, ConsumeQueue

UPF = 10  # units per file


def _unit(i: int) -> tuple[int, int, int]:
    # phy offsets 100 apart, size 90; tags codes include negatives (Java hashes)
    return (i * 100, 90, (-1) ** i * (1000 + i))


@pytest.fixture
def cq(tmp_path: Path) -> Iterator[ConsumeQueue]:
    q = ConsumeQueue(tmp_path / "consumequeue", "TopicTest", 3, UPF)
    q.load()
    yield q
    q.close()


def _fill(q: ConsumeQueue, n: int) -> None:
    for _ in range(n):
        i = q.max_offset
        assert q.append(*_unit(i)) == i


def _reload(q: ConsumeQueue, root: Path) -> ConsumeQueue:
    q.close()
    again = ConsumeQueue(root, q.topic, q.queue_id, UPF)
    again.load()
    return again


def test_unit_size_matches_schema() -> None:
    assert UNIT_SIZE == CqUnit.sizeof() == 20


def test_append_get_across_files(cq: ConsumeQueue) -> None:
    _fill(cq, 25)
    names = sorted(p.name for p in cq.directory.iterdir())
    assert names == [f"{0:020d}", f"{UPF * 20:020d}", f"{2 * UPF * 20:020d}"]  # byte offsets
    assert cq.directory.parts[-2:] == ("TopicTest", "3")
    for p in cq.directory.iterdir():
        assert p.stat().st_size == UPF * 20
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    for i in range(25):
        assert cq.get(i) == _unit(i)
    assert cq.get(25) is None
    assert cq.get(-1) is None


def test_file_bytes_parse_with_schema(cq: ConsumeQueue) -> None:
    _fill(cq, 12)
    cq.flush()
    raw = (cq.directory / f"{0:020d}").read_bytes() + (cq.directory / f"{200:020d}").read_bytes()
    for i in range(12):
        u = CqUnit.parse(raw[i * 20 : (i + 1) * 20])
        assert (u.phy_offset, u.size, u.tags_code) == _unit(i)
    assert raw[12 * 20 :] == b"\x00" * (len(raw) - 12 * 20)  # the rest is still zeros
    built = CqUnit.build(dict(phy_offset=300, size=90, tags_code=-1003))
    assert raw[3 * 20 : 4 * 20] == built


def test_units_stop_at_file_end(cq: ConsumeQueue) -> None:
    _fill(cq, 25)
    assert cq.units(0, 100) == [_unit(i) for i in range(10)]
    assert cq.units(8, 5) == [_unit(8), _unit(9)]
    assert cq.units(10, 3) == [_unit(i) for i in range(10, 13)]
    assert cq.units(20, 100) == [_unit(i) for i in range(20, 25)]
    assert cq.units(25, 10) == []
    assert cq.units(24, 0) == []


def test_load_finds_the_valid_prefix(tmp_path: Path, cq: ConsumeQueue) -> None:
    root = tmp_path / "consumequeue"
    for n, expected in [(0, 0), (7, 7), (3, 10), (10, 20), (1, 21)]:
        _fill(cq, n)
        cq = _reload(cq, root)
        assert cq.max_offset == expected
        assert [cq.get(i) for i in range(expected)] == [_unit(i) for i in range(expected)]
    cq.close()


def test_load_of_missing_directory(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "nothing", "T", 0, UPF)
    q.load()
    assert (q.min_offset, q.max_offset) == (0, 0)
    assert q.get(0) is None and q.units(0, 5) == []


def test_truncate_from_phy(tmp_path: Path, cq: ConsumeQueue) -> None:
    _fill(cq, 25)
    # unit i covers [100 i, 100 i + 90): phy end 1250 keeps units 0..11 (1190 <= 1250)
    assert cq.truncate_from_phy(1250) == 13
    assert cq.max_offset == 12
    assert cq.get(12) is None
    assert sorted(p.name for p in cq.directory.iterdir()) == [f"{0:020d}", f"{200:020d}"]
    cq = _reload(cq, tmp_path / "consumequeue")
    assert cq.max_offset == 12
    assert cq.append(*_unit(12)) == 12
    assert cq.truncate_from_phy(10**9) == 0
    assert cq.truncate_from_phy(0) == 13
    assert cq.max_offset == 0
    assert len(list(cq.directory.iterdir())) == 1  # the first file is kept
    cq.close()


def test_truncate_boundary_is_inclusive_of_records_ending_at_the_cut(cq: ConsumeQueue) -> None:
    _fill(cq, 3)
    assert cq.truncate_from_phy(290) == 0  # unit 2 ends exactly at 290
    assert cq.truncate_from_phy(289) == 1


def test_delete_below_phy(tmp_path: Path, cq: ConsumeQueue) -> None:
    _fill(cq, 25)
    # file 0's last unit is at phy 900, file 1's at 1900
    assert cq.delete_below_phy(900) == 0
    assert cq.delete_below_phy(901) == 1
    assert cq.min_offset == 10
    assert cq.get(5) is None and cq.get(10) == _unit(10)
    assert cq.units(5, 3) == []
    assert cq.delete_below_phy(10**9) == 1  # file 2 is partially filled: never deleted
    assert cq.min_offset == 20 and cq.max_offset == 25
    assert sorted(p.name for p in cq.directory.iterdir()) == [f"{400:020d}"]
    cq = _reload(cq, tmp_path / "consumequeue")
    assert (cq.min_offset, cq.max_offset) == (20, 25)
    assert cq.get(22) == _unit(22)
    cq.close()


def test_delete_below_phy_keeps_the_last_full_file(cq: ConsumeQueue) -> None:
    _fill(cq, 20)
    assert cq.delete_below_phy(10**9) == 1
    assert (cq.min_offset, cq.max_offset) == (10, 20)


def test_offset_by_time(cq: ConsumeQueue) -> None:
    times = [1000, 1000, 2000, 3000, 3000, 5000]
    _fill(cq, len(times))

    def store_time_of(i: int) -> int:
        return times[i]

    assert cq.offset_by_time(0, store_time_of) == 0
    assert cq.offset_by_time(1000, store_time_of) == 0
    assert cq.offset_by_time(1500, store_time_of) == 2
    assert cq.offset_by_time(3000, store_time_of) == 3
    assert cq.offset_by_time(4000, store_time_of) == 5
    assert cq.offset_by_time(9000, store_time_of) == 5


def test_offset_by_time_of_empty_queue(cq: ConsumeQueue) -> None:
    assert cq.offset_by_time(123, lambda i: 0) == 0


def _loop_blocked_during(work: Callable[[], None]) -> tuple[float, float]:
    """Run ``work`` in a thread; return (its duration, how much of it this thread could
    not run Python), both in seconds."""
    span: list[float] = []
    th = threading.Thread(
        target=lambda: (span.append(time.monotonic()), work(), span.append(time.monotonic()))
    )
    last = time.monotonic()
    blocked = 0.0
    th.start()
    while len(span) < 2:
        now = time.monotonic()
        if span and now - last > 0.001:  # a gap: how much of it lies inside the work
            blocked = max(
                blocked, min(now, span[-1] if len(span) == 2 else now) - max(last, span[0])
            )
        last = now
    th.join()
    t0, t1 = span
    return t1 - t0, blocked


def test_flush_does_not_hold_the_gil_through_the_disk_write(tmp_path: Path) -> None:
    """The checkpoint thread syncs dirty queue files while the event loop goes on: CPython's
    ``mmap.flush`` holds the GIL through msync, which stalled the loop for the whole disk
    write (tens of ms at every checkpoint); ``fdatasync`` releases it."""
    q = ConsumeQueue(tmp_path / "consumequeue", "TopicTest", 0, 1 << 20)
    q.directory.mkdir(parents=True)  # a file grown to its full 20 MB (files grow in steps)
    (q.directory / f"{0:020d}").write_bytes(bytes(q.file_bytes))
    q.load()
    try:
        for attempt in range(6):
            q.append(*_unit(q.max_offset))  # marks the file dirty
            mm = q.files[0].mm
            mm[UNIT_SIZE:] = bytes([attempt + 1]) * (len(mm) - UNIT_SIZE)  # 20 MB dirty
            took, blocked = _loop_blocked_during(q.flush)
            if took >= 0.01:  # a disk write long enough to tell
                # held through msync: 0.7-1.0 of it here; released: 0.1-0.2
                assert blocked < 0.5 * took, (took, blocked)
                return
        pytest.skip("every flush took < 10 ms: this disk is too fast to tell")
    finally:
        q.close()
