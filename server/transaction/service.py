"""TransactionService: pending half messages, END_TRANSACTION and the check-back.

Owns: the pending table (half commit-log offset -> ``HalfEntry``), derived from the
commit log alone: a half record (``RMQ_SYS_TRANS_HALF_TOPIC``) adds an entry; an op
record tagged ``d`` (``RMQ_SYS_TRANS_OP_HALF_TOPIC``) or a committed copy carrying
``KAIROS_TX_HALF`` removes it; an op record tagged ``c`` counts a check. ``end`` (commit,
rollback), ``run`` (the supervised check-back service: CHECK_TRANSACTION_STATE to a
live producer of the group, at most ``transaction_check_max`` times, then discard) and
``status`` (KAIROS_GET_TRANSACTION_STATUS), ``half_topic`` (the real topic of the half
message at a commit-log offset: what END_TRANSACTION's ACL check needs PUB on). A
StateProvider: the table is saved with
each checkpoint and rebuilt by replaying the log after it.

Invariants:
* Crash-exact: a commit is one append that both delivers the message and ends the
  half message (the committed copy names it), so after ``kill -9`` a committed
  message is neither lost nor put twice; the op record written right after it is the
  RocketMQ-visible trace. A rollback or discard is its op record. An end for a half
  message that is no longer pending changes nothing (the second of two ends, a check
  answer racing the producer's own end).
* A committed copy's ``KAIROS_TX_HALF`` is accepted live only for the commit in
  progress (``_ending``); clients cannot send it (ingress strips ``KAIROS_*``).
* Checks count only when sent to a live producer (an op record ``c`` each, so the
  count survives a crash); with no live producer the half message is tried again
  after ``transaction_check_interval``.
* Synchronous on the event loop (dispatch, end); ``run`` awaits only its sleep.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any  # Any: JSON values; supervisor state; a producer's connection

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import CheckTransactionStateRequestHeader
from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.protocol.properties import (
    DELAY,
    INT32_DIGITS,
    PGROUP,
    TAGS,
    UNIQ_KEY,
    parse_decimal,
)
from kairosmq.protocol.timer import TimerIllegal, has_timer, resolve_timer

from ..observe.logs import MessageLog, get_logger
from ..put.kind import MessageKind
from ..put.path import response_code
from ..remoting.client_calls import notify_client
from ..store import PutStatus
from ..store.message_store import interested_in
from ..store.undo import UndoLog
from .messages import (
    CHECK_IMMUNITY,
    HALF_TOPIC,
    OP_CHECK_TAG,
    OP_REMOVE_TAG,
    OP_TOPIC,
    TX_HALF,
    check_body,
    committed_message,
    op_message,
    parse_key,
    real_address,
)

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..store import DispatchRequest, MessageStore, PutResult
    from ..tables.clients import ClientRegistry

PutFn = Callable[..., "PutResult"]
COMMIT, ROLLBACK, UNKNOWN = 0x8, 0xC, 0x0  # MessageSysFlag TRANSACTION_*_TYPE


@dataclass(slots=True)
class HalfEntry:
    queue_offset: int
    phy: int
    size: int
    group: str
    topic: str
    msg_id: str
    store_ts: int
    immunity_ms: int
    checks: int = 0
    next_check_ms: int = 0

    def row(self) -> list[Any]:
        return [
            self.queue_offset,
            self.phy,
            self.size,
            self.group,
            self.topic,
            self.msg_id,
            self.store_ts,
            self.immunity_ms,
            self.checks,
        ]


class TransactionError(Exception):
    """An END_TRANSACTION that cannot be applied: ``code`` and RocketMQ's remark."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class TransactionService:
    """Pending half messages, their ends and check-backs; a StateProvider of the store."""

    name = "transaction"

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        clients: ClientRegistry,
        put: PutFn,
        *,
        clock_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.config = config
        self.clients = clients
        self.put = put  # PutPath.put(msg, kind, *, due_ms=0)
        self.clock_ms = clock_ms
        self.log = get_logger("transaction")
        self.msglog = MessageLog("transaction")  # per-message events (log_messages)
        self.pending: dict[int, HalfEntry] = {}
        self.counters: Counter[str] = Counter()  # committed, rolled_back, checked, ...
        self._heap: list[tuple[int, int]] = []  # (next check ms, phy); stale rows skipped
        self._ending: int | None = None
        # the entries ended by appends that a failed write may still roll back
        self._undo: UndoLog[HalfEntry] = UndoLog(lambda: store.commitlog.written_offset)
        self._wake: asyncio.Event | None = None
        store.rollback_listeners.append(self.rollback)

    # ------------------------------------------------------------- StateProvider

    def snapshot(self) -> dict[str, Any]:
        return {"pending": [e.row() for e in self.pending.values()]}

    def restore(self, state: Any) -> None:
        self.pending = {}
        rows = state.get("pending") if isinstance(state, dict) else None
        for row in rows if isinstance(rows, list) else ():
            if not (isinstance(row, list) and len(row) == 9):
                continue
            qoff, phy, size, group, topic, msg_id, store_ts, immunity, checks = row
            if not all(isinstance(v, int) for v in (qoff, phy, size, store_ts, immunity, checks)):
                continue
            self._add(
                HalfEntry(
                    qoff, phy, size, str(group), str(topic), str(msg_id), store_ts, immunity, checks
                )
            )

    # ------------------------------------------------------------- dispatch

    @interested_in(topics=(HALF_TOPIC,), properties=(TX_HALF,))  # halves, their ends
    def on_dispatch(self, req: DispatchRequest) -> None:
        props = req.properties
        if req.topic == HALF_TOPIC:
            self._add(self._entry(req))
            return
        raw = props.get(TX_HALF)
        if raw is None:
            return
        key = parse_key(raw)
        if key is None:
            return
        phy = key[1]
        if req.topic == OP_TOPIC:
            tag = props.get(TAGS)
            if tag == OP_CHECK_TAG:
                entry = self.pending.get(phy)
                if entry is not None:
                    entry.checks += 1
            elif tag == OP_REMOVE_TAG:
                self._ended(phy, req)
            return
        if phy not in self.pending:
            return  # a later copy (a delayed commit's re-put, a retry) of a commit
        if req.replay or phy == self._ending:
            self._ended(phy, req)  # a committed copy: the commit itself
        else:
            self.log.warning(
                "transaction.origin_ignored", phy_offset=req.phy_offset, origin=raw[:64]
            )

    def _entry(self, req: DispatchRequest) -> HalfEntry:
        props = req.properties
        immunity = int(self.config.transaction_timeout * 1000)
        seconds = parse_decimal(props.get(CHECK_IMMUNITY), INT32_DIGITS)
        if seconds is not None:
            immunity = seconds * 1000  # getImmunityTime: seconds replace the timeout
        addr = real_address(props)
        return HalfEntry(
            req.queue_offset,
            req.phy_offset,
            req.size,
            props.get(PGROUP, ""),
            addr[0] if addr else "",
            props.get(UNIQ_KEY, ""),
            req.store_timestamp,
            immunity,
        )

    def _add(self, entry: HalfEntry) -> None:
        entry.next_check_ms = entry.store_ts + entry.immunity_ms
        self.pending[entry.phy] = entry
        heapq.heappush(self._heap, (entry.next_check_ms, entry.phy))
        if self._wake is not None and self._heap[0][1] == entry.phy:
            self._wake.set()

    def _ended(self, phy: int, req: DispatchRequest) -> None:
        entry = self.pending.pop(phy, None)
        if entry is None or req.replay:
            return
        self._undo.add(req.phy_offset, entry)

    def rollback(self, kept: int) -> None:
        """A failed write rolled the log back to ``kept``: forget what it added."""
        for phy in [p for p in self.pending if p >= kept]:
            del self.pending[phy]
        for entry in self._undo.rollback_from(kept):
            if entry.phy < kept:  # ended by a dropped append: pending again
                self._add(entry)

    # ------------------------------------------------------------- END_TRANSACTION

    def end(
        self, group: str, queue_offset: int, phy: int, kind: int, from_check: bool, peer: str
    ) -> str | None:
        """Commit or roll back the half message at ``phy``; None when applied, else why
        nothing was done ("already ended"). Raises ``TransactionError``."""
        entry = self.pending.get(phy)
        if entry is None:
            return self._not_pending(queue_offset, phy)
        if entry.group != group:
            raise TransactionError(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if entry.queue_offset != queue_offset:
            raise TransactionError(
                ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
            )
        how = "commit" if kind == COMMIT else "rollback"
        if kind == COMMIT:
            self._commit(entry)
        op = self._op(entry, OP_REMOVE_TAG, how)
        if kind == ROLLBACK:
            if op.status is not PutStatus.PUT_OK:
                raise TransactionError(response_code(op.status), op.remark or op.status.value)
            self.pending.pop(entry.phy, None)
        fields = dict(
            msg_id=entry.msg_id,
            producer_group=group,
            topic=entry.topic,
            half_offset=entry.phy,
            checks=entry.checks,
            from_check=from_check,
            peer=peer,
        )
        if kind == COMMIT:
            self.counters["committed"] += 1
            if self.config.log_messages and self.msglog.enabled:
                self.msglog.info("transaction.committed", **fields)
        else:
            self.counters["rolled_back"] += 1
            if self.config.log_messages and self.msglog.enabled:
                self.msglog.info("transaction.rolled_back", **fields)
        return None

    def _not_pending(self, queue_offset: int, phy: int) -> str:
        m = self._half_record(phy)
        if m is not None and m.queue_offset == queue_offset:
            return "the transaction already ended; this end is ignored"
        raise TransactionError(
            ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
        )

    def _half_record(self, phy: int) -> MessageExt | None:
        """The half message stored at ``phy`` (pending or ended), or None."""
        rec = self.store.read_at(phy)
        if rec is None:
            return None
        try:
            m = decode_record(rec)
        except MessageDecodeError:
            return None
        return m if m.topic == HALF_TOPIC else None

    def half_topic(self, phy: int) -> str | None:
        """The real topic of the half message at ``phy``: the pending entry's, else the
        stored half record's (an ended one); None when no half message is there, and then
        ``end`` changes nothing. A half record without a real topic answers the half topic
        itself (a system topic: only an explicit grant or an admin reaches it)."""
        entry = self.pending.get(phy)
        if entry is not None:
            return entry.topic or HALF_TOPIC
        if phy < 0:
            return None
        m = self._half_record(phy)
        if m is None:
            return None
        addr = real_address(m.properties)
        return addr[0] if addr and addr[0] else HALF_TOPIC

    def _commit(self, entry: HalfEntry) -> None:
        rec = self.store.read(entry.phy, entry.size)
        try:
            m = decode_record(rec) if rec is not None else None
        except MessageDecodeError:
            m = None
        addr = real_address(m.properties) if m is not None else None
        if m is None or addr is None:
            raise TransactionError(
                ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
            )
        msg = committed_message(m, *addr)
        kind, due = MessageKind.NORMAL, 0
        if msg.properties.get(DELAY, "0") not in ("0", ""):
            kind = MessageKind.DELAYED
        elif has_timer(msg.properties):
            try:
                due = (
                    resolve_timer(
                        msg.properties,
                        self.clock_ms(),
                        self.config.timer_max_delay_sec * 1000,
                        round_up_ms=1,
                    )
                    or 0
                )
            except TimerIllegal:
                due = 0
            kind = MessageKind.TIMER if due else MessageKind.NORMAL
        self._ending = entry.phy
        try:
            result = self.put(msg, kind, due_ms=due)
        finally:
            self._ending = None
        if result.status is not PutStatus.PUT_OK:
            raise TransactionError(
                response_code(result.status), result.remark or result.status.value
            )

    def _op(self, entry: HalfEntry, tag: str, end: str | None) -> PutResult:
        msg = op_message(
            entry.queue_offset, entry.phy, tag, end, self.store.store_host, self.clock_ms()
        )
        return self.put(msg, MessageKind.TRANSACTION_OP)

    # ------------------------------------------------------------- check-back

    async def run(self, st: Any) -> None:
        """The check-back service (RocketMQ's TransactionalMessageCheckService)."""
        self._wake = asyncio.Event()
        while True:
            self.check_due(self.clock_ms())
            st.ok()
            wait = self.config.transaction_check_interval
            if self._heap:
                wait = min(wait, max(0.0, (self._heap[0][0] - self.clock_ms()) / 1000))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.005))
            except TimeoutError:
                pass

    def check_due(self, now: int) -> int:
        """Check (or discard) every pending half message due by ``now``; the count."""
        done = 0
        interval = int(self.config.transaction_check_interval * 1000)
        while self._heap and self._heap[0][0] <= now:
            at, phy = heapq.heappop(self._heap)
            entry = self.pending.get(phy)
            if entry is None or entry.next_check_ms != at:
                continue
            entry.next_check_ms = now + max(interval, 1)
            self._check_one(entry)
            if entry.phy in self.pending:
                heapq.heappush(self._heap, (entry.next_check_ms, entry.phy))
            done += 1
        return done

    def _check_one(self, entry: HalfEntry) -> bool:
        if entry.checks >= self.config.transaction_check_max:
            self._discard(entry, "transactionCheckMax checks without an end")
            return False
        conn = self._producer(entry.group)
        if conn is None:
            self.counters["no_producer"] += 1
            self.log.debug(
                "transaction.check_deferred",
                msg_id=entry.msg_id,
                producer_group=entry.group,
                reason="no live producer",
            )
            return False
        rec = self.store.read(entry.phy, entry.size)
        try:
            m = decode_record(rec) if rec is not None else None
        except MessageDecodeError:
            m = None
        if m is None:  # retention deleted its segment (RocketMQ's needSkip)
            self._discard(entry, "the half message is no longer in the commit log")
            return False
        if self._op(entry, OP_CHECK_TAG, None).status is not PutStatus.PUT_OK:
            return False  # the count must be stored first; tried again next interval
        host, port = m.store_host
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=entry.queue_offset,
            commit_log_offset=entry.phy,
            msg_id=entry.msg_id or None,
            transaction_id=entry.msg_id or None,
            offset_msg_id=create_offset_msg_id(host, port, entry.phy),
        )
        notify_client(
            conn, RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), check_body(m)
        )
        self.counters["checked"] += 1
        self.log.info(
            "transaction.checked",
            msg_id=entry.msg_id,
            producer_group=entry.group,
            topic=entry.topic,
            half_offset=entry.phy,
            checks=entry.checks,
            peer=conn.peer,
        )
        return True

    def _discard(self, entry: HalfEntry, reason: str) -> None:
        op = self._op(entry, OP_REMOVE_TAG, "discard")
        if op.status is PutStatus.PUT_OK:
            self.pending.pop(entry.phy, None)
            self.counters["discarded"] += 1
            self.log.warning(
                "transaction.discarded",
                msg_id=entry.msg_id,
                producer_group=entry.group,
                topic=entry.topic,
                half_offset=entry.phy,
                checks=entry.checks,
                reason=reason,
            )

    def _producer(self, group: str) -> Any:
        """A live connection of a producer of ``group`` (getAvailableChannel)."""
        for info in (self.clients.producers.get(group) or {}).values():
            conn = info.conn
            if not getattr(conn, "closed", True):
                return conn
        return None

    # ------------------------------------------------------------- admin

    def status(self, group: str | None = None, limit: int = 100) -> dict[str, Any]:
        """Pending half messages per producer group (KAIROS_GET_TRANSACTION_STATUS)."""
        now = self.clock_ms()
        groups: dict[str, dict[str, Any]] = {}
        for e in sorted(self.pending.values(), key=lambda e: e.phy):
            if group is not None and e.group != group:
                continue
            g = groups.setdefault(
                e.group, {"pending": 0, "oldestStoreTimestamp": e.store_ts, "messages": []}
            )
            g["pending"] += 1
            if len(g["messages"]) < limit:
                g["messages"].append(
                    {
                        "msgId": e.msg_id,
                        "topic": e.topic,
                        "commitLogOffset": e.phy,
                        "ageMs": now - e.store_ts,
                        "checks": e.checks,
                        "nextCheckInMs": max(0, e.next_check_ms - now),
                    }
                )
        return {
            "pending": sum(g["pending"] for g in groups.values()),
            "groups": groups,
            "counters": dict(self.counters),
            "transactionTimeoutMs": int(self.config.transaction_timeout * 1000),
            "transactionCheckIntervalMs": int(self.config.transaction_check_interval * 1000),
            "transactionCheckMax": self.config.transaction_check_max,
        }
