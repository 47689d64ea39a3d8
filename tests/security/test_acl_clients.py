"""The bundled clients with ACL credentials against a broker started with ``--acl``:
Producer and PushConsumer sign every request (a retry round trip through %RETRY% included),
credentials come from arguments or the environment, clients without them are refused,
``kairosmq admin`` signs too, and all of them work when the broker requires the request
binding of every request (``--acl-request-binding all``)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from kairosmq.client.admin import main as admin_main
from kairosmq.client.credentials import AclRpcHook, credentials_from
from kairosmq.client.errors import BrokerError, ClientError, NoPermission
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.server.broker import Broker

from tests.helpers import Collector
from tests.security.acl_setup import ACL_FILE, ADMIN, CONSUMER, PRODUCER

FAST = dict(
    rebalance_interval=0.3,
    pull_time_delay_millis_when_exception=50,
    persist_consumer_offset_interval=0.2,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
)


async def test_producer_and_push_consumer_with_credentials(acl_broker: Broker) -> None:
    attempts: dict[bytes, int] = {}

    def first_fails(msg: object) -> ConsumeStatus:
        body = msg.body  # type: ignore[attr-defined]
        attempts[body] = attempts.get(body, 0) + 1
        return (
            ConsumeStatus.RECONSUME_LATER if attempts[body] == 1 else ConsumeStatus.CONSUME_SUCCESS
        )

    got = Collector(first_fails)
    async with Producer(
        "PG",
        acl_broker.namesrv_address,
        access_key=PRODUCER.access_key,
        secret_key=PRODUCER.secret_key,
    ) as producer:
        for i in range(3):
            await producer.send(Message("Orders", b"m%d" % i))
        with pytest.raises(NoPermission, match="topic:Audit"):
            await producer.send(Message("Audit", b"no"))
        consumer = PushConsumer(
            "OrdersCG",
            acl_broker.namesrv_address,
            access_key=CONSUMER.access_key,
            secret_key=CONSUMER.secret_key,
            **FAST,
        )  # type: ignore[arg-type]
        consumer.subscribe("Orders", "*")
        consumer.register_listener(got)
        await consumer.start()
        try:
            await got.wait_for(6, timeout=15.0)  # 3 first deliveries + 3 redeliveries
        finally:
            await consumer.shutdown()
    assert sorted(attempts.values()) == [2, 2, 2]
    assert sorted(m.reconsume_times for m in got.msgs) == [0, 0, 0, 1, 1, 1]
    # only the Audit send: tried 1 + retry_times_when_send_failed (2) times, as RocketMQ's
    # producer retries NO_PERMISSION
    assert acl_broker.acl.denied == {"permission": 3}


async def test_clients_without_credentials_are_refused(acl_broker: Broker) -> None:
    async with Producer("PG", acl_broker.namesrv_address, send_msg_timeout=1.0) as producer:
        with pytest.raises(ClientError, match="No accessKey is configured"):
            await producer.send(Message("Orders", b"x"))
    assert acl_broker.store.max_offset("Orders", 0) == 0


async def test_credentials_from_the_environment(
    acl_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_ACCESS_KEY", PRODUCER.access_key)
    monkeypatch.setenv("KAIROS_SECRET_KEY", PRODUCER.secret_key)
    async with Producer("PG", acl_broker.namesrv_address) as producer:
        assert (await producer.send(Message("Orders", b"env"))).msg_id
    monkeypatch.setenv("KAIROS_SECRET_KEY", "wrong-secret")
    async with Producer("PG", acl_broker.namesrv_address, send_msg_timeout=1.0) as producer:
        with pytest.raises(BrokerError, match="Check signature failed"):
            await producer.send(Message("Orders", b"x"))


def test_credential_sources() -> None:
    env = {"ROCKETMQ_ACCESS_KEY": "rak_12345", "ROCKETMQ_SECRET_KEY": "rsk_12345"}
    assert credentials_from(env=env).access_key == "rak_12345"  # type: ignore[union-attr]
    env |= {"KAIROS_ACCESS_KEY": "kak_12345", "KAIROS_SECRET_KEY": "ksk_12345"}
    assert credentials_from(env=env).access_key == "kak_12345"  # type: ignore[union-attr]
    assert credentials_from("a_12345", "s_12345", env=env).access_key == "a_12345"  # type: ignore[union-attr]
    assert credentials_from(env={}) is None
    assert "s_12345" not in repr(credentials_from("a_12345", "s_12345", env={}))
    with pytest.raises(ValueError):
        credentials_from(env={"KAIROS_ACCESS_KEY": "only_the_key"})
    with pytest.raises(ValueError):
        Producer("PG", "127.0.0.1:1", access_key="only_the_key")


async def test_admin_cli_signs_its_requests(
    acl_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def admin(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--namesrv", acl_broker.namesrv_address, *argv], out=out, err=err)
        return code, out.getvalue() + err.getvalue()

    code, text = await asyncio.to_thread(admin, "topic", "create", "AdminMade")
    assert code == 1 and "No accessKey is configured" in text
    code, text = await asyncio.to_thread(
        admin,
        "--access-key",
        CONSUMER.access_key,
        "--secret-key",
        CONSUMER.secret_key,
        "topic",
        "create",
        "AdminMade",
    )
    assert code == 1 and "Need admin permission" in text
    assert acl_broker.topics.get("AdminMade") is None
    monkeypatch.setenv("KAIROS_ACCESS_KEY", ADMIN.access_key)
    monkeypatch.setenv("KAIROS_SECRET_KEY", ADMIN.secret_key)
    code, text = await asyncio.to_thread(admin, "topic", "create", "AdminMade")
    assert code == 0, text
    assert acl_broker.topics.get("AdminMade") is not None


async def test_bundled_clients_work_when_every_request_must_be_bound(
    broker_factory: Callable[..., Awaitable[Broker]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--acl-request-binding all``: only kairosmq's clients can sign; the Producer, the
    PushConsumer (heartbeats, rebalance, pulls, offsets, a send-back) and ``kairosmq admin``
    all do, with no ACL refusal, while a stock-signed request is refused."""
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    broker = await broker_factory(acl_file=path, acl_request_binding="all")
    attempts: dict[bytes, int] = {}

    def first_fails(msg: object) -> ConsumeStatus:
        body = msg.body  # type: ignore[attr-defined]
        attempts[body] = attempts.get(body, 0) + 1
        return (
            ConsumeStatus.RECONSUME_LATER if attempts[body] == 1 else ConsumeStatus.CONSUME_SUCCESS
        )

    got = Collector(first_fails)
    async with Producer(
        "PG", broker.namesrv_address, access_key=PRODUCER.access_key, secret_key=PRODUCER.secret_key
    ) as producer:
        for i in range(2):
            await producer.send(Message("Orders", b"b%d" % i))
    consumer = PushConsumer(
        "OrdersCG",
        broker.namesrv_address,
        access_key=CONSUMER.access_key,
        secret_key=CONSUMER.secret_key,
        **FAST,
    )  # type: ignore[arg-type]
    consumer.subscribe("Orders", "*")
    consumer.register_listener(got)
    await consumer.start()
    try:
        await got.wait_for(4, timeout=15.0)
    finally:
        await consumer.shutdown()
    assert sorted(attempts.values()) == [2, 2]
    monkeypatch.setenv("KAIROS_ACCESS_KEY", ADMIN.access_key)
    monkeypatch.setenv("KAIROS_SECRET_KEY", ADMIN.secret_key)
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(
        admin_main,
        ["--namesrv", broker.namesrv_address, "topic", "create", "BoundMade"],
        out=out,
        err=err,
    )
    assert code == 0, err.getvalue()
    assert broker.topics.get("BoundMade") is not None
    assert broker.acl is not None and broker.acl.denied == {}, broker.acl.denied
    stock = RemotingClient(broker.address, rpc_hook=AclRpcHook(PRODUCER, bind=False))
    try:
        r = await stock.invoke(R.GET_BROKER_RUNTIME_INFO, {}, b"", timeout=5.0)
    finally:
        stock.close()
    assert r.code == ResponseCode.NO_PERMISSION
    assert "aclRequestBinding=all requires every signed request" in r.remark
