"""The ceiling for bench_broker: a uvloop server with the same codec and no store.

It decodes every frame with ``FrameReader`` and answers each request with a SUCCESS
response carrying send-result ext fields, through ``encode_command``: what the broker
does minus storing, dispatching and logging.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop
from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.commands import RemotingCommand


class NullConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None
        self.n = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        out = []
        for cmd in self.reader:
            self.n += 1
            resp: RemotingCommand = cmd.response(
                ext_fields={
                    "msgId": "7F00000100002A9F0000000000000000",
                    "queueId": "0",
                    "queueOffset": str(self.n),
                    "MSG_REGION": "DefaultRegion",
                    "TRACE_ON": "true",
                }
            )
            out.append(encode_command(resp))
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(NullConn, "127.0.0.1", port)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
