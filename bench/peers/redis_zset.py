"""Redis sorted-set delay queue: ZADD by due time, a 10 ms mover, a list the consumer pops.

Owns: the producer and consumer sides of the ``redis`` system (redis-py asyncio + hiredis).

producer: ``ZADD bench:delayed <due_ms> <body>`` (members are unique: the body carries a seq);
          ``send`` returns on the reply (with ``appendonly yes`` the write is in the AOF buffer,
          fsynced every second).
mover:    a task in the consumer process on its own connection: every 10 ms an atomic Lua
          script moves up to 1,000 members with score <= now from the sorted set to the list
          ``bench:ready`` (repeats at once while a full batch moved). This is the common DIY
          pattern; its lateness is bounded below by the poll interval.
consumer: ``BLMPOP 1 bench:ready LEFT COUNT 100`` (Redis 7) in a loop, on a third connection.

``redis-pipelined`` is the same system with a leaner producer: the ZADDs go out pipelined on one
connection through a minimal RESP protocol (replies matched in order), the way the kairosmq
driver pipelines its sends, so the two "max" rows compare servers rather than client libraries.

Invariants: the move is atomic (a member is in the set or in the list, never both, never lost by
the mover); the list pop is at-most-once, as in the DIY pattern.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

DELAYED, READY = "bench:delayed", "bench:ready"
MOVE_DUE = """
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #items > 0 then
  redis.call('ZREM', KEYS[1], unpack(items))
  redis.call('RPUSH', KEYS[2], unpack(items))
end
return #items
"""


class RedisZsetPeer:
    def __init__(self, opts: dict[str, str]) -> None:
        self.host = opts.get("host", "127.0.0.1")
        self.port = int(opts["port"])
        self.poll_s = float(opts.get("poll_ms", "10")) / 1000.0
        self.batch = 1000
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        self.errors: list[str] = []
        self.clients: list[Any] = []

    def _client(self, max_connections: int) -> Any:
        pool = aioredis.BlockingConnectionPool(
            host=self.host, port=self.port, max_connections=max_connections, timeout=30
        )
        c = aioredis.Redis(connection_pool=pool)
        self.clients.append(c)
        return c

    async def start(self, role: str) -> None:
        # the producer keeps up to `window` ZADDs in flight: one connection each (redis-py does
        # not pipeline independent calls on one connection)
        self.r = self._client(64 if role == "producer" else 1)
        await self.r.ping()
        if role == "consumer":
            await self.r.delete(DELAYED, READY)

    async def send(self, delay_ms: int, body: bytes) -> None:
        await self.r.zadd(DELAYED, {body: time.time() * 1000.0 + delay_ms})

    async def consume(self, callback: Callable[[bytes], None]) -> None:
        mover_conn = self._client(1)
        move = mover_conn.register_script(MOVE_DUE)

        async def mover() -> None:
            while not self.stopping:
                moved = await move(keys=[DELAYED, READY], args=[time.time() * 1000.0, self.batch])
                if moved < self.batch:
                    await asyncio.sleep(self.poll_s)

        async def popper() -> None:
            while not self.stopping:
                got = await self.r.execute_command("BLMPOP", 1, 1, READY, "LEFT", "COUNT", 100)
                if got:
                    for body in got[1]:
                        callback(body)

        self.tasks = [asyncio.ensure_future(mover()), asyncio.ensure_future(popper())]

    async def stop(self) -> None:
        self.stopping = True
        for t in self.tasks:
            t.cancel()
        for c in self.clients:
            await c.aclose()


class _RespPipe(asyncio.Protocol):
    """One connection, commands pipelined, replies (+ - : only) matched to callers in order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiting: collections.deque[asyncio.Future[bytes]] = collections.deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (i := self.buf.find(b"\r\n")) >= 0:
            line = bytes(self.buf[:i])
            del self.buf[: i + 2]
            fut = self.waiting.popleft()
            if line[:1] == b"-":
                fut.set_exception(RuntimeError(line[1:].decode(errors="replace")))
            else:
                fut.set_result(line)

    def connection_lost(self, exc: Exception | None) -> None:
        while self.waiting:
            self.waiting.popleft().set_exception(ConnectionError("redis connection closed"))

    def call(self, *args: bytes) -> asyncio.Future[bytes]:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%b\r\n" % (len(a), a))
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        assert self.transport is not None
        self.transport.write(b"".join(out))
        return fut


class RedisPipelinedPeer(RedisZsetPeer):
    """Producer pipelines ZADDs on one raw connection; consumer as ``RedisZsetPeer``."""

    async def start(self, role: str) -> None:
        if role == "consumer":
            await super().start(role)
            return
        _t, self.pipe = await asyncio.get_running_loop().create_connection(
            _RespPipe, self.host, self.port
        )

    async def send(self, delay_ms: int, body: bytes) -> None:
        score = repr(time.time() * 1000.0 + delay_ms).encode()
        await self.pipe.call(b"ZADD", DELAYED.encode(), score, body)

    async def stop(self) -> None:
        if getattr(self, "pipe", None) is not None and self.pipe.transport is not None:
            self.pipe.transport.close()
        await super().stop()
