"""Unit tests of PullMessageProcessor (server/handlers/pull.py) on a real store, offset
table, client registry and arrival notifier: found messages, tag filtering, the commit
side effect, status codes, and a held pull woken by a put or by its timeout."""

from __future__ import annotations

import asyncio
from typing import Any

from kairosmq.protocol.codec import FrameReader
from kairosmq.protocol.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import decode_records
from kairosmq.server.handlers.pull import PullMessageProcessor
from kairosmq.server.remoting.transport import Connection

from tests.helpers import wait_until
from tests.server.handlers.rig import Services, req


def _processor(
    s: Services,
    running: bool = True,
    cls: type[PullMessageProcessor] = PullMessageProcessor,
    subscriptions: bool = False,
) -> PullMessageProcessor:
    """A pull processor (``cls``: the reference or a native twin's subclass) over the
    broker's services; ``subscriptions``: with its subscription-group table."""
    b = s.broker
    return cls(
        reads=s.store,
        topics=s.topics,
        offsets=s.offsets,
        clients=s.clients,
        notifier=b.notifier,
        holds=b.pull_holds,
        stats=s.stats,
        config=s.config,
        log=s.log,
        msglog=b.msglog,
        running=lambda: running,
        subscriptions=b.subscriptions if subscriptions else None,
    )


def _pull(topic: str, offset: int = 0, *, sys_flag: int = 0, **extra: Any) -> RemotingCommand:
    ext: dict[str, Any] = {
        "consumerGroup": "G",
        "topic": topic,
        "queueId": 0,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": sys_flag,
        "commitOffset": 0,
        "suspendTimeoutMillis": 50,
        "subVersion": 0,
    }
    ext.update(extra)
    return req(RequestCode.PULL_MESSAGE, ext)


def _bodies(resp: RemotingCommand) -> list[bytes]:
    return [m.body for m in decode_records(resp.body)]


async def test_pull_returns_stored_messages_from_the_offset(services: Services) -> None:
    for i in range(5):
        services.store_message("T", f"m{i}".encode())
    resp = _processor(services).handle_pull(services.conn(), _pull("T", 2))
    assert resp.code == ResponseCode.SUCCESS
    assert _bodies(resp) == [b"m2", b"m3", b"m4"]
    assert resp.ext_fields["nextBeginOffset"] == "5" and resp.ext_fields["maxOffset"] == "5"
    assert services.stats.pulled["T"] == 3


async def test_tag_subscription_filters_at_the_broker(services: Services) -> None:
    services.store_message("T", b"a", props={"TAGS": "A"})
    services.store_message("T", b"b", props={"TAGS": "B"})
    services.store_message("T", b"a2", props={"TAGS": "A"})
    resp = _processor(services).handle_pull(
        services.conn(), _pull("T", sys_flag=PULL_SUBSCRIPTION, subscription="A")
    )
    assert _bodies(resp) == [b"a", b"a2"] and resp.ext_fields["nextBeginOffset"] == "3"


async def test_request_tag_expressions_parsed_once_each(services: Services) -> None:
    """The same processor answers a run of pulls with different TAG expressions each
    by its own expression (the parsed ones are kept, keyed by the expression), also once
    the table of parsed expressions has restarted; SQL92 ones are not kept there."""
    from kairosmq.server.handlers import pull as pull_mod

    for i, tag in enumerate("ABAC"):
        services.store_message("T", f"{tag}{i}".encode(), props={"TAGS": tag})
    proc = _processor(services)
    want = {
        "A": [b"A0", b"A2"],
        "B": [b"B1"],
        "A || C": [b"A0", b"A2", b"C3"],
        " C ": [b"C3"],
        "*": [b"A0", b"B1", b"A2", b"C3"],
    }
    for _ in range(2):
        for expr, bodies in want.items():
            resp = proc.handle_pull(
                services.conn(), _pull("T", sys_flag=PULL_SUBSCRIPTION, subscription=expr)
            )
            assert _bodies(resp) == bodies, expr
    assert set(proc._tag_filters) == set(want)
    for i in range(pull_mod._TAG_FILTERS + 5):  # the table restarts, answers stay right
        proc.handle_pull(
            services.conn(), _pull("T", sys_flag=PULL_SUBSCRIPTION, subscription=f"X{i}")
        )
    assert len(proc._tag_filters) <= pull_mod._TAG_FILTERS
    long = " || ".join(["B"] * 100)  # longer than the table keeps: parsed, answered, not kept
    proc._tag_filters.clear()
    resp = proc.handle_pull(
        services.conn(), _pull("T", sys_flag=PULL_SUBSCRIPTION, subscription=long)
    )
    assert _bodies(resp) == [b"B1"] and not proc._tag_filters
    resp = proc.handle_pull(
        services.conn(), _pull("T", sys_flag=PULL_SUBSCRIPTION, subscription="B")
    )
    assert _bodies(resp) == [b"B1"]


async def test_commit_flag_commits_the_consumer_offset(services: Services) -> None:
    services.store_message("T", b"x")
    _processor(services).handle_pull(
        services.conn(), _pull("T", 1, sys_flag=PULL_COMMIT_OFFSET, commitOffset=1)
    )
    assert services.offsets.query("G", "T", 0) == 1


async def test_status_codes(services: Services) -> None:
    proc = _processor(services)
    services.store_message("T", b"x")
    unknown = proc.handle_pull(services.conn(), _pull("Missing"))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    at_end = proc.handle_pull(services.conn(), _pull("T", 1))
    assert at_end.code == ResponseCode.PULL_NOT_FOUND
    beyond = proc.handle_pull(services.conn(), _pull("T", 9))
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
    assert beyond.ext_fields["nextBeginOffset"] == "1"


class _Recorder:
    """Stands in for the socket under ``conn``: decodes the frames the outbox writes."""

    def __init__(self) -> None:
        self.reader = FrameReader()
        self.sent: list[RemotingCommand] = []

    def write(self, data: bytes) -> None:
        self.reader.feed(data)
        self.sent.extend(self.reader)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40001) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def _answers(conn: Connection) -> list[RemotingCommand]:
    """The answers the processor sends on ``conn`` later (a held pull's), as they leave
    through the outbox (not by replacing ``conn.send``: compiled callers bypass that)."""
    rec = _Recorder()
    conn.connection_made(rec)  # type: ignore[arg-type]
    return rec.sent


async def test_held_pull_is_answered_when_a_message_lands(services: Services) -> None:
    services.store_message("T", b"first")
    cmd = _pull("T", 1, sys_flag=PULL_SUSPEND, suspendTimeoutMillis=10_000)
    conn = services.conn()
    sent = _answers(conn)
    assert _processor(services).handle_pull(conn, cmd) is None  # held: answered later
    await asyncio.sleep(0.05)
    assert sent == [] and services.broker.notifier.is_waiting("T", 0)
    assert conn.held_pulls == 1
    services.store_message("T", b"second")
    await wait_until(lambda: sent, 5.0, what="the answer")  # far below the 10 s hold
    assert len(sent) == 1
    assert sent[0].code == ResponseCode.SUCCESS and _bodies(sent[0]) == [b"second"]
    assert conn.held_pulls == 0 and not services.broker.notifier.is_waiting("T", 0)


async def test_held_pull_times_out_and_is_not_held_when_stopping(services: Services) -> None:
    services.store_message("T", b"x")
    cmd = _pull("T", 1, sys_flag=PULL_SUSPEND, suspendTimeoutMillis=50)
    conn = services.conn()
    sent = _answers(conn)
    assert _processor(services).handle_pull(conn, cmd) is None
    await wait_until(lambda: sent, 5.0, what="the answer at the timeout")
    assert sent[0].code == ResponseCode.PULL_NOT_FOUND and conn.held_pulls == 0
    assert not services.broker.notifier.is_waiting("T", 0)
    now = _processor(services, running=False).handle_pull(services.conn(), cmd)
    assert isinstance(now, RemotingCommand) and now.code == ResponseCode.PULL_NOT_FOUND
