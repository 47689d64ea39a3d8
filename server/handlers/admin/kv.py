"""The embedded name server's KV config (RocketMQ ``KVConfigManager``): PUT_KV_CONFIG (100),
GET_KV_CONFIG (101), DELETE_KV_CONFIG (102), GET_KVLIST_BY_NAMESPACE (219), as
``mqadmin updateKvConfig`` / ``deleteKvConfig`` and rocketmq-dashboard use them.

Owns: ``KvConfig`` (namespace -> key -> value), persisted to ``config/kvConfig.json`` as
``{"configTable": {...}}`` like RocketMQ's ``kvConfig.json``; one per broker (its
``KvConfigProcessor``, the KV half of RocketMQ's name-server DefaultRequestProcessor),
loaded on first use.

Invariants:
* Loading and writing run in a thread (never file I/O on the event loop); a change is
  answered only once the file holds it. Writes are atomic and ordered by generation, so
  an older snapshot never overwrites a newer one.
* Bounded by bytes, not by counts RocketMQ does not have (its KVConfigManager has no
  limit): namespace and key at most 255 characters; a value as long as a header allows
  (``max_header_bytes``); the whole table at most ``MAX_TABLE_BYTES`` (8 MiB of UTF-8), so
  that GET_KVLIST_BY_NAMESPACE always fits in one 16 MiB frame, the most a RocketMQ
  client reads. Beyond that the request gets SYSTEM_ERROR and a remark, nothing changes.
* A missing key or namespace answers QUERY_NOT_FOUND (22) with RocketMQ's remark.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers (see Handler)

from kairosmq.protocol.bodies import encode_kv_table
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    KvConfigRequestHeader,
    KvConfigResponseHeader,
    KvNamespaceRequestHeader,
)

from ...store.files import OrderedJsonFile, read_json

if TYPE_CHECKING:
    from ...remoting.transport import Connection

MAX_NAME = 255
MAX_TABLE_BYTES = 8 * 1024 * 1024  # namespaces, keys and values (UTF-8) together


class KvConfig:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self._loaded: asyncio.Future[None] | None = None
        self._file = OrderedJsonFile(path)

    async def ready(self) -> None:
        if self._loaded is None:
            self._loaded = asyncio.get_running_loop().create_future()
            try:
                data = await asyncio.to_thread(read_json, self.path, {})
                table = data.get("configTable") if isinstance(data, dict) else None
                for ns, kv in (table or {}).items():
                    if isinstance(kv, dict):
                        self.table[str(ns)] = {str(k): str(v) for k, v in kv.items()}
                self._loaded.set_result(None)
            except BaseException as err:
                self._loaded.set_exception(err)
                self._loaded.exception()  # retrieved: later waiters re-raise it
                self._loaded = None
                raise
        await asyncio.shield(self._loaded)

    def entries(self) -> int:
        return sum(len(kv) for kv in self.table.values())

    def size(self) -> int:
        """Bytes of every namespace, key and value (UTF-8)."""
        return sum(
            len(ns.encode()) + sum(len(k.encode()) + len(v.encode()) for k, v in kv.items())
            for ns, kv in self.table.items()
        )

    async def persist(self) -> None:
        generation = self._file.snapshot_id()
        data = {"configTable": {ns: dict(kv) for ns, kv in self.table.items()}}
        await asyncio.to_thread(self._file.write, generation, data)


def _bad_name(value: str, field: str) -> str | None:
    if not value.strip():
        return f"{field} is empty"
    if len(value) > MAX_NAME:
        return f"{field} is {len(value)} characters long, more than {MAX_NAME}"
    return None


class KvConfigProcessor:
    """PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE."""

    def __init__(self, *, kv: KvConfig, log: Any) -> None:
        self.kv = kv
        self.log = log

    def handle_kv(self, conn: Connection, cmd: RemotingCommand) -> Any:
        """PUT_KV_CONFIG, GET_KV_CONFIG and DELETE_KV_CONFIG."""
        h = KvConfigRequestHeader.from_ext_fields(cmd.ext_fields)
        bad = _bad_name(h.namespace, "namespace") or _bad_name(h.key, "key")
        if cmd.code == RequestCode.PUT_KV_CONFIG:
            if h.value is None:
                bad = bad or "missing required header field 'value'"
        if bad:
            return cmd.error(ResponseCode.SYSTEM_ERROR, bad)
        return self._kv(cmd, h)

    async def _kv(self, cmd: RemotingCommand, h: KvConfigRequestHeader) -> RemotingCommand:
        kv = self.kv
        await kv.ready()
        space = kv.table.get(h.namespace, {})
        if cmd.code == RequestCode.GET_KV_CONFIG:
            value = space.get(h.key)
            if value is None:
                return cmd.error(
                    ResponseCode.QUERY_NOT_FOUND,
                    f"No config item, Namespace: {h.namespace} Key: {h.key}",
                )
            return cmd.response(ext_fields=KvConfigResponseHeader(value).to_ext_fields())
        if cmd.code == RequestCode.PUT_KV_CONFIG:
            assert h.value is not None
            old = space.get(h.key)
            grown = len(h.value.encode()) + (
                len(h.key.encode()) + (0 if space else len(h.namespace.encode()))
                if old is None
                else -len(old.encode())
            )
            if grown > 0 and kv.size() + grown > MAX_TABLE_BYTES:
                return cmd.error(
                    ResponseCode.SYSTEM_ERROR,
                    f"the KV config would hold {kv.size() + grown} bytes, more "
                    f"than {MAX_TABLE_BYTES} (MAX_TABLE_BYTES)",
                )
            kv.table.setdefault(h.namespace, {})[h.key] = h.value
            event = "kvconfig.updated"
        else:
            if space.pop(h.key, None) is None:
                return cmd.response()  # RocketMQ deletes idempotently
            if not space:
                kv.table.pop(h.namespace, None)
            event = "kvconfig.deleted"
        await kv.persist()
        self.log.info(event, namespace=h.namespace, key=h.key)
        return cmd.response()

    def handle_kv_list(self, conn: Connection, cmd: RemotingCommand) -> Any:
        h = KvNamespaceRequestHeader.from_ext_fields(cmd.ext_fields)
        bad = _bad_name(h.namespace, "namespace")
        if bad:
            return cmd.error(ResponseCode.SYSTEM_ERROR, bad)
        return self._kv_list(cmd, h.namespace)

    async def _kv_list(self, cmd: RemotingCommand, namespace: str) -> RemotingCommand:
        await self.kv.ready()
        space = self.kv.table.get(namespace)
        if not space:
            return cmd.error(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
            )
        return cmd.response(body=encode_kv_table(space))
