"""Pending scheduled messages for operators: KAIROS_BROWSE_PENDING (907),
KAIROS_PENDING_HISTOGRAM (908), KAIROS_RESCHEDULE_PENDING (909) and KAIROS_RECALL_PENDING
(910); ``kairosmq admin pending ...`` (headers and the cursor: ``protocol/pending.py``).

Owns: ``PendingMessageProcessor``: each request's checks (a bad field answers
SYSTEM_ERROR with a remark naming it, before any work), the JSON answers, and the
refusals of actions (ILLEGAL_OPERATION: nothing pending matches, or every match already
fired). The view is ``schedule/pending/browse.py``'s, the actions
``schedule/pending/actions.py``'s.

Invariants: the checks run synchronously in the handler (``ingress.guarded`` answers a
``Rejected``); the work is a coroutine. Browsing reads only. Every action is admin-only
(``server/security/access.py``) and decided per message like RECALL_MESSAGE.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any  # Any: JSON answer bodies; coroutine type parameters

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import shown
from kairosmq.protocol.pending import (
    KINDS,
    MAX_PAGE,
    MAX_SCAN,
    UNITS_MS,
    BrowsePendingRequestHeader,
    PendingHistogramRequestHeader,
    RecallPendingRequestHeader,
    ReschedulePendingRequestHeader,
    format_ref,
    parse_ref,
)

from ...remoting.ingress import Rejected, check_topic
from ...schedule.pending.actions import ActionError, PendingActions
from ...schedule.pending.browse import START, PendingView
from ...store.index import KIND_KEY, KIND_UNIQ

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...store.index import KeyIndex

SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
ILLEGAL_OPERATION = ResponseCode.ILLEGAL_OPERATION
MAX_SPAN_MS = 41 * 86_400_000  # a histogram covers at most this (timers: 40 days ahead)
Answer = Coroutine[Any, Any, RemotingCommand]


def _json(cmd: RemotingCommand, data: Any) -> RemotingCommand:
    return cmd.response(body=orjson.dumps(data))


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise Rejected(SYSTEM_ERROR, f"kind: {shown(kind)} is not one of {', '.join(KINDS)}")
    return kind


def _cursor(text: str | None, field: str = "cursor") -> tuple[int, int]:
    if text is None or text == "":
        return START
    pair = parse_ref(text)
    if pair is None:
        raise Rejected(SYSTEM_ERROR, f"{field}: {shown(text)} is not <dueMs>:<phyOffset>")
    return pair


def _topic(topic: str | None) -> str | None:
    if topic:
        check_topic(topic)
        return topic
    return None


def _window(from_ms: int | None, to_ms: int | None) -> None:
    for name, v in (("fromMs", from_ms), ("toMs", to_ms)):
        if v is not None and v < 0:
            raise Rejected(SYSTEM_ERROR, f"{name}: {v} is negative")
    if from_ms is not None and to_ms is not None and to_ms <= from_ms:
        raise Rejected(SYSTEM_ERROR, f"toMs {to_ms} is not after fromMs {from_ms}")


def _positive(name: str, v: int, cap: int) -> int:
    if v <= 0:
        raise Rejected(SYSTEM_ERROR, f"{name}: {v} must be positive")
    return min(v, cap)


def _one_name(ref: str | None, msg_id: str | None, key: str | None) -> None:
    named = [n for n, v in (("ref", ref), ("msgId", msg_id), ("key", key)) if v]
    if len(named) != 1:
        raise Rejected(
            SYSTEM_ERROR,
            "name the message with exactly one of ref, msgId, key"
            + (f" (got {', '.join(named)})" if named else ""),
        )


class PendingMessageProcessor:
    """Browse, histogram, reschedule / run now, recall of pending scheduled messages."""

    def __init__(
        self,
        *,
        view: PendingView,
        actions: PendingActions,
        index: KeyIndex,
        clock_ms: Callable[[], int],
    ) -> None:
        self.view = view
        self.actions = actions
        self.index = index
        self.clock_ms = clock_ms

    # ------------------------------------------------------------------ browse

    def handle_browse(self, conn: Connection, cmd: RemotingCommand) -> Answer:
        h = BrowsePendingRequestHeader.from_ext_fields(cmd.ext_fields)
        after = _cursor(h.cursor)
        kind = _kind(h.kind)
        topic = _topic(h.topic)
        _window(h.from_ms, h.to_ms)
        limit = _positive("limit", h.limit, MAX_PAGE)
        max_scan = _positive("maxScan", h.max_scan, MAX_SCAN)
        if h.msg_id and h.key:
            raise Rejected(SYSTEM_ERROR, "give msgId or key, not both")
        return self._browse(cmd, h, after, kind, topic, limit, max_scan)

    async def _browse(
        self,
        cmd: RemotingCommand,
        h: BrowsePendingRequestHeader,
        after: tuple[int, int],
        kind: str,
        topic: str | None,
        limit: int,
        max_scan: int,
    ) -> RemotingCommand:
        if h.msg_id or h.key:
            lookup = (KIND_UNIQ, h.msg_id) if h.msg_id else (KIND_KEY, h.key)
            phys = self.index.lookup(lookup[0], str(lookup[1]))
            page = await self.view.by_candidates(
                phys,
                after,
                limit=limit,
                from_ms=h.from_ms,
                to_ms=h.to_ms,
                topic=topic,
                kind=kind,
            )
        else:
            page = await self.view.page(
                after,
                limit=limit,
                from_ms=h.from_ms,
                to_ms=h.to_ms,
                topic=topic,
                kind=kind,
                max_scan=max_scan,
            )
        page["nowMs"] = self.clock_ms()
        return _json(cmd, page)

    # ------------------------------------------------------------------ histogram

    def handle_histogram(self, conn: Connection, cmd: RemotingCommand) -> Answer:
        h = PendingHistogramRequestHeader.from_ext_fields(cmd.ext_fields)
        unit_ms = UNITS_MS.get(h.unit)
        if unit_ms is None:
            raise Rejected(
                SYSTEM_ERROR, f"unit: {shown(h.unit)} is not one of {', '.join(UNITS_MS)}"
            )
        kind = _kind(h.kind)
        topic = _topic(h.topic)
        _window(h.from_ms, h.to_ms)
        after = _cursor(h.cursor)
        max_scan = _positive("maxScan", h.max_scan, MAX_SCAN)
        from_ms = h.from_ms if h.from_ms is not None else 0
        to_ms = h.to_ms if h.to_ms is not None else self.clock_ms() + MAX_SPAN_MS
        if to_ms - max(from_ms, self.clock_ms() - MAX_SPAN_MS) > MAX_SPAN_MS * 2:
            raise Rejected(SYSTEM_ERROR, f"toMs {to_ms}: a histogram spans at most 82 days")
        return self._histogram(cmd, h.unit, unit_ms, from_ms, to_ms, kind, topic, after, max_scan)

    async def _histogram(
        self,
        cmd: RemotingCommand,
        unit: str,
        unit_ms: int,
        from_ms: int,
        to_ms: int,
        kind: str,
        topic: str | None,
        after: tuple[int, int],
        max_scan: int,
    ) -> RemotingCommand:
        nxt: tuple[int, int] | None = None
        scanned = None
        if topic is None:
            bins = await self.view.histogram(
                unit_ms=unit_ms, from_ms=from_ms, to_ms=to_ms, kind=kind
            )
        else:
            bins, nxt, scanned = await self.view.topic_histogram(
                unit_ms=unit_ms,
                from_ms=from_ms,
                to_ms=to_ms,
                kind=kind,
                topic=topic,
                after=after,
                max_scan=max_scan,
            )
        rows = [{"startMs": b, "timers": n[0], "levels": n[1]} for b, n in sorted(bins.items())]
        return _json(
            cmd,
            {
                "unit": unit,
                "fromMs": from_ms,
                "toMs": to_ms,
                "topic": topic,
                "bins": rows,
                "timers": sum(r["timers"] for r in rows),
                "levels": sum(r["levels"] for r in rows),
                "complete": nxt is None,
                "nextCursor": format_ref(*nxt) if nxt is not None else None,
                "scanned": scanned,
                "nowMs": self.clock_ms(),
            },
        )

    # ------------------------------------------------------------------ actions

    def handle_reschedule(self, conn: Connection, cmd: RemotingCommand) -> Answer:
        h = ReschedulePendingRequestHeader.from_ext_fields(cmd.ext_fields)
        _one_name(h.ref, h.msg_id, h.key)
        ref = _cursor(h.ref, "ref") if h.ref else None
        topic = _topic(h.topic)
        if h.due_ms is not None and h.run_now:
            raise Rejected(SYSTEM_ERROR, "give dueMs or runNow, not both")
        if h.due_ms is not None and h.due_ms < 0:
            raise Rejected(SYSTEM_ERROR, f"dueMs: {h.due_ms} is negative")
        try:
            self.actions.new_due(h.due_ms, h.run_now)  # checked now; taken again later
        except ActionError as err:
            raise Rejected(SYSTEM_ERROR, str(err)) from None
        return self._act(cmd, "reschedule", ref, h.msg_id, h.key, topic, h.due_ms, h.run_now)

    def handle_recall(self, conn: Connection, cmd: RemotingCommand) -> Answer:
        h = RecallPendingRequestHeader.from_ext_fields(cmd.ext_fields)
        _one_name(h.ref, h.msg_id, h.key)
        ref = _cursor(h.ref, "ref") if h.ref else None
        topic = _topic(h.topic)
        born = (conn.born_ip, conn.peer_port)
        return self._act(cmd, "recall", ref, h.msg_id, h.key, topic, None, False, born)

    async def _act(
        self,
        cmd: RemotingCommand,
        action: str,
        ref: tuple[int, int] | None,
        msg_id: str | None,
        key: str | None,
        topic: str | None,
        due_ms: int | None,
        run_now: bool,
        born: tuple[bytes, int] = (b"\x00\x00\x00\x00", 0),
    ) -> RemotingCommand:
        try:
            targets, named = await self.actions.targets(
                ref=ref, msg_id=msg_id, key=key, topic=topic
            )
            if not targets:
                return cmd.error(
                    ILLEGAL_OPERATION,
                    f"{action} failed: no pending delayed or timer message with {named} "
                    f"on this broker (already delivered, recalled, or unknown)",
                )
            results = []
            for t in targets:
                if action == "recall":
                    results.append(await self.actions.recall(t, born))
                else:
                    due = self.actions.new_due(due_ms, run_now)
                    results.append(await self.actions.reschedule(t, due, run_now))
        except ActionError as err:
            return cmd.error(SYSTEM_ERROR, f"{action} failed: {err}")
        done = [r for r in results if r["outcome"] in ("rescheduled", "recalled")]
        if not done:
            why = ", ".join(sorted({r["outcome"] for r in results}))
            return cmd.error(ILLEGAL_OPERATION, f"{action} failed: {named}: {why}")
        return _json(cmd, {"action": action, "results": results, "done": len(done)})
