"""The broker's one clock: wall-clock milliseconds.

Owns: ``wall_ms`` (the clock the store stamps records with and the scheduler compares due
times against; ``Broker`` hands the store's clock to the scheduler, so both read the same
function) and ``sub_ms`` (how far into the current millisecond that clock is).

Invariant: ``sub_ms`` is non-zero only for ``wall_ms`` itself: an injected clock (tests'
virtual time) has whole milliseconds, so a sleep computed from it needs no correction.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wall_ms() -> int:
    """The wall clock in whole milliseconds (truncated)."""
    return int(time.time() * 1000)


def sub_ms(clock_ms: Callable[[], int]) -> float:
    """The fraction of a millisecond ``clock_ms`` truncated away (0.0 for any clock but
    ``wall_ms``): a sleep to a due instant subtracts it so it ends on that instant."""
    return time.time() * 1000 % 1 if clock_ms is wall_ms else 0.0
