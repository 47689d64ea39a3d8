"""Requests of the name-server ACL tests, as a stock client or an attacker sends them: signed
by an account of ``tests/security/acl_setup.ACL_FILE``, unsigned, or with a wrong secret,
plain or over TLS; the reads a stock client makes (signed by the consumer account), and the
requests the outside audit sent (``audit_requests``) with the answers RocketMQ gives them.
"""

from __future__ import annotations

import asyncio
import ssl

from kairosmq.client.credentials import AclRpcHook, SessionCredentials
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.registration import (
    ORDER_TOPIC_CONFIG,
    ClusterInfo,
    DataVersion,
    TopicConfigData,
    build_query_data_version,
    build_register_broker,
    build_unregister_broker,
)
from kairosmq.server.security.access import ACL_EXCEPTION

from tests.security.acl_setup import ADMIN, CONSUMER, PRODUCER

ATTACKER = "10.66.66.66:10911"  # where the audit moved a broker's route
NO_KEY = (C.SYSTEM_ERROR, ACL_EXCEPTION + "No accessKey is configured")


def not_admin(code: int, key: str) -> tuple[int, str]:
    return (
        C.NO_PERMISSION,
        ACL_EXCEPTION + f"Need admin permission for request "
        f"code={code}, but accessKey={key} is not",
    )


def client(
    address: str,
    creds: SessionCredentials | None = None,
    *,
    secret: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> RemotingClient:
    """A RemotingClient signing as ``creds`` (with ``secret`` instead of its own: a wrong
    signature), over TLS with ``tls``; unsigned without ``creds``."""
    hook = None
    if creds is not None:
        hook = AclRpcHook(creds if secret is None else SessionCredentials(creds.access_key, secret))
    return RemotingClient(address, rpc_hook=hook, ssl=tls)


async def call(
    address: str,
    cmd: RemotingCommand,
    creds: SessionCredentials | None = None,
    *,
    secret: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> RemotingCommand:
    c = client(address, creds, secret=secret, tls=tls)
    try:
        return await c.invoke(cmd.code, dict(cmd.ext_fields), cmd.body, timeout=10.0)
    finally:
        c.close()


def req(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return request(code, dict(ext or {}), body)


async def route(
    address: str, topic: str, *, tls: ssl.SSLContext | None = None
) -> TopicRouteData | None:
    """The route as a stock client reads it: signed by the consumer account."""
    r = await call(address, req(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), CONSUMER, tls=tls)
    if r.code == C.TOPIC_NOT_EXIST:
        return None
    assert r.code == C.SUCCESS, (r.code, r.remark)
    return TopicRouteData.from_json(r.body)


async def wait_route(
    address: str,
    topic: str,
    broker_addr: str,
    *,
    tls: ssl.SSLContext | None = None,
    timeout: float = 30.0,
) -> TopicRouteData:
    """Until the route of ``topic`` names ``broker_addr`` as a master; that route."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await route(address, topic, tls=tls)
        if got is not None and any(b.broker_addrs.get(0) == broker_addr for b in got.broker_datas):
            return got
        assert loop.time() < deadline, f"no route of {topic} to {broker_addr}: {got}"
        await asyncio.sleep(0.1)


async def cluster_info(address: str, *, tls: ssl.SSLContext | None = None) -> ClusterInfo:
    r = await call(address, req(R.GET_BROKER_CLUSTER_INFO), CONSUMER, tls=tls)
    assert r.code == C.SUCCESS, (r.code, r.remark)
    return ClusterInfo.from_json(r.body)


async def namesrv_config(address: str, *, tls: ssl.SSLContext | None = None) -> dict[str, str]:
    """The name server's settings (GET_NAMESRV_CONFIG needs admin: server/security/access.py)."""
    r = await call(address, req(R.GET_NAMESRV_CONFIG), ADMIN, tls=tls)
    assert r.code == C.SUCCESS, (r.code, r.remark)
    return dict(line.split("=", 1) for line in r.body.decode().splitlines() if "=" in line)


async def kv_get(address: str, key: str) -> RemotingCommand:
    return await call(
        address, req(R.GET_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": key}), CONSUMER
    )


async def create_topic(broker_addr: str, topic: str, *, tls: ssl.SSLContext | None = None) -> None:
    """UPDATE_AND_CREATE_TOPIC on the broker (ACL on), signed by the admin."""
    r = await call(
        broker_addr,
        req(
            R.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": "4",
                "writeQueueNums": "4",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            },
        ),
        ADMIN,
        tls=tls,
    )
    assert r.code == C.SUCCESS, (r.code, r.remark)


def audit_requests(cluster: str, broker: str, broker_addr: str) -> list[RemotingCommand]:
    """What the audit sent against ``broker`` (the first three), then every other
    registration or write of the name server."""
    hijack = build_register_broker(
        cluster_name=cluster,
        broker_name=broker,
        broker_addr=ATTACKER,
        ha_server_addr="10.66.66.66:10912",
        topic_configs=[TopicConfigData("Orders", 4, 4)],
        data_version=DataVersion(1, 999_999),
    )
    return [
        hijack,
        req(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker}),
        req(R.UPDATE_NAMESRV_CONFIG, body=b"brokerChannelExpiredTime=1000\n"),
        build_unregister_broker(cluster_name=cluster, broker_name=broker, broker_addr=broker_addr),
        build_query_data_version(
            cluster_name=cluster,
            broker_name=broker,
            broker_addr=broker_addr,
            data_version=DataVersion(1, 1),
        ),
        req(R.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker}),
        req(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"}),
        req(R.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "Evil", "value": "evil:1"}),
        req(R.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "Orders"}),
    ]


async def refused_every_way(
    address: str, cmds: list[RemotingCommand], *, tls: ssl.SSLContext | None = None
) -> None:
    """Each request unsigned, signed by a non-admin and with a wrong secret: refused with
    RocketMQ's code and remark."""
    for cmd in cmds:
        r = await call(address, cmd, tls=tls)
        assert (r.code, r.remark) == NO_KEY, (cmd.code, r.code, r.remark)
        for who in (PRODUCER, CONSUMER):
            r = await call(address, cmd, who, tls=tls)
            assert (r.code, r.remark) == not_admin(cmd.code, who.access_key), cmd.code
        r = await call(address, cmd, ADMIN, secret="not-the-secret", tls=tls)
        assert (r.code, r.remark) == (
            C.SYSTEM_ERROR,
            ACL_EXCEPTION + f"Check signature failed for accessKey={ADMIN.access_key}",
        ), cmd.code
