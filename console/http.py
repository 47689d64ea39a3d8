"""A small HTTP/1.1 server on asyncio streams for the console's API (no framework).

Owns: ``HttpServer`` (listen, read one request at a time per connection, answer, keep
the connection alive up to ``MAX_REQUESTS``), ``Request`` / ``Response`` and the limits
on what a client may send.

Invariants (nothing a client sends can crash, stall or exhaust the process):
* A request line is at most ``MAX_LINE`` bytes, headers at most ``MAX_HEADERS`` lines and
  ``MAX_HEADER_BYTES`` in all, a body at most ``MAX_BODY`` bytes and only with a
  Content-Length (Transfer-Encoding is refused with 501): each breach is a 4xx/5xx answer
  and the connection is closed.
* A request must be complete within ``READ_TIMEOUT`` seconds of the previous answer (or
  of the connection): slow and idle clients are dropped; at most ``MAX_CONNECTIONS``
  connections at once (more are closed at once).
* A handler that raises answers 500 and logs ``console.request_failed``; the server goes
  on. Every answer carries Content-Length, ``Cache-Control: no-store`` and the security
  headers of ``SECURITY_HEADERS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

MAX_LINE = 8_192
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16_384
MAX_BODY = 65_536
MAX_QUERY_FIELDS = 32
READ_TIMEOUT = 15.0  # for each request, from the end of the previous answer
MAX_REQUESTS = 100  # per connection
MAX_CONNECTIONS = 256
REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
}
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
}
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpError(Exception):
    """A request that cannot be served: the status to answer and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names; a repeated header keeps its first value
    body: bytes
    peer: str
    cookies: dict[str, str] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (415 unless the Content-Type is JSON, 400 if not an
        object)."""
        ctype = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise HttpError(415, "send the body as application/json")
        try:
            value = orjson.loads(self.body or b"{}")
        except orjson.JSONDecodeError as err:
            raise HttpError(400, f"the body is not JSON: {err}") from None
        if not isinstance(value, dict):
            raise HttpError(400, "the body must be a JSON object")
        return value


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        return cls(status, orjson.dumps(data))

    @classmethod
    def error(cls, status: int, message: str, **extra: Any) -> Response:
        return cls(status, orjson.dumps({"error": message, **extra}))

    def encode(self, keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Status')}"]
        headers = {
            **SECURITY_HEADERS,
            "Content-Type": self.content_type,
            "Content-Length": str(len(self.body)),
            "Connection": "keep-alive" if keep_alive else "close",
            **self.headers,
        }
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def parse_cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";")[:64]:
        name, sep, value = part.strip().partition("=")
        if sep and name and name not in out:
            out[name] = value.strip()
    return out


async def read_request(reader: asyncio.StreamReader, peer: str) -> Request | None:
    """One request from ``reader``; None at a clean end of the connection."""
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError as err:
        if not err.partial.strip():
            return None
        raise HttpError(400, "the connection ended inside the request line") from None
    except asyncio.LimitOverrunError:
        raise HttpError(400, "the request line is too long") from None
    if len(line) > MAX_LINE:
        raise HttpError(400, "the request line is too long")
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "not an HTTP/1.x request line")
    method, target, _version = parts
    if not method or not all(ord(c) in _TOKEN for c in method):
        raise HttpError(400, "bad method")
    headers: dict[str, str] = {}
    total = 0
    for _ in range(MAX_HEADERS + 1):
        try:
            raw = await reader.readuntil(b"\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise HttpError(400, "the headers do not end") from None
        total += len(raw)
        if total > MAX_HEADER_BYTES:
            raise HttpError(431, "the headers are too large")
        if raw == b"\r\n":
            break
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name or not all(ord(c) in _TOKEN for c in name):
            raise HttpError(400, "a malformed header line")
        key = name.lower()
        if key == "cookie" and key in headers:
            headers[key] += "; " + value.strip()
        else:
            headers.setdefault(key, value.strip())
    else:
        raise HttpError(431, f"more than {MAX_HEADERS} headers")
    if "transfer-encoding" in headers:
        raise HttpError(501, "Transfer-Encoding is not supported; send a Content-Length")
    body = b""
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit() or len(length) > 9:
            raise HttpError(400, "Content-Length is not a number")
        n = int(length)
        if n > MAX_BODY:
            raise HttpError(413, f"the body is larger than {MAX_BODY} bytes")
        try:
            body = await reader.readexactly(n)
        except asyncio.IncompleteReadError:
            raise HttpError(400, "the body is shorter than its Content-Length") from None
    elif method in ("POST", "PUT", "PATCH"):
        raise HttpError(411, "a body needs a Content-Length")
    if not target.startswith("/") or target.startswith("//"):
        raise HttpError(400, "the target is not an absolute path")
    split = urlsplit(target)
    try:
        pairs = parse_qsl(
            split.query,
            keep_blank_values=False,
            max_num_fields=MAX_QUERY_FIELDS,
            strict_parsing=False,
        )
    except ValueError:
        raise HttpError(400, f"more than {MAX_QUERY_FIELDS} query fields") from None
    query: dict[str, str] = {}
    for k, v in pairs:
        query.setdefault(k, v)
    return Request(
        method,
        split.path,
        query,
        headers,
        body,
        peer,
        parse_cookies(headers.get("cookie", "")),
    )


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    """Serves ``handler`` on ``host:port`` (TLS with ``ssl_context``)."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        ssl_context: ssl.SSLContext | None = None,
        log: Any = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.log = log
        self.server: asyncio.Server | None = None
        self.connections = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_LINE * 2, ssl=self.ssl_context
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_info = writer.get_extra_info("peername")
        peer = f"{peer_info[0]}:{peer_info[1]}" if isinstance(peer_info, tuple) else "?"
        self.connections += 1
        try:
            if self.connections > MAX_CONNECTIONS:
                return
            for n in range(MAX_REQUESTS):
                try:
                    req = await asyncio.wait_for(read_request(reader, peer), READ_TIMEOUT)
                except HttpError as err:
                    writer.write(Response.error(err.status, err.message).encode(False))
                    await _drain(writer)
                    return
                except (TimeoutError, ConnectionError):
                    return
                if req is None:
                    return
                try:
                    resp = await self.handler(req)
                except HttpError as err:
                    resp = Response.error(err.status, err.message)
                except Exception as err:  # noqa: BLE001 - one request fails, not the server
                    if self.log is not None:
                        self.log.error(
                            "console.request_failed",
                            path=req.path[:200],
                            error=f"{type(err).__name__}: {err}",
                        )
                    resp = Response.error(500, "internal error")
                keep = n + 1 < MAX_REQUESTS and req.headers.get("connection", "").lower() != "close"
                writer.write(resp.encode(keep))
                if not await _drain(writer) or not keep:
                    return
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _drain(writer: asyncio.StreamWriter) -> bool:
    try:
        await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
        return True
    except (TimeoutError, ConnectionError):
        return False
