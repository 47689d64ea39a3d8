"""The wire contract of kairosmq's pending-message requests (operators browse and act on
scheduled messages one by one: ``kairosmq admin pending``, the console).

Owns: the request headers of KAIROS_BROWSE_PENDING (907), KAIROS_PENDING_HISTOGRAM (908),
KAIROS_RESCHEDULE_PENDING (909) and KAIROS_RECALL_PENDING (910); the keyset cursor codec
(``format_ref`` / ``parse_ref``: a pending message's ``ref`` is ``<dueMs>:<phyOffset>``, the
position of its schedule or timer record, and a page's ``nextCursor`` is the ref of the
last entry it examined); the histogram units and the kind filter's values.

Invariants:
* A ref or cursor parses only as two decimals of at most 18 digits (int64-safe);
  anything else is ``None`` and the broker answers with a remark naming the field.
* Pages are ordered by ``(dueMs, phyOffset)`` over timers and level-delayed messages
  together; a cursor means "strictly after this pair", so a page never repeats an entry
  of the page before it and a message stored behind the cursor (due earlier) is not
  shown by later pages (keyset pagination: no offsets, no counts).
* Sans-IO: data and pure functions only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .headers import Header, wire
from .properties import INT64_DIGITS, parse_decimal_pair

KINDS = ("all", "timer", "level")  # the ``kind`` filter
UNITS_MS = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}  # histogram bins
MAX_PAGE = 1_000  # rows per page at most (a larger ``limit`` is lowered to it)
DEFAULT_PAGE = 50
MAX_SCAN = 200_000  # entries one request may examine at most (``maxScan`` is lowered)
DEFAULT_SCAN = 20_000
MAX_TARGETS = 64  # messages one action may name by key (the key index's limit)


def format_ref(due_ms: int, phy: int) -> str:
    return f"{due_ms}:{phy}"


def parse_ref(text: str | None) -> tuple[int, int] | None:
    """``<dueMs>:<phyOffset>`` -> the pair, else None."""
    if not text:
        return None
    return parse_decimal_pair(text, INT64_DIGITS, INT64_DIGITS)


@dataclass(slots=True)
class BrowsePendingRequestHeader(Header):
    """KAIROS_BROWSE_PENDING (907): pending timers and level-delayed messages in
    ``(dueMs, phyOffset)`` order, after ``cursor``, due in ``[fromMs, toMs)``, filtered by
    real ``topic``, ``msgId`` (UNIQ_KEY), ``key`` (KEYS) and ``kind``."""

    cursor: str | None = wire("cursor", default=None)
    limit: int = wire("limit", default=DEFAULT_PAGE)
    topic: str | None = wire("topic", default=None)
    msg_id: str | None = wire("msgId", default=None)
    key: str | None = wire("key", default=None)
    kind: str = wire("kind", default="all")
    from_ms: int | None = wire("fromMs", default=None)
    to_ms: int | None = wire("toMs", default=None)
    max_scan: int = wire("maxScan", default=DEFAULT_SCAN)


@dataclass(slots=True)
class PendingHistogramRequestHeader(Header):
    """KAIROS_PENDING_HISTOGRAM (908): pending messages per ``unit`` (minute, hour, day)
    of due time in ``[fromMs, toMs)``; with ``topic``, a scan from ``cursor`` that may
    stop after ``maxScan`` entries (``complete: false`` and a ``nextCursor``)."""

    unit: str = wire("unit", default="hour")
    topic: str | None = wire("topic", default=None)
    kind: str = wire("kind", default="all")
    from_ms: int | None = wire("fromMs", default=None)
    to_ms: int | None = wire("toMs", default=None)
    cursor: str | None = wire("cursor", default=None)
    max_scan: int = wire("maxScan", default=DEFAULT_SCAN)


@dataclass(slots=True)
class ReschedulePendingRequestHeader(Header):
    """KAIROS_RESCHEDULE_PENDING (909): move the pending message(s) named by ``ref``,
    ``msgId`` or ``key`` (optionally only of ``topic``) to ``dueMs``; ``runNow`` makes
    them due at once. Each fires once: at the new instant, or (the fire won) at the old."""

    ref: str | None = wire("ref", default=None)
    msg_id: str | None = wire("msgId", default=None)
    key: str | None = wire("key", default=None)
    topic: str | None = wire("topic", default=None)
    due_ms: int | None = wire("dueMs", default=None)
    run_now: bool = wire("runNow", default=False)


@dataclass(slots=True)
class RecallPendingRequestHeader(Header):
    """KAIROS_RECALL_PENDING (910): recall the pending message(s) named by ``ref``,
    ``msgId`` or ``key`` (optionally only of ``topic``), without the producer's handle."""

    ref: str | None = wire("ref", default=None)
    msg_id: str | None = wire("msgId", default=None)
    key: str | None = wire("key", default=None)
    topic: str | None = wire("topic", default=None)
