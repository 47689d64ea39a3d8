"""TLS on the broker and name-server ports, RocketMQ's three modes.

Owns: ``TlsMode`` (disabled / permissive / enforcing, RocketMQ's ``TlsMode``),
``TlsSettings`` (``--tls-mode``, ``--tls-cert``, ``--tls-key``, ``--tls-ca``),
``server_context`` and ``TlsLayer``: an ``asyncio.Protocol`` placed between the socket
and a transport ``Connection`` (``RemotingServer.wrap_protocol``). It looks at the first
byte a client sends: 0x16 (a TLS handshake record) starts TLS through an
``ssl.SSLObject`` over memory BIOs; anything else is plain remoting, accepted in
permissive mode and closed (``tls.refused``) in enforcing mode.

Invariants:
* The ``Connection`` sees plaintext only and talks to a transport proxy: its writes are
  encrypted when the connection is TLS; pause/resume reading and close reach the socket.
* The server never writes before the client's first bytes (remoting is request first),
  so the decision is made before any output; writes queued while a handshake is still
  running leave after it completes.
* A failed handshake or a TLS error closes only that connection (``tls.failed``).
* With ``--tls-ca`` a client certificate signed by that CA is required.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any  # Any: structlog's logger; asyncio transport extras of any type

TLS_HANDSHAKE = 0x16
READ_CHUNK = 256 * 1024


class TlsMode(StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


@dataclass(frozen=True)
class TlsSettings:
    mode: TlsMode = TlsMode.DISABLED
    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None  # client certificates must be signed by this CA

    def problem(self) -> str | None:
        """Why these settings cannot start (a start-up error), or None."""
        if self.mode is TlsMode.DISABLED:
            return None
        if self.cert is None:
            return f"--tls-mode {self.mode.value} needs --tls-cert (and --tls-key)"
        return None


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server's context (``ssl.SSLError``/``OSError`` if the files are unusable)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert settings.cert is not None
    ctx.load_cert_chain(str(settings.cert), None if settings.key is None else str(settings.key))
    if settings.ca is not None:
        ctx.load_verify_locations(cafile=str(settings.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Proxy(asyncio.Transport):
    """What the wrapped ``Connection`` sees as its transport."""

    def __init__(self, layer: TlsLayer, transport: asyncio.Transport) -> None:
        super().__init__()
        self._layer = layer
        self._transport = transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._layer.write(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self._layer.write(b"".join(list_of_data))

    def close(self) -> None:
        self._layer.close()

    def abort(self) -> None:
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        obj = self._layer.ssl_object
        if obj is not None:
            if name == "ssl_object":
                return obj
            if name == "peercert":
                return obj.getpeercert()
            if name == "cipher":
                return obj.cipher()
        return self._transport.get_extra_info(name, default)


class TlsLayer(asyncio.Protocol):
    """TLS (or plain, in permissive mode) under one ``Connection``."""

    def __init__(
        self, inner: asyncio.Protocol, context: ssl.SSLContext, mode: TlsMode, log: Any
    ) -> None:
        self.inner = inner
        self.context = context
        self.mode = mode
        self.log = log
        self.transport: asyncio.Transport | None = None
        self.ssl_object: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._decided = False
        self._handshaken = False
        self._queued: list[bytes] = []
        self._closed = False
        self.peer = "?"

    # ------------------------------------------------------------ from the socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.inner.connection_made(_Proxy(self, self.transport))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if not self._decided:
            if not data:
                return
            self._decided = True
            if data[0] == TLS_HANDSHAKE:
                self.ssl_object = self.context.wrap_bio(
                    self._incoming, self._outgoing, server_side=True
                )
            elif self.mode is TlsMode.ENFORCING:
                self.log.warning(
                    "tls.refused", peer=self.peer, reason="plain remoting on a TLS-enforcing port"
                )
                self.close()
                return
        if self.ssl_object is None:
            self.inner.data_received(data)
            return
        self._incoming.write(data)
        self._pump()

    def _pump(self) -> None:
        obj = self.ssl_object
        assert obj is not None
        chunks: list[bytes] = []
        peer_closed = False
        try:
            if not self._handshaken:
                try:
                    obj.do_handshake()
                except ssl.SSLWantReadError:
                    self._flush()
                    return
                self._handshaken = True
                queued, self._queued = self._queued, []
                for data in queued:
                    obj.write(data)
            while True:
                try:
                    chunk = obj.read(READ_CHUNK)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # the peer's close_notify
                    peer_closed = True
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        except (ssl.SSLError, OSError) as err:
            self.log.warning(
                "tls.failed",
                peer=self.peer,
                stage="data" if self._handshaken else "handshake",
                error=f"{type(err).__name__}: {err}",
            )
            self._flush()
            if self.transport is not None:
                self.transport.close()
            self._closed = True
            return
        self._flush()
        if chunks and not self._closed:
            self.inner.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if peer_closed:
            self.close()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # ------------------------------------------------------------ from the Connection

    def write(self, data: bytes) -> None:
        if self.transport is None or self._closed:
            return
        obj = self.ssl_object
        if obj is None:
            self.transport.write(data)
        elif not self._handshaken:
            self._queued.append(data)
        else:
            try:
                obj.write(data)
            except ssl.SSLError as err:
                self.log.warning(
                    "tls.failed",
                    peer=self.peer,
                    stage="write",
                    error=f"{type(err).__name__}: {err}",
                )
                self.transport.close()
                self._closed = True
                return
            self._flush()

    def _flush(self) -> None:
        out = self._outgoing.read()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def close(self) -> None:
        if self._closed or self.transport is None:
            return
        self._closed = True
        if self.ssl_object is not None and self._handshaken:
            try:
                self.ssl_object.unwrap()  # queue our close_notify
            except ssl.SSLError:
                pass
            self._flush()
        self.transport.close()


class TlsServer:
    """``RemotingServer.wrap_protocol`` for one broker: wraps each new ``Connection``."""

    def __init__(self, settings: TlsSettings, log: Any) -> None:
        self.settings = settings
        self.mode = settings.mode
        self.context = server_context(settings)
        self.log = log

    def __call__(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        return TlsLayer(inner, self.context, self.mode, self.log)
