"""Unit tests of server/tables/table_file.py: coalesced background writes of a JSON table, the
durability ``flushed()`` promises, a failed write (raised to its waiters, logged through
``on_failed``, retried), and the parts encoders against ``orjson.dumps`` of the whole."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.server.tables import table_file
from kairosmq.server.tables.table_file import TableFile, collect, encode_parts, join_parts


class _Table:
    def __init__(self, path: Path) -> None:
        self.rows: dict[str, int] = {}
        self.failed: list[OSError] = []
        self.file = TableFile(path, self.parts, on_failed=self.failed.append, retry=0.01)

    def parts(self) -> Any:
        return encode_parts(b"{", list(self.rows.items()), b"}", mapping=True)

    def set(self, key: str, value: int) -> None:
        self.rows[key] = value
        self.file.changed()


def _on_disk(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


async def test_changes_are_coalesced_and_flushed_means_on_disk(tmp_path: Path) -> None:
    t = _Table(tmp_path / "t.json")
    for i in range(1000):  # one loop turn: one write
        t.set(f"k{i}", i)
    await t.file.flushed()
    assert t.file.writes == 1 and not t.file.dirty
    assert _on_disk(tmp_path / "t.json") == {f"k{i}": i for i in range(1000)}
    waits = []
    for i in range(50):  # changes while writes run: each waiter sees its change on disk
        t.set("late", i)
        waits.append(asyncio.create_task(t.file.flushed()))
        await asyncio.sleep(0)
    await asyncio.gather(*waits)
    assert _on_disk(tmp_path / "t.json")["late"] == 49
    assert t.file.writes < 1 + 50, "every change was written on its own"
    writes = t.file.writes
    await t.file.flushed()  # nothing changed: returns at once, no write
    assert t.file.writes == writes


async def test_a_failed_write_reaches_its_waiters_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _Table(tmp_path / "t.json")
    real = table_file.write_parts_atomic
    fails = [OSError(28, "No space left on device")]

    def flaky(path: Path, parts: Any) -> None:
        if fails:
            raise fails.pop()
        real(path, parts)

    monkeypatch.setattr(table_file, "write_parts_atomic", flaky)
    t.set("a", 1)
    with pytest.raises(OSError, match="No space"):
        await t.file.flushed()
    assert len(t.failed) == 1 and t.file.dirty
    for _ in range(200):  # retried after ``retry`` seconds, with no new change
        if not t.file.dirty:
            break
        await asyncio.sleep(0.01)
    assert not t.file.dirty and _on_disk(tmp_path / "t.json") == {"a": 1}


def test_write_now_and_an_older_snapshot(tmp_path: Path) -> None:
    t = _Table(tmp_path / "t.json")
    t.set("a", 1)  # no running loop: stays dirty until written
    assert t.file.dirty and not (tmp_path / "t.json").exists()
    old = (t.file.changes, list(t.parts()))
    t.set("b", 2)
    t.file.write_now()
    t.file._write(*old)  # a slower writer of the older snapshot finishes last: skipped
    assert _on_disk(tmp_path / "t.json") == {"a": 1, "b": 2}


@pytest.mark.parametrize("n", [0, 1, 499, 500, 501, 4321])
async def test_parts_encode_what_orjson_encodes_whole(n: int) -> None:
    table = {f"k{i}": {"v": i, "q": {0: i}} for i in range(n)}
    whole = orjson.dumps(table, option=orjson.OPT_NON_STR_KEYS)
    assert await collect(encode_parts(b"{", list(table.items()), b"}", mapping=True)) == whole
    items = list(range(n))
    assert b"".join(encode_parts(b"[", items, b"]", mapping=False)) == orjson.dumps(items)
    rows = [orjson.dumps(x) for x in items]
    assert b"".join(join_parts(b"[", rows, b"]")) == orjson.dumps(items)
