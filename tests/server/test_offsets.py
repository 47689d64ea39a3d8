"""ConsumerOffsetManager: bounds, persistence that never silently stops, tolerant load.

What these catch: a commitOffset beyond int64 (or negative) entering the table (orjson
then fails every later write and all groups rewind at restart), a failed write that
marks the table clean (the change would never be written), and a damaged file that
stops the broker from starting.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from kairosmq.server.tables import offsets as offsets_mod
from kairosmq.server.tables.offsets import MAX_OFFSET, ConsumerOffsetManager


@pytest.mark.parametrize("bad", [MAX_OFFSET + 1, 99999999999999999999, -1, -(1 << 70), True])
def test_commit_refuses_values_outside_int64_offsets(tmp_path: Path, bad: int) -> None:
    m = ConsumerOffsetManager(tmp_path)
    assert m.commit("G", "T", 0, 5)
    assert not m.commit("G", "T", 0, bad)
    assert m.query("G", "T", 0) == 5
    m.persist(m.snapshot())
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query("G", "T", 0) == 5


def test_commit_accepts_the_int64_edges(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    assert m.commit("G", "T", 0, 0) and m.commit("G", "T", 1, MAX_OFFSET)
    m.persist(m.snapshot())
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert (again.query("G", "T", 0), again.query("G", "T", 1)) == (0, MAX_OFFSET)


def test_a_failed_write_is_retried_by_the_next_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit("G", "T", 0, 7)
    snap = m.snapshot()

    def boom(path: Path, parts: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(offsets_mod, "write_parts_atomic", boom)
    with pytest.raises(OSError):
        m.persist(snap)
    monkeypatch.undo()
    assert m.dirty and m.persist_failures == 1
    retry = m.snapshot()
    assert retry is not None  # still dirty: the change is written next time
    m.persist(retry)
    assert not m.dirty and m.snapshot() is None
    assert orjson.loads((tmp_path / "consumerOffset.json").read_bytes()) == {"G": {"T": {"0": 7}}}


def test_a_change_during_a_write_stays_dirty(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit("G", "T", 0, 1)
    snap = m.snapshot()
    m.commit("G", "T", 0, 2)  # after the snapshot, before its write finishes
    m.persist(snap)
    assert m.dirty
    m.persist(m.snapshot())
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query("G", "T", 0) == 2


def test_load_drops_bad_entries_and_moves_an_unreadable_file_aside(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(
        '{"G": {"T": {"0": 3, "1": 99999999999999999999, "x": 1, "2": -4}, "U": [1]}, "H": 5}'
    )
    m = ConsumerOffsetManager(tmp_path)
    m.load()
    assert m.table == {"G": {"T": {0: 3}}}
    path.write_bytes(b'{"G": {"T"')  # torn (cannot happen with atomic writes, but)
    m2 = ConsumerOffsetManager(tmp_path)
    m2.load()
    assert m2.table == {}
    assert not path.exists()
    assert any(p.name.startswith("consumerOffset.json.unreadable-") for p in tmp_path.iterdir())
