"""The console's read-only views over a mixed cluster: the REAL Apache RocketMQ 4.9.8
broker (``start_broker.sh``) and a kairosmq broker (in-process) behind one name server
(kairosmq's, in-process). The cluster, topics and groups views show the Apache broker
from stock requests (no kairosmq columns); timer health shows its delay levels from
GET_BROKER_RUNTIME_INFO. Skipped when the Apache build (``shared/apache-rocketmq``) or
java is absent."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from kairosmq.client.remoting import RemotingPool
from kairosmq.console.api import Brokers, ConsoleApi
from kairosmq.console.auth import Users
from kairosmq.console.http import HttpServer
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader
from kairosmq.server.namesrv import NameServer

from tests.console.harness import Http, Log, users_file
from tests.helpers import (
    APACHE_BROKER_MISSING,
    free_broker_port,
    send,
    start_apache_broker,
    wait_until,
)
from tests.wire import RawPeer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        APACHE_BROKER_MISSING is not None, reason=f"Apache broker: {APACHE_BROKER_MISSING}"
    ),
]


async def test_views_over_an_apache_and_a_kairosmq_broker(broker_factory, tmp_path: Path) -> None:
    ns = NameServer(port=0, data_dir=tmp_path / "namesrv")
    await ns.start()
    port = free_broker_port()
    apache_addr = f"127.0.0.1:{port}"
    java = await start_apache_broker(tmp_path / "apache", port, ns.address, "Mixed")
    pool = RemotingPool()
    server = None
    try:
        kairos = await broker_factory(
            namesrv_addr=ns.address, broker_name="kairos-b", cluster_name="Mixed"
        )
        await wait_until(
            lambda: {"apache-a", "kairos-b"} <= set(ns.routes.broker_addr_table), 120.0
        )
        peer = await RawPeer.connect(apache_addr)
        h = CreateTopicRequestHeader(topic="ApT", read_queue_nums=2, write_queue_nums=2)
        resp = await peer.call(R.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        for _ in range(3):
            assert (await send(peer, "ApT", queue_id=1)).code == ResponseCode.SUCCESS
        commit = UpdateConsumerOffsetRequestHeader("ApCG", "ApT", 1, 1)
        resp = await peer.call(R.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await peer.close()

        api = ConsoleApi(
            Users.load(users_file(tmp_path)),
            Brokers(pool, namesrv=ns.address, broker=None),
            log=Log(),
        )
        server = HttpServer(api.handle, "127.0.0.1", 0)
        await server.start()
        vera = Http(server.port)
        await vera.login("vera", "view-pw")

        # a just-started Apache broker refuses GET_BROKER_RUNTIME_INFO until its stats
        # have a first sample (NoSuchElementException): shown as that row's error
        for _ in range(120):
            status, out = await vera.call("GET", "/api/cluster")
            assert status == 200, out
            rows = {b["brokerName"]: b for b in out["brokers"]}
            if "error" not in rows["apache-a"]:
                break
            await asyncio.sleep(0.5)
        assert out["clusters"] == ["Mixed"]
        ap, kb = rows["apache-a"], rows["kairos-b"]
        assert "error" not in ap, ap["error"]
        assert (ap["address"], ap["role"], ap["version"]) == (apache_addr, "master", "V4_9_8")
        assert ap["kairosmq"] is False and "core" not in ap
        # "<10 s> <60 s> <600 s>", blank until the broker has 10 s of samples: "-" then
        assert ap["runtime"]["putTps"].strip() == "" or isinstance(ap["putTps"], float)
        assert 0.0 <= ap["diskUsed"] <= 1.0
        assert kb["address"] == kairos.address and kb["kairosmq"] is True and kb["core"]

        status, page = await vera.call("GET", "/api/topics?broker=apache-a&contains=ApT")
        assert status == 200, page
        (row,) = page["rows"]
        assert row["messages"] == 3 and [q["maxOffset"] for q in row["queues"]] == [0, 3]
        status, page = await vera.call("GET", "/api/topics?broker=apache-a&limit=2")
        assert status == 200 and len(page["rows"]) == 2 and page["total"] > 2

        status, group = await vera.call(
            "GET", "/api/groups/detail?broker=apache-a&consumerGroup=ApCG"
        )
        assert status == 200, group
        q1 = next(q for q in group["queues"] if q["queueId"] == 1)
        assert (q1["brokerOffset"], q1["consumerOffset"], q1["lag"]) == (3, 1, 2)
        status, groups = await vera.call("GET", "/api/groups?broker=apache-a")
        # Apache's list is its subscription-group table (201): its own groups; a group
        # that only committed offsets is not in it (no 900 on Apache)
        names = {g["group"] for g in groups["groups"]}
        assert status == 200 and "TOOLS_CONSUMER" in names and "ApCG" not in names
        assert all(g["online"] is None for g in groups["groups"])

        status, timers = await vera.call("GET", "/api/timers?broker=apache-a")
        assert status == 200, timers
        assert timers["kairosmq"] is False and timers["timers"] is None
        status, timers = await vera.call("GET", "/api/timers?broker=kairos-b")
        assert status == 200 and timers["kairosmq"] is True
    finally:
        if server is not None:
            await server.stop()
        pool.close()
        if java.returncode is None:
            os.killpg(java.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(java.wait(), 60)
        finally:
            if java.returncode is None:
                os.killpg(java.pid, signal.SIGKILL)
                await java.wait()
        await ns.stop()
