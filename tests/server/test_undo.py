"""UndoLog (server/store/undo.py): a rollback pops a suffix; trimming is amortised."""

from __future__ import annotations

from kairosmq.server.store.undo import TRIM_AT, UndoLog


def test_rollback_pops_the_suffix_newest_first() -> None:
    written = 0
    log: UndoLog[str] = UndoLog(lambda: written)
    for phy, item in ((10, "a"), (20, "b"), (30, "c")):
        log.add(phy, item)
    assert list(log.rollback_from(20)) == ["c", "b"]
    assert len(log) == 1 and list(log.rollback_from(0)) == ["a"]


def test_written_entries_are_trimmed_and_never_rolled_back() -> None:
    written = 0
    log: UndoLog[int] = UndoLog(lambda: written)
    for i in range(TRIM_AT):
        log.add(i, i)
    written = TRIM_AT - 5  # all but the last five reached the OS
    log.add(TRIM_AT, TRIM_AT)  # past the threshold: filtered
    assert len(log) == 6
    assert list(log.rollback_from(0)) == list(range(TRIM_AT, TRIM_AT - 6, -1))


def test_nothing_written_during_a_long_drain_is_not_quadratic() -> None:
    """A synchronous drain appends many records before the loop writes any: the list is
    filtered only each time it doubles (20 times for 1M entries), and keeps them all."""
    calls = 0

    def written() -> int:
        nonlocal calls
        calls += 1
        return 0

    log: UndoLog[int] = UndoLog(written)
    for i in range(1_000_000):
        log.add(i, i)
    assert len(log) == 1_000_000 and calls <= 11
