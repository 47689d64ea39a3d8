"""MessageStore: put/get status table, coalesced reads, recovery with checkpoints,
consume-queue rebuild by replay, retention, atomic JSON files and state providers.

``put`` schedules ``write_out`` on the running loop, so tests that put are async.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.message import decode_records, java_string_hash
from kairosmq.server.store import GetStatus, MessageInner, MessageStore, PutStatus
from kairosmq.server.store.files import read_json, write_json_atomic
from kairosmq.server.store.message_store import DispatchRequest

SEG = 64 * 1024
UPF = 100
HOST = (b"\x7f\x00\x00\x01", 10911)


def _store(root: Path, **kw: Any) -> MessageStore:
    s = MessageStore(
        root, store_host=HOST, segment_size=SEG, units_per_file=kw.pop("upf", UPF), **kw
    )
    s.open()
    return s


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[MessageStore]:
    s = _store(root)
    yield s
    s.close()


def _msg(
    topic: str = "T", qid: int = 0, body: bytes = b"body", tags: str | None = None, **props: str
) -> MessageInner:
    p = dict(props)
    if tags is not None:
        p["TAGS"] = tags
    return MessageInner(
        topic=topic, queue_id=qid, body=body, properties=p, born_timestamp=1_700_000_000_000
    )


def _bodies(res: Any) -> list[bytes]:
    return [m.body for m in decode_records(b"".join(res.chunks))]


def _put_n(
    s: MessageStore, n: int, topic: str = "T", qid: int = 0, size: int = 10, tag: str | None = None
) -> list[Any]:
    out = []
    for i in range(n):
        r = s.put(_msg(topic, qid, f"{topic}-{qid}-{i:04d}".encode().ljust(size, b"."), tag))
        assert r.status is PutStatus.PUT_OK
        out.append(r)
    return out


def _truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def _overwrite(path: Path, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- put / get


async def test_put_assigns_queue_and_physical_offsets(store: MessageStore) -> None:
    rs = _put_n(store, 3) + _put_n(store, 2, qid=1)
    assert [r.queue_offset for r in rs] == [0, 1, 2, 0, 1]
    assert [r.phy_offset for r in rs] == [sum(x.size for x in rs[:i]) for i in range(5)]
    assert rs[0].size == 91 + 10 + 1 + 0  # body + topic "T", no properties
    assert (store.max_offset("T", 0), store.max_offset("T", 1), store.max_offset("X", 0)) == (
        3,
        2,
        0,
    )
    m = decode_records(store.read_at(rs[4].phy_offset))[0]
    assert (m.topic, m.queue_id, m.queue_offset) == ("T", 1, 1)
    assert m.commit_log_offset == rs[4].phy_offset
    assert m.store_host == HOST


async def test_get_reads_pending_and_partly_written_runs(store: MessageStore) -> None:
    _put_n(store, 2)
    store.write_out()
    _put_n(store, 2)  # still pending: write_out is only scheduled
    res = store.get("T", 0, 0, 32)
    assert res.status is GetStatus.FOUND
    assert res.queue_offsets == [0, 1, 2, 3]
    assert len(res.chunks) == 1  # one run spanning the written and the pending bytes
    assert _bodies(res) == [f"T-0-{i:04d}".encode().ljust(10, b".") for i in (0, 1, 0, 1)]
    assert [m.queue_offset for m in decode_records(res.chunks[0])] == [0, 1, 2, 3]


async def test_get_status_table(store: MessageStore) -> None:
    res = store.get("T", 0, 0, 32)
    assert (res.status, res.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    _put_n(store, 5, tag="A")
    _put_n(store, 3, tag="B")

    found = store.get("T", 0, 2, 4)
    assert (found.status, found.next_begin_offset, found.min_offset, found.max_offset) == (
        GetStatus.FOUND,
        6,
        0,
        8,
    )
    assert found.queue_offsets == [2, 3, 4, 5]
    assert [m.queue_offset for m in decode_records(b"".join(found.chunks))] == [2, 3, 4, 5]

    code_b = java_string_hash("B")
    only_b = store.get("T", 0, 0, 32, match=lambda c: c == code_b)
    assert (only_b.status, only_b.next_begin_offset, only_b.queue_offsets) == (
        GetStatus.FOUND,
        8,
        [5, 6, 7],
    )

    code_c = java_string_hash("C")
    none = store.get("T", 0, 1, 32, match=lambda c: c == code_c)
    assert (none.status, none.next_begin_offset, none.chunks) == (
        GetStatus.NO_MATCHED_MESSAGE,
        8,
        [],
    )

    limited = store.get("T", 0, 0, 32, match=lambda c: c == code_c, max_scan=3)
    assert (limited.status, limited.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 3)

    one = store.get("T", 0, 8, 32)
    assert (one.status, one.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 8)
    badly = store.get("T", 0, 50, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 8)
    assert store.get("T", 7, 0, 32).status is GetStatus.NO_MESSAGE_IN_QUEUE


async def test_get_max_count(store: MessageStore) -> None:
    _put_n(store, 10)
    res = store.get("T", 0, 3, 2)
    assert (res.queue_offsets, res.next_begin_offset) == ([3, 4], 5)


async def test_get_max_bytes(store: MessageStore) -> None:
    rs = _put_n(store, 6, size=200)
    size = rs[0].size
    res = store.get("T", 0, 0, 32, max_bytes=2 * size + size // 2)
    assert res.queue_offsets == [0, 1]
    assert res.next_begin_offset == 2  # the unit that did not fit is read next time
    assert sum(len(c) for c in res.chunks) == 2 * size
    tiny = store.get("T", 0, 4, 32, max_bytes=1)  # at least one message is always returned
    assert (tiny.queue_offsets, tiny.next_begin_offset) == ([4], 5)


async def test_coalesced_chunks_decode_to_the_right_messages(store: MessageStore) -> None:
    for i in range(6):  # interleave two queues: queue 0's records are not contiguous
        store.put(_msg("T", i % 2, f"m{i}".encode()))
    _put_n(store, 3, topic="U")
    res = store.get("T", 0, 0, 32)
    assert len(res.chunks) == 3
    assert _bodies(res) == [b"m0", b"m2", b"m4"]
    contiguous = store.get("U", 0, 0, 32)
    assert len(contiguous.chunks) == 1
    assert [m.queue_offset for m in decode_records(contiguous.chunks[0])] == [0, 1, 2]
    for chunk, (phy, size, _) in zip(res.chunks, res.units, strict=True):
        assert len(chunk) == size
        assert decode_records(chunk)[0].commit_log_offset == phy


async def test_get_across_a_segment_rollover(store: MessageStore) -> None:
    rs = _put_n(store, 70, size=1000)
    assert rs[-1].phy_offset >= SEG
    res = store.get("T", 0, 0, 100, max_bytes=1 << 30)
    assert len(res.chunks) == 2  # the BLANK at the end of segment 0 breaks the run
    assert [m.queue_offset for m in decode_records(b"".join(res.chunks))] == list(range(70))


async def test_properties_size_limit(store: MessageStore) -> None:
    too_big = store.put(_msg(K="x" * 32767))  # "K\x01" + 32767 = 32769 bytes
    assert too_big.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert "32769" in too_big.remark
    at_limit = store.put(_msg(K="x" * 32765))  # exactly 32767 bytes
    assert at_limit.status is PutStatus.PUT_OK
    assert store.max_offset("T", 0) == 1
    m = decode_records(store.read_at(at_limit.phy_offset))[0]
    assert m.properties == {"K": "x" * 32765}


@pytest.mark.parametrize("topic", ["", "x" * 128, "\u00e9" * 64])
async def test_topic_length_limit(store: MessageStore, topic: str) -> None:
    assert store.put(_msg(topic)).status is PutStatus.MESSAGE_ILLEGAL


async def test_put_when_not_writable(store: MessageStore) -> None:
    store.writable = False
    assert store.put(_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_read_at_and_store_time(root: Path) -> None:
    s = _store(root, clock_ms=lambda: 1_234_567)
    r = s.put(_msg())
    assert r.store_timestamp == 1_234_567
    assert s.store_time_at("T", 0, 0) == 1_234_567
    assert s.store_time_at("T", 0, 1) is None
    assert s.read_at(r.phy_offset + r.size) is None
    s.close()


# ---------------------------------------------------------------- recovery


async def test_reopen_recovers_everything(root: Path, store: MessageStore) -> None:
    _put_n(store, 30, size=1000)
    _put_n(store, 40, qid=1, size=1000)
    store.write_out()
    store.close()
    s = _store(root)
    assert (s.max_offset("T", 0), s.max_offset("T", 1)) == (30, 40)
    assert len(_bodies(s.get("T", 1, 0, 100, max_bytes=1 << 30))) == 40
    s.close()


def _cq_units(s: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    return {
        k: [cq.get(i) for i in range(cq.min_offset, cq.max_offset)] for k, cq in s.queues.items()
    }


async def test_consume_queues_rebuilt_by_replay(root: Path, store: MessageStore) -> None:
    for i in range(90):
        store.put(_msg("T", i % 3, b"x" * 1000, tags=f"tag{i % 4}"))
    store.put(_msg("%RETRY%G", 0, b"r"))
    store.write_out()
    before_max = {k: cq.max_offset for k, cq in store.queues.items()}
    before_units = _cq_units(store)
    store.close()
    shutil.rmtree(root / "consumequeue")
    assert not (root / "checkpoint.json").exists()
    s = _store(root)
    assert {k: cq.max_offset for k, cq in s.queues.items()} == before_max
    assert _cq_units(s) == before_units
    s.close()


async def test_consume_queues_rebuilt_when_lost_below_a_checkpoint(
    root: Path, store: MessageStore
) -> None:
    _put_n(store, 20)
    store.persist_checkpoint(store.checkpoint_snapshot())
    store.close()
    shutil.rmtree(root / "consumequeue")
    s = _store(root)
    try:
        assert s.max_offset("T", 0) == 20
    finally:
        s.close()


async def test_torn_tail_cut_and_consume_queue_truncated(root: Path, store: MessageStore) -> None:
    rs = _put_n(store, 10, size=300)
    store.write_out()
    store.close()
    _truncate(root / "commitlog" / f"{0:020d}", rs[7].phy_offset + 100)  # 7 torn, 8-9 lost
    s = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=UPF)
    summary = s.open()
    assert summary["commitlog_max_offset"] == rs[7].phy_offset
    assert summary["truncated_bytes"] > 0
    assert s.max_offset("T", 0) == 7
    assert s.get("T", 0, 6, 32).queue_offsets == [6]
    assert s.get("T", 0, 7, 32).status is GetStatus.OFFSET_OVERFLOW_ONE
    r = s.put(_msg(body=b"after"))
    assert (r.queue_offset, r.phy_offset) == (7, rs[7].phy_offset)
    s.close()


async def test_checkpoint_beyond_the_data_recovers_everything_before_the_cut(
    root: Path, store: MessageStore
) -> None:
    rs = _put_n(store, 80, size=1000)  # two segments
    assert rs[-1].phy_offset >= SEG
    snap = store.checkpoint_snapshot()
    store.persist_checkpoint(snap)
    assert (
        read_json(root / "checkpoint.json")["dispatched_offset"] == rs[-1].phy_offset + rs[-1].size
    )
    store.close()
    cut_at = rs[70]
    assert cut_at.phy_offset >= SEG
    _truncate(root / "commitlog" / f"{SEG:020d}", cut_at.phy_offset - SEG + 40)
    s = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=UPF)
    summary = s.open()
    assert summary["commitlog_max_offset"] == cut_at.phy_offset
    assert summary["records_replayed"] == len([r for r in rs[:70] if r.phy_offset >= SEG])
    assert s.max_offset("T", 0) == 70
    res = s.get("T", 0, 0, 100, max_bytes=1 << 30)
    assert [m.queue_offset for m in decode_records(b"".join(res.chunks))] == list(range(70))
    s.close()


async def test_flipped_crc_in_last_record(root: Path, store: MessageStore) -> None:
    rs = _put_n(store, 5, size=50)
    store.write_out()
    store.close()
    _overwrite(root / "commitlog" / f"{0:020d}", rs[-1].phy_offset + 90, b"\xff")  # body byte
    s = _store(root)
    assert s.max_offset("T", 0) == 4
    assert s.commitlog.max_offset == rs[-1].phy_offset
    s.close()


class Counter:
    """A tiny StateProvider: counts dispatched records per topic."""

    name = "counter"

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.restored: Any = "never"

    def on_dispatch(self, req: DispatchRequest) -> None:
        self.counts[req.topic] = self.counts.get(req.topic, 0) + 1

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def restore(self, state: Any) -> None:
        self.restored = state
        self.counts = dict(state or {})


def _with_counter(root: Path) -> tuple[MessageStore, Counter]:
    s = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=UPF)
    c = Counter()
    s.providers.append(c)
    s.dispatchers.append(c.on_dispatch)
    return s, c


async def test_state_provider_round_trip_through_checkpoint_and_replay(root: Path) -> None:
    s, c = _with_counter(root)
    s.open()
    assert c.restored is None
    _put_n(s, 5)
    _put_n(s, 2, topic="U")
    s.persist_checkpoint(s.checkpoint_snapshot())
    assert read_json(root / "checkpoint.json")["states"] == {"counter": {"T": 5, "U": 2}}
    _put_n(s, 3)  # after the checkpoint: rebuilt by replay
    s.write_out()
    s.close()

    s2, c2 = _with_counter(root)
    summary = s2.open()
    assert c2.restored == {"T": 5, "U": 2}
    assert summary["records_replayed"] == 3
    assert c2.counts == {"T": 8, "U": 2}
    assert s2.max_offset("T", 0) == 8
    s2.close()


# ---------------------------------------------------------------- retention


async def test_delete_expired_segments_and_queue_files(root: Path) -> None:
    s = _store(root, upf=10)
    rs = _put_n(s, 150, size=1000)  # about 2.5 segments
    s.write_out()
    assert rs[-1].phy_offset >= 2 * SEG
    old = time.time() - 10 * 3600
    for p in (root / "commitlog").iterdir():
        os.utime(p, (old, old))
    gone = s.delete_expired(3600)
    segs, files = gone.segments, gone.queue_files
    assert segs == 2 and gone.segment_bytes == 2 * SEG
    floor = 2 * SEG
    first_kept = next(i for i, r in enumerate(rs) if r.phy_offset >= floor)
    # CQ files of 10 units whose last unit points below the floor are deleted
    assert files == first_kept // 10
    cq = s.find_queue("T", 0)
    assert cq.min_offset == (first_kept // 10) * 10
    assert gone.queue_file_bytes == files * cq.file_bytes > 0
    too_small = s.get("T", 0, 0, 32)
    assert (too_small.status, too_small.next_begin_offset) == (
        GetStatus.OFFSET_TOO_SMALL,
        cq.min_offset,
    )
    # units still indexed but whose records are gone are skipped, then data is found
    res = s.get("T", 0, cq.min_offset, 200, max_bytes=1 << 30)
    assert res.status is GetStatus.FOUND
    assert res.queue_offsets[0] == first_kept
    assert res.queue_offsets[-1] == 149
    s.close()
    s = _store(root, upf=10)
    assert s.find_queue("T", 0).min_offset == (first_kept // 10) * 10
    assert s.max_offset("T", 0) == 150
    s.close()


async def test_delete_expired_keeps_recent(store: MessageStore) -> None:
    _put_n(store, 70, size=1000)
    store.write_out()
    assert store.delete_expired(3600) == (0, 0, 0, 0)


# ---------------------------------------------------------------- files


def test_write_json_atomic(tmp_path: Path) -> None:
    path = tmp_path / "config" / "offsets.json"
    write_json_atomic(path, {"g": {"t": {1: 5}}, "n": [1, 2]})
    assert read_json(path) == {"g": {"t": {"1": 5}}, "n": [1, 2]}
    write_json_atomic(path, {"v": 2})
    assert read_json(path) == {"v": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["offsets.json"]  # no temp file
    assert read_json(tmp_path / "missing.json", {"d": 1}) == {"d": 1}
    assert read_json(tmp_path / "missing.json") is None


def test_write_json_atomic_keeps_old_file_when_serialization_fails(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_json_atomic(path, {"ok": True})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert read_json(path) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


async def test_a_restart_without_new_records_keeps_the_next_restart_fast(root: Path) -> None:
    """A broker started and stopped without storing anything must checkpoint the record
    ending the log again; else the start after it rescans (and replays) a whole segment."""
    s = _store(root)
    _put_n(s, 50)
    s.persist_checkpoint(s.checkpoint_snapshot())
    s.close()
    for _ in range(3):
        s = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=UPF)
        assert s.open()["records_replayed"] == 0
        s.persist_checkpoint(s.checkpoint_snapshot())
        s.close()
        assert read_json(s.checkpoint_path, {})["last_record"] is not None
