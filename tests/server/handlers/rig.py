"""Shared setup of the handler unit tests: a Broker's real services, not started.

Owns: ``Services`` (a ``Broker`` constructed on tmp_path with its store, topic table,
offsets and key index loaded/opened, but no listener and no background task: each test
builds the one processor it tests from the services it names, as
server/handlers/__init__.py does), ``Services.conn`` (a real, unconnected transport
``Connection`` with a chosen peer address), ``req`` (a request command) and
``Services.guarded`` (a handler wrapped as the tables wrap it: ``ingress.guarded``, and
answered once ``topics.json`` holds a topic-table change it made).

Invariant: nothing is mocked; every service is the broker's own, so what a processor
does is visible in the store, the tables and the stats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.server.broker import Broker
from kairosmq.server.handlers import after_topic_write
from kairosmq.server.put.kind import MessageKind
from kairosmq.server.remoting.ingress import guarded
from kairosmq.server.remoting.transport import Connection, Handler
from kairosmq.server.store import GetStatus, MessageInner, PutResult, PutStatus

from tests.helpers import fast_config


class Services:
    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        self.broker = b = Broker(fast_config(tmp_path / "broker", **overrides))
        b.topics.load()
        b.offsets.load()
        b.store.open()
        b.index.open()
        self.config, self.store, self.topics = b.config, b.store, b.topics
        self.offsets, self.clients, self.locks = b.offsets, b.clients, b.locks
        self.stats, self.log, self.put = b.stats, b.log, b.put_path.put

    def conn(self, port: int = 40001) -> Connection:
        c = Connection(self.broker.server, {}, "broker")
        c.peer, c.peer_port = f"127.0.0.1:{port}", port
        c.peer_ip, c.born_ip = "127.0.0.1", b"\x7f\x00\x00\x01"  # as connection_made sets them
        return c

    def guarded(self, handler: Handler) -> Handler:
        return guarded(after_topic_write(self.topics, handler), self.stats, self.log)

    def store_message(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        kind: MessageKind = MessageKind.NORMAL,
    ) -> PutResult:
        """Store one message through the put path (needs a running loop)."""
        if self.topics.get(topic) is None:
            self.topics.create(topic, 4)
        r = self.put(MessageInner(topic, queue_id, body, dict(props or {})), kind)
        assert r.status is PutStatus.PUT_OK, r
        return r

    def messages(self, topic: str, queue_id: int = 0) -> list[MessageExt]:
        """Every stored message of a queue, decoded."""
        self.store.write_out()
        res = self.store.get(topic, queue_id, self.store.min_offset(topic, queue_id), 512)
        if res.status is not GetStatus.FOUND:
            return []
        out, at = [], 0
        body = b"".join(res.chunks)
        for unit in res.units:
            out.append(decode_record(body[at : at + unit[1]]))
            at += unit[1]
        return out

    def close(self) -> None:
        self.broker.index.close()
        self.store.close()


def req(
    code: int, ext: dict[str, Any] | None = None, body: bytes = b"", **kw: Any
) -> RemotingCommand:
    return request(code, {k: str(v) for k, v in (ext or {}).items()}, body, **kw)
