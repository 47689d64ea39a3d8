"""The remoting server: TCP listeners, per-connection framing, dispatch, and the outbox.

Owns: ``Connection`` (an ``asyncio.Protocol``: bytes -> ``FrameReader`` -> commands ->
handler) and ``RemotingServer`` (listeners, the handler table, tracked handler tasks, and
the *outbox tick*: one ``call_soon`` callback per loop iteration that first hands the
commit log's pending bytes to the OS and then writes each connection's queued responses
with a single ``transport.write``).

Invariants:
* A response to a send is never on the wire before its record is written to the OS:
  responses only leave through the outbox tick, which calls ``before_write`` first; an
  answer to a request that appended (``ack_guard.appends`` changed) is checked against
  the store's ``ack_problem`` and becomes SYSTEM_ERROR if a failed write dropped it.
* Handlers return a ``RemotingCommand`` (answered in this tick), ``None`` (no answer), or
  an awaitable (run as a tracked task: long polls, sync flush, a batch stored over several
  loop turns); so many requests can be in flight per connection and answers go out in
  completion order, matched by opaque. An awaitable that appends after its handler
  returned resolves to an ``AckedAnswer``: its answer is checked against every ack token
  it carries, as an inline answer is against the one taken after its handler.
* A response frame from a client completes the broker -> client call waiting on its
  opaque (``client_calls.py``: GET_CONSUMER_RUNNING_INFO); any other is dropped, and a
  closing connection fails the calls still waiting on it.
* SYNC_MASTER (``replicated``): a SUCCESS answer to a request that appended (a send, a
  send-back, a transaction end, a recall, a DLQ resend) leaves only once a slave acked
  its records; else FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (RocketMQ's handleHA).
* One-way requests are never answered. A malformed or oversized frame (or a header above
  ``max_header``) closes only that connection; an unknown code answers
  REQUEST_CODE_NOT_SUPPORTED; an exception in a handler answers SYSTEM_ERROR with a
  remark (``RequestRefused`` its own code). Nothing a client sends stops the server.
* Limits (``ConnectionLimits``): beyond ``max_connections`` (default: what the
  file-descriptor limit allows, ``fdbudget.fd_connection_limit``) a new connection is closed at
  once (``conn.refused``); ``sweep()`` (one periodic call, no per-frame timers) closes
  connections with no traffic either way for ``idle_timeout`` seconds and those holding
  a half-received frame with no frame completed for ``partial_frame_timeout`` seconds
  whose bytes arrived at under ``MIN_PARTIAL_RATE`` (1 KiB/s) meanwhile (a trickle).
  The per-read cost is one attribute store (``active``), a byte counter and a comparison
  with the budget's count (``account`` runs only when the buffered size changed).
* Peer addresses are real or absent: a connection whose peer address cannot be read (the
  client reset it before the accept completed) is closed before a byte of it is read
  (``conn.refused``, counted in ``unknown_peer``), so the ACL white list only ever sees
  the address the socket reports (``peer_ip``, IPv6 included). ``born_ip`` is the packed
  form a record's bornHost gets: 4 bytes for IPv4 (and IPv4-mapped IPv6) peers, 16 for
  IPv6 ones (the store then sets BORNHOST_V6, as RocketMQ does).
* Memory of unfinished frames is bounded across all connections: every connection's
  ``FrameReader`` bytes are counted in ``RemotingServer.buffered`` (updated after each
  read and each processing turn, released when it closes). Above
  ``partial_frame_budget`` the largest holders are closed until the total is within it
  (``conn.over_budget``, counted in ``over_budget``): first connections on which no
  request has been authorized yet (``authorized``: a request passed the ACL, or any
  request decoded when the ACL is off), largest first, then, if still above, the largest
  authorized holders. So the held total never exceeds the budget by more than one socket
  read. A legitimate frame is at most ``max_message_size`` plus its header (4 MiB): the
  default budget holds 64 of them in flight at once.
* The per-request steps (``data_received``, ``_process``, ``send``, ``flush_out``,
  ``dispatch``, ``mark_dirty``, ``_tick``) here are the reference; their native twin
  (``_transport.pyx``) runs them compiled on the native core and hands a response frame,
  an ACL-checked request and an unknown code to them. ``Connection`` and
  ``RemotingServer`` are slotted (plus ``__dict__``, so any other attribute can still be
  set) so that the twin reads and writes their per-frame fields by offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any  # Any: structlog's logger; flush acks; uvloop's server sockets

from kairosmq.protocol import native
from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import FLAG_ONEWAY, LanguageCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError, ProtocolError

from ..fdbudget import fd_connection_limit
from . import client_calls


@dataclass(frozen=True, slots=True)
class AckedAnswer:
    """What an awaitable handler resolves to when it appended after it returned (a batch
    stored over several loop turns): the answer leaves only if the records behind every
    token in ``acks`` (the store's ``ack_token()`` after each part) are written."""

    command: RemotingCommand
    acks: tuple[Any, ...]


Result = RemotingCommand | Awaitable[RemotingCommand | AckedAnswer | None] | None
# a processor's bound ``handle_x`` (server/handlers/__init__.py builds the tables)
Handler = Callable[["Connection", RemotingCommand], Result]

_conn_ids = itertools.count(1)
FRAMES_PER_TURN = 16
# a frame still incomplete after partial_frame_timeout is closed only if it arrives slower
# than this (bytes/s, averaged since it was first seen pending): a slow link sending a big
# frame is not a stalled one (RocketMQ closes only idle connections)
MIN_PARTIAL_RATE = 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-server connection limits (BrokerConfig names; docs/reliability.md).
    ``max_connections`` None: ``fdbudget.fd_connection_limit()``, read when the server is
    made (a broker then applies its fd budget: server/fdbudget.py)."""

    max_connections: int | None = None
    idle_timeout: float = 120.0
    partial_frame_timeout: float = 30.0
    max_header: int | None = 1024 * 1024  # BrokerConfig.max_header_bytes
    partial_frame_budget: int = 256 * 1024 * 1024

    @property
    def sweep_interval(self) -> float:
        """How often ``sweep`` should run: 1 s, finer for tiny (test) timeouts."""
        return max(0.01, min(1.0, self.idle_timeout / 4, self.partial_frame_timeout / 4))


def _set_peer(conn: Connection, peer: Any) -> bool:
    """Fill ``conn``'s peer fields from a ``peername`` tuple; False if it holds no address."""
    try:
        ip = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
        port = int(peer[1])
    except (ValueError, TypeError, IndexError):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        conn.born_ip = ip.ipv4_mapped.packed  # a dual-stack listener's IPv4 client
    else:
        conn.born_ip = ip.packed
    conn.peer_ip = str(peer[0])
    conn.peer_port = port
    conn.peer = f"{peer[0]}:{port}"
    return True


class RequestRefused(Exception):
    """A handler refuses a request because a limit is reached: answered with
    ``response_code`` and the message as remark (the connection stays open)."""

    def __init__(self, message: str, response_code: int = ResponseCode.SYSTEM_BUSY) -> None:
        super().__init__(message)
        self.response_code = response_code


class Connection(asyncio.Protocol):
    # every field a slot (the native twin reads and writes the per-frame ones by offset);
    # ``__dict__`` keeps other attributes settable, ``__weakref__`` weak references
    __slots__ = (
        "server",
        "handlers",
        "listener",
        "reader",
        "transport",
        "conn_id",
        "peer",
        "peer_ip",
        "born_ip",
        "peer_port",
        "_out",
        "_acks",
        "_opaque",
        "_busy",
        "_write_paused",
        "_reading_paused",
        "closed",
        "held_pulls",
        "calls",
        "active",
        "frames_in",
        "idle_since",
        "bytes_in",
        "_partial_mark",
        "_partial_since",
        "_partial_bytes",
        "authorized",
        "counted",
        "__dict__",
        "__weakref__",
    )

    def __init__(self, server: RemotingServer, handlers: dict[int, Handler], listener: str) -> None:
        self.server = server
        self.handlers = handlers
        self.listener = listener
        self.reader = FrameReader(server.max_frame, max_header=server.limits.max_header)
        self.transport: asyncio.Transport | None = None
        self.conn_id = next(_conn_ids)
        self.peer = "?"
        self.peer_ip = ""  # the socket's peer address; never a stand-in (see the module doc)
        self.born_ip = b"\x00\x00\x00\x00"  # packed peer_ip: a record's bornHost
        self.peer_port = 0
        self._out: list[bytes] = []
        self._acks: list[tuple[int, Any, RemotingCommand]] = []  # see send()
        self._opaque = itertools.count(1)
        self._busy = False  # a _process continuation is scheduled
        self._write_paused = False
        self._reading_paused = False
        self.closed = False
        self.held_pulls = 0  # admitted long polls (longpoll.PullHolds)
        # broker -> client requests awaiting their answer, by opaque (client_calls.py)
        self.calls: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.active = True  # traffic since the last sweep (either direction)
        self.frames_in = 0
        self.idle_since = 0.0
        self.bytes_in = 0
        self._partial_mark = -1  # frames_in when a pending partial frame was first seen
        self._partial_since = 0.0
        self._partial_bytes = 0  # bytes_in then
        self.authorized = False  # a request passed the auth check (the budget's eviction order)
        self.counted = 0  # reader bytes included in server.buffered

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        srv = self.server
        peer = transport.get_extra_info("peername")
        if not peer or not _set_peer(self, peer):
            # reset before the accept completed: getpeername fails. Without an address the
            # white list cannot be asked, so nothing of it is read (never a stand-in address)
            self.closed = True
            srv.unknown_peer += 1
            srv.log.warning(
                "conn.refused",
                peer=self.peer,
                listener=self.listener,
                connections=len(srv.connections),
                reason="peer address unknown (reset before accept); closed unread",
            )
            transport.close()
            return
        if len(srv.connections) >= (srv.limits.max_connections or 0):
            self.closed = True
            srv.refused += 1
            srv.log.warning(
                "conn.refused",
                peer=self.peer,
                listener=self.listener,
                connections=len(srv.connections),
                reason=f"max_connections {srv.limits.max_connections} reached",
            )
            transport.close()
            return
        self.idle_since = asyncio.get_running_loop().time()
        self.server.connections.add(self)
        self.server.log.info(
            "conn.opened", peer=self.peer, conn_id=self.conn_id, listener=self.listener
        )

    def data_received(self, data: bytes) -> None:
        if self.closed:  # refused or aborted: nothing more of it is read
            return
        self.active = True
        self.bytes_in += len(data)
        self.reader.feed(data)
        if not self._busy and not self._write_paused:
            self._process()
        if self.reader.buffered != self.counted:
            self.server.account(self)

    def pause_writing(self) -> None:
        """The peer is not reading its answers: stop taking its requests (memory bound)."""
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._busy:
            self._process()

    def _update_reading(self) -> None:
        want = self._busy or self._write_paused
        if want != self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = want
            if want:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _process(self) -> None:
        """Handle up to FRAMES_PER_TURN frames, then yield to the loop (timers: the delay
        scheduler must not wait behind a 64 KiB read of sends); reading pauses meanwhile,
        and while the peer leaves its answers unread (write backpressure)."""
        self._busy = False
        if self.closed or self._write_paused:
            self._update_reading()
            return
        n = 0
        frames = iter(self.reader)
        try:
            for cmd in frames:
                self.server.dispatch(self, cmd)
                n += 1
                if n >= FRAMES_PER_TURN:
                    break
        except ProtocolError as err:
            self.frames_in += n
            self.server.log.warning(
                "frame.rejected",
                peer=self.peer,
                conn_id=self.conn_id,
                error=f"{type(err).__name__}: {err}",
            )
            self.abort(f"protocol error: {err}")
            return
        finally:
            frames.close()  # drops the frames handled (the native twin: on close, not on release)
        self.frames_in += n
        if n >= FRAMES_PER_TURN and self.reader.buffered and not self.closed:
            self._busy = True
            asyncio.get_running_loop().call_soon(self._process)
        self._update_reading()
        if self.reader.buffered != self.counted and not self.closed:
            self.server.account(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connection_lost(self, "peer closed" if exc is None else str(exc))

    # ------------------------------------------------------------ output

    def send(
        self, cmd: RemotingCommand, request: RemotingCommand | None = None, ack: Any = None
    ) -> None:
        """Queue a frame; it leaves in this loop iteration's outbox tick. ``ack`` (the
        store's ack token, when the request appended) makes the tick check that the
        records were written before this answer leaves; if they were rolled back, an
        error to ``request`` goes instead."""
        if self.closed:
            return
        if not self._out:
            self.server.mark_dirty(self)
        self._out.append(encode_command(cmd))
        if ack is not None and request is not None:
            self._acks.append((len(self._out) - 1, ack, request))

    def send_acked(self, answer: AckedAnswer, request: RemotingCommand) -> None:
        """``send`` of an answer whose records are behind several ack tokens."""
        self.send(answer.command)
        if not self.closed:
            self._acks.extend((len(self._out) - 1, token, request) for token in answer.acks)

    def notify(self, code: int, ext_fields: dict[str, str]) -> None:
        """Send a one-way request to the client (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
        self.send(
            RemotingCommand(
                code=int(code),
                opaque=next(self._opaque),
                flag=FLAG_ONEWAY,
                language=LanguageCode.JAVA,
                ext_fields=ext_fields,
            )
        )

    def flush_out(self) -> None:
        if self._acks:
            self._check_acks()
        if self._out and self.transport is not None and not self.closed:
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self.active = True
            self.transport.write(data)

    def _check_acks(self) -> None:
        """Replace answers whose records a failed commit-log write dropped with errors."""
        acks, self._acks = self._acks, []
        guard = self.server.ack_guard
        if guard is None:
            return
        for idx, token, request in acks:
            problem = guard.ack_problem(token)
            if problem is not None and idx < len(self._out):
                self._out[idx] = encode_command(request.error(ResponseCode.SYSTEM_ERROR, problem))

    def abort(self, reason: str) -> None:
        if self.transport is not None and not self.closed:
            self.flush_out()
            self.closed = True
            self.transport.close()
            self.server.connection_lost(self, reason)


class RemotingServer:
    # every field a slot (the native twin reads and writes the per-frame ones by offset);
    # ``__dict__`` keeps other attributes settable (a test replaces ``dispatch``)
    __slots__ = (
        "log",
        "before_write",
        "on_connection_lost",
        "max_frame",
        "limits",
        "ack_guard",
        "replicated",
        "refused",
        "unknown_peer",
        "timed_out",
        "over_budget",
        "buffered",
        "connections",
        "servers",
        "tasks",
        "_dirty",
        "_tick_scheduled",
        "auth",
        "wrap_protocol",
        "__dict__",
        "__weakref__",
    )

    def __init__(
        self,
        *,
        log: Any,
        before_write: Callable[[], None],
        on_connection_lost: Callable[[Connection], None],
        max_frame: int,
        limits: ConnectionLimits | None = None,
        ack_guard: Any = None,
        replicated: Callable[[int], Awaitable[tuple[int, str] | None]] | None = None,
    ) -> None:
        self.log = log
        self.before_write = before_write
        self.on_connection_lost = on_connection_lost
        self.max_frame = max_frame
        limits = limits or ConnectionLimits()
        if limits.max_connections is None:
            limits = dataclasses.replace(limits, max_connections=fd_connection_limit())
        self.limits = limits
        # The store (appends / ack_token() / ack_problem()): an answer to a request that
        # appended leaves only if its records were written (not rolled back).
        self.ack_guard = ack_guard
        # SYNC_MASTER (server/ha/master.py wait_replicated): a SUCCESS answer to a request
        # that appended leaves only once a slave acked its records, else the (code,
        # remark) it returns (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE); None: no wait
        self.replicated = replicated
        self.refused = 0  # connections refused by max_connections
        self.unknown_peer = 0  # connections closed unread: no peer address (reset early)
        self.timed_out = 0  # connections closed by the idle / partial-frame sweep
        self.over_budget = 0  # connections closed by partial_frame_budget
        self.buffered = 0  # bytes held by every connection's FrameReader (see account)
        self.connections: set[Connection] = set()
        self.servers: list[asyncio.Server] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self._dirty: list[Connection] = []
        self._tick_scheduled = False
        # server/security/install.py: the ACL check of every request (None: let it through, else
        # the error answer) and the TLS layer each new Connection is wrapped in
        self.auth: Callable[[Connection, RemotingCommand], RemotingCommand | None] | None = None
        self.wrap_protocol: Callable[[Connection], asyncio.Protocol] | None = None

    async def listen(self, host: str, port: int, handlers: dict[int, Handler], name: str) -> int:
        loop = asyncio.get_running_loop()
        wrap = self.wrap_protocol
        factory: Callable[[], asyncio.Protocol] = (
            (lambda: Connection(self, handlers, name))
            if wrap is None
            else (lambda: wrap(Connection(self, handlers, name)))
        )
        srv = await loop.create_server(factory, host, port, reuse_address=True)
        self.servers.append(srv)
        # uvloop's is a list, not typeshed's tuple: typed Any, or mypyc's check refuses it
        sockets: Any = getattr(srv, "sockets")  # noqa: B009
        return int(sockets[0].getsockname()[1])

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.is_response:  # answers to broker -> client calls; others are dropped
            if conn.calls:
                client_calls.answered(conn, cmd)
            return
        if self.auth is not None and (denied := self.auth(conn, cmd)) is not None:
            if not cmd.is_oneway:  # ACL first, as RocketMQ's RPC hook: unknown codes too
                conn.send(denied)
            return
        conn.authorized = True
        handler = conn.handlers.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                conn.send(
                    cmd.error(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f"request code {cmd.code} is not supported",
                    )
                )
            return
        guard = self.ack_guard
        appends = guard.appends if guard is not None else 0
        try:
            result = handler(conn, cmd)
        except Exception as err:  # noqa: BLE001 - every failure becomes an answer
            result = self.failure_answer(conn, cmd, err)
        if result is None:
            return
        ack = guard.ack_token() if guard is not None and guard.appends != appends else None
        if self.replicated is not None and (
            ack is not None or not isinstance(result, RemotingCommand)
        ):
            result = self._when_replicated(cmd, result, ack, appends)
        if isinstance(result, RemotingCommand):
            if not cmd.is_oneway:
                conn.send(result, cmd, ack)
            return
        task = asyncio.get_running_loop().create_task(self._finish(conn, cmd, result, ack))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        pending: Awaitable[RemotingCommand | AckedAnswer | None],
        ack: Any = None,
    ) -> None:
        result: RemotingCommand | AckedAnswer | None
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001
            result = self.failure_answer(conn, cmd, err)
        if isinstance(result, AckedAnswer):
            if not cmd.is_oneway:
                conn.send_acked(result, cmd)
        elif result is not None and not cmd.is_oneway:
            conn.send(result, cmd, ack)

    async def _when_replicated(
        self, cmd: RemotingCommand, result: Any, ack: Any, appends: int
    ) -> RemotingCommand | AckedAnswer | None:
        """``result`` (awaited), once a slave acked what the request appended; a SUCCESS
        answer becomes the code ``replicated`` returns when no slave acks it in time."""
        done: RemotingCommand | AckedAnswer | None = (
            result if isinstance(result, RemotingCommand) else await result
        )
        answer = done.command if isinstance(done, AckedAnswer) else done
        if answer is None or answer.code != ResponseCode.SUCCESS or self.replicated is None:
            return done
        ends = [token[0] for token in done.acks] if isinstance(done, AckedAnswer) else []
        if ack is not None:
            ends.append(ack[0])
        guard = self.ack_guard
        if not ends and guard is not None and guard.appends != appends:
            ends.append(guard.ack_token()[0])  # appended while awaited: the latest end covers it
        if not ends:
            return done
        failed = await self.replicated(max(ends))
        if failed is None:
            return done
        answer = cmd.response(failed[0], ext_fields=answer.ext_fields, remark=failed[1])
        return AckedAnswer(answer, done.acks) if isinstance(done, AckedAnswer) else answer

    def failure_answer(
        self, conn: Connection, cmd: RemotingCommand, err: Exception
    ) -> RemotingCommand:
        """The error answer to a request whose handler raised ``err`` (logged if unexpected)."""
        if isinstance(err, HeaderError | RequestRefused):
            return cmd.error(err.response_code, str(err))
        if isinstance(err, ValueError):
            return cmd.error(ResponseCode.SYSTEM_ERROR, f"bad request: {err}")
        self.log.exception(
            "request.failed",
            peer=conn.peer,
            request_code=cmd.code,
            error=f"{type(err).__name__}: {err}",
        )
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"{type(err).__name__}: {err}")

    # ------------------------------------------------------------ outbox

    def mark_dirty(self, conn: Connection) -> None:
        self._dirty.append(conn)
        if not self._tick_scheduled:
            self._tick_scheduled = True
            asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self._tick_scheduled = False
        self.before_write()
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.flush_out()

    def connection_lost(self, conn: Connection, reason: str) -> None:
        if conn.counted:
            self.buffered -= conn.counted
            conn.counted = 0
        conn.reader.clear()  # a closed connection holds no frame bytes (it may be referenced)
        if conn in self.connections:
            self.connections.discard(conn)
            self.log.info("conn.closed", peer=conn.peer, conn_id=conn.conn_id, reason=reason)
            if conn.calls:
                client_calls.connection_closed(conn, reason)
            self.on_connection_lost(conn)

    # ------------------------------------------------------------ limits

    def account(self, conn: Connection) -> None:
        """Carry ``conn``'s FrameReader size into ``buffered``; above
        ``partial_frame_budget`` close the largest holders (module doc)."""
        n = conn.reader.buffered
        self.buffered += n - conn.counted
        conn.counted = n
        budget = self.limits.partial_frame_budget
        if self.buffered <= budget:
            return
        # the order: never-authorized connections first, each group largest first
        holders = sorted(
            (c for c in self.connections if c.counted), key=lambda c: (c.authorized, -c.counted)
        )
        for c in holders:
            if self.buffered <= budget:
                break
            self.over_budget += 1
            held, total = c.counted, self.buffered
            self.log.warning(
                "conn.over_budget",
                peer=c.peer,
                conn_id=c.conn_id,
                buffered=held,
                total=total,
                budget=budget,
                authorized=c.authorized,
            )
            c.abort(
                f"unfinished frames hold {total} bytes across connections, above "
                f"partial_frame_budget {budget}; this connection held {held} "
                f"({'after' if c.authorized else 'before'} any authorized request)"
            )

    def sweep(self, now: float | None = None) -> int:
        """Close idle connections and stalled partial frames; return how many closed.

        Called every ``limits.sweep_interval`` seconds: a connection is idle after a
        sweep that saw no traffic plus ``idle_timeout``; a partial frame is stalled when
        bytes of an incomplete frame stay buffered with no frame completed (and the
        connection not paused by backpressure) for ``partial_frame_timeout`` while fewer
        than ``MIN_PARTIAL_RATE`` bytes a second arrived.
        """
        lim = self.limits
        now = asyncio.get_running_loop().time() if now is None else now
        closing: list[tuple[Connection, str]] = []
        for conn in self.connections:
            if conn.active:
                conn.active = False
                conn.idle_since = now
            elif now - conn.idle_since >= lim.idle_timeout:
                closing.append((conn, f"idle for more than {lim.idle_timeout:g}s"))
                continue
            if conn.reader.buffered and not conn._busy and not conn._write_paused:
                if conn._partial_mark != conn.frames_in:
                    conn._partial_mark = conn.frames_in
                    conn._partial_since = now
                    conn._partial_bytes = conn.bytes_in
                elif (
                    (held := now - conn._partial_since) >= lim.partial_frame_timeout
                    and conn.bytes_in - conn._partial_bytes < MIN_PARTIAL_RATE * held
                ):
                    closing.append(
                        (
                            conn,
                            f"partial frame ({conn.reader.buffered} bytes) "
                            f"for more than {lim.partial_frame_timeout:g}s at "
                            f"under {MIN_PARTIAL_RATE} bytes/s",
                        )
                    )
            else:
                conn._partial_mark = -1
        for conn, reason in closing:
            self.timed_out += 1
            conn.abort(reason)
        return len(closing)

    # ------------------------------------------------------------ shutdown

    async def close(self, grace: float = 2.0) -> None:
        """Stop accepting, let running handlers finish (bounded), then close connections."""
        for srv in self.servers:
            srv.close()
        if self.tasks:
            _done, pending = await asyncio.wait(set(self.tasks), timeout=grace)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        self._tick()
        for conn in list(self.connections):
            conn.abort("broker stopping")
        for srv in self.servers:
            await srv.wait_closed()
        self.servers.clear()


# ------------------------------------------------------------------ the native twin

# The per-request steps above are the reference (``tests/server/test_native_send.py``
# and the transport tests on both cores hold the twin to them); the twin's
# (``_transport.pyx``) replace them when protocol/native.py chooses it.
reference = SimpleNamespace(
    data_received=Connection.data_received,
    process=Connection._process,
    send=Connection.send,
    flush_out=Connection.flush_out,
    dispatch=RemotingServer.dispatch,
    mark_dirty=RemotingServer.mark_dirty,
    tick=RemotingServer._tick,
)


def _load_twin() -> ModuleType:
    from . import _transport  # type: ignore[attr-defined]

    twin: ModuleType = _transport  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    Connection.data_received = _twin.data_received  # type: ignore[method-assign]
    Connection._process = _twin._process  # type: ignore[method-assign]
    Connection.send = _twin.send  # type: ignore[method-assign]
    Connection.flush_out = _twin.flush_out  # type: ignore[method-assign]
    RemotingServer.dispatch = _twin.dispatch  # type: ignore[method-assign]
    RemotingServer.mark_dirty = _twin.mark_dirty  # type: ignore[method-assign]
    RemotingServer._tick = _twin._tick  # type: ignore[method-assign]
