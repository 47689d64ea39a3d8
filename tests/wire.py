"""A minimal raw remoting peer for server tests: sends commands, matches answers by opaque;
and ``ServerPeer``, a tiny remoting server that client tests talk to.

Deliberately tiny (the real client is ``kairosmq.client``): server tests should depend on
the protocol package and a socket, nothing else.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, Self

from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import SerializeType
from kairosmq.protocol.commands import RemotingCommand, request


class StreamPeer:
    """Connection plumbing shared by test peers: connect, one reader task, close.

    Subclasses implement ``_read`` (how frames are parsed and matched to ``pending``).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, address: str) -> Self:
        host, port = address.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port))
        return cls(r, w)

    async def _read(self) -> None:
        raise NotImplementedError

    async def _read_loop(self) -> None:
        try:
            await self._read()
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    async def closed(self, timeout: float = 2.0) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, ConnectionError):
            pass


class RawPeer(StreamPeer):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.frames = FrameReader()
        self.requests: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self._opaque = itertools.count(1)
        super().__init__(reader, writer)

    async def _read(self) -> None:
        while data := await self.reader.read(65536):
            self.frames.feed(data)
            for cmd in self.frames:
                fut = self.pending.pop(cmd.opaque, None) if cmd.is_response else None
                if fut is not None:
                    fut.set_result(cmd)
                else:
                    self.requests.put_nowait(cmd)

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        binary: bool = False,
        timeout: float = 5.0,
    ) -> RemotingCommand:
        opaque = next(self._opaque)
        cmd = request(
            code,
            {k: str(v) for k, v in (ext or {}).items()},
            body,
            opaque=opaque,
            serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
        )
        fut = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        self.writer.write(encode_command(cmd))
        return await asyncio.wait_for(fut, timeout)

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)


class ServerPeer:
    """A tiny remoting server for client tests; ``on_cmd(cmd, writer)`` decides what to
    answer (default: echo the request code), ``received`` records every request."""

    def __init__(self) -> None:
        self.received: list[RemotingCommand] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.on_cmd: Callable[[RemotingCommand, asyncio.StreamWriter], None] = self.echo
        self.server: asyncio.Server | None = None
        self.address = ""

    @staticmethod
    def echo(cmd: RemotingCommand, w: asyncio.StreamWriter) -> None:
        if not cmd.is_oneway:
            w.write(encode_command(cmd.response(ext_fields={"echo": str(cmd.code)})))

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.writers.append(w)
        reader = FrameReader()
        while data := await r.read(65536):
            reader.feed(data)
            for cmd in reader:
                self.received.append(cmd)
                self.on_cmd(cmd, w)
        w.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()
