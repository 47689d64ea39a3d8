"""The re-put of a due record into its real topic: one protocol for the delay levels and
the timers.

Owns: the restores of a due record (``restore_delayed_view``: a schedule record back to
its real topic with ``KAIROS_SCHEDULE_ORIGIN=level:offset``; ``restore_timer_view``: a
timer record with ``KAIROS_TIMER_ORIGIN=due:phy``; each gives the record's layout, where
it goes and the properties to store, without decoding the record, for
``MessageStore.put_patched``), their object-path references (``restore_delayed`` /
``restore_timer``: the same message built through ``put/requeue.py``'s copy; the services
never call them, tests/server/test_reput_parity.py holds the views to them byte for
byte), ``RequeueError``, ``Target`` (what a re-put stored), ``Reputs`` (one service's
re-puts, one or a batch in one call: restore, put the patched record, the outcome and
the reason of a skip, the origin in flight, the undo log of progress not yet written)
and ``RETRY_PAUSE``.

Invariants:
* One outcome per attempt: DONE (stored: progress moves past it), SKIP (it can never be
  stored: undecodable, REAL_TOPIC/REAL_QID naming no queue, a put refused as illegal;
  the service logs its ``<service>.record_skipped`` with the attempt's reason and moves
  past it, so a task never stalls or dies on a record) or RETRY (not stored now: the
  same record again after ``RETRY_PAUSE``, nothing overtakes it).
* The origin in flight: ``in_flight`` is the ``(a, b)`` of the re-put being made, set
  around the store write only (``in_flight_props``: the properties dict that write
  dispatches); a dispatch listener accepts an origin online only when ``made`` says it
  is that one, or its request carries that very dict, so no client property moves
  progress. A batch sets them item by item, each around its own write.
* A delivered copy keeps every client property (UNIQ_KEY: the same msgId), body, flag,
  sys flag, born time and host, gets a fresh store time and loses the internal
  properties, except that a level re-put keeps REAL_TOPIC/REAL_QID (as RocketMQ does)
  and the due time (it marks the re-put as a delivery in logs and stats), and a timer
  fire keeps ``TIMER_OUT_MS`` (when it was due) and drops the timer properties.
* Nothing trusts a record's properties: REAL_QID must be a decimal of at most
  ``INT32_DIGITS`` digits, or the record is skipped (``RequeueError``).
* The restores here are the reference; their native twin (``_reput.pyx``, chosen by
  ``protocol/native.py``) builds the same view, target and properties in one pass and
  hands every record it cannot restore to them, and runs ``Reputs.put_many``'s loop
  step for step (tests/server/test_native_reput.py: the same settles and bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from types import ModuleType, SimpleNamespace
from typing import Generic, NamedTuple, TypeVar

from kairosmq.protocol import native
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import MessageExt, RecordView, decode_record, view_record
from kairosmq.protocol.properties import (
    DELIVER_TIME,
    INT32_DIGITS,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
    TIMER_ORIGIN,
    TIMER_PROPERTIES,
    decode_properties,
    parse_decimal,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ..put.requeue import INTERNAL_PROPERTIES, requeue, stripped
from ..store import MessageInner, MessageStore, PutResult, PutStatus
from ..store.undo import UndoLog

RETRY_PAUSE = 0.2  # seconds before a task tries a re-put the store could not make again
# statuses that will not change on a retry: the record is skipped
PERMANENT = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)
_KEEP_ON_REPUT = (REAL_TOPIC, REAL_QID, DELIVER_TIME)  # a level re-put keeps these, in order
_TIMER_STRIP = INTERNAL_PROPERTIES + TIMER_PROPERTIES  # what a fired timer copy drops

Restore = tuple[RecordView, str, int, dict[str, str]]
RestoreView = Callable[[bytes, int, int], Restore]
PutPatched = Callable[[bytes, RecordView, str, int, dict[str, str]], PutResult]
U = TypeVar("U")


class RequeueError(ValueError):
    """A stored record cannot be re-put (undecodable, or a property it relies on is bad)."""


# ------------------------------------------------------------------ restores


def _view(record: bytes) -> tuple[RecordView, dict[str, str]]:
    try:
        view = view_record(record)
        return view, decode_properties(record[view.props_start : view.props_end].decode())
    except (MessageDecodeError, UnicodeDecodeError) as err:
        raise RequeueError(str(err)) from err


def _decoded(record: bytes) -> MessageExt:
    try:
        return decode_record(record)
    except MessageDecodeError as err:
        raise RequeueError(str(err)) from err


def _queue_id(props: dict[str, str]) -> int | None:
    return parse_decimal(props.get(REAL_QID, "0"), INT32_DIGITS)


def _delayed_target(props: dict[str, str], stored_topic: str) -> tuple[str, int]:
    qid = _queue_id(props)
    if qid is None:
        raise RequeueError(f"REAL_QID {props[REAL_QID][:32]!r} is not a queue id")
    return props.get(REAL_TOPIC, stored_topic), qid


def _delayed_properties(props: dict[str, str], level: int, offset: int) -> dict[str, str]:
    new = stripped(props, INTERNAL_PROPERTIES)
    for k in _KEEP_ON_REPUT:
        if k in props:
            new[k] = props[k]
    new[SCHEDULE_ORIGIN] = f"{level}:{offset}"
    return new


def restore_delayed_view(record: bytes, level: int, schedule_offset: int) -> Restore:
    """A due schedule record's layout, real topic and queue, and the properties to store:
    no DELAY, ``KAIROS_SCHEDULE_ORIGIN=level:offset``. Raises ``RequeueError`` for a
    record that cannot be decoded or whose REAL_QID is not a queue id."""
    view, props = _view(record)
    topic, qid = _delayed_target(props, view.topic)
    return view, topic, qid, _delayed_properties(props, level, schedule_offset)


def restore_delayed(record: bytes, level: int, schedule_offset: int) -> MessageInner:
    """``restore_delayed_view``'s message, decoded and copied (the parity reference)."""
    m = _decoded(record)
    topic, qid = _delayed_target(m.properties, m.topic)
    return requeue(
        m, topic, qid, properties=_delayed_properties(m.properties, level, schedule_offset)
    )


def _timer_target(props: dict[str, str]) -> tuple[str, int]:
    topic = props.get(REAL_TOPIC, "")
    qid = _queue_id(props)
    if not topic or qid is None:
        raise RequeueError(
            f"REAL_TOPIC {topic[:64]!r} / REAL_QID "
            f"{props.get(REAL_QID, '0')[:32]!r} do not name a queue"
        )
    return topic, qid


def _timer_properties(props: dict[str, str], due: int, phy: int) -> dict[str, str]:
    new = stripped(props, _TIMER_STRIP)
    new[TIMER_OUT_MS] = str(due)
    new[TIMER_ORIGIN] = f"{due}:{phy}"
    return new


def restore_timer_view(record: bytes, due: int, phy: int) -> Restore:
    """A due timer record's layout, real topic and queue, and the properties to store:
    the timer properties gone except ``TIMER_OUT_MS`` (when it was due), and
    ``KAIROS_TIMER_ORIGIN=due:phy``. Raises ``RequeueError`` for a record that cannot be
    decoded or whose REAL_TOPIC/REAL_QID do not name a queue."""
    view, props = _view(record)
    topic, qid = _timer_target(props)
    return view, topic, qid, _timer_properties(props, due, phy)


def restore_timer(record: bytes, due: int, phy: int) -> MessageInner:
    """``restore_timer_view``'s message, decoded and copied (the parity reference)."""
    m = _decoded(record)
    topic, qid = _timer_target(m.properties)
    return requeue(
        m, topic, qid, drop=TIMER_PROPERTIES, properties=_timer_properties(m.properties, due, phy)
    )


# ------------------------------------------------------------------ the native twin

# The restores above are the reference (tests/server/test_native_reput.py holds the twin
# to them); the twin's (``_reput.pyx``) replace them when protocol/native.py chooses it.
reference = SimpleNamespace(
    restore_delayed_view=restore_delayed_view, restore_timer_view=restore_timer_view
)


def _load_twin() -> ModuleType:
    from . import _reput  # type: ignore[attr-defined]

    twin: ModuleType = _reput  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    restore_delayed_view = _twin.restore_delayed_view
    restore_timer_view = _twin.restore_timer_view


# ------------------------------------------------------------------ the protocol


class Target:
    """What a re-put stored, as the delivery events need it (duck-types MessageInner)."""

    __slots__ = ("topic", "queue_id", "properties", "reconsume_times")

    def __init__(
        self, topic: str, queue_id: int, properties: dict[str, str], reconsume_times: int
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.properties = properties
        self.reconsume_times = reconsume_times


class Outcome(Enum):
    DONE = "done"  # stored: progress moves past it
    SKIP = "skip"  # never storable: logged, progress moves past it
    RETRY = "retry"  # not stored now: the same record after RETRY_PAUSE


class Attempt(NamedTuple):
    outcome: Outcome
    result: PutResult | None  # None: the record could not be restored, nothing was put
    target: Target | None
    reason: str  # why a SKIP


_NO_RETRY = Attempt(Outcome.RETRY, None, None, "")


class Reputs(Generic[U]):
    """One service's re-puts of due records (``U``: what its undo log keeps)."""

    # slotted: the twin's ``put_many`` and the services' dispatch listeners read and write
    # these by offset
    __slots__ = ("restore", "put_patched", "in_flight", "in_flight_props", "last_retry", "undo")

    def __init__(
        self, store: MessageStore, restore: RestoreView, *, put_patched: PutPatched | None = None
    ) -> None:
        self.restore = restore
        self.put_patched = put_patched or store.put_patched  # a test wraps it (failures)
        self.in_flight: tuple[int, int] | None = None
        # the properties of the re-put being made: the dispatch of that very put carries
        # this dict, so a listener knows its origin by identity without parsing it
        self.in_flight_props: dict[str, str] | None = None
        self.last_retry = _NO_RETRY  # the RETRY that stopped the last batch
        # per re-put dispatched but not written yet: what a rollback of it undoes
        self.undo: UndoLog[U] = UndoLog(lambda: store.commitlog.written_offset)

    def put(self, record: bytes, a: int, b: int) -> Attempt:
        """Restore ``record`` with origin ``(a, b)``, put it patched, say the outcome."""
        out: list[Attempt] = []
        self.put_many([(record, a, b)], "", lambda attempt, _a, _b: out.append(attempt))
        return out[0] if out else self.last_retry

    def put_many(
        self,
        items: Sequence[tuple[bytes | None, int, int]],
        unread: str,
        settle: Callable[[Attempt, int, int], None],
    ) -> int:
        """Re-put each ``(record, a, b)`` of ``items`` in order, ``put``'s steps in one
        frame for the batch; a ``None`` record (it could not be read) is a SKIP with the
        reason ``unread``. ``settle(attempt, a, b)`` is called right after each DONE or
        SKIP, before the next item is tried (the service moves its progress there, as
        after ``put``). Stops at the first RETRY (kept in ``last_retry``): returns how
        many items were settled, so ``items[returned]`` is the one to retry, if any."""
        restore, put_patched = self.restore, self.put_patched
        ok, permanent = PutStatus.PUT_OK, PERMANENT
        for i, (record, a, b) in enumerate(items):
            if record is None:
                settle(Attempt(Outcome.SKIP, None, None, unread), a, b)
                continue
            self.in_flight = (a, b)
            try:
                view, topic, queue_id, props = restore(record, a, b)
                self.in_flight_props = props
                result = put_patched(record, view, topic, queue_id, props)
            except RequeueError as err:
                reason = f"cannot restore the message: {err}"
                settle(Attempt(Outcome.SKIP, None, None, reason), a, b)
                continue
            finally:
                self.in_flight = self.in_flight_props = None
            target = Target(topic, queue_id, props, view.reconsume_times)
            status = result.status
            if status is ok:
                settle(Attempt(Outcome.DONE, result, target, ""), a, b)
            elif status in permanent:
                reason = f"the re-put was refused: {result.remark or status.value}"
                settle(Attempt(Outcome.SKIP, result, target, reason), a, b)
            else:
                self.last_retry = Attempt(Outcome.RETRY, result, target, "")
                return i
        return len(items)

    def made(self, origin: tuple[int, int]) -> bool:
        """Whether ``origin`` is the re-put this service is making right now."""
        return origin == self.in_flight


# ``Reputs.put_many`` above is the reference; the twin's replaces it with the restores
reference.put_many = Reputs.put_many
if _twin is not None:
    Reputs.put_many = _twin.put_many  # type: ignore[method-assign]
