"""LevelRecalls: the recall marks of level-delayed messages.

Owns: the commit-log offsets of schedule records that RECALL_MESSAGE recalled and no
level task has passed yet. The timer service adds a mark when it dispatches a recall
record of kind ``level`` (and keeps the marks in its checkpoint state, so replay after
it rebuilds them); ``handlers/timers.py`` decides a recall with them
(``TimerService.level_recall_state``); each level task asks ``pass_record`` before its
re-put and passes over a marked record instead.

Invariants: built before both services (the timer service writes the marks, the
scheduler reads them: neither is wired to the other after construction); a mark is
dropped once its record is passed, so the set holds only pending recalled records.
"""

from __future__ import annotations

from typing import Any  # Any: a service's snapshot state (JSON)


class LevelRecalls:
    """Recalled schedule records not passed yet (commit-log offsets)."""

    def __init__(self) -> None:
        self.marks: set[int] = set()

    def __contains__(self, phy: int) -> bool:
        return phy in self.marks

    def mark(self, phy: int) -> None:
        self.marks.add(phy)

    def pass_record(self, phy: int) -> bool:
        """The scheduler's check before a re-put: True if the schedule record at ``phy`` was
        recalled (the scheduler then skips it; the mark is dropped once passed)."""
        if phy in self.marks:
            self.marks.discard(phy)
            return True
        return False

    def snapshot(self) -> list[int]:
        return sorted(self.marks)

    def restore(self, state: Any) -> None:
        """Marks from a checkpoint; anything that is not a non-negative int is ignored."""
        if isinstance(state, list):
            self.marks = {v for v in state if isinstance(v, int) and v >= 0}
