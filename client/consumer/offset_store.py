"""Consumer offset stores: on the broker (CLUSTERING) or in a local file (BROADCASTING).

Owns: the in-memory table ``MessageQueue -> next offset to consume`` and how it is read
and persisted. ``RemoteOffsetStore`` uses QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET
(one-way on the 5 s timer, acknowledged on shutdown and queue removal);
``LocalOffsetStore`` keeps ``<dir>/<group>/offsets.json``, written atomically (temp file,
fsync, ``os.replace``).

Also owns where a queue without a stored offset starts: ``ConsumeFromWhere`` and
``compute_start_offset`` (RocketMQ ``computePullFromWhere``; the consumer's Rebalance asks
it when it adds a queue).

Invariants: ``update(..., increase_only=True)`` never moves an offset backwards; a
queue's offset is only persisted after it changed (or when forced), and a read that finds
nothing returns -1 ("no offset"), which ``compute_start_offset`` resolves by
``consume_from_where`` (a stored offset always wins; a ``%RETRY%`` topic never starts by
timestamp).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import (
    Header,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from kairosmq.protocol.naming import is_retry_topic

from ..errors import ClientError
from ..message import MessageQueue
from ..options import ConsumeFromWhere
from ..remoting import RemotingPool

log = logging.getLogger("kairosmq.client.offsets")


class OffsetStore:
    """Base: the in-memory table; subclasses load and persist."""

    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}
        self._dirty: set[MessageQueue] = set()

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        old = self._table.get(mq)
        if old is None or not increase_only or offset > old:
            if old != offset:
                self._table[mq] = offset
                self._dirty.add(mq)

    def cached(self, mq: MessageQueue) -> int:
        return self._table.get(mq, -1)

    async def read_from_store(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def persist(self, mqs: list[MessageQueue], *, final: bool = False) -> None:
        raise NotImplementedError

    def remove(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)
        self._dirty.discard(mq)


class RemoteOffsetStore(OffsetStore):
    """Offsets kept by the broker for the group (RocketMQ ``RemoteBrokerOffsetStore``)."""

    def __init__(
        self,
        pool: RemotingPool,
        group: str,
        addr_of: Callable[[str], str | None],
        timeout: float = 3.0,
    ) -> None:
        super().__init__()
        self._pool = pool
        self._group = group
        self._addr_of = addr_of
        self._timeout = timeout
        self._failing: set[str] = set()  # brokers whose last commit failed (logged once)

    async def read_from_store(self, mq: MessageQueue) -> int:
        """The broker's offset for ``mq``, or -1 if it has none (any error code means none).

        Raises:
            ClientError: the broker could not be asked (connection, timeout, no address).
        """
        addr = self._addr_of(mq.broker_name)
        if addr is None:
            raise ClientError(f"no address for broker {mq.broker_name}")
        ext = QueryConsumerOffsetRequestHeader(self._group, mq.topic, mq.queue_id).to_ext_fields()
        resp = await self._pool.invoke(
            addr, RequestCode.QUERY_CONSUMER_OFFSET, ext, timeout=self._timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            return -1
        offset = _offset(resp, -1)
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
            self._dirty.discard(mq)
        return offset

    async def persist(self, mqs: list[MessageQueue], *, final: bool = False) -> None:
        """Send changed offsets of ``mqs``, each to the broker owning its queue; ``final``
        waits for acknowledgements. A broker that fails is skipped for the rest of this
        round (its offsets stay dirty for the next) and logged once until it answers."""
        failed: set[str] = set()
        for mq in mqs:
            offset = self._table.get(mq)
            if offset is None or (mq not in self._dirty and not final):
                continue
            addr = self._addr_of(mq.broker_name)
            if addr is None or addr in failed:
                continue
            ext = UpdateConsumerOffsetRequestHeader(
                self._group, mq.topic, mq.queue_id, offset
            ).to_ext_fields()
            try:
                if final:
                    await self._pool.invoke(
                        addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext, timeout=self._timeout
                    )
                else:
                    await self._pool.invoke_oneway(
                        addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext, timeout=self._timeout
                    )
                self._dirty.discard(mq)
                if addr in self._failing:
                    self._failing.discard(addr)
                    log.info("offset commits to %s work again", addr)
            except ClientError as err:
                failed.add(addr)
                if addr not in self._failing:
                    self._failing.add(addr)
                    log.warning("persisting offset %d of %s failed: %s", offset, mq, err)


class LocalOffsetStore(OffsetStore):
    """Offsets in ``<directory>/<group>/offsets.json`` (BROADCASTING consumers)."""

    def __init__(self, directory: str | os.PathLike[str], group: str) -> None:
        super().__init__()
        self.path = Path(directory) / group / "offsets.json"
        self._loaded: dict[MessageQueue, int] = {}
        try:
            data = json.loads(self.path.read_text())
            for row in data.get("offsetTable", []):
                mq = MessageQueue(row["topic"], row["brokerName"], int(row["queueId"]))
                self._loaded[mq] = int(row["offset"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as err:
            log.warning("ignoring unreadable offset file %s: %s", self.path, err)

    async def read_from_store(self, mq: MessageQueue) -> int:
        offset = self._loaded.get(mq, -1)
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
            self._dirty.discard(mq)
        return offset

    async def persist(self, mqs: list[MessageQueue], *, final: bool = False) -> None:
        if not self._dirty and not final:
            return
        for mq in mqs:
            if mq in self._table:
                self._loaded[mq] = self._table[mq]
        rows = [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o}
            for mq, o in sorted(self._loaded.items())
        ]
        self._dirty.clear()
        await asyncio.to_thread(self._write, json.dumps({"offsetTable": rows}))

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


async def compute_start_offset(
    store: OffsetStore,
    mq: MessageQueue,
    where: ConsumeFromWhere,
    timestamp: int | None,
    *,
    pool: RemotingPool,
    addr_of: Callable[[str], str | None],
    timeout: float = 3.0,
) -> int:
    """RocketMQ computePullFromWhere: the stored offset, else by ``where``.

    ``timestamp`` (ms) is for ``ConsumeFromWhere.TIMESTAMP``; None (or 0) means 30 min ago.

    Raises:
        ClientError: the store or the broker could not be asked, or the broker refused.
    """
    offset = await store.read_from_store(mq)
    if offset >= 0:
        return offset
    is_retry = is_retry_topic(mq.topic)

    async def ask(code: int, header: Header) -> int:
        return await _queue_offset(pool, addr_of, mq, code, header, timeout)

    max_offset = QueueRequestHeader(mq.topic, mq.queue_id)
    if where is ConsumeFromWhere.FIRST_OFFSET:
        return 0
    if where is ConsumeFromWhere.LAST_OFFSET:
        return 0 if is_retry else await ask(RequestCode.GET_MAX_OFFSET, max_offset)
    if is_retry:
        return await ask(RequestCode.GET_MAX_OFFSET, max_offset)
    ts = timestamp or int(time.time() * 1000) - 30 * 60 * 1000
    return await ask(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(mq.topic, mq.queue_id, ts)
    )


async def _queue_offset(
    pool: RemotingPool,
    addr_of: Callable[[str], str | None],
    mq: MessageQueue,
    code: int,
    header: Header,
    timeout: float,
) -> int:
    addr = addr_of(mq.broker_name)
    if addr is None:
        raise ClientError(f"no address for broker {mq.broker_name}")
    resp = await pool.invoke(addr, code, header.to_ext_fields(), timeout=timeout)
    if resp.code != ResponseCode.SUCCESS:
        name = RequestCode(code).name
        raise ClientError(f"{name} for {mq} answered {resp.code} {resp.remark}")
    return _offset(resp, 0)


def _offset(resp: RemotingCommand, missing: int) -> int:
    """The ``offset`` of an ``OffsetResponseHeader`` answer; ``missing`` when it has none."""
    try:
        return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset
    except HeaderError:
        return missing
