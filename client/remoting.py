"""Remoting transport: the client package's only I/O module.

Owns: one TCP connection per broker/name-server address (``RemotingClient``), the pool
that maps addresses to clients (``RemotingPool``), and the request/response matching.

Invariants:
* Responses are matched by opaque through ``pending: dict[opaque, Future]``: long-poll
  pulls make responses arrive out of order, so there is no FIFO assumption anywhere.
* Every request has a deadline that also bounds connecting; when it passes the caller
  gets ``RequestTimeout`` and the pending entry is removed (a late response is dropped).
* When a connection drops, every pending request on it fails at once with
  ``ConnectionClosed``; the next request reconnects. Consecutive failed connects back
  off exponentially with jitter (``base * 2**n * (1 + random())``, capped), and a request
  whose deadline ends before the next attempt fails fast with ``ConnectionClosed``.
* ``backing_off(address)`` says whether an address is waiting out that backoff (a
  producer sends to another broker meanwhile, client/producer/fault.py); ``on_reconnect`` is
  called when a connection opens again after one was lost (the client heartbeats a
  broker that may have restarted); ``drop(address)`` closes a broker no route lists.
* Requests initiated by the peer (e.g. NOTIFY_CONSUMER_IDS_CHANGED, one-way) go to the
  ``on_request`` callback; a two-way one it does not answer gets REQUEST_CODE_NOT_SUPPORTED.
* Frames are queued whole and flushed together once per loop iteration (one writev),
  so frames never interleave and a burst of sends costs one syscall.
* Every request passes ``rpc_hook`` (ACL signing, client/credentials.py) right before it is
  encoded, so the signature covers the exact extFields and body sent; answers to the
  peer's requests are not signed. With ``ssl`` the connection is TLS (server name checked
  as the context says).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import TypedDict, Unpack

from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import (
    BROKER_VERSION,
    FLAG_ONEWAY,
    LanguageCode,
    ResponseCode,
    SerializeType,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import ProtocolError

from .errors import ConnectionClosed, RequestTimeout

log = logging.getLogger("kairosmq.client.remoting")

RequestHandler = Callable[["RemotingClient", RemotingCommand], "RemotingCommand | None"]
# client/credentials.py AclRpcHook: (code, extFields, body) -> the extFields to send (signed)
RpcHook = Callable[[int, Mapping[str, str], bytes], dict[str, str]]


class ConnectionOptions(TypedDict, total=False):
    """``RemotingClient``'s keyword options (its defaults apply to what is left out); a
    ``RemotingPool`` hands the same to each client it makes."""

    on_request: RequestHandler | None
    serialize_type: SerializeType
    backoff_base: float
    backoff_max: float
    rpc_hook: RpcHook | None
    ssl: ssl.SSLContext | None
    on_reconnect: Callable[[str], None] | None


def local_ip() -> str:
    """Best-effort IPv4 address of this host (for client ids and UNIQ_KEY), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent for UDP connect
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


class _Connection(asyncio.Protocol):
    """asyncio protocol for one socket: frame reading and dispatch to the owner."""

    def __init__(self, owner: RemotingClient) -> None:
        self.owner = owner
        self.reader = FrameReader()
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._wbuf: list[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            for cmd in self.reader:
                if cmd.is_response:
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self.owner._on_peer_request(self, cmd)
        except ProtocolError as err:
            log.warning("closing %s: undecodable frame: %s", self.owner.address, err)
            self.lose(f"undecodable frame: {err}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.lose(f"connection lost ({exc})" if exc else "connection closed by peer")

    def lose(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self._flush()  # a voluntary close still sends what was written before it
                self.transport.close()
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(self.owner.address, reason))
        self.owner._on_lost(self)

    def write(self, frame: bytes) -> None:
        # Frames written during one loop iteration leave in one writev: with many sends
        # in flight this saves a syscall per message, at the cost of one call_soon.
        if self._wbuf is None:
            self._wbuf = [frame]
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._wbuf.append(frame)

    def _flush(self) -> None:
        buf, self._wbuf = self._wbuf, None
        if buf and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(buf)


class RemotingClient:
    """A lazily (re)connecting connection to one address.

    Args:
        address: ``host:port``.
        on_request: callback for requests the peer sends us.
        serialize_type: header encoding for our requests (JSON is what stock Java uses).
        backoff_base / backoff_max: reconnect backoff, seconds.
        rpc_hook: applied to every request's extFields just before encoding (signing).
        ssl: connect with TLS using this context (client/credentials.py ``client_ssl_context``).
        on_reconnect: called with the address each time a connection opens after an
            earlier one was lost (a restarted broker: the client heartbeats it again).
    """

    def __init__(
        self,
        address: str,
        *,
        on_request: RequestHandler | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
        backoff_base: float = 0.05,
        backoff_max: float = 2.0,
        rpc_hook: RpcHook | None = None,
        ssl: ssl.SSLContext | None = None,
        on_reconnect: Callable[[str], None] | None = None,
    ) -> None:
        self.address = address
        self._on_reconnect = on_reconnect
        self._connects = 0
        self._rpc_hook = rpc_hook
        self._ssl = ssl
        self._host, self._port = split_address(address)
        self._on_request = on_request
        self._serialize_type = serialize_type
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()
        self._opaque = itertools.count(1)
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def backing_off(self) -> bool:
        """True while not connected and the next connect attempt is still in the future
        (the last one was refused or timed out): a producer sends elsewhere meanwhile."""
        if self.connected or self._failures == 0:
            return False
        try:
            return asyncio.get_running_loop().time() < self._retry_at
        except RuntimeError:
            return False

    async def _connection(self, deadline: float) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise ConnectionClosed(self.address, "client is closed")
        loop = asyncio.get_running_loop()
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            now = loop.time()
            if now < self._retry_at:
                if self._retry_at >= deadline:
                    raise ConnectionClosed(
                        self.address,
                        f"unreachable ({self._last_error}); next connect attempt in "
                        f"{self._retry_at - now:.2f}s",
                    )
                await asyncio.sleep(self._retry_at - now)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimeout(self.address, -1, 0.0)
            try:
                async with asyncio.timeout(remaining):
                    _, proto = await loop.create_connection(
                        lambda: _Connection(self),
                        self._host,
                        self._port,
                        ssl=self._ssl,
                        server_hostname=self._host if self._ssl is not None else None,
                    )
            except TimeoutError:
                self._note_failure(loop, "connect timed out")
                raise RequestTimeout(self.address, -1, remaining) from None
            except OSError as err:
                self._note_failure(loop, f"connect failed: {err.strerror or err}")
                raise ConnectionClosed(self.address, self._last_error) from err
            if self._closed:
                proto.lose("client closed while connecting")
                raise ConnectionClosed(self.address, "client is closed")
            sock = proto.transport.get_extra_info("socket") if proto.transport else None
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._failures = 0
            self._retry_at = 0.0
            self._conn = proto
            self._connects += 1
            if self._connects > 1 and self._on_reconnect is not None:
                try:
                    self._on_reconnect(self.address)
                except Exception:  # a callback bug must not fail the request
                    log.exception("reconnect callback failed for %s", self.address)
            return proto

    def _note_failure(self, loop: asyncio.AbstractEventLoop, reason: str) -> None:
        self._failures += 1
        self._last_error = reason
        delay = min(self._backoff_max, self._backoff_base * 2 ** (self._failures - 1))
        self._retry_at = loop.time() + delay * (1 + random.random())

    def _command(
        self,
        code: int,
        ext: dict[str, str] | None,
        body: bytes,
        flag: int,
        opaque: int | None = None,
    ) -> bytes:
        """One request frame (the rpc hook applied); a new opaque unless one is given."""
        if self._rpc_hook is not None:
            ext = self._rpc_hook(int(code), ext or {}, body)
        return encode_command(
            RemotingCommand(
                int(code),
                next(self._opaque) if opaque is None else opaque,
                flag,
                LanguageCode.PYTHON,
                BROKER_VERSION,
                None,
                ext or {},
                body,
                self._serialize_type,
            )
        )

    async def invoke(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float,
    ) -> RemotingCommand:
        """Send a request and await its response (any code; the caller interprets it).

        Raises:
            RequestTimeout: no response (or no connection) within ``timeout`` seconds.
            ConnectionClosed: the connection could not be opened or dropped meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        conn = await self._connection(deadline)
        opaque = next(self._opaque)
        frame = self._command(code, ext_fields, body, 0, opaque)
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        conn.pending[opaque] = fut
        conn.write(frame)
        handle = loop.call_at(deadline, _expire, fut, self.address, code, timeout)
        try:
            return await fut
        finally:
            handle.cancel()
            conn.pending.pop(opaque, None)

    async def invoke_oneway(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float,
    ) -> None:
        """Send a one-way request (no response); ``timeout`` bounds connecting only."""
        conn = await self._connection(asyncio.get_running_loop().time() + timeout)
        conn.write(self._command(code, ext_fields, body, FLAG_ONEWAY))

    def _on_peer_request(self, conn: _Connection, cmd: RemotingCommand) -> None:
        resp: RemotingCommand | None = None
        if self._on_request is not None:
            try:
                resp = self._on_request(self, cmd)
            except Exception:  # a callback bug must not kill the reader
                log.exception("request handler failed for code %d", cmd.code)
        if cmd.is_oneway or conn.closed:
            return
        if resp is None:
            resp = cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {cmd.code} not supported by this client",
            )
        conn.write(encode_command(resp))

    def _on_lost(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None

    def close(self) -> None:
        """Close the connection; pending requests fail with ``ConnectionClosed``."""
        self._closed = True
        if self._conn is not None:
            self._conn.lose("client closed")


def _expire(fut: asyncio.Future[RemotingCommand], address: str, code: int, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(RequestTimeout(address, code, timeout))


class RemotingPool:
    """Address -> RemotingClient, created on first use; one per Producer/PushConsumer."""

    def __init__(self, **options: Unpack[ConnectionOptions]) -> None:
        self._clients: dict[str, RemotingClient] = {}
        self._options = options  # each client's (RemotingClient's keywords)
        self._closed = False

    def get(self, address: str) -> RemotingClient:
        client = self._clients.get(address)
        if client is None:
            if self._closed:
                raise ConnectionClosed(address, "client pool is closed")
            client = self._clients[address] = RemotingClient(address, **self._options)
        return client

    def backing_off(self, address: str) -> bool:
        """True if ``address`` is in reconnect backoff (``RemotingClient.backing_off``)."""
        client = self._clients.get(address)
        return client is not None and client.backing_off

    def drop(self, address: str) -> None:
        """Close and forget the client of ``address`` (a broker no route lists any more);
        a later request to it opens a new one."""
        client = self._clients.pop(address, None)
        if client is not None:
            client.close()

    async def invoke(
        self,
        address: str,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float,
    ) -> RemotingCommand:
        return await self.get(address).invoke(code, ext_fields, body, timeout=timeout)

    async def invoke_oneway(
        self,
        address: str,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float,
    ) -> None:
        await self.get(address).invoke_oneway(code, ext_fields, body, timeout=timeout)

    def close(self) -> None:
        self._closed = True
        for client in self._clients.values():
            client.close()
        self._clients.clear()
