"""A lean load generator for acked sends over the remoting protocol (bench support).

Pre-encodes one SEND_MESSAGE_V2 frame with a ROCKETMQ binary header and patches only the
opaque per request, so the generator's own CPU cost stays small next to the server's.
Used by ``bench_broker.py``; not part of the package.
"""

from __future__ import annotations

import asyncio
import struct
import time

from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode, SerializeType
from kairosmq.protocol.commands import request

_OPAQUE_AT = 4 + 4 + 2 + 1 + 2  # binary header: length, type|hlen, code, language, version
OPAQUE_MARK = 1_000_000_000  # JSON header: a 10-digit opaque patched in place
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


def send_frame(
    topic: str,
    body: bytes,
    queue_id: int,
    props: str = "",
    serialize_type: SerializeType = SerializeType.ROCKETMQ,
) -> bytearray:
    ext = {
        "a": "bench",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
        "m": "false",
    }
    cmd = request(
        RequestCode.SEND_MESSAGE_V2, ext, body, serialize_type=serialize_type, opaque=OPAQUE_MARK
    )
    return bytearray(encode_command(cmd))


class Conn(asyncio.Protocol):
    def __init__(self, template: bytearray) -> None:
        self.template = template
        self.binary = template[4] == 1
        self.opaque_at = _OPAQUE_AT if self.binary else template.index(b'"opaque":') + 9
        self.buf = bytearray()
        self.sent_at: dict[int, float] = {}
        self.latencies: list[float] = []
        self.codes: dict[int, int] = {}
        self.window: asyncio.Semaphore | None = None
        self.transport: asyncio.Transport | None = None
        self.next_opaque = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> None:
        op = self.next_opaque
        self.next_opaque += 1
        frame = self.template
        if self.binary:
            _I32.pack_into(frame, _OPAQUE_AT, op)
        else:  # same width: OPAQUE_MARK + op stays 10 digits
            frame[self.opaque_at : self.opaque_at + 10] = b"%d" % (OPAQUE_MARK + op)
        self.sent_at[op] = time.perf_counter()
        assert self.transport is not None
        self.transport.write(bytes(frame))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        now = time.perf_counter()
        while n - pos >= 4:
            (length,) = _U32.unpack_from(buf, pos)
            if n - pos < 4 + length:
                break
            word = _U32.unpack_from(buf, pos + 4)[0]
            if word >> 24 == 1:
                code = struct.unpack_from(">h", buf, pos + 8)[0]
                op = _I32.unpack_from(buf, pos + _OPAQUE_AT)[0]
            else:  # JSON answer (the null server mirrors the request type, so rare)
                import orjson

                h = orjson.loads(bytes(buf[pos + 8 : pos + 8 + (word & 0xFFFFFF)]))
                code, op = h["code"], h["opaque"]
            if op >= OPAQUE_MARK:
                op -= OPAQUE_MARK
            t0 = self.sent_at.pop(op, None)
            if t0 is not None:
                self.latencies.append(now - t0)
            self.codes[code] = self.codes.get(code, 0) + 1
            pos += 4 + length
            if self.window is not None:
                self.window.release()
        del buf[:pos]


async def run_load(
    host: str,
    port: int,
    *,
    total: int,
    concurrency: int,
    connections: int,
    body_size: int,
    topic: str,
    queues: int = 4,
    props: str = "",
    binary: bool = False,
) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    per_conn = max(1, concurrency // connections)
    conns: list[Conn] = []
    for i in range(connections):
        tmpl = send_frame(
            topic,
            b"x" * body_size,
            i % queues,
            props,
            SerializeType.ROCKETMQ if binary else SerializeType.JSON,
        )
        _t, proto = await loop.create_connection(lambda t=tmpl: Conn(t), host, port)
        proto.window = asyncio.Semaphore(per_conn)
        conns.append(proto)
    # warm-up (topic auto-creation)
    c0 = conns[0]
    assert c0.window is not None
    await c0.window.acquire()
    c0.send()
    while c0.sent_at:
        await asyncio.sleep(0.001)
    for c in conns:
        c.latencies.clear()
        c.codes.clear()

    async def drive(c: Conn, n: int) -> None:
        assert c.window is not None
        for _ in range(n):
            await c.window.acquire()
            c.send()
        while c.sent_at:
            await asyncio.sleep(0.0005)

    t0 = time.perf_counter()
    await asyncio.gather(*(drive(c, total // connections) for c in conns))
    elapsed = time.perf_counter() - t0
    lat = sorted(x for c in conns for x in c.latencies)
    codes: dict[int, int] = {}
    for c in conns:
        for k, v in c.codes.items():
            codes[k] = codes.get(k, 0) + v
        assert c.transport is not None
        c.transport.close()
    done = len(lat)
    return {
        "acked": codes.get(0, 0),
        "errors": done - codes.get(0, 0),
        "seconds": elapsed,
        "rate": done / elapsed if elapsed else 0.0,
        "p50_ms": lat[len(lat) // 2] * 1000 if lat else 0.0,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000 if lat else 0.0,
    }
