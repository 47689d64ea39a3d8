"""MessageStore: put, get and recover messages over the commit log and consume queues.

Owns: ``put``/``put_many`` (encode -> commit-log append -> ``dispatch``), ``get`` (pull
reads with tag filtering), lookups by physical offset, the checkpoint (dispatch position
plus the snapshots of registered state providers), recovery, flushing and retention.

Invariants:
* ``put`` is synchronous: on one event loop, "reserve, encode, append, dispatch" is
  atomic without a lock, and queue offsets are assigned in commit-log order.
* ``dispatch`` is the only writer of consume queues and the only feed of dispatch
  listeners (the scheduler derives its progress there); recovery replays the records
  after the checkpoint through the same ``dispatch`` with ``replay=True``.
* A checkpoint records a commit-log offset X only after every consume-queue unit and
  provider state for records below X is on disk, so replaying from X rebuilds the rest.
* Expected outcomes are ``PutStatus``/``GetStatus`` values; exceptions mean bugs or I/O
  failure.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from kairosmq.protocol.message import (
    RECORD_OVERHEAD_V4,
    STORE_TIMESTAMP_POS,
    decode_record,
    encode_record,
    tags_code,
)
from kairosmq.protocol.properties import (
    DELIVER_TIME,
    MAX_PROPERTIES_BYTES,
    TAGS,
    encode_properties,
)

from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .files import read_json, write_json_atomic

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_I64 = struct.Struct(">q")


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


@dataclass(slots=True)
class MessageInner:
    """A message on its way into the store (RocketMQ's MessageExtBrokerInner)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    reconsume_times: int = 0
    store_timestamp: int | None = None


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    phy_offset: int = -1
    size: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    tags_code: int = 0
    remark: str = ""
    offset_msg_id: str = ""  # filled by the broker when it needs it (logs, response)


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    phy_offset: int
    size: int
    tags_code: int
    queue_offset: int
    store_timestamp: int
    properties: dict[str, str]
    replay: bool = False


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    chunks: list[bytes] = field(default_factory=list)
    units: list[tuple[int, int, int]] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)


class StateProvider(Protocol):
    """Derived state saved with each checkpoint and rebuilt by replay after it."""

    name: str

    def snapshot(self) -> Any: ...

    def restore(self, state: Any) -> None: ...


def compute_tags_code(topic: str, props: dict[str, str]) -> int:
    """tagsCode of a consume-queue unit: deliver time for the schedule topic, else tag hash."""
    if topic == SCHEDULE_TOPIC and DELIVER_TIME in props:
        return int(props[DELIVER_TIME])
    return tags_code(props.get(TAGS))


class MessageStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        store_host: tuple[bytes, int],
        segment_size: int = 1 << 30,
        units_per_file: int = 300_000,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_host = store_host
        self.commitlog = CommitLog(self.data_dir / "commitlog", segment_size)
        self.cq_dir = self.data_dir / "consumequeue"
        self.units_per_file = units_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dispatchers: list[Callable[[DispatchRequest], None]] = []
        self.providers: list[StateProvider] = []
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._write_scheduled = False
        self._last_record: int | None = None
        self.writable = True
        self.checkpoint_path = self.data_dir / "checkpoint.json"

    # ------------------------------------------------------------------ queues

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.cq_dir, topic, queue_id, self.units_per_file)
            self.queues[(topic, queue_id)] = cq
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
        if not self.writable:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="store is not writable")
        props = encode_properties(msg.properties).encode()
        if len(props) > MAX_PROPERTIES_BYTES:
            return PutResult(
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
                remark=f"properties are {len(props)} bytes, the limit is {MAX_PROPERTIES_BYTES}",
            )
        topic = msg.topic.encode()
        if not 0 < len(topic) <= 127:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="topic must be 1..127 bytes")
        size = RECORD_OVERHEAD_V4 + len(msg.body) + len(topic) + len(props)
        cq = self.queue(msg.topic, msg.queue_id)
        queue_offset = cq.max_offset
        try:
            phy = self.commitlog.reserve(size)
        except OSError as err:
            self.writable = False
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=f"commit log: {err}")
        store_ts = msg.store_timestamp if msg.store_timestamp is not None else self.clock_ms()
        record = encode_record(
            topic=topic, body=msg.body, properties=props, queue_id=msg.queue_id,
            flag=msg.flag, queue_offset=queue_offset, physical_offset=phy,
            sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
            born_host=msg.born_host, store_timestamp=store_ts, store_host=self.store_host,
            reconsume_times=msg.reconsume_times,
        )
        self.commitlog.append(record)
        self._last_record = phy
        code = compute_tags_code(msg.topic, msg.properties)
        self.dispatch(DispatchRequest(msg.topic, msg.queue_id, phy, size, code, queue_offset,
                                      store_ts, msg.properties))
        if not self._write_scheduled:
            self._write_scheduled = True
            asyncio.get_running_loop().call_soon(self.write_out)
        return PutResult(PutStatus.PUT_OK, phy, size, queue_offset, store_ts, code)

    def write_out(self) -> None:
        """Hand pending commit-log bytes to the OS (the broker calls this before acks)."""
        self._write_scheduled = False
        try:
            self.commitlog.write_out()
        except OSError:
            self.writable = False
            raise

    def dispatch(self, req: DispatchRequest) -> None:
        cq = self.queue(req.topic, req.queue_id)
        if req.replay:
            if req.queue_offset < cq.max_offset:
                unit = cq.get(req.queue_offset)
                if unit is not None and unit[0] == req.phy_offset:
                    for d in self.dispatchers:
                        d(req)
                    return
                cq.truncate_from_phy(req.phy_offset)
            if req.queue_offset > cq.max_offset:
                # Units were lost below this one (a consume queue older than its log):
                # the offsets cannot be re-numbered, so continue from the record's own.
                cq.max_offset = req.queue_offset
        cq.append(req.phy_offset, req.size, req.tags_code)
        for d in self.dispatchers:
            d(req)

    # ------------------------------------------------------------------ read

    def read(self, phy_offset: int, size: int) -> bytes | None:
        return self.commitlog.read(phy_offset, size)

    def read_at(self, phy_offset: int) -> bytes | None:
        """The whole record starting at ``phy_offset`` (size read from its header)."""
        head = self.commitlog.read(phy_offset, 4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        if size < RECORD_OVERHEAD_V4:
            return None
        return self.commitlog.read(phy_offset, size)

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = 4 << 20,
        match: Callable[[int], bool] | None = None,
        max_scan: int = 16_000,
    ) -> GetResult:
        cq = self.queues.get((topic, queue_id))
        if cq is None or cq.max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        res = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        log_min = self.commitlog.min_offset
        total = scanned = 0
        pos = offset
        missing = False
        while pos < hi and len(res.units) < max_count and scanned < max_scan:
            # a chunk at a time: a filter may skip units, but most pulls need max_count
            units = cq.units(pos, min(max_scan - scanned, hi - pos, max(64, 2 * max_count)))
            if not units:
                break
            for unit in units:
                phy, size, code = unit
                scanned += 1
                if phy < log_min:
                    missing = True
                elif match is None or match(code):
                    if res.units and total + size > max_bytes:
                        scanned -= 1
                        break
                    total += size
                    res.units.append(unit)
                    res.queue_offsets.append(offset + scanned - 1)
                    if len(res.units) >= max_count:
                        break
            else:
                pos += len(units)
                continue
            break
        if res.units:
            res.chunks, read = self.commitlog.read_concat([(u[0], u[1]) for u in res.units])
            if read < len(res.units):  # a range fell outside the log (retention raced us)
                del res.units[read:]
                del res.queue_offsets[read:]
                if res.queue_offsets:
                    scanned = res.queue_offsets[-1] - offset + 1
        res.next_begin_offset = offset + scanned
        if res.units:
            res.status = GetStatus.FOUND
        elif missing:
            res.status = GetStatus.OFFSET_FOUND_NULL
        return res

    def store_time_at(self, topic: str, queue_id: int, index: int) -> int | None:
        cq = self.queues.get((topic, queue_id))
        unit = cq.get(index) if cq else None
        if unit is None:
            return None
        data = self.commitlog.read(unit[0] + STORE_TIMESTAMP_POS, 8)
        return _I64.unpack(data)[0] if data else None

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> dict[str, Any]:
        """Load files, recover the commit log, rebuild derived state; return a summary."""
        started = time.monotonic()
        cp = read_json(self.checkpoint_path, {}) or {}
        for provider in self.providers:
            provider.restore((cp.get("states") or {}).get(provider.name))
        self.commitlog.load()
        if self.cq_dir.is_dir():
            for tdir in self.cq_dir.iterdir():
                for qdir in tdir.iterdir():
                    if qdir.name.isdigit():
                        self.queue(tdir.name, int(qdir.name)).load()
        replayed = 0

        def replay(phy: int, rec: bytes) -> None:
            nonlocal replayed
            m = decode_record(rec)
            self.dispatch(DispatchRequest(
                m.topic, m.queue_id, phy, len(rec), compute_tags_code(m.topic, m.properties),
                m.queue_offset, m.store_timestamp, m.properties, replay=True))
            self._last_record = phy
            replayed += 1

        trusted = int(cp.get("dispatched_offset", 0))
        for key, saved in (cp.get("queues") or {}).items():
            topic, _, qid = key.rpartition("/")
            cq = self.queues.get((topic, int(qid)))
            if cq is None or cq.max_offset < saved:
                trusted = 0  # consume-queue files were lost below the checkpoint: full replay
                break
        end, cut = self.commitlog.recover(trusted, cp.get("last_record"), replay)
        for cq in self.queues.values():
            cq.truncate_from_phy(end)
        return {
            "commitlog_max_offset": end,
            "truncated_bytes": cut,
            "records_replayed": replayed,
            "duration_ms": round((time.monotonic() - started) * 1000, 3),
        }

    def checkpoint_snapshot(self) -> dict[str, Any]:
        """Take (on the loop) the state to persist; pair with ``persist_checkpoint``."""
        self.write_out()
        return {
            "dispatched_offset": self.commitlog.max_offset,
            "last_record": self._last_record,
            "queues": {f"{t}/{q}": cq.max_offset for (t, q), cq in self.queues.items()},
            "states": {p.name: p.snapshot() for p in self.providers},
        }

    def persist_checkpoint(self, snap: dict[str, Any]) -> None:
        """Flush data below the snapshot's offset, then write it (blocking; use a thread)."""
        self.commitlog.fsync()
        for cq in list(self.queues.values()):
            cq.flush()
        write_json_atomic(self.checkpoint_path, snap)

    def fsync(self) -> int:
        return self.commitlog.fsync()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.commitlog.close()

    def delete_expired(self, reserved_seconds: float) -> tuple[int, int]:
        """Retention: drop expired commit-log segments and the queue files they orphan."""
        segs = self.commitlog.delete_expired(reserved_seconds)
        files = 0
        if segs:
            floor = self.commitlog.min_offset
            for cq in self.queues.values():
                files += cq.delete_below_phy(floor)
        return len(segs), files

