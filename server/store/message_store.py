"""MessageStore: put, get and recover messages over the commit log and consume queues.

Owns: the consume queues (``queue``, created on first use) and their open mappings
(``maps``: at most ``max_open_queue_files``, least recently used closed; mapped.py),
``put`` (encode -> commit-log
append -> ``dispatch``), ``put_patched`` (the same for a stored record re-addressed
without decoding it: the scheduler's re-put), write-failure rollback, the checkpoint
(dispatch position plus the snapshots of registered state providers), recovery, flushing
and retention. The read
path (``get`` with tag filtering, checked lookups by physical offset) is ``StoreReads``
in reads.py, which ``MessageStore`` inherits.

Invariants:
* ``put`` is synchronous: on one event loop, "reserve, encode, append, dispatch" is
  atomic without a lock, and queue offsets are assigned in commit-log order.
* ``dispatch`` is the only writer of consume queues and the only feed of dispatch
  listeners (the scheduler derives its progress there). A listener may declare the
  records it needs (``interested_in``: topics, property names); it is then fed only
  those (``wants``, the one rule, read from ``Dispatchers.plan``), live or replayed, and
  one without a declaration is fed every record; recovery replays the records
  after the checkpoint through the same ``dispatch`` with ``replay=True``
  (``replay_record``, which a slave also runs on each replicated record:
  store/replica.py; its checkpoint then records ``replica_end``, the end of the last
  whole record, not the log's end).
* A checkpoint records a commit-log offset X only after every consume-queue unit and
  provider state for records below X is on disk, so replaying from X rebuilds the rest
  (queue files stored into since the last checkpoint are synced by path, mapped or not:
  an fdatasync each, or one ``syncfs`` past ``SYNCFS_OVER`` files). Its table of each
  queue's max offset is kept between checkpoints and only changed queues are read.
* Expected outcomes are ``PutStatus``/``GetStatus`` values; exceptions mean bugs or I/O
  failure. Everything that can fail on a message's content (encoding, tagsCode, space
  for its segment and consume-queue file) is checked or allocated before the append;
  after it, a failing dispatch listener is logged (``store.dispatch_failed``), never
  raised into the put.
* Replay never refuses to start on a record: one that cannot be decoded or dispatched is
  logged (``store.replay_skipped``), counted (``records_skipped``) and passed over.
* Acked means written: a failed commit-log write rolls back what the dropped records
  changed (their consume-queue units become holes, rollback listeners such as the
  scheduler undo their progress) and ``ack_problem`` tells the outbox which answers
  must become errors. Puts are refused (SERVICE_NOT_AVAILABLE) for
  ``disk_check_interval`` after a failed write or segment allocation, and while the
  data disk is fuller than ``disk_max_used_ratio`` (a cached ``statvfs``, refreshed at
  most every ``disk_check_interval``); reads and pulls go on meanwhile.
* Reads at client-given offsets go through ``read_record`` (reads.py): the one record
  check plus "a consume-queue unit points here", so a record hidden in a body is never
  served.
* ``put`` and ``put_patched`` here are the reference. Their native twin
  (``_message_store.pyx``, chosen by ``protocol/native.py``) makes the common put (every
  check passed, room in the queue's map and in the current segment) in one C function,
  mirroring ``_put``, ``ensure_room``, ``reserve``, ``append`` and ``dispatch`` step for
  step, and hands every other put to these before changing anything (it calls the
  consume-queue twin's unit append and the index twin's dispatch as C functions, and
  reads the slotted ``WriteGuard``'s and ``CommitLog``'s fields in place). ``write_out``
  is the reference too: the twin makes its common case (the pending bytes written into
  the current segment, counters advanced, the guard told, in the reference's order) and
  a failed write through the same rollback methods.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, SupportsIndex, TypeVar  # Any: JSON values of the checkpoint

from kairosmq.protocol import native
from kairosmq.protocol.message import (
    RECORD_OVERHEAD_V4,
    RecordView,
    decode_record,
    encode_record,
    patch_record,
    patched_size,
)
from kairosmq.protocol.naming import validate_queue_topic
from kairosmq.protocol.properties import MAX_PROPERTIES_BYTES, encode_properties

from ..clock import wall_ms
from ..observe.logs import get_logger
from .allocate import FileAllocator
from .checkpoint import read_checkpoint, trusted_offset
from .commitlog import CommitLog, KeepFrom, WriteFailed
from .consumequeue import ConsumeQueue, compute_tags_code, load_queues, sync_dirty
from .files import write_json_atomic
from .guard import WriteGuard
from .mapped import DEFAULT_CAPACITY, MappedFiles
from .reads import StoreReads
from .types import (
    DispatchRequest,
    Expired,
    GetResult,
    GetStatus,
    MessageInner,
    PutResult,
    PutStatus,
    StateProvider,
)

__all__ = [
    "DispatchRequest",
    "GetResult",
    "GetStatus",
    "MessageInner",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StateProvider",
    "compute_tags_code",
]

_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
# born host and store host may each be IPv6 (12 more bytes); topic <= 127 bytes
_MAX_OVERHEAD = RECORD_OVERHEAD_V4 + 24 + 127 + MAX_PROPERTIES_BYTES
# more dirty consume-queue files than this at a checkpoint: one syncfs instead of an
# fdatasync each (measured here: 0.28 ms a file each, 8 ms for 1,000 files at once)
SYNCFS_OVER = 64
# what building a record raises for a message the record cannot hold (MESSAGE_ILLEGAL)
ENCODE_ERRORS = (struct.error, ValueError, OverflowError)


Dispatcher = Callable[[DispatchRequest], None]
# a dispatcher's plan entry: the listener, and the topics (None: it hears every record)
# and property names it declared (``interested_in``)
PlanEntry = tuple[Dispatcher, frozenset[str] | None, tuple[str, ...]]


_L = TypeVar("_L", bound=Callable[..., None])


def interested_in(
    *, topics: tuple[str, ...] = (), properties: tuple[str, ...] = ()
) -> Callable[[_L], _L]:
    """Declare which records a dispatch listener needs: those stored in one of ``topics``
    or whose properties hold one of ``properties`` (records the listener would pass over
    at its first check). The store then never calls it for the others (``wants``)."""

    def mark(fn: _L) -> _L:
        fn.dispatch_interest = (frozenset(topics), tuple(properties))  # type: ignore[attr-defined]
        return fn

    return mark


def wants(entry: PlanEntry, req: DispatchRequest) -> bool:
    """The one rule of a declared interest: whether ``entry``'s listener hears ``req``."""
    _d, topics, names = entry
    return topics is None or req.topic in topics or not req.properties.keys().isdisjoint(names)


class Dispatchers(list[Dispatcher]):
    """The store's dispatch listeners, in call order (a list: the broker appends to it),
    and their ``plan``: each with its declared interest, made again after any change."""

    _plan: list[PlanEntry] | None = None

    def plan(self) -> list[PlanEntry]:
        plan = self._plan
        if plan is None:
            plan = []
            for d in self:
                interest = getattr(d, "dispatch_interest", None)
                if interest is None:
                    plan.append((d, None, ()))
                else:
                    plan.append((d, interest[0], interest[1]))
            self._plan = plan
        return plan

    def append(self, d: Dispatcher) -> None:
        self._plan = None
        super().append(d)

    def extend(self, ds: Iterable[Dispatcher]) -> None:
        self._plan = None
        super().extend(ds)

    def insert(self, i: SupportsIndex, d: Dispatcher) -> None:
        self._plan = None
        super().insert(i, d)

    def remove(self, d: Dispatcher) -> None:
        self._plan = None
        super().remove(d)

    def pop(self, i: SupportsIndex = -1) -> Dispatcher:
        self._plan = None
        return super().pop(i)

    def clear(self) -> None:
        self._plan = None
        super().clear()

    def __setitem__(self, i: Any, v: Any) -> None:  # Any: list's index-or-slice overloads
        self._plan = None
        super().__setitem__(i, v)

    def __delitem__(self, i: SupportsIndex | slice) -> None:
        self._plan = None
        super().__delitem__(i)

    def __iadd__(self, ds: Iterable[Dispatcher]) -> Dispatchers:  # type: ignore[override,misc]
        self._plan = None
        return super().__iadd__(ds)


class MessageStore(StoreReads):
    # the fields read per message, held in slots (the twins read them by offset, the rest
    # by their member descriptors); the instance keeps its __dict__ (StoreReads has none
    # declared) for everything else
    __slots__ = (
        "guard",
        "commitlog",
        "queues",
        "dispatchers",
        "clock_ms",
        "store_host",
        "max_record_size",
        "confirm_offset",
        "_cp_changed",
        "_last_record",
        "_last_written_record",
        "_write_scheduled",
    )

    def __init__(
        self,
        data_dir: Path,
        *,
        store_host: tuple[bytes, int],
        segment_size: int = 1 << 30,
        units_per_file: int = 300_000,
        clock_ms: Callable[[], int] | None = None,
        max_message_size: int = 4 << 20,
        disk_max_used_ratio: float = 0.90,
        disk_check_interval: float = 1.0,
        max_open_queue_files: int = DEFAULT_CAPACITY,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_host = store_host
        self.commitlog = CommitLog(self.data_dir / "commitlog", segment_size)
        self.cq_dir = self.data_dir / "consumequeue"
        self.units_per_file = units_per_file
        self.allocator = FileAllocator()  # next consume-queue files, made off the loop
        # the open consume-queue mappings, at most max_open_queue_files (LRU; mapped.py)
        self.maps = MappedFiles(max_open_queue_files)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        # the checkpoint's "topic/queue" -> max offset table, kept between checkpoints:
        # only the queues changed since the last one are read again (100k queues took
        # 0.1-0.15 s of the loop every checkpoint when it was rebuilt each time)
        self._cp_queues: dict[str, int] = {}
        self._cp_changed: set[ConsumeQueue] = set()
        self.dispatchers = Dispatchers()  # the listeners; each may declare an interest
        # called with the commit-log offset a failed write rolled back to
        self.rollback_listeners: list[Callable[[int], None]] = []
        self.providers: list[StateProvider] = []
        self.log = get_logger("store")
        self.max_record_size = min(segment_size, max_message_size + _MAX_OVERHEAD)
        self.guard = WriteGuard(
            self.data_dir,
            max_used_ratio=disk_max_used_ratio,
            check_interval=disk_check_interval,
            log=self.log,
        )
        self.dispatch_failures = 0
        self._last_written_record: int | None = None
        self._replay_skipped = 0
        self.clock_ms = clock_ms or wall_ms  # server/clock.py: the broker's one clock
        self._write_scheduled = False
        self._last_record: int | None = None
        self.checkpoint_path = self.data_dir / "checkpoint.json"
        # a slave: the end of the last replicated record dispatched (store/replica.py);
        # the log may hold part of the next one, which a checkpoint must not cover
        self.replica_end: int | None = None
        # SYNC_MASTER: pulls serve records ending at or below this (the slave's ack)
        self.confirm_offset: int | None = None

    # ------------------------------------------------------------------ queues

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue), created on first use; ``ValueError`` if
        the name could not be a directory name we wrote (names reach the file system
        only here, so a hostile REAL_TOPIC or RETRY_TOPIC cannot escape the store)."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            bad = validate_queue_topic(topic)
            if bad is not None or not 0 <= queue_id <= _INT32_MAX:
                raise ValueError(bad or f"queue id {queue_id} is out of range")
            cq = ConsumeQueue(
                self.cq_dir, topic, queue_id, self.units_per_file, self.allocator, self.maps
            )
            self.queues[(topic, queue_id)] = cq
            self._cp_changed.add(cq)
        return cq

    def find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    # ------------------------------------------------------------------ put

    def put(self, msg: MessageInner) -> PutResult:
        """Store one message; synchronous and atomic on the event loop."""
        props = encode_properties(msg.properties).encode()
        topic = msg.topic.encode()
        hosts = len(msg.born_host[0]) + len(self.store_host[0]) - 8
        size = RECORD_OVERHEAD_V4 + len(msg.body) + len(topic) + len(props) + hosts

        def build(queue_offset: int, phy: int, store_ts: int) -> bytes:
            return encode_record(
                topic=topic,
                body=msg.body,
                properties=props,
                queue_id=msg.queue_id,
                flag=msg.flag,
                queue_offset=queue_offset,
                physical_offset=phy,
                sys_flag=msg.sys_flag,
                born_timestamp=msg.born_timestamp,
                born_host=msg.born_host,
                store_timestamp=store_ts,
                store_host=self.store_host,
                reconsume_times=msg.reconsume_times,
            )

        return self._put(
            msg.topic, topic, msg.queue_id, msg.properties, props, size, msg.store_timestamp, build
        )

    def put_patched(
        self, src: bytes, view: RecordView, topic: str, queue_id: int, properties: dict[str, str]
    ) -> PutResult:
        """Store a copy of the record ``src`` (laid out by ``view``) re-addressed to
        ``topic``/``queue_id`` with ``properties``: the scheduler's re-put, the same record
        ``put`` would write for the decoded message, without decoding it."""
        props = encode_properties(properties).encode()
        topic_b = topic.encode()
        size = patched_size(view, topic_b, props, self.store_host)

        def build(queue_offset: int, phy: int, store_ts: int) -> bytes:
            return patch_record(
                src,
                view,
                topic=topic_b,
                properties=props,
                queue_id=queue_id,
                queue_offset=queue_offset,
                physical_offset=phy,
                store_timestamp=store_ts,
                store_host=self.store_host,
            )

        return self._put(topic, topic_b, queue_id, properties, props, size, None, build)

    def _put(
        self,
        topic: str,
        topic_b: bytes,
        queue_id: int,
        properties: dict[str, str],
        props: bytes,
        size: int,
        store_ts: int | None,
        build: Callable[[int, int, int], bytes],
    ) -> PutResult:
        """Check, reserve, build the record with ``build(queue_offset, phy, store_ts)``,
        append and dispatch it."""
        refusal = self.guard.refusal()
        if refusal is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=refusal)
        if len(props) > MAX_PROPERTIES_BYTES:
            return PutResult(
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
                remark=f"properties are {len(props)} bytes, the limit is {MAX_PROPERTIES_BYTES}",
            )
        if not 0 < len(topic_b) <= 127:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="topic must be 1..127 bytes")
        if size > self.max_record_size:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"the record would be {size} bytes, the limit is {self.max_record_size}",
            )
        code = compute_tags_code(topic, properties)
        try:
            cq = self.queue(topic, queue_id)
        except ValueError as err:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(err))
        queue_offset = cq.max_offset
        try:
            cq.ensure_room()
            phy = self.commitlog.reserve(size)
        except WriteFailed as failed:
            self._write_failed(failed)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.write_failure or "")
        except OSError as err:
            self.guard.hold(f"service not available now: cannot allocate store files ({err})")
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.write_failure or "")
        if store_ts is None:
            store_ts = self.clock_ms()
        try:
            record = build(queue_offset, phy, store_ts)
        except ENCODE_ERRORS as err:  # nothing appended yet
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"cannot encode the message: {err}")
        self.commitlog.append(record)
        self._last_record = phy
        self.guard.appended(phy + size)
        self.dispatch(
            DispatchRequest(topic, queue_id, phy, size, code, queue_offset, store_ts, properties)
        )
        if not self._write_scheduled:
            self._write_scheduled = True
            asyncio.get_running_loop().call_soon(self.write_out)
        return PutResult(PutStatus.PUT_OK, phy, size, queue_offset, store_ts, code)

    def write_out(self) -> None:
        """Hand pending commit-log bytes to the OS (the broker calls this before acks).

        Never raises: a failed write is rolled back (``_write_failed``) and the answers
        to the sends it dropped become errors through ``ack_problem``.
        """
        self._write_scheduled = False
        try:
            self.commitlog.write_out()
        except WriteFailed as failed:
            self._write_failed(failed)
            return
        self._last_written_record = self._last_record
        self.guard.written()

    # ------------------------------------------------------------------ write faults

    @property
    def writable(self) -> bool:
        """The operator's switch (False: every put is refused)."""
        return self.guard.writable

    @writable.setter
    def writable(self, value: bool) -> None:
        self.guard.writable = value

    @property
    def write_failure(self) -> str | None:
        """The remark of the last failed write or allocation while it holds puts."""
        return self.guard.write_failure

    @property
    def appends(self) -> int:
        """Appends so far (the outbox compares it around a handler)."""
        return self.guard.appends

    def check_disk(self) -> str | None:
        """Refresh the free-space watermark now; its refusal remark, or None."""
        return self.guard.check_disk()

    def _write_failed(self, failed: WriteFailed) -> None:
        """Roll back everything derived from the records a failed write dropped."""
        kept, lost = failed.kept, failed.lost
        reason = (
            f"the commit-log write failed ({failed.cause.strerror or failed.cause}); "
            f"the message was not stored"
        )
        self.guard.rolled_back(kept, reason)
        voided = 0
        for cq in list(self.queues.values()):
            voided += cq.void_from_phy(kept)
        for listener in self.rollback_listeners:
            try:
                listener(kept)
            except Exception as err:  # noqa: BLE001 - a listener must not stop the rollback
                self.log.error(
                    "store.dispatch_failed",
                    phy_offset=kept,
                    dispatcher=getattr(listener, "__qualname__", repr(listener)),
                    error=f"rollback: {type(err).__name__}: {err}",
                )
        self._last_record = (
            failed.last_record if failed.last_record is not None else self._last_written_record
        )
        self._last_written_record = self._last_record
        self.guard.hold(f"service not available now: {reason}")
        self.log.error(
            "store.write_failed",
            phy_offset=kept,
            rolled_back_bytes=lost - kept,
            records=voided,
            errno=failed.cause.errno or 0,
            error=str(failed.cause),
            retry_in_ms=self.guard.check_interval * 1000,
        )

    def ack_token(self) -> tuple[int, int]:
        """Identify the last append (its end offset and rollback epoch) for ``ack_problem``;
        the outbox takes one when a request appended (``appends`` changed)."""
        return self.guard.ack_token()

    def ack_problem(self, token: tuple[int, int]) -> str | None:
        """None if the record(s) behind ``token`` are written to the OS and were not rolled
        back; else the remark for the error that must replace the success answer."""
        return self.guard.ack_problem(token, self.commitlog.written_offset)

    def dispatch(self, req: DispatchRequest) -> None:
        cq = self.queue(req.topic, req.queue_id)
        if req.replay:
            if req.queue_offset < cq.max_offset:
                unit = cq.get(req.queue_offset)
                if unit is not None and unit[0] == req.phy_offset:
                    self._notify(req)
                    return
                cq.truncate_from_phy(req.phy_offset)
            if req.queue_offset > cq.max_offset:
                # Units were lost below this one (a consume queue older than its log):
                # the offsets cannot be re-numbered, so continue from the record's own.
                cq.skip_to(req.queue_offset)
        cq.append(req.phy_offset, req.size, req.tags_code)
        self._cp_changed.add(cq)
        self._notify(req)

    def _notify(self, req: DispatchRequest) -> None:
        """Feed the dispatch listeners that want ``req`` (``wants``); one that raises is
        logged, never raised."""
        topic, props = req.topic, req.properties
        for d, topics, names in self.dispatchers.plan():
            # ``wants``, inlined (a call per listener and record costs what it saves)
            if topics is not None and topic not in topics and props.keys().isdisjoint(names):
                continue
            try:
                d(req)
            except Exception as err:  # noqa: BLE001 - after the append nothing may fail
                self._dispatch_failed(d, req, err)

    def _dispatch_failed(
        self, d: Callable[[DispatchRequest], None], req: DispatchRequest, err: Exception
    ) -> None:
        """A dispatch listener raised ``err`` for ``req``: counted and logged, never raised
        (``_notify`` and the native put's loop call this)."""
        self.dispatch_failures += 1
        name = getattr(d, "__qualname__", repr(d))
        reason = f"dispatcher {name}: {type(err).__name__}: {err}"
        if req.replay:
            self._replay_skipped += 1
            self.log.error("store.replay_skipped", phy_offset=req.phy_offset, reason=reason)
        else:
            self.log.error(
                "store.dispatch_failed",
                phy_offset=req.phy_offset,
                dispatcher=name,
                error=f"{type(err).__name__}: {err}",
            )

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> dict[str, Any]:
        """Load files, recover the commit log, rebuild derived state; return a summary."""
        started = time.monotonic()
        cp = read_checkpoint(self.checkpoint_path, self.log)
        for provider in self.providers:
            try:
                provider.restore((cp.get("states") or {}).get(provider.name))
            except Exception as err:  # noqa: BLE001 - replay from the start rebuilds it
                self.log.error(
                    "store.checkpoint_unreadable",
                    path=str(self.checkpoint_path),
                    error=f"state {provider.name}: {type(err).__name__}: {err}",
                )
                cp = {}
                provider.restore(None)
        self.commitlog.load()
        self.queues.update(load_queues(self.cq_dir, self.units_per_file, self.allocator, self.maps))
        replayed = 0
        self._replay_skipped = 0

        def replay(phy: int, rec: bytes) -> None:
            nonlocal replayed
            if self.replay_record(phy, rec) is not None:
                replayed += 1

        trusted, last = trusted_offset(cp, self.queues, self.checkpoint_path, self.log)
        # the record ending at the trusted offset: kept if replay finds nothing after it, so
        # the next checkpoint names it again (None would make the next start rescan the
        # whole segment: a restart without new records must stay a fast restart)
        self._last_record = last
        end, cut = self.commitlog.recover(trusted, last, replay)
        if self._last_record is not None and self._last_record >= end:
            self._last_record = None  # the log was cut below it: no record ends at ``end``
        if self.commitlog.allocation_error is not None:
            self.log.warning(
                "store.allocation_failed",
                kind="commitlog",
                path=str(self.commitlog.directory),
                error=str(self.commitlog.allocation_error),
            )
        for cq in self.queues.values():
            cq.truncate_from_phy(end)
        self._cp_queues.clear()
        self._cp_changed = set(self.queues.values())
        self._last_written_record = self._last_record
        self.check_disk()
        return {
            "commitlog_max_offset": end,
            "truncated_bytes": cut,
            "records_replayed": replayed,
            "records_skipped": self._replay_skipped,
            "duration_ms": round((time.monotonic() - started) * 1000, 3),
        }

    def replay_record(self, phy: int, rec: bytes) -> DispatchRequest | None:
        """Dispatch a record that is already in the log at ``phy`` (recovery's replay, and
        a slave's replicated records: one code path); its request, or None if it was
        skipped (logged ``store.replay_skipped``, counted). ``OSError`` is raised (the
        disk, not the record)."""
        self._last_record = phy
        try:
            m = decode_record(rec)
            if not 0 <= m.queue_id <= _INT32_MAX or not 0 <= m.queue_offset <= _INT64_MAX:
                raise ValueError(f"queue {m.queue_id} offset {m.queue_offset} out of range")
            req = DispatchRequest(
                m.topic,
                m.queue_id,
                phy,
                len(rec),
                compute_tags_code(m.topic, m.properties),
                m.queue_offset,
                m.store_timestamp,
                m.properties,
                replay=True,
            )
            self.dispatch(req)
        except OSError:
            raise  # the disk, not the record: fail loudly, lose nothing
        except Exception as err:  # noqa: BLE001 - one bad record never stops a restart
            self._replay_skipped += 1
            self.log.error(
                "store.replay_skipped", phy_offset=phy, reason=f"{type(err).__name__}: {err}"
            )
            return None
        return req

    def checkpoint_snapshot(self) -> dict[str, Any]:
        """Take (on the loop) the state to persist; pair with ``persist_checkpoint``."""
        self.write_out()
        changed, self._cp_changed = self._cp_changed, set()
        table = self._cp_queues
        for cq in changed:
            table[cq.key] = cq.max_offset
        return {
            "dispatched_offset": (
                self.commitlog.max_offset if self.replica_end is None else self.replica_end
            ),
            "last_record": self._last_record,
            "queues": table.copy(),
            "states": {p.name: p.snapshot() for p in self.providers},
        }

    def persist_checkpoint(self, snap: dict[str, Any]) -> None:
        """Flush data below the snapshot's offset, then write it (blocking; use a thread)."""
        self.commitlog.fsync()
        dirty = self.maps.dirty
        files = list(dirty)
        sync_dirty(dirty, files, self.cq_dir if len(files) > SYNCFS_OVER else None)
        write_json_atomic(self.checkpoint_path, snap)

    def fsync(self) -> int:
        return self.commitlog.fsync()

    def close(self) -> None:
        self.allocator.close()
        for cq in self.queues.values():
            cq.close()
        self.maps.close()
        self.commitlog.close()

    def delete_expired(self, reserved_seconds: float, keep_from: KeepFrom = None) -> Expired:
        """Retention: drop expired commit-log segments and the queue files they orphan;
        never a segment holding bytes at or after ``keep_from`` (a pending timer)."""
        segs = self.commitlog.delete_expired(reserved_seconds, keep_from=keep_from)
        files = queue_bytes = 0
        if segs:
            floor = self.commitlog.min_offset
            for cq in self.queues.values():
                n = cq.delete_below_phy(floor)
                files += n
                queue_bytes += n * cq.file_bytes
        return Expired(len(segs), files, len(segs) * self.commitlog.segment_size, queue_bytes)


# ------------------------------------------------------------------ the native twin

# ``MessageStore.put``, ``put_patched`` and ``write_out`` above are the reference
# (tests/server/test_native_message_store.py holds the twin to them); the twin's
# (``_message_store.pyx``) replace them when protocol/native.py chooses it.
reference = SimpleNamespace(
    put=MessageStore.put, put_patched=MessageStore.put_patched, write_out=MessageStore.write_out
)


def _load_twin() -> ModuleType:
    from . import _message_store  # type: ignore[attr-defined]

    twin: ModuleType = _message_store  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    MessageStore.put = _twin.put  # type: ignore[method-assign]
    MessageStore.put_patched = _twin.put_patched  # type: ignore[method-assign]
    MessageStore.write_out = _twin.write_out  # type: ignore[method-assign]
