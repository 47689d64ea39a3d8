"""TLS on the broker and name-server ports in RocketMQ's three modes (server/security/tls.py), with
the bundled client (``tls=`` an ``ssl.SSLContext``) and raw sockets; certificates are made
for each test module with the ``openssl`` command (skipped without it)."""

from __future__ import annotations

import asyncio
import io
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import structlog
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.client.admin import main as admin_main
from kairosmq.client.errors import ClientError
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.server.broker import Broker

from tests.helpers import Collector, wait_until
from tests.security.acl_setup import ACL_FILE, PRODUCER
from tests.security.certs import Certs, make_certs, openssl_missing

pytestmark = pytest.mark.skipif(
    openssl_missing() is not None, reason=f"TLS tests: {openssl_missing()}"
)
Factory = Callable[..., Awaitable[Broker]]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


async def start(factory: Factory, certs: Certs, mode: str, tmp: Path, **kw: object) -> Broker:
    return await factory(
        tls_mode=mode,
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        data_dir=tmp / f"b-{mode}",
        **kw,
    )


async def runtime_info(address: str, ctx: ssl.SSLContext | None) -> int:
    client = RemotingClient(address, ssl=ctx)
    try:
        return (await client.invoke(R.GET_BROKER_RUNTIME_INFO, {}, timeout=5.0)).code
    finally:
        client.close()


async def cluster_info(address: str, ctx: ssl.SSLContext | None) -> int:
    client = RemotingClient(address, ssl=ctx)
    try:
        return (await client.invoke(R.GET_BROKER_CLUSTER_INFO, {}, timeout=5.0)).code
    finally:
        client.close()


async def test_permissive_takes_tls_and_plain_on_the_same_ports(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await start(broker_factory, certs, "permissive", tmp_path)
    tls = certs.client_context()
    assert await runtime_info(broker.address, tls) == C.SUCCESS
    assert await runtime_info(broker.address, None) == C.SUCCESS
    assert await cluster_info(broker.namesrv_address, tls) == C.SUCCESS
    assert await cluster_info(broker.namesrv_address, None) == C.SUCCESS
    # the TLS connection really is TLS: the server side sees an SSLObject
    client = RemotingClient(broker.address, ssl=tls)
    try:
        await client.invoke(R.GET_BROKER_RUNTIME_INFO, {}, timeout=5.0)
        conns = list(broker.server.connections)
        assert any(
            c.transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]
            for c in conns
        )
    finally:
        client.close()


async def test_enforcing_refuses_plain_clients(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await start(broker_factory, certs, "enforcing", tmp_path)
    assert await runtime_info(broker.address, certs.client_context()) == C.SUCCESS
    assert await cluster_info(broker.namesrv_address, certs.client_context()) == C.SUCCESS
    with structlog.testing.capture_logs() as logs:
        for addr in (broker.address, broker.namesrv_address):
            with pytest.raises(ClientError):
                await runtime_info(addr, None)
    refused = [e for e in logs if e["event"] == "tls.refused"]
    assert len(refused) == 2 and refused[0]["peer"].startswith("127.0.0.1:")


async def test_disabled_is_plain_only(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await broker_factory(data_dir=tmp_path / "plain")
    assert broker.server.wrap_protocol is None
    assert await runtime_info(broker.address, None) == C.SUCCESS
    with pytest.raises((ClientError, ssl.SSLError, OSError)):
        await runtime_info(broker.address, certs.client_context())


async def test_producer_and_consumer_over_tls_with_acl(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    acl = tmp_path / "acl.yml"
    acl.write_text(
        ACL_FILE.replace("Orders=PUB", "Orders=PUB|SUB").replace(
            "    defaultGroupPerm: DENY\n    topicPerms:\n      - Orders",
            "    defaultGroupPerm: SUB\n    topicPerms:\n      - Orders",
        )
    )
    broker = await start(broker_factory, certs, "enforcing", tmp_path, acl_file=acl)
    tls = certs.client_context()
    got = Collector()
    creds = {"access_key": PRODUCER.access_key, "secret_key": PRODUCER.secret_key}
    async with Producer("PG", broker.namesrv_address, tls=tls, **creds) as producer:  # type: ignore[arg-type]
        for i in range(5):
            await producer.send(Message("Orders", b"tls%d" % i))
        consumer = PushConsumer(
            "TlsCG",
            broker.namesrv_address,
            tls=tls,  # type: ignore[arg-type]
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            rebalance_interval=0.3,
            **creds,
        )
        consumer.subscribe("Orders", "*")
        consumer.register_listener(got)
        await consumer.start()
        try:
            await got.wait_for(5, timeout=15.0)
        finally:
            await consumer.shutdown()
    assert sorted(got.bodies) == [b"tls%d" % i for i in range(5)]
    assert all(
        c.transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]
        for c in broker.server.connections
    )


async def test_client_certificate_required_with_a_ca(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await start(broker_factory, certs, "enforcing", tmp_path, tls_ca=certs.ca)
    assert await runtime_info(broker.address, certs.client_context(with_cert=True)) == 0
    with structlog.testing.capture_logs() as logs:
        with pytest.raises((ClientError, ssl.SSLError, OSError)):
            await runtime_info(broker.address, certs.client_context())
        await wait_until(lambda: any(e["event"] == "tls.failed" for e in logs))
    failed = [e for e in logs if e["event"] == "tls.failed"]
    assert failed[0]["stage"] == "handshake" and "certificate" in failed[0]["error"].lower()


async def test_default_tls_true_verifies_the_broker(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    """``tls=True`` trusts the system CAs only: a broker with a private CA is refused."""
    broker = await start(broker_factory, certs, "enforcing", tmp_path)
    async with Producer("PG", broker.namesrv_address, tls=True, send_msg_timeout=2.0) as producer:
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            await producer.send(Message("T", b"x"))


async def test_garbage_after_the_handshake_byte_closes_only_that_connection(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await start(broker_factory, certs, "permissive", tmp_path)
    host, port = broker.address.rsplit(":", 1)
    with structlog.testing.capture_logs() as logs:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"\x16\x03\x01\x00\x05hello-not-tls" * 4)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5.0) is not None  # closed by the broker
        writer.close()
    assert any(e["event"] == "tls.failed" for e in logs)
    assert await runtime_info(broker.address, certs.client_context()) == C.SUCCESS
    assert await runtime_info(broker.address, None) == C.SUCCESS


async def test_admin_cli_over_tls(broker_factory: Factory, certs: Certs, tmp_path: Path) -> None:
    broker = await start(broker_factory, certs, "enforcing", tmp_path)

    def admin(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--namesrv", broker.namesrv_address, *argv, "status"], out=out, err=err)
        return code, out.getvalue() + err.getvalue()

    code, text = await asyncio.to_thread(admin, "--tls-ca", str(certs.ca))
    assert code == 0, text
    code, text = await asyncio.to_thread(admin)  # plain: closed by the enforcing port
    assert code == 2, text
    code, text = await asyncio.to_thread(admin, "--tls")  # system CAs: the test CA is not one
    assert code == 2 and "CERTIFICATE_VERIFY_FAILED" in text, text


async def test_large_messages_over_tls(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    """A 3 MiB body crosses the TLS layer both ways (many records per frame)."""
    broker = await start(broker_factory, certs, "enforcing", tmp_path)
    body = os.urandom(3 * 1024 * 1024)  # incompressible: the client compresses > 4 KiB
    got = Collector()
    async with Producer("PG", broker.namesrv_address, tls=certs.client_context()) as p:
        await p.send(Message("Big", body))
        c = PushConsumer(
            "BigCG",
            broker.namesrv_address,
            tls=certs.client_context(),
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            rebalance_interval=0.3,
        )
        c.subscribe("Big", "*")
        c.register_listener(got)
        await c.start()
        try:
            await got.wait_for(1, timeout=15.0)
        finally:
            await c.shutdown()
    assert got.bodies == [body]


async def test_stalled_handshake_is_closed_by_the_idle_sweep(
    broker_factory: Factory, certs: Certs, tmp_path: Path
) -> None:
    broker = await start(broker_factory, certs, "enforcing", tmp_path, idle_timeout=0.3)
    host, port = broker.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed by the broker
    writer.close()
    assert broker.server.timed_out == 1
