"""Minimal async RocketMQ remoting client, the way stock clients speak it (JSON headers).

Owns: the frame codec of the benchmark's RocketMQ-protocol driver (kairosmq and Apache
RocketMQ 4.9.8 are both driven by it), ``RemotingClient`` (one TCP connection, many calls
in flight, matched by ``opaque``) and ``decode_bodies`` (the bodies of a PULL_MESSAGE
answer, RocketMQ's message-record layout).

Invariants:
* Independent of the ``kairosmq`` package on purpose: the benchmark must drive the broker as an
  outside client does, and keep working while the project's own codecs change.
* Requests carry JSON headers (``serializeTypeCurrentRPC: JSON``, serialize type 0), like the
  stock Java client; responses are decoded whether JSON or ROCKETMQ binary.
* A call never waits forever: every call has a timeout, and a closed connection fails every
  pending call with ``ConnectionError``.

Frame: ``total_len:u32 | (serialize_type << 24 | header_len):u32 | header | body``, where
``total_len`` counts everything after itself; header flag bit 0 marks a response.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

try:  # the drivers share the 2 cores with the server they measure: the cheaper codec
    import orjson

    _dumps: Callable[[Any], bytes] = orjson.dumps
    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # the peers' bench venv has no orjson: the same JSON, stdlib speed

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

LEN = struct.Struct(">II")
SEND_MESSAGE_V2, PULL_MESSAGE = 310, 11
SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED = 0, 19, 20, 21
FLAG_RESPONSE = 1
PULL_SUSPEND_AND_SUBSCRIPTION = 2 | 4  # FLAG_SUSPEND | FLAG_SUBSCRIPTION


def encode_frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    h = _dumps(header)
    return LEN.pack(4 + len(h) + len(body), len(h)) + h + body


def _decode_binary_header(raw: bytes) -> dict[str, Any]:
    """The ROCKETMQ (serialize type 1) header, only the fields a client needs."""
    code, _lang, _ver, opaque, flag = struct.unpack_from(">hbhii", raw, 0)
    p = 13
    (rlen,) = struct.unpack_from(">i", raw, p)
    p += 4
    remark = raw[p : p + rlen].decode(errors="replace") if rlen > 0 else None
    p += max(rlen, 0)
    (elen,) = struct.unpack_from(">i", raw, p)
    p += 4
    end = p + elen
    ext: dict[str, str] = {}
    while p < end:
        (klen,) = struct.unpack_from(">h", raw, p)
        k = raw[p + 2 : p + 2 + klen].decode()
        p += 2 + klen
        (vlen,) = struct.unpack_from(">i", raw, p)
        ext[k] = raw[p + 4 : p + 4 + vlen].decode()
        p += 4 + vlen
    return {"code": code, "opaque": opaque, "flag": flag, "remark": remark, "extFields": ext}


class RemotingClient:
    """One connection; ``call`` sends a request and awaits the response with its opaque."""

    def __init__(self, language: str = "PYTHON") -> None:
        self.pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self.ids = itertools.count(1)
        self.language = language
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, host: str, port: int) -> None:
        self.reader, self.writer = await asyncio.open_connection(host, port)
        self._task = asyncio.ensure_future(self._read_loop())

    async def call(
        self, code: int, ext: dict[str, Any], body: bytes = b"", timeout: float = 30.0
    ) -> tuple[dict[str, Any], bytes]:
        assert self.writer is not None
        op = next(self.ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[dict[str, Any], bytes]] = loop.create_future()
        self.pending[op] = fut
        self.writer.write(
            encode_frame(
                {
                    "code": code,
                    "flag": 0,
                    "language": self.language,
                    "opaque": op,
                    "serializeTypeCurrentRPC": "JSON",
                    "version": 0,
                    "extFields": {k: str(v) for k, v in ext.items()},
                },
                body,
            )
        )
        # a timer handle, not ``asyncio.wait_for`` (a task per call on Python 3.11)
        timer = loop.call_later(timeout, _time_out, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            self.pending.pop(op, None)

    async def _read_loop(self) -> None:
        assert self.reader is not None
        buf = bytearray()
        try:
            while True:
                data = await self.reader.read(1 << 18)
                if not data:
                    break
                buf += data
                pos = 0
                while len(buf) - pos >= 8:
                    total, word = LEN.unpack_from(buf, pos)
                    end = pos + 4 + total
                    if end > len(buf):
                        break
                    hlen = word & 0xFFFFFF
                    raw = bytes(buf[pos + 8 : pos + 8 + hlen])
                    hdr = _loads(raw) if word >> 24 == 0 else _decode_binary_header(raw)
                    body = bytes(buf[pos + 8 + hlen : end])
                    pos = end
                    fut = self.pending.pop(hdr.get("opaque", -1), None)
                    if fut is not None and not fut.done() and hdr.get("flag", 0) & FLAG_RESPONSE:
                        fut.set_result((hdr, body))
                del buf[:pos]
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("remoting connection closed"))

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._task is not None:
            self._task.cancel()


def _time_out(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


def decode_bodies(buf: bytes) -> Iterator[bytes]:
    """Bodies of the message records in a PULL_MESSAGE answer (RocketMQ 4.x record layout)."""
    pos, n = 0, len(buf)
    while pos + 8 <= n:
        (total,) = struct.unpack_from(">i", buf, pos)
        if total <= 0 or pos + total > n:
            break
        p = pos + 4 + 4 + 4 + 4 + 4 + 8 + 8  # size, magic, bodyCRC, queueId, flag, qoff, phys
        (sysflag,) = struct.unpack_from(">i", buf, p)
        p += 4 + 8  # sysFlag, bornTimestamp
        p += 20 if sysflag & (1 << 4) else 8  # bornHost (IPv6 / IPv4) + port
        p += 8  # storeTimestamp
        p += 20 if sysflag & (1 << 5) else 8  # storeHost
        p += 4 + 8  # reconsumeTimes, preparedTransactionOffset
        (blen,) = struct.unpack_from(">i", buf, p)
        p += 4
        yield buf[p : p + blen]
        pos += total
