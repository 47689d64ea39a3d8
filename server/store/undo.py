"""UndoLog: what a dispatch listener must undo if the appends it saw are rolled back.

Owns: the ``(phy_offset, item)`` pairs a listener records for appends that may not be
written to the OS yet (the scheduler's and the timers' progress), their trimming once
written, and ``rollback_from`` (the items of appends at or after the kept offset, newest
first).

Invariants: entries are added in append order (phy offsets ascending), so the ones a
rollback drops are a suffix; an entry below the written offset can never be rolled back
and is dropped by the next trim. Trimming is amortised O(1) per entry: the list is
filtered only when it doubled since the last filter (a long synchronous drain, whose
appends are written only at the end of the loop turn, must not filter on every append).

``UndoLog.add`` here is the reference; its native twin (``_undo.pyx``, chosen by
``protocol/native.py``) is the same steps in C (tests/server/test_native_undo.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Generic, TypeVar

from kairosmq.protocol import native

T = TypeVar("T")

TRIM_AT = 1024


class UndoLog(Generic[T]):
    def __init__(self, written_offset: Callable[[], int]) -> None:
        self._written = written_offset  # the commit log's written (handed to the OS) end
        self._entries: list[tuple[int, T]] = []
        self._trim_at = TRIM_AT

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, phy_offset: int, item: T) -> None:
        entries = self._entries
        entries.append((phy_offset, item))
        if len(entries) > self._trim_at:
            written = self._written()
            self._entries = entries = [e for e in entries if e[0] >= written]
            self._trim_at = max(TRIM_AT, 2 * len(entries))

    def rollback_from(self, kept: int) -> Iterator[T]:
        """Pop and yield the items of appends at or after ``kept``, newest first."""
        entries = self._entries
        while entries and entries[-1][0] >= kept:
            yield entries.pop()[1]


# ``UndoLog.add`` above is the reference (tests/server/test_native_undo.py holds the twin
# to it); the twin's (``_undo.pyx``) replaces it when protocol/native.py chooses it.
reference = SimpleNamespace(add=UndoLog.add)


def _load_twin() -> ModuleType:
    from . import _undo  # type: ignore[attr-defined]

    twin: ModuleType = _undo  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    UndoLog.add = _twin.add  # type: ignore[method-assign]
