"""Test rig for the multi-broker client tests: a real kairosmq ``NameServer`` and kairosmq
brokers registered with it (``namesrv_addr``), all in-process on port 0, plus wire-level
helpers to ask any of them (routes, offsets, consumer lists) and the admin CLI."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from kairosmq.client import admin
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.bodies import TopicRouteData, decode_consumer_list
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
)
from kairosmq.server.broker import Broker
from kairosmq.server.namesrv import NameServer

from tests.helpers import fast_config, wait_until


class Cluster:
    """A name server and named brokers registered with it (``await start("a", "b")``)."""

    def __init__(self, tmp: Path, **broker_config: Any) -> None:
        self.tmp = tmp
        self.broker_config = broker_config  # fast_config overrides for every broker
        self.ns: NameServer | None = None
        self.brokers: dict[str, Broker] = {}
        self.pool = RemotingPool()

    @property
    def namesrv(self) -> str:
        assert self.ns is not None
        return f"127.0.0.1:{self.ns.port}"

    async def start(self, *names: str) -> None:
        self.ns = NameServer(
            host="127.0.0.1",
            port=0,
            data_dir=self.tmp / "namesrv",
            scan_interval_s=0.2,
            broker_expiry_s=5.0,
        )
        await self.ns.start()
        for name in names:
            await self.start_broker(name)

    async def start_broker(self, name: str, port: int = 0) -> Broker:
        """Start (or restart on its data dir and ``port``) broker ``name``; returns once
        the name server lists it."""
        b = Broker(
            fast_config(
                self.tmp / name,
                broker_name=name,
                namesrv_addr=self.namesrv,
                port=port,
                log_messages=False,
                register_period=1.0,
                **self.broker_config,
            )
        )
        await b.start()
        self.brokers[name] = b
        await wait_until(lambda: name in self.cluster_brokers(), 10.0, what=f"{name} registered")
        return b

    async def stop_broker(self, name: str) -> int:
        """Stop broker ``name`` (clean stop: it unregisters); returns its port."""
        b = self.brokers.pop(name)
        port = b.port
        await b.stop("test")
        return port

    def cluster_brokers(self) -> set[str]:
        assert self.ns is not None
        return set(self.ns.routes.broker_addr_table)

    def addr(self, name: str) -> str:
        return self.brokers[name].address

    async def ask(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
    ) -> RemotingCommand:
        return await self.pool.invoke(addr, code, ext, body, timeout=timeout)

    async def route_brokers(self, topic: str) -> set[str]:
        resp = await self.ask(
            self.namesrv,
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            GetRouteInfoRequestHeader(topic).to_ext_fields(),
        )
        if resp.code != ResponseCode.SUCCESS:
            return set()
        return {q.broker_name for q in TopicRouteData.from_json(resp.body).queue_datas}

    async def admin(self, *argv: str) -> tuple[int, str, str]:
        """``kairosmq admin --namesrv <ns> <argv>`` (in a thread: it runs its own loop)."""
        out, err = io.StringIO(), io.StringIO()
        rc = await asyncio.to_thread(
            admin.main, ["--namesrv", self.namesrv, *argv], out=out, err=err
        )
        return rc, out.getvalue(), err.getvalue()

    async def create_topic(self, topic: str, queues: int = 4, brokers: str = "all") -> None:
        rc, _out, err = await self.admin(
            "topic", "create", topic, "--queues", str(queues), "--brokers", brokers
        )
        assert rc == 0, err
        want = self.cluster_brokers() if brokers == "all" else set(brokers.split(","))

        async def routed() -> bool:
            return await self.route_brokers(topic) == want

        await wait_async(routed, 10.0)

    async def committed(self, name: str, group: str, topic: str, queue_id: int) -> int:
        h = QueryConsumerOffsetRequestHeader(group, topic, queue_id).to_ext_fields()
        resp = await self.ask(self.addr(name), RequestCode.QUERY_CONSUMER_OFFSET, h)
        if resp.code != ResponseCode.SUCCESS:
            return -1
        return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def max_offset(self, name: str, topic: str, queue_id: int) -> int:
        h = QueueRequestHeader(topic, queue_id).to_ext_fields()
        resp = await self.ask(self.addr(name), RequestCode.GET_MAX_OFFSET, h)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def consumers(self, name: str, group: str) -> list[str]:
        resp = await self.ask(
            self.addr(name),
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            ConsumerGroupRequestHeader(group).to_ext_fields(),
        )
        return decode_consumer_list(resp.body) if resp.code == ResponseCode.SUCCESS else []

    async def close(self) -> None:
        self.pool.close()
        for name in list(self.brokers):
            await self.stop_broker(name)
        if self.ns is not None:
            await self.ns.stop()


async def wait_async(pred: Any, timeout: float = 5.0, interval: float = 0.05) -> None:
    """``wait_until`` for an async predicate."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        if loop.time() > deadline:
            raise AssertionError(f"{pred.__name__} still false after {timeout} s")
        await asyncio.sleep(interval)
