"""The log catalogue (``server/observe/logs.py`` ``CATALOGUE``) is true to what the broker emits.

Two checks: a static one over the source (every event name a log call in ``server/`` uses is
catalogued, and every keyword it passes is a catalogued field of that event, or a field
``LEAN_EVENTS`` drops from the line), and a live one: a real in-process broker runs a workload
that emits most events (sends, delayed sends, pulls, long polls, offsets, a retry and a dead
letter, heartbeats and unregistering, topic create/delete, refused requests, a bad frame,
retention, stop) with JSON logs at debug level in a temp dir; every line's event must be
catalogued and its keys a subset of the event's fields plus the common ones.
"""

from __future__ import annotations

import ast
import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import kairosmq.client as client
import pytest
import pytest_asyncio
import structlog
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import CreateTopicRequestHeader, SendMessageRequestHeader
from kairosmq.server.broker import Broker
from kairosmq.server.observe import logs

from tests.helpers import pull, send, wait_until
from tests.wire import RawPeer

SERVER = Path(__file__).resolve().parents[2] / "server"
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical"}
GROUP = "CG-logcat"


def _batch_calls(tree: ast.Module) -> Iterator[ast.Call]:
    """Each ``x.info_many(event, rows)`` call (``MessageLog.info_many``: one event, one
    fields dict per row) as if it were one ``info`` call passing, as keywords, the keys of
    the dict literals with string keys in the function that makes it."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        keys = {
            k.value
            for d in ast.walk(fn)
            if isinstance(d, ast.Dict)
            and d.keys
            and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in d.keys)
            for k in d.keys
            if isinstance(k, ast.Constant)
        }
        for node in ast.walk(fn):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(node, ast.Call) and isinstance(f, ast.Attribute) and node.args:
                if f.attr == "info_many":
                    kws = [ast.keyword(arg=k, value=ast.Constant(None)) for k in sorted(keys)]
                    yield ast.Call(
                        func=ast.Attribute(value=f.value, attr="info", ctx=ast.Load()),
                        args=node.args[:1],
                        keywords=kws,
                        lineno=node.lineno,
                        col_offset=node.col_offset,
                    )


def _log_calls() -> Iterator[tuple[str, int, ast.Call]]:
    """Every ``x.<level>(...)`` call in ``server/`` with arguments, every call of a local
    alias of one (``info = broker.msglog.info; info("message.pulled", ...)``) and every
    ``info_many`` call (``_batch_calls``)."""
    for path in sorted([*SERVER.rglob("*.py"), *(SERVER.parent / "console").rglob("*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        for call in _batch_calls(tree):
            yield f"{path.relative_to(SERVER.parent)}", call.lineno, call
        aliases = {
            node.targets[0].id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr in LOG_METHODS
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in LOG_METHODS) or (
                isinstance(f, ast.Name) and f.id in aliases
            ):
                yield f"{path.relative_to(SERVER.parent)}", node.lineno, node


def _event_names(arg: ast.expr, tree_assigns: dict[str, set[str]]) -> set[str] | None:
    """The event names a first argument can take: a literal, or a local variable only ever
    assigned string literals (``event = "a" if x else "b"``); None when not a name."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    if isinstance(arg, ast.Name):
        return tree_assigns.get(arg.id)
    return None


def _string_assigns(path: Path) -> dict[str, set[str]]:
    """Per module: variable -> the string literals assigned to it (directly or by IfExp)."""
    out: dict[str, set[str]] = {}

    def strings(v: ast.expr) -> list[str]:
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return [v.value]
        if isinstance(v, ast.IfExp):
            return strings(v.body) + strings(v.orelse)
        return []

    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            found = strings(node.value)
            if found:
                out.setdefault(node.targets[0].id, set()).update(found)
    return out


def test_every_event_named_in_server_code_is_catalogued() -> None:
    checked: set[str] = set()
    passed: dict[str, set[str]] = {}  # event -> the keywords its calls pass
    splat: set[str] = set()
    problems: list[str] = []
    assigns: dict[str, dict[str, set[str]]] = {}
    for where, line, call in _log_calls():
        path = SERVER.parent / where
        names = _event_names(call.args[0], assigns.setdefault(where, _string_assigns(path)))
        if names is None or not all("." in n for n in names):
            continue  # not a log event (e.g. ``cmd.error(code, remark)``)
        for name in names:
            checked.add(name)
            passed.setdefault(name, set()).update(k.arg for k in call.keywords if k.arg)
            if any(k.arg is None for k in call.keywords):
                splat.add(name)
            fields = logs.CATALOGUE.get(name)
            if fields is None:
                problems.append(f"{where}:{line}: event {name!r} is not in the catalogue")
                continue
            allowed = fields.keys() | logs.COMMON.keys() | set(logs.LEAN_EVENTS.get(name, ()))
            if isinstance(call.func, ast.Attribute) and call.func.attr == "exception":
                passed.setdefault(name, set()).add("exception")  # the traceback field
                if "exception" not in fields:
                    problems.append(
                        f"{where}:{line}: {name} is logged with .exception() "
                        f"but its catalogue entry has no 'exception' field"
                    )
            for kw in call.keywords:
                if kw.arg is not None and kw.arg not in allowed:
                    problems.append(
                        f"{where}:{line}: {name} passes {kw.arg!r}, not a catalogued field"
                    )
    assert not problems, "\n".join(problems)
    # the other way: a field the catalogue promises is passed by some call of its event
    # (calls that splat a dict, ``**fields``, are checked by the live test below)
    for name, fields in logs.CATALOGUE.items():
        assert name in passed, f"catalogued event {name!r} is never emitted in server/"
        if name not in splat:
            missing = fields.keys() - passed[name]
            assert not missing, f"{name}: catalogued fields {sorted(missing)} never emitted"
    # the scan is not vacuous: it saw the lifecycle, store, message and dynamic events
    assert {
        "broker.started",
        "store.files_deleted",
        "message.stored",
        "message.pulled",
        "message.dead_lettered",
        "kvconfig.updated",
        "request.failed",
    } <= checked
    assert len(checked) >= 0.8 * len(logs.CATALOGUE)


def test_catalogue_field_types_agree() -> None:
    fields = logs.all_fields()  # raises on a field with two types
    assert set(logs.COMMON) <= set(fields)
    assert all(k in {"string", "long", "int", "double", "boolean"} for k in fields.values())


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "logs"
    logs.configure_logging(json=True, level="debug", log_dir=d, stdout=False)
    try:
        yield d
    finally:
        logs.close_sinks()
        structlog.reset_defaults()


def _lines(d: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(d.iterdir())
        for line in f.read_text().splitlines()
        if line.strip()
    ]


def _check_line(rec: dict[str, Any]) -> str | None:
    event = rec.get("event")
    fields = logs.CATALOGUE.get(event)  # type: ignore[arg-type]
    if fields is None:
        return f"uncatalogued event: {rec}"
    extra = rec.keys() - fields.keys() - logs.COMMON.keys()
    return f"{event}: keys {sorted(extra)} not catalogued: {rec}" if extra else None


@pytest_asyncio.fixture
async def pool() -> AsyncIterator[RemotingPool]:
    p = RemotingPool()
    yield p
    p.close()


async def _workload(broker: Broker, pool: RemotingPool) -> None:
    addr = f"127.0.0.1:{broker.port}"
    sent: dict[str, str] = {}
    seen: list[tuple[str, int]] = []

    def listener(msgs: list[Any], _ctx: Any) -> client.ConsumeStatus:
        m = msgs[0]
        seen.append((m.msg_id, m.reconsume_times))
        if m.msg_id == sent.get("dlq"):
            return client.ConsumeStatus.RECONSUME_LATER
        return client.ConsumeStatus.CONSUME_SUCCESS

    # topic create/delete through the admin requests; one refused (bad name)
    ok = CreateTopicRequestHeader(
        topic="LcAdmin", read_queue_nums=2, write_queue_nums=2, perm=6, order=False
    )
    assert (
        await pool.invoke(addr, R.UPDATE_AND_CREATE_TOPIC, ok.to_ext_fields(), timeout=5)
    ).code == ResponseCode.SUCCESS
    bad = CreateTopicRequestHeader(
        topic="bad topic!", read_queue_nums=2, write_queue_nums=2, perm=6, order=False
    )
    assert (
        await pool.invoke(addr, R.UPDATE_AND_CREATE_TOPIC, bad.to_ext_fields(), timeout=5)
    ).code != ResponseCode.SUCCESS
    assert (
        await pool.invoke(addr, R.DELETE_TOPIC_IN_BROKER, {"topic": "LcAdmin"}, timeout=5)
    ).code == ResponseCode.SUCCESS
    # a send refused by the broker (bad topic name): message.rejected
    h = SendMessageRequestHeader(producer_group="PG-logcat", topic="bad topic!")
    assert (
        await pool.invoke(addr, R.SEND_MESSAGE, h.to_ext_fields(), b"x", timeout=5)
    ).code != ResponseCode.SUCCESS
    # a frame the codec refuses: frame.rejected, then the connection closes
    _r, w = await asyncio.open_connection("127.0.0.1", broker.port)
    w.write(b"\x7f\xff\xff\xff" + b"\x00" * 16)
    await w.drain()
    await asyncio.sleep(0.1)
    w.close()

    async with client.Producer("PG-logcat", broker.namesrv_address) as p:
        sent["plain"] = (await p.send(client.Message("LcNormal", b"plain"))).msg_id
        sent["dlq"] = (await p.send(client.Message("LcNormal", b"dlq"))).msg_id
        sent["delayed"] = (await p.send(client.Message("LcDelay", b"d", delay_level=1))).msg_id
    consumer = client.PushConsumer(
        GROUP,
        broker.namesrv_address,
        rebalance_interval=0.5,
        max_reconsume_times=1,
        consume_from_where=client.ConsumeFromWhere.FIRST_OFFSET,
        pull_time_delay_millis_when_exception=50,
        persist_consumer_offset_interval=0.2,
    )
    consumer.subscribe("LcNormal")
    consumer.subscribe("LcDelay")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await wait_until(
            lambda: (
                broker.store.max_offset(f"%DLQ%{GROUP}", 0) >= 1
                and {sent["plain"], sent["delayed"]} <= {m for m, _ in seen}
            ),
            timeout=30,
        )
        await asyncio.sleep(0.5)  # an offset commit and a held pull
    finally:
        await consumer.shutdown()
    # retention: fill a few small segments, then let housekeeping delete the old ones
    rnd = random.Random(11)  # incompressible bodies: the producer compresses big ones
    async with client.Producer("PG-logcat", broker.namesrv_address) as p:
        for _ in range(12):
            await p.send(client.Message("LcBulk", rnd.randbytes(8000)))
    await wait_until(lambda: broker.store.commitlog.min_offset > 0, timeout=30)


async def test_every_emitted_line_matches_the_catalogue(
    log_dir: Path, broker_factory: Callable[..., Awaitable[Broker]], pool: RemotingPool
) -> None:
    broker = await broker_factory(
        commitlog_segment_size=64 * 1024,
        max_message_size=16 * 1024,
        consumequeue_units_per_file=4,
        file_reserved_hours=0.0,
        retention_check_interval=0.2,
        max_reconsume_times=1,
    )
    await _workload(broker, pool)
    await broker.stop("log catalogue test")
    logs.close_sinks()  # drain: every line is on disk
    lines = _lines(log_dir)
    problems = [p for p in map(_check_line, lines) if p]
    assert not problems, "\n".join(problems[:20])
    events = {r["event"] for r in lines}
    expected = {
        "store.recovered",
        "broker.started",
        "broker.stopping",
        "broker.stopped",
        "topic.created",
        "topic.deleted",
        "request.rejected",
        "message.rejected",
        "frame.rejected",
        "conn.opened",
        "conn.closed",
        "client.registered",
        "client.unregistered",
        "message.stored",
        "message.scheduled",
        "message.due",
        "message.delivered",
        "message.pulled",
        "message.redelivered",
        "message.dead_lettered",
        "pull.held",
        "offset.committed",
        "store.files_deleted",
    }
    assert expected <= events, f"not emitted: {sorted(expected - events)}"
    # each emitted event carried every field the catalogue promises for it (lean events
    # leave out reconsume_times 0; a first-time producer store always has 0)
    for event in events:
        seen = set().union(*(r.keys() for r in lines if r["event"] == event))
        missing = logs.CATALOGUE[event].keys() - seen
        if event in logs.LEAN_EVENTS:
            missing.discard("reconsume_times")
        assert not missing, f"{event}: catalogued fields {sorted(missing)} never emitted"
    deleted = [r for r in lines if r["event"] == "store.files_deleted"]
    assert all(r["count"] > 0 and r["bytes"] > 0 for r in deleted), deleted
    seg = [r for r in deleted if r["kind"] == "commitlog"]
    assert seg and all(r["bytes"] == r["count"] * 64 * 1024 for r in seg)


def test_an_exception_call_writes_the_traceback_as_a_catalogued_field(log_dir: Path) -> None:
    log = logs.get_logger("transport")
    try:
        raise KeyError("boom")
    except KeyError as err:
        log.exception(
            "request.failed",
            peer="127.0.0.1:1",
            request_code=10,
            error=f"{type(err).__name__}: {err}",
        )
    logs.close_sinks()
    (rec,) = _lines(log_dir)
    assert _check_line(rec) is None
    assert "exc_info" not in rec and rec["level"] == "error"
    assert rec["exception"].startswith("Traceback") and "KeyError: 'boom'" in rec["exception"]


async def test_above_info_no_message_event_is_built_or_written(
    tmp_path: Path, broker_factory: Callable[..., Awaitable[Broker]]
) -> None:
    """At ``--log-level warning`` the per-message steps skip their events (and the work of
    building them: ``MessageLog.enabled``); warnings are still written."""
    d = tmp_path / "logs"
    logs.configure_logging(json=True, level="warning", log_dir=d, stdout=False)
    try:
        assert not logs.MessageLog("x").enabled
        broker = await broker_factory()
        peer = await RawPeer.connect(broker.address)
        for i in range(3):
            assert (await send(peer, "LvT", f"m{i}".encode())).code == ResponseCode.SUCCESS
        got = await pull(peer, "LvT", offset=0)
        assert got.code == ResponseCode.SUCCESS
        logs.get_logger("transport").warning(
            "frame.rejected", peer="p", conn_id=1, error="a warning still goes out"
        )
        await peer.close()
        await broker.stop("level test")
    finally:
        logs.close_sinks()
        structlog.reset_defaults()
    events = [r["event"] for r in _lines(d)]
    assert "frame.rejected" in events
    assert not [e for e in events if e.startswith("message.")], events
    logs.configure_logging(json=True, level="info", log_dir=tmp_path / "l2", stdout=False)
    try:
        assert logs.MessageLog("x").enabled
    finally:
        logs.close_sinks()
        structlog.reset_defaults()
