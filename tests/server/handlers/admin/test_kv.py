"""Unit tests of KvConfigProcessor (server/handlers/admin/kv.py): put/get/delete/list
answered only once kvConfig.json holds the change, and bounded input refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.handlers.admin.kv import MAX_TABLE_BYTES, KvConfig, KvConfigProcessor
from kairosmq.server.observe.logs import get_logger
from kairosmq.server.remoting.transport import Connection

from tests.server.handlers.rig import req


async def _call(proc: KvConfigProcessor, code: int, **ext: Any) -> RemotingCommand:
    conn: Connection | None = None  # the KV handlers never read the connection
    handler = proc.handle_kv_list if code == RequestCode.GET_KVLIST_BY_NAMESPACE else proc.handle_kv
    out = handler(conn, req(code, ext))  # type: ignore[arg-type]
    return out if isinstance(out, RemotingCommand) else await out


async def test_put_get_delete_list_persisted(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    proc = KvConfigProcessor(kv=KvConfig(path), log=get_logger("test"))
    put = await _call(proc, RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="v1")
    assert put.code == ResponseCode.SUCCESS
    assert json.loads(path.read_text()) == {"configTable": {"NS": {"k": "v1"}}}
    got = await _call(proc, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert got.ext_fields == {"value": "v1"}
    listed = await _call(proc, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="NS")
    assert orjson.loads(listed.body) == {"table": {"k": "v1"}}
    reloaded = KvConfigProcessor(kv=KvConfig(path), log=get_logger("test"))
    again = await _call(reloaded, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert again.ext_fields == {"value": "v1"}
    await _call(reloaded, RequestCode.DELETE_KV_CONFIG, namespace="NS", key="k")
    assert json.loads(path.read_text()) == {"configTable": {}}
    missing = await _call(reloaded, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert missing.code == ResponseCode.QUERY_NOT_FOUND


async def test_bounds_are_refused_and_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    proc = KvConfigProcessor(kv=KvConfig(path), log=get_logger("test"))
    # RocketMQ has no value limit: a 100 KiB value (mqadmin updateKvConfig) is kept ...
    ok = await _call(
        proc, RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="v" * (100 * 1024)
    )
    assert ok.code == ResponseCode.SUCCESS
    for i in range(MAX_TABLE_BYTES // (1024 * 1024) - 1):
        fill = await _call(
            proc,
            RequestCode.PUT_KV_CONFIG,
            namespace="NS",
            key=f"f{i}",
            value="v" * (1024 * 1024 - 16),
        )
        assert fill.code == ResponseCode.SUCCESS, fill.remark
    # ... up to the table's bytes (its list answer must fit in a frame)
    big = await _call(
        proc, RequestCode.PUT_KV_CONFIG, namespace="NS", key="big", value="v" * (1024 * 1024)
    )
    assert big.code == ResponseCode.SYSTEM_ERROR and "MAX_TABLE_BYTES" in big.remark
    assert "big" not in json.loads(path.read_text())["configTable"]["NS"]
    path.unlink()
    proc = KvConfigProcessor(kv=KvConfig(path), log=get_logger("test"))
    blank = await _call(proc, RequestCode.PUT_KV_CONFIG, namespace=" ", key="k", value="v")
    assert blank.code == ResponseCode.SYSTEM_ERROR and not path.exists()
