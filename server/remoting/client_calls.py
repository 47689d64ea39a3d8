"""Requests the broker sends to a client connection: RocketMQ's ``Broker2Client``.

Owns: ``call_client`` (a two-way request on a client's connection whose answer the
broker awaits: GET_CONSUMER_RUNNING_INFO relayed from an admin) and ``notify_client``
(one-way: RESET_CONSUMER_CLIENT_OFFSET). The answer comes back through the transport:
``RemotingServer.dispatch`` hands a response frame to ``answered``, which completes the
future registered under the request's opaque in ``Connection.calls``.

Invariants:
* A call waits at most ``timeout`` seconds; then its entry is removed (a late answer is
  dropped) and ``TimeoutError`` is raised. A connection that closes fails its pending
  calls at once (``ConnectionError``), so no caller waits on a dead connection.
* Opaques come from the connection's own counter (the one NOTIFY_CONSUMER_IDS_CHANGED
  uses), so a client never sees two requests from this connection with one opaque.
* Requests leave through ``Connection.send`` (the outbox tick): nothing here writes to a
  socket.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kairosmq.protocol.codes import FLAG_ONEWAY, LanguageCode
from kairosmq.protocol.commands import RemotingCommand

if TYPE_CHECKING:
    from .transport import Connection

CALL_TIMEOUT = 5.0  # seconds (RocketMQ callClient: 10 s; mqadmin's own timeout is 5 s)


def _request(
    conn: Connection, code: int, ext_fields: dict[str, str], body: bytes, oneway: bool
) -> RemotingCommand:
    return RemotingCommand(
        code=int(code),
        opaque=next(conn._opaque),
        flag=FLAG_ONEWAY if oneway else 0,
        language=LanguageCode.JAVA,
        ext_fields=dict(ext_fields),
        body=body,
    )


async def call_client(
    conn: Connection,
    code: int,
    ext_fields: dict[str, str],
    body: bytes = b"",
    timeout: float | None = None,
) -> RemotingCommand:
    """Send a request to the client on ``conn`` and return its response (waiting at most
    ``timeout``, default ``CALL_TIMEOUT``, read at call time)."""
    if conn.closed:
        raise ConnectionError(f"connection to {conn.peer} is closed")
    req = _request(conn, code, ext_fields, body, oneway=False)
    fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    conn.calls[req.opaque] = fut
    try:
        conn.send(req)
        return await asyncio.wait_for(fut, CALL_TIMEOUT if timeout is None else timeout)
    finally:
        conn.calls.pop(req.opaque, None)


def notify_client(
    conn: Connection, code: int, ext_fields: dict[str, str], body: bytes = b""
) -> None:
    """Send a one-way request to the client on ``conn`` (no answer)."""
    conn.send(_request(conn, code, ext_fields, body, oneway=True))


def answered(conn: Connection, cmd: RemotingCommand) -> None:
    """A response frame arrived on ``conn``: complete the call waiting for it, if any."""
    fut = conn.calls.pop(cmd.opaque, None)
    if fut is not None and not fut.done():
        fut.set_result(cmd)


def connection_closed(conn: Connection, reason: str) -> None:
    """Fail every call still waiting on ``conn``."""
    calls, conn.calls = conn.calls, {}
    for fut in calls.values():
        if not fut.done():
            fut.set_exception(ConnectionError(f"connection to {conn.peer} closed: {reason}"))
