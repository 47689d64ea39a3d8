"""HAService / HAConnection, the master's side (RocketMQ 4.9.8's, kairosmq's handshake).

Owns: the HA listener (``--ha-listen-port``), one ``HAConnection`` per slave (its start,
its acks, the stream of commit-log bytes), ``push_max`` (RocketMQ's
push2SlaveMaxOffset: the highest offset a slave acked), SYNC_MASTER's waits
(``wait_replicated``: FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) and the confirm offset
(``store.confirm_offset``) with the arrival notifications it holds back (``ConfirmGate``).

Invariants:
* A slave is sent only bytes handed to the OS (``written_offset``: never rolled back),
  read at their offsets, at most ``ha_transfer_batch_size`` at once and never across a
  segment end; offsets are continuous per connection.
* A slave's start is checked: a HELLO gets the segment header; 0 after a HELLO is the
  oldest retained byte, 0 without one the last segment's start (RocketMQ); any other
  start must be inside the log (``ha.bad_report`` otherwise, the connection closed).
  Acks must not go back and not pass what was sent (RocketMQ closes on an ack above
  its max offset).
* Bad input on the HA port closes that connection only: nothing is appended from it,
  the broker and other slaves go on.
* SYNC_MASTER: a waiter is answered when ``push_max`` covers its end; at once with
  SLAVE_NOT_AVAILABLE when no slave is attached or the best one is more than
  ``ha_slave_fallbehind_max`` behind (RocketMQ's isSlaveOK); FLUSH_SLAVE_TIMEOUT after
  ``sync_flush_timeout``. Pulls serve records up to ``push_max`` only.
* The lag (``status``, the metrics): ``lagBytes`` is the log's written end minus
  ``push_max``; ``lagMs`` is how long the log has held bytes past ``push_max``: the age
  of the oldest sample of the written end (taken at each slave report and each status
  read, so at their resolution) that ``push_max`` does not cover yet; 0 when caught up.
* ``on_dispatch`` here is the reference of its native twin (``_master.pyx``, chosen by
  ``protocol/native.py``), which skips the call to an event already set.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods); JSON status rows

from kairosmq.protocol import native
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.schema import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

from .role import BrokerRole
from .wire import HELLO, INT32_MAX, ReportReader, header, segment_header

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..remoting.longpoll import ArrivalNotifier
    from ..store import DispatchRequest, MessageStore

READ_SIZE = 64 * 1024


class ConfirmGate:
    """SYNC_MASTER: arrival notifications held until the slave's ack covers the record
    (a held pull woken earlier would find nothing it may serve)."""

    def __init__(self, notifier: ArrivalNotifier) -> None:
        self.notifier = notifier
        # (topic, queue) -> [end of the first record not yet released, end of the last]
        self.pending: dict[tuple[str, int], list[int]] = {}

    def dispatched(self, req: DispatchRequest) -> None:
        if req.topic == SCHEDULE_TOPIC:  # the delay levels' own wake: not a pull's
            self.notifier.notify(req.topic, req.queue_id)
            return
        end = req.phy_offset + req.size
        entry = self.pending.get((req.topic, req.queue_id))
        if entry is None:
            self.pending[(req.topic, req.queue_id)] = [end, end]
        else:
            entry[1] = end

    def confirmed(self, offset: int) -> None:
        done = []
        for key, entry in self.pending.items():
            if entry[0] <= offset:
                self.notifier.notify(*key)
                if entry[1] > offset:
                    entry[0] = entry[1]
                else:
                    done.append(key)
        for key in done:
            del self.pending[key]


class HAService:
    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        notifier: ArrivalNotifier,
        log: Any,
        *,
        role: BrokerRole | None = None,  # a promoted slave's new role (else the config's)
    ) -> None:
        self.store = store
        self.config = config
        self.log = log
        self.role = role or BrokerRole(config.broker_role)
        self.connections: set[HAConnection] = set()
        self.push_max = 0
        # (written end, monotonic ms) samples not yet covered by push_max: lag_ms
        self._ends: deque[tuple[int, float]] = deque(maxlen=4096)
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._data = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.gate: ConfirmGate | None = None
        if self.role is BrokerRole.SYNC_MASTER:
            self.gate = ConfirmGate(notifier)
            store.confirm_offset = 0

    @property
    def sync(self) -> bool:
        """SYNC_MASTER: acks and pulls wait for a slave."""
        return self.gate is not None

    # ------------------------------------------------------------------ listener

    async def listen(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for _end, _seq, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        self.connections.add(conn)
        self.log.info("ha.slave_connected", slave=conn.peer)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            conn.close()
            self.log.info(
                "ha.slave_disconnected", slave=conn.peer, ack_offset=conn.ack, reason=conn.reason
            )

    # ------------------------------------------------------------------ data and acks

    def on_dispatch(self, req: DispatchRequest) -> None:
        """A dispatch listener: wake the connections' writers; SYNC_MASTER: hold the
        record's arrival notification until a slave acks it."""
        self._data.set()
        if self.gate is not None and not req.replay:
            self.gate.dispatched(req)

    async def wait_data(self, timeout: float) -> None:
        self._data.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._data.wait(), timeout)

    def _sample_end(self) -> None:
        end = self.store.commitlog.written_offset
        if not self._ends or self._ends[-1][0] != end:
            self._ends.append((end, time.monotonic() * 1000))
        while self._ends and self._ends[0][0] <= self.push_max:
            self._ends.popleft()

    def lag_bytes(self) -> int | None:
        """The written end minus the best ack (None: no slave attached)."""
        if not self.connections:
            return None
        return max(0, self.store.commitlog.written_offset - self.push_max)

    def lag_ms(self) -> int | None:
        """How long bytes past the best ack have been waiting (None: no slave)."""
        self._sample_end()
        if not self.connections:
            return None
        if not self._ends:
            return 0
        return round(time.monotonic() * 1000 - self._ends[0][1])

    def acked(self, offset: int) -> None:
        self._sample_end()
        if offset <= self.push_max:
            return
        self.push_max = offset
        if self.gate is not None:
            self.store.confirm_offset = offset
            self.gate.confirmed(offset)
        while self._waiters and self._waiters[0][0] <= offset:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ SYNC_MASTER

    def slave_ok(self, end: int) -> bool:
        """RocketMQ's isSlaveOK: a slave attached and at most fall-behind-max behind."""
        return (
            any(c.streaming for c in self.connections)
            and end - self.push_max < self.config.ha_slave_fallbehind_max
        )

    async def wait_replicated(self, end: int) -> tuple[int, str] | None:
        """None once a slave acked ``end``; else (code, remark) as RocketMQ answers."""
        if self.push_max >= end:
            return None
        if not self.slave_ok(end):
            return (
                ResponseCode.SLAVE_NOT_AVAILABLE,
                "stored on the master, but no slave is attached or it is more than "
                f"{self.config.ha_slave_fallbehind_max} bytes behind "
                f"(slave acked {self.push_max}, this message ends at {end})",
            )
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end, next(self._seq), fut))
        try:
            await asyncio.wait_for(fut, self.config.sync_flush_timeout)
        except TimeoutError:
            return (
                ResponseCode.FLUSH_SLAVE_TIMEOUT,
                f"stored on the master, but no slave acked it within "
                f"{self.config.sync_flush_timeout:g} s (slave acked {self.push_max}, "
                f"this message ends at {end})",
            )
        return None

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role.value,
            "haListenPort": self.port,
            "slaveAckOffset": self.push_max,
            "slaves": [c.as_dict() for c in self.connections],
            "lagBytes": self.lag_bytes(),
            "lagMs": self.lag_ms(),
        }


class HAConnection:
    """One slave: its reports in, the commit log out."""

    def __init__(
        self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.hello = False
        self.streaming = False
        self.start = -1
        self.next = -1  # nextTransferFromWhere
        self.ack = -1
        self.reason = ""
        self._started = asyncio.Event()
        self._closed = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.peer,
            "kairosmq": self.hello,
            "startOffset": self.start,
            "ackOffset": self.ack,
            "sentOffset": self.next,
        }

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.writer.close()

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        try:
            await self._read_loop()
        except (OSError, asyncio.IncompleteReadError) as err:
            self.reason = self.reason or f"{type(err).__name__}: {err}"
        finally:
            writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                await writer_task

    def _refuse(self, reason: str, value: int) -> None:
        self.reason = reason
        self.service.log.error("ha.bad_report", slave=self.peer, offset=value, reason=reason)

    async def _read_loop(self) -> None:
        svc = self.service
        reports = ReportReader()
        housekeeping = svc.config.ha_housekeeping_interval
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(READ_SIZE), housekeeping)
            except TimeoutError:
                self.reason = f"nothing read for {housekeeping:g} s (haHousekeepingInterval)"
                return
            if not data:
                self.reason = self.reason or "closed by the slave"
                return
            for value in reports.feed(data):
                if not self.streaming:
                    if not self._begin(value):
                        return
                    continue
                if not self._ack(value):
                    return

    def _begin(self, value: int) -> bool:
        """The slave's first report(s): HELLO, then its start."""
        svc = self.service
        log = svc.store.commitlog
        if value == HELLO and not self.hello:
            self.hello = True
            self.writer.write(segment_header(min(log.segment_size, INT32_MAX)))
            return True
        if value < 0:
            self._refuse(f"a start offset must be >= 0 (got {value})", value)
            return False
        end = log.written_offset
        if value == 0:
            start = log.min_offset if self.hello else end - end % log.segment_size
        else:
            start = value
            problem = self._start_problem(start)
            if problem is not None:
                self._refuse(problem, value)
                return False
        self.start = self.next = start
        self.ack = value
        self.streaming = True
        svc.log.info(
            "ha.slave_started",
            slave=self.peer,
            offset=value,
            start_offset=start,
            kairosmq=self.hello,
        )
        svc.acked(value)
        self._started.set()
        return True

    def _start_problem(self, start: int) -> str | None:
        log = self.service.store.commitlog
        end = log.written_offset
        if start > end:
            return (
                f"the slave's log ends at {start}, past this master's ({end}): it holds "
                f"bytes this master does not (a former master? cut its tail first)"
            )
        if start < log.min_offset:
            return (
                f"the slave's log ends at {start}, below the oldest byte this master "
                f"retains ({log.min_offset}): start the slave on an empty data directory"
            )
        if start == end or start % log.segment_size == 0:
            return None
        head = log.read(start, 8)
        magic = int.from_bytes(head[4:8], "big") if head else 0
        if magic not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
            return f"no record of this master starts at {start}: the logs differ"
        return None

    def _ack(self, value: int) -> bool:
        if value < self.ack or value > self.next:
            self._refuse(
                f"ack {value} is outside [{self.ack}, {self.next}] (the last ack, the bytes sent)",
                value,
            )
            return False
        self.ack = value
        self.service.acked(value)
        return True

    async def _write_loop(self) -> None:
        svc = self.service
        store = svc.store
        log = store.commitlog
        cfg = svc.config
        batch = cfg.ha_transfer_batch_size
        heartbeat = cfg.ha_send_heartbeat_interval
        await self._started.wait()
        last_write = time.monotonic()
        while not self._closed:
            if log.written_offset < log.max_offset:
                store.write_out()  # a put's bytes are handed to the OS on the next turn
            end = log.written_offset
            if self.next < end:
                if self.next < log.min_offset:
                    self.reason = (
                        f"offset {self.next} was deleted by retention (oldest {log.min_offset})"
                    )
                    self.close()
                    return
                seg_end = self.next - self.next % log.segment_size + log.segment_size
                size = min(batch, end - self.next, seg_end - self.next)
                data = log.read(self.next, size)
                if data is None:
                    self.reason = f"cannot read {size} bytes at {self.next}"
                    self.close()
                    return
                self.writer.write(header(self.next, size) + data)
                self.next += size
                await self.writer.drain()
                last_write = time.monotonic()
                continue
            wait = heartbeat - (time.monotonic() - last_write)
            if wait <= 0:
                self.writer.write(header(self.next, 0))
                await self.writer.drain()
                last_write = time.monotonic()
                continue
            await svc.wait_data(min(wait, 0.1))


# ------------------------------------------------------------------ the native twin

# ``HAService.on_dispatch`` above is the reference (tests/ha/test_native_master.py holds
# the twin to it); the twin's (``_master.pyx``) replaces it when protocol/native.py
# chooses it.
reference = SimpleNamespace(on_dispatch=HAService.on_dispatch)


def _load_twin() -> ModuleType:
    from . import _master  # type: ignore[attr-defined]

    twin: ModuleType = _master  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    HAService.on_dispatch = _twin.on_dispatch  # type: ignore[method-assign]
