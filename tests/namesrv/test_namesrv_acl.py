"""``kairosmq namesrv --acl`` and ``--tls-mode`` as REAL processes (issue 29, row 5 of the
outside audit): what the audit sent is refused, state stays, brokers with credentials
register, stock-ish clients route through it.

The audit sent, unsigned, to a standalone name server of brokers that ran with ACL:
REGISTER_BROKER (a broker's route moved to the attacker's address), WIPE_WRITE_PERM_OF_BROKER
(write permission wiped) and UPDATE_NAMESRV_CONFIG ``brokerChannelExpiredTime=1000`` (every
broker expired). Here each of those, and every other registration and write code, is sent
unsigned, signed by a non-admin account and with a wrong signature: each is answered with
RocketMQ's code and remark, the route, the broker's write permission, the name server's
settings and its kvConfig.json stay as they were (also after kill -9 and a restart), and
the name server keeps serving. A kairosmq broker process registers with
``--namesrv-access-key`` (its secret in ``KAIROS_NAMESRV_SECRET_KEY``), and the bundled
Producer / PushConsumer with ACL credentials route and send through it; white-listed
addresses register unsigned (how Apache RocketMQ 4.9.8 brokers, which cannot sign, get in);
TLS enforcing refuses plain clients and serves TLS ones (mutual TLS included).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.client.credentials import AclRpcHook, SessionCredentials
from kairosmq.client.errors import ClientError
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.registration import (
    ORDER_TOPIC_CONFIG,
    DataVersion,
    TopicConfigData,
    build_register_broker,
)
from kairosmq.server.cli import NAMESRV_SECRET_KEY_ENV

from tests.helpers import Collector, wait_until
from tests.integration.procs import BrokerProcess
from tests.namesrv.acl_calls import (
    NO_KEY,
    audit_requests,
    call,
    cluster_info,
    create_topic,
    kv_get,
    namesrv_config,
    not_admin,
    refused_every_way,
    req,
    route,
    wait_route,
)
from tests.namesrv.procs import NamesrvProcess
from tests.security.acl_setup import ACL_FILE, ADMIN, CONSUMER, PRODUCER
from tests.security.certs import Certs, make_certs, openssl_missing
from tests.wire import RawPeer

pytestmark = pytest.mark.slow

CLUSTER, BROKER = "AclCluster", "broker-a"
FAST = dict(
    rebalance_interval=0.3,
    pull_time_delay_millis_when_exception=50,
    persist_consumer_offset_interval=0.2,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
)


def kv_file(ns: NamesrvProcess) -> Any:
    return orjson.loads((ns.data_dir / "kvConfig.json").read_bytes())


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    return path


@pytest.fixture
async def procs() -> AsyncIterator[list[Any]]:
    """Started processes, stopped (brokers first) at the end whatever happened."""
    started: list[Any] = []
    yield started
    for p in reversed(started):
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def broker_with_credentials(data_dir: Path, ns: str, acl_file: Path, *extra: str) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        "--acl",
        str(acl_file),
        "--namesrv",
        ns,
        "--broker-name",
        BROKER,
        "--cluster",
        CLUSTER,
        "--namesrv-access-key",
        ADMIN.access_key,
        "--register-period",
        "1",
        *extra,
        env={NAMESRV_SECRET_KEY_ENV: ADMIN.secret_key},
    )


# ------------------------------------------------------------------ the audit


async def test_audit_requests_are_refused_and_nothing_moves(
    tmp_path: Path, acl_file: Path, procs: list[Any]
) -> None:
    ns = NamesrvProcess(tmp_path / "ns", "--acl", str(acl_file), "--scan-not-active-ms", "200")
    await ns.start()
    procs.append(ns)
    broker = broker_with_credentials(tmp_path / "broker", ns.address, acl_file)
    await broker.start()
    procs.append(broker)
    await create_topic(broker.address, "Orders")
    before = await wait_route(ns.address, "Orders", broker.address)
    assert [q.perm for q in before.queue_datas] == [6]
    # an admin's KV entry: the state an attacker must not change
    put = req(
        R.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "Orders", "value": f"{BROKER}:4"}
    )
    assert (await call(ns.address, put, ADMIN)).code == C.SUCCESS
    kv_before = kv_file(ns)
    assert kv_before == {"configTable": {ORDER_TOPIC_CONFIG: {"Orders": f"{BROKER}:4"}}}
    config_before = await namesrv_config(ns.address)
    assert config_before["brokerChannelExpiredTime"] == "120000"

    await refused_every_way(ns.address, audit_requests(CLUSTER, BROKER, broker.address))
    # reads need a valid signature too (a stock client signs them)
    r = await call(ns.address, req(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}))
    assert (r.code, r.remark) == NO_KEY
    r = await call(
        ns.address, req(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}), PRODUCER, secret="wrong"
    )
    assert r.code == C.SYSTEM_ERROR and "Check signature failed" in r.remark

    # well past the 1 s expiry the audit asked for, and several scans (every 200 ms):
    # the broker is still there, at its own address, writable; nothing else changed
    await asyncio.sleep(2.5)
    assert await route(ns.address, "Orders") == before
    info = await cluster_info(ns.address)
    assert info.broker_addr_table[BROKER].broker_addrs == {0: broker.address}
    assert await namesrv_config(ns.address) == config_before
    assert kv_file(ns) == kv_before
    assert (await kv_get(ns.address, "Evil")).code == C.QUERY_NOT_FOUND
    await wait_until(
        lambda: (
            {e["request_code"] for e in ns.events("acl.denied")}
            >= {
                int(R.REGISTER_BROKER),
                int(R.WIPE_WRITE_PERM_OF_BROKER),
                int(R.UPDATE_NAMESRV_CONFIG),
            }
        ),
        10.0,
        what="acl.denied logged",
    )
    assert {e["listener"] for e in ns.events("acl.denied")} == {"namesrv"}

    # stock-ish clients with credentials route through it and send to the broker
    got = Collector()
    async with Producer(
        "AclPG", ns.address, access_key=PRODUCER.access_key, secret_key=PRODUCER.secret_key
    ) as producer:
        for i in range(3):
            sent = await producer.send(Message("Orders", b"m%d" % i))
            assert sent.message_queue.broker_name == BROKER
        consumer = PushConsumer(
            "OrdersCG",
            ns.address,
            access_key=CONSUMER.access_key,
            secret_key=CONSUMER.secret_key,
            **FAST,
        )  # type: ignore[arg-type]
        consumer.subscribe("Orders", "*")
        consumer.register_listener(got)
        await consumer.start()
        try:
            await got.wait_for(3, timeout=30.0)
        finally:
            await consumer.shutdown()
    assert sorted(got.bodies) == [b"m0", b"m1", b"m2"]

    # kill -9 and restart: only the admin's KV entry, the command line's settings; the
    # broker registers again (signed) and the name server serves
    ns.kill9()
    await ns.start()
    assert kv_file(ns) == kv_before
    after = await wait_route(ns.address, "Orders", broker.address)
    assert after == before
    assert await namesrv_config(ns.address) == config_before
    assert (await kv_get(ns.address, "Orders")).ext_fields["value"] == f"{BROKER}:4"
    assert (await kv_get(ns.address, "Evil")).code == C.QUERY_NOT_FOUND
    async with Producer(
        "AclPG2", ns.address, access_key=PRODUCER.access_key, secret_key=PRODUCER.secret_key
    ) as producer:
        assert (await producer.send(Message("Orders", b"after"))).msg_id
    assert broker.terminate() == 0  # a clean stop: its signed UNREGISTER_BROKER is taken
    info = await cluster_info(ns.address)
    assert BROKER not in info.broker_addr_table
    assert ns.terminate() == 0


# ------------------------------------------------------------------ admins and white lists


async def peer_from(ip: str, ns: NamesrvProcess) -> RawPeer:
    """A raw connection from the loopback address ``ip`` (127.0.0.0/8 is all local)."""
    r, w = await asyncio.open_connection("127.0.0.1", ns.port, local_addr=(ip, 0))
    return RawPeer(r, w)


def register(name: str, addr: str) -> RemotingCommand:
    return build_register_broker(
        cluster_name=CLUSTER,
        broker_name=name,
        broker_addr=addr,
        ha_server_addr="127.0.0.1:1",
        topic_configs=[TopicConfigData("WlTopic", 2, 2)],
        data_version=DataVersion(1, 1),
    )


async def test_admins_write_and_white_listed_addresses_register_unsigned(
    tmp_path: Path, procs: list[Any]
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(
        "globalWhiteRemoteAddresses:\n  - 127.0.0.2\n"
        + ACL_FILE
        + "  - accessKey: relay_ak_1\n    secretKey: relay_sk_1\n"
        "    whiteRemoteAddress: 127.0.0.3\n"
    )
    relay = SessionCredentials("relay_ak_1", "relay_sk_1")
    ns = NamesrvProcess(tmp_path / "ns", "--acl", str(acl))
    await ns.start()
    procs.append(ns)

    # globalWhiteRemoteAddresses: unsigned registrations pass (an Apache 4.9.8 broker's way)
    whitelisted = await peer_from("127.0.0.2", ns)
    reg = register("wl-a", "127.0.0.2:20911")
    r = await whitelisted.call(reg.code, reg.ext_fields, reg.body)
    assert r.code == C.SUCCESS, r.remark
    # an account's whiteRemoteAddress: its AccessKey from that address, signature unchecked
    # (RocketMQ 4.9's rule); without an AccessKey (what an Apache broker sends) refused
    relayed = await peer_from("127.0.0.3", ns)
    reg = register("wl-b", "127.0.0.3:20911")
    r = await relayed.call(
        reg.code,
        {**reg.ext_fields, "AccessKey": relay.access_key, "Signature": "unchecked"},
        reg.body,
    )
    assert r.code == C.SUCCESS, r.remark
    r = await relayed.call(reg.code, reg.ext_fields, reg.body)
    assert (r.code, r.remark) == NO_KEY
    # elsewhere the same account is a non-admin like any other
    r = await call(ns.address, register("wl-c", "127.0.0.1:20911"), relay)
    assert (r.code, r.remark) == not_admin(R.REGISTER_BROKER, relay.access_key)
    r = await call(ns.address, register("wl-c", "127.0.0.1:20911"))
    assert (r.code, r.remark) == NO_KEY
    info = await cluster_info(ns.address)  # the connections stay open: closing one drops
    assert set(info.broker_addr_table) == {"wl-a", "wl-b"}  # its broker (RocketMQ's rule)

    # an admin's signed writes are taken
    wipe = await call(ns.address, req(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "wl-a"}), ADMIN)
    assert (wipe.code, wipe.ext_fields["wipeTopicCount"]) == (C.SUCCESS, "1")
    perms = {q.broker_name: q.perm for q in (await route(ns.address, "WlTopic")).queue_datas}
    assert perms == {"wl-a": 4, "wl-b": 6}
    add = await call(ns.address, req(R.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "wl-a"}), ADMIN)
    assert (add.code, add.ext_fields["addTopicCount"]) == (C.SUCCESS, "1")
    r = await call(
        ns.address, req(R.UPDATE_NAMESRV_CONFIG, body=b"scanNotActiveBrokerInterval=5000\n"), ADMIN
    )
    assert r.code == C.SUCCESS, r.remark
    assert (await namesrv_config(ns.address))["scanNotActiveBrokerInterval"] == "5000"
    put = req(
        R.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "WlTopic", "value": "wl-a:2"}
    )
    assert (await call(ns.address, put, ADMIN)).code == C.SUCCESS
    r = await call(
        ns.address,
        req(R.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "WlTopic"}),
        PRODUCER,
    )
    assert (r.code, r.remark) == not_admin(R.DELETE_KV_CONFIG, PRODUCER.access_key)
    kv_before = kv_file(ns)
    await whitelisted.close()
    await relayed.close()
    # kill -9, restart: the admin's KV entry stays; settings are the command line's again
    # (memory only, as RocketMQ 4.9); routes come back with the brokers' next registration
    ns.kill9()
    await ns.start()
    assert kv_file(ns) == kv_before
    assert (await kv_get(ns.address, "WlTopic")).ext_fields["value"] == "wl-a:2"
    assert (await namesrv_config(ns.address))["scanNotActiveBrokerInterval"] == "10000"
    assert (await cluster_info(ns.address)).broker_addr_table == {}
    assert ns.terminate() == 0


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if (missing := openssl_missing()) is not None:
        pytest.skip(f"TLS tests: {missing}")
    return make_certs(tmp_path_factory.mktemp("certs"))


async def test_tls_enforcing_name_server_with_client_certificates(
    tmp_path: Path, acl_file: Path, certs: Certs, procs: list[Any]
) -> None:
    """Mutual TLS on the name server (``--tls-ca``): plain clients and TLS clients without a
    certificate are refused; a broker registers over TLS (its own certificate as client
    certificate, the name server verified against the CA) and signed; TLS clients route and
    send through it; ACL still applies inside TLS."""
    tls_opts = (
        "--tls-mode",
        "enforcing",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
    )
    ns = NamesrvProcess(
        tmp_path / "ns", "--acl", str(acl_file), *tls_opts, "--tls-ca", str(certs.ca)
    )
    await ns.start()
    procs.append(ns)
    tls = certs.client_context(with_cert=True)

    plain = await RawPeer.connect(ns.address)
    with pytest.raises((ConnectionError, TimeoutError)):
        await plain.call(R.GET_BROKER_CLUSTER_INFO, timeout=5.0)
    assert await plain.closed(5.0)
    with pytest.raises(ClientError):  # TLS, but no client certificate: handshake refused
        await call(ns.address, req(R.GET_BROKER_CLUSTER_INFO), CONSUMER, tls=certs.client_context())
    await wait_until(
        lambda: ns.events("tls.refused") and ns.events("tls.failed"),
        10.0,
        what="tls.refused and tls.failed logged",
    )

    broker = broker_with_credentials(
        tmp_path / "broker",
        ns.address,
        acl_file,
        *tls_opts,
        "--namesrv-tls",
        "--namesrv-tls-ca",
        str(certs.ca),
    )
    await broker.start()
    procs.append(broker)
    await create_topic(broker.address, "Orders", tls=tls)
    before = await wait_route(ns.address, "Orders", broker.address, tls=tls)
    await refused_every_way(
        ns.address, audit_requests(CLUSTER, BROKER, broker.address)[:3], tls=tls
    )
    assert await route(ns.address, "Orders", tls=tls) == before

    got = Collector()
    async with Producer(
        "TlsPG", ns.address, access_key=PRODUCER.access_key, secret_key=PRODUCER.secret_key, tls=tls
    ) as producer:
        for i in range(2):
            await producer.send(Message("Orders", b"t%d" % i))
        consumer = PushConsumer(
            "OrdersCG",
            ns.address,
            access_key=CONSUMER.access_key,
            secret_key=CONSUMER.secret_key,
            tls=tls,
            **FAST,
        )  # type: ignore[arg-type]
        consumer.subscribe("Orders", "*")
        consumer.register_listener(got)
        await consumer.start()
        try:
            await got.wait_for(2, timeout=30.0)
        finally:
            await consumer.shutdown()
    assert sorted(got.bodies) == [b"t0", b"t1"]
    assert (await cluster_info(ns.address, tls=tls)).broker_addr_table[BROKER].broker_addrs == {
        0: broker.address
    }
    assert broker.terminate() == 0
    assert ns.terminate() == 0


async def test_a_broker_without_credentials_is_refused_and_says_why(
    tmp_path: Path, acl_file: Path, procs: list[Any]
) -> None:
    """A kairosmq broker without --namesrv-access-key (or with a non-admin account) gets no
    route; its status names the name server's answer. The name server keeps serving."""
    ns = NamesrvProcess(tmp_path / "ns", "--acl", str(acl_file))
    await ns.start()
    procs.append(ns)
    unsigned = BrokerProcess(
        tmp_path / "b1", "--namesrv", ns.address, "--broker-name", "b1", "--register-period", "1"
    )
    producer_signed = BrokerProcess(
        tmp_path / "b2",
        "--namesrv",
        ns.address,
        "--broker-name",
        "b2",
        "--namesrv-access-key",
        PRODUCER.access_key,
        "--register-period",
        "1",
        env={NAMESRV_SECRET_KEY_ENV: PRODUCER.secret_key},
    )
    for b in (unsigned, producer_signed):
        await b.start()
        procs.append(b)
    await wait_until(
        lambda: (
            {(e["request_code"], e["access_key"]) for e in ns.events("acl.denied")}
            >= {(int(R.REGISTER_BROKER), ""), (int(R.REGISTER_BROKER), PRODUCER.access_key)}
        ),
        20.0,
        what="both registrations refused",
    )
    for b, remark in (
        (unsigned, "No accessKey is configured"),
        (producer_signed, "Need admin permission for request code=103"),
    ):
        st = await call(b.address, req(R.KAIROS_GET_BROKER_STATUS))
        assert st.code == C.SUCCESS, st.remark
        (link,) = orjson.loads(st.body)["registration"]["nameServers"]
        assert not link["registered"] and remark in link["lastError"], link
    assert (await cluster_info(ns.address)).broker_addr_table == {}
    for b in (unsigned, producer_signed):
        assert b.terminate() == 0
    assert ns.terminate() == 0


# ------------------------------------------------------------------ the request policy


async def test_the_request_policy_holds_on_the_name_server(
    tmp_path: Path, acl_file: Path, procs: list[Any]
) -> None:
    """``kairosmq namesrv --acl-request-binding all`` takes the broker's request policy: a
    request signed as RocketMQ's AclClientRPCHook signs it (no binding) is refused with
    NO_PERMISSION and the policy's remark, a bundled client's (bound) is served; a policy
    the name server cannot hold stops the start with one line and exit code 2."""
    ns = NamesrvProcess(tmp_path / "ns", "--acl", str(acl_file), "--acl-request-binding", "all")
    await ns.start()
    procs.append(ns)
    stock = RemotingClient(ns.address, rpc_hook=AclRpcHook(CONSUMER, bind=False))
    try:
        r = await stock.invoke(R.GET_BROKER_CLUSTER_INFO, {}, b"", timeout=10.0)
    finally:
        stock.close()
    assert r.code == C.NO_PERMISSION, (r.code, r.remark)
    assert "aclRequestBinding=all requires every signed request" in (r.remark or "")
    bound = await call(ns.address, req(R.GET_BROKER_CLUSTER_INFO), CONSUMER)
    assert bound.code == C.SUCCESS, (bound.code, bound.remark)

    for bad, says in (
        (("--acl-request-window", "0"), "acl_request_window 0.0 must be between 1 and 86400"),
        (("--acl-admin-require-tls",), "acl_admin_require_tls needs tls_mode permissive"),
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kairosmq.server",
            "namesrv",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "bad"),
            "--acl",
            str(acl_file),
            *bad,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60.0)
        assert proc.returncode == 2, err
        assert says in err.decode(), err


def test_a_cluster_passes_the_request_policy_to_every_process(acl_file: Path) -> None:
    """``kairosmq cluster --acl ... --acl-request-binding admin --acl-admin-require-tls``:
    the name server and every broker get the same policy options (they once got only
    ``--acl`` and TLS, so the cluster ran on the default policy)."""
    from kairosmq.server.cluster.local import _security_argv, add_cluster_parser

    parser = argparse.ArgumentParser()
    add_cluster_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "cluster",
            "--acl",
            str(acl_file),
            "--acl-request-binding",
            "admin",
            "--acl-request-window",
            "60",
            "--acl-admin-require-tls",
            "--tls-mode",
            "permissive",
            "--tls-cert",
            str(acl_file),
        ]
    )
    argv = _security_argv(args)
    at = argv.index("--acl-request-binding")
    assert argv[at : at + 2] == ["--acl-request-binding", "admin"]
    at = argv.index("--acl-request-window")
    assert float(argv[at + 1]) == 60.0
    assert "--acl-admin-require-tls" in argv
