"""PendingActions: an operator reschedules, runs now or recalls a pending message.

Owns: finding the targets an action names (a ``ref`` ``<due>:<phy>`` from a browse page,
a msgId through the key index's UNIQ_KEY entries, a key through its KEYS entries; only
schedule and timer records, optionally of one real topic), the decision per target and
the one record that carries it out, and the ``schedule.rescheduled`` /
``schedule.recalled`` events.

Records (the commit log is the truth; replay after the checkpoint honours each):
* recall: the recall record RECALL_MESSAGE writes (``timer/topic.py``'s
  ``recall_record``: ``rmq_sys_wheel_timer`` queue 1, ``KAIROS_RECALL_TARGET``), so a
  recalled message never fires, whoever recalled it;
* reschedule and run now: a timer record, a copy of the message (body, properties,
  UNIQ_KEY: the same msgId) due at the new instant (run now: the broker's now), that also
  carries ``KAIROS_RESCHEDULE_OF=<due>:<phy>`` and ``KAIROS_RECALL_KIND`` of the record it
  replaces. Its dispatch (``TimerService.on_dispatch``) adds the new timer and cancels the
  old one in the same step, so the move is one append: after ``kill -9`` either the
  record is in the log (the old never fires, the new fires once at its instant) or it is
  not (the old fires at its own instant, and the operator got no SUCCESS).

Invariants:
* Decided like a recall: ``TimerService.recall_state`` / ``level_recall_state`` and then
  the append with no await in between, so an action racing the fire gets exactly one of
  "done" (the new instant, or never) and "already fired" (the old instant), never both.
* A new instant is never beyond ``timer_max_delay_sec`` from now (refused with a remark)
  and never behind the fired cursor (``TimerService.admit``); one in the past is now.
* An action names at most ``MAX_TARGETS`` messages (the key index's lookup limit).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import (
    TYPE_CHECKING,
    Any,
    NamedTuple,
)  # Any: JSON answer rows; a born host of either address family

from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.pending import MAX_TARGETS, format_ref
from kairosmq.protocol.properties import (
    INT32_DIGITS,
    REAL_QID,
    REAL_TOPIC,
    RECALL_KIND,
    RESCHEDULE_OF,
    UNIQ_KEY,
    parse_decimal,
)

from ...observe.logs import get_logger
from ...put.kind import MessageKind
from ...put.requeue import requeue
from ...store import PutResult, PutStatus
from ...store.index import KIND_KEY, KIND_UNIQ
from ..timer.topic import RecallOutcome, format_pair, recall_record
from .browse import Entry, PendingView

if TYPE_CHECKING:
    from ...store.index import KeyIndex
    from ..timer import TimerService


class Target(NamedTuple):
    entry: Entry
    message: MessageExt

    @property
    def kind(self) -> str:
        return "level" if self.entry.level else "timer"


class ActionError(Exception):
    """The request cannot be carried out as asked (the remark says why)."""


class PendingActions:
    """Reschedule, run now and recall pending messages for operators."""

    def __init__(
        self,
        *,
        view: PendingView,
        timer: TimerService,
        index: KeyIndex,
        put: Callable[..., PutResult],
        schedule_fired: Callable[[int, int], bool],
        clock_ms: Callable[[], int],
        max_delay_ms: int,
        wait_flushed: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        self.view = view
        self.timer = timer
        self.index = index
        self.put = put  # PutPath.put
        self.schedule_fired = schedule_fired  # (level, schedule queue offset) -> re-put?
        self.clock_ms = clock_ms
        self.max_delay_ms = max_delay_ms
        self.log = get_logger("schedule")
        self.wait_flushed = wait_flushed  # SYNC_FLUSH: answered once the record is on disk

    # ------------------------------------------------------------------ targets

    async def targets(
        self,
        *,
        ref: tuple[int, int] | None,
        msg_id: str | None,
        key: str | None,
        topic: str | None,
    ) -> tuple[list[Target], str]:
        """The pending messages an action names, and what was named (for remarks)."""
        if ref is not None:
            named = f"ref {format_ref(*ref)}"
            found = await self.view.pending_at(ref[1], ref[0])
            hits = [found] if found is not None else []
        elif msg_id:
            named = f"msgId {msg_id}"
            phys = self.index.lookup(KIND_UNIQ, msg_id, MAX_TARGETS)
            hits = [
                h
                for h in await self.view.pending_of(phys)
                if h[1].properties.get(UNIQ_KEY) == msg_id
            ]
        elif key:
            named = f"key {key}"
            phys = self.index.lookup(KIND_KEY, key, MAX_TARGETS)
            hits = [
                h
                for h in await self.view.pending_of(phys)
                if key in (h[1].properties.get("KEYS") or "").split(" ")
            ]
        else:
            raise ActionError("name the message: give ref, msgId or key")
        if topic:
            named += f" of topic {topic}"
            hits = [h for h in hits if h[1].properties.get(REAL_TOPIC) == topic]
        return [Target(e, m) for e, m in sorted(hits, key=lambda h: h[0])], named

    async def _decide(self, t: Target) -> RecallOutcome | None:
        """None: still pending; the caller appends right after, without awaiting."""
        e = t.entry
        if e.level:
            return self.timer.level_recall_state(
                e.phy, self.schedule_fired(e.level, e.queue_offset)
            )
        return await self.timer.recall_state(e.due, e.phy)

    # ------------------------------------------------------------------ actions

    def new_due(self, due_ms: int | None, run_now: bool) -> int:
        """The instant an action moves a message to (checked; the past is now)."""
        now = self.clock_ms()
        if run_now:
            return now
        if due_ms is None:
            raise ActionError("give dueMs (epoch ms) or runNow=true")
        if due_ms > now + self.max_delay_ms:
            raise ActionError(
                f"dueMs {due_ms} is more than timerMaxDelaySec "
                f"({self.max_delay_ms // 1000} s) after now ({now})"
            )
        return max(due_ms, now)

    async def reschedule(self, t: Target, due: int, run_now: bool) -> dict[str, Any]:
        outcome = await self._decide(t)
        row = _row(t)
        if outcome is not None:  # no await from the decision to the append
            row["outcome"] = outcome.value
            return row
        e, m = t.entry, t.message
        qid = parse_decimal(m.properties.get(REAL_QID, "0"), INT32_DIGITS)
        target_topic = m.properties.get(REAL_TOPIC)
        if not target_topic or qid is None:
            row["outcome"] = "unroutable"
            return row
        msg = requeue(
            m,
            target_topic,
            qid,
            properties={RESCHEDULE_OF: format_pair(e.due, e.phy), RECALL_KIND: t.kind},
        )
        result = self.put(msg, MessageKind.TIMER, due_ms=due)
        if result.status is not PutStatus.PUT_OK:
            raise ActionError(
                f"the rescheduled copy of {row['msgId']} was not stored: "
                f"{result.remark or result.status.value}"
            )
        new_due = int(msg.properties.get("TIMER_OUT_MS", due))
        self.log.info(
            "schedule.rescheduled",
            msg_id=row["msgId"],
            topic=target_topic,
            kind=t.kind,
            from_ts=e.due,
            deliver_ts=new_due,
            phy_offset=e.phy,
            new_phy_offset=result.phy_offset,
            run_now=run_now,
        )
        await self._flushed(result)
        row.update(
            outcome="rescheduled", newDueMs=new_due, newRef=format_ref(new_due, result.phy_offset)
        )
        return row

    async def recall(self, t: Target, born: Any) -> dict[str, Any]:
        outcome = await self._decide(t)
        row = _row(t)
        if outcome is not None:  # no await from the decision to the append
            row["outcome"] = outcome.value
            return row
        e = t.entry
        marker = recall_record(e.due, e.phy, t.kind, self.clock_ms(), born)
        result = self.put(marker, MessageKind.RECALL)
        if result.status is not PutStatus.PUT_OK:
            raise ActionError(
                f"the recall record of {row['msgId']} was not stored: "
                f"{result.remark or result.status.value}"
            )
        self.log.info(
            "schedule.recalled",
            msg_id=row["msgId"],
            topic=row["topic"],
            kind=t.kind,
            deliver_ts=e.due,
            phy_offset=e.phy,
        )
        await self._flushed(result)
        row["outcome"] = "recalled"
        return row

    async def _flushed(self, result: PutResult) -> None:
        if self.wait_flushed is not None and not await self.wait_flushed(
            result.phy_offset + result.size
        ):
            raise ActionError("the action's record was stored but its flush timed out")


def _row(t: Target) -> dict[str, Any]:
    props = t.message.properties
    return {
        "ref": format_ref(t.entry.due, t.entry.phy),
        "kind": t.kind,
        "msgId": props.get(UNIQ_KEY),
        "topic": props.get(REAL_TOPIC),
        "dueMs": t.entry.due,
    }
