"""Plain ACL on a real in-process broker (server/security/access.py through the transport's hook).

Every request here goes over TCP to the broker and name-server ports, signed by the
bundled client's hook (client/credentials.py) or deliberately mis-signed, and each refusal is
checked for RocketMQ's code and remark: SYSTEM_ERROR "...AclException: Check signature
failed / No acl config / No accessKey is configured", NO_PERMISSION naming the resource
and the permission. Also: white-listed addresses, admin-only codes, %RETRY% through the
group, system topics, hot reload (and a bad file keeping the old rules), the
``acl.denied`` event and counter, and the warning of a non-loopback broker without ACL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from kairosmq.protocol.acl import ACCESS_KEY, SIGNATURE, calc_signature, request_content
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import CreateTopicRequestHeader
from kairosmq.server.broker import Broker
from kairosmq.server.observe.metrics import take_snapshot

from tests.helpers import send_ext, stays_false, wait_until
from tests.security.acl_setup import ACL_FILE, ADMIN, CONSUMER, PRODUCER, signed_client

ACL_EXC = "org.apache.rocketmq.acl.common.AclException: "


def send_fields(topic: str) -> dict[str, str]:
    return {k: str(v) for k, v in send_ext(topic).items()}


def pull_fields(topic: str, group: str) -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }


async def call(
    client: Any, code: int, ext: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    return await client.invoke(code, ext or {}, body, timeout=5.0)  # type: ignore[no-any-return]


async def test_right_key_passes_wrong_secret_unknown_key_and_missing_signature_refused(
    acl_broker: Broker,
) -> None:
    addr = acl_broker.address
    ok = signed_client(addr, PRODUCER)
    wrong = signed_client(addr, PRODUCER, secret="not-the-secret")
    unknown = signed_client(addr, PRODUCER.__class__("nobody_ak", "whatever_sk"))
    unsigned = signed_client(addr, PRODUCER, drop=SIGNATURE)
    anonymous = signed_client(addr, None)
    tampered = signed_client(addr, PRODUCER, tamper=("b", "Audit"))
    try:
        r = await call(ok, R.SEND_MESSAGE_V2, send_fields("Orders"), b"hello")
        assert r.code == C.SUCCESS, r.remark
        for client, remark in (
            (wrong, "Check signature failed for accessKey=producer_ak"),
            (unsigned, "Check signature failed for accessKey=producer_ak"),
            (tampered, "Check signature failed for accessKey=producer_ak"),
            (unknown, "No acl config for nobody_ak"),
            (anonymous, "No accessKey is configured"),
        ):
            r = await call(client, R.SEND_MESSAGE_V2, send_fields("Orders"), b"evil")
            assert (r.code, r.remark) == (C.SYSTEM_ERROR, ACL_EXC + remark)
    finally:
        for c in (ok, wrong, unknown, unsigned, anonymous, tampered):
            c.close()
    # nothing of the refused sends was stored: one message in Orders
    assert sum(acl_broker.store.max_offset("Orders", q) for q in range(4)) == 1
    assert acl_broker.acl.denied == {"signature": 3, "unknown_access_key": 1, "no_access_key": 1}


async def test_name_server_port_follows_the_same_rules(acl_broker: Broker) -> None:
    addr = acl_broker.namesrv_address
    clients = [signed_client(addr, c) for c in (None, CONSUMER, ADMIN)]
    anonymous, consumer, admin = clients
    try:
        r = await call(anonymous, R.GET_BROKER_CLUSTER_INFO)
        assert (r.code, r.remark) == (C.SYSTEM_ERROR, ACL_EXC + "No accessKey is configured")
        assert (await call(consumer, R.GET_BROKER_CLUSTER_INFO)).code == C.SUCCESS
        r = await call(consumer, R.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"})
        assert r.code == C.NO_PERMISSION
        assert r.remark == ACL_EXC + (
            f"Need admin permission for request code="
            f"{int(R.DELETE_TOPIC_IN_NAMESRV)}, but accessKey="
            f"consumer_ak is not"
        )
        r = await call(consumer, R.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
        assert r.code == C.NO_PERMISSION
        r = await call(admin, R.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
        assert r.code != C.NO_PERMISSION and r.code != C.SYSTEM_ERROR, r.remark
    finally:
        for c in clients:
            c.close()


async def test_per_resource_pub_sub_deny(acl_broker: Broker) -> None:
    addr = acl_broker.address
    producer, consumer = signed_client(addr, PRODUCER), signed_client(addr, CONSUMER)
    try:
        assert (await call(producer, R.SEND_MESSAGE_V2, send_fields("Orders"), b"x")).code == 0
        # producer: Audit is SUB only, Other falls to defaultTopicPerm DENY
        r = await call(producer, R.SEND_MESSAGE_V2, send_fields("Audit"), b"x")
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC + "No PUB permission for topic:Audit: accessKey=producer_ak has SUB",
        )
        r = await call(producer, R.SEND_MESSAGE_V2, send_fields("Other"), b"x")
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC + "No PUB permission for "
            "topic:Other: accessKey=producer_ak has DENY (its default)",
        )
        # producer may not consume Orders (PUB only)
        r = await call(producer, R.PULL_MESSAGE, pull_fields("Orders", "OrdersCG"))
        assert r.code == C.NO_PERMISSION and "No SUB permission for topic:Orders" in r.remark
        # consumer: SUB by default on topics, SUB on group OrdersCG only
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("Orders", "OrdersCG"))
        assert r.code not in (C.NO_PERMISSION, C.SYSTEM_ERROR), r.remark
        assert r.code == C.SUCCESS  # the one message
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("Orders", "OtherCG"))
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC + "No SUB permission for "
            "group:OtherCG: accessKey=consumer_ak has DENY (its "
            "default)",
        )
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("Secret", "OrdersCG"))
        assert r.code == C.NO_PERMISSION and "topic:Secret" in r.remark
        r = await call(consumer, R.SEND_MESSAGE_V2, send_fields("Orders"), b"x")
        assert r.code == C.NO_PERMISSION and "No PUB permission for topic:Orders" in r.remark
        # offsets of another group: neither read nor rewritten
        q = {"consumerGroup": "OtherCG", "topic": "Orders", "queueId": "0"}
        assert (await call(consumer, R.QUERY_CONSUMER_OFFSET, q)).code == C.NO_PERMISSION
        assert (
            await call(consumer, R.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "0"})
        ).code == C.NO_PERMISSION
        r = await call(
            consumer,
            R.UPDATE_CONSUMER_OFFSET,
            {**q, "consumerGroup": "OrdersCG", "commitOffset": "1"},
        )
        assert r.code == C.SUCCESS, r.remark
        lock = b'{"consumerGroup":"OtherCG","clientId":"c","mqSet":[]}'
        assert (await call(consumer, R.LOCK_BATCH_MQ, body=lock)).code == C.NO_PERMISSION
    finally:
        producer.close()
        consumer.close()
    assert acl_broker.offsets.query("OtherCG", "Orders", 0) is None


async def test_system_topics_need_an_explicit_grant(acl_broker: Broker) -> None:
    """Default SUB does not reach SCHEDULE_TOPIC_XXXX (every pending delayed message)."""
    consumer = signed_client(acl_broker.address, CONSUMER)
    try:
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("SCHEDULE_TOPIC_XXXX", "OrdersCG"))
        assert r.code == C.NO_PERMISSION and "topic:SCHEDULE_TOPIC_XXXX" in r.remark
    finally:
        consumer.close()


async def test_retry_topics_go_through_the_group(acl_broker: Broker) -> None:
    consumer = signed_client(acl_broker.address, CONSUMER)
    try:
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("%RETRY%OrdersCG", "OrdersCG"))
        assert r.code not in (C.NO_PERMISSION, C.SYSTEM_ERROR), r.remark
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("%RETRY%OtherCG", "OrdersCG"))
        assert r.code == C.NO_PERMISSION and "group:OtherCG" in r.remark
        r = await call(consumer, R.PULL_MESSAGE, pull_fields("%DLQ%OtherCG", "OrdersCG"))
        assert r.code == C.NO_PERMISSION and "group:OtherCG" in r.remark
        # a send-back is checked on its group; a retry-topic send (the client's fallback)
        # too, whatever producer group it names
        back = {
            "group": "OtherCG",
            "offset": "0",
            "delayLevel": "0",
            "originMsgId": "x",
            "originTopic": "Orders",
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        }
        r = await call(consumer, R.CONSUMER_SEND_MSG_BACK, back)
        assert r.code == C.NO_PERMISSION and "group:OtherCG" in r.remark
        r = await call(consumer, R.CONSUMER_SEND_MSG_BACK, {**back, "group": "OrdersCG"})
        assert r.code != C.NO_PERMISSION
        r = await call(consumer, R.SEND_MESSAGE_V2, send_fields("%RETRY%OrdersCG"), b"x")
        assert r.code not in (C.NO_PERMISSION, C.SYSTEM_ERROR), r.remark
        r = await call(consumer, R.SEND_MESSAGE_V2, send_fields("%RETRY%OtherCG"), b"x")
        assert r.code == C.NO_PERMISSION and "group:OtherCG" in r.remark
    finally:
        consumer.close()


async def test_admin_only_codes(acl_broker: Broker) -> None:
    addr = acl_broker.address
    consumer, admin = signed_client(addr, CONSUMER), signed_client(addr, ADMIN)
    create = CreateTopicRequestHeader(topic="Made").to_ext_fields()
    try:
        for code, ext in (
            (R.UPDATE_AND_CREATE_TOPIC, create),
            (R.DELETE_TOPIC_IN_BROKER, {"topic": "Orders"}),
            (R.KAIROS_RESEND_DLQ, {"consumerGroup": "OrdersCG"}),
            (
                R.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": "Orders", "group": "OrdersCG", "timestamp": "0", "isForce": "true"},
            ),
            (R.VIEW_MESSAGE_BY_ID, {"offset": "0"}),
            (
                R.QUERY_MESSAGE,
                {
                    "topic": "",
                    "key": "k",
                    "maxNum": "32",
                    "beginTimestamp": "0",
                    "endTimestamp": "9999999999999",
                },
            ),
        ):
            r = await call(consumer, code, ext)
            assert r.code == C.NO_PERMISSION, (code, r.remark)
            assert f"Need admin permission for request code={int(code)}" in r.remark
        assert acl_broker.topics.get("Made") is None
        r = await call(admin, R.UPDATE_AND_CREATE_TOPIC, create)
        assert r.code == C.SUCCESS, r.remark
        assert acl_broker.topics.get("Made") is not None
        # an admin without topicPerms/groupPerms may do everything (RocketMQ)
        r = await call(admin, R.PULL_MESSAGE, pull_fields("SCHEDULE_TOPIC_XXXX", "AnyCG"))
        assert r.code != C.NO_PERMISSION
        # read-only admin requests need a valid signature only
        assert (await call(consumer, R.GET_BROKER_RUNTIME_INFO)).code == C.SUCCESS
    finally:
        consumer.close()
        admin.close()


async def test_white_listed_addresses_pass_unsigned(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    path = tmp_path / "white.yml"
    path.write_text("globalWhiteRemoteAddresses: ['10.9.*', '127.0.0.{1,2}']\n" + ACL_FILE)
    broker = await broker_factory(acl_file=path, data_dir=tmp_path / "b1")
    anonymous = signed_client(broker.address, None)
    try:
        r = await call(anonymous, R.SEND_MESSAGE_V2, send_fields("Anything"), b"x")
        assert r.code == C.SUCCESS, r.remark
        r = await call(
            anonymous,
            R.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(topic="ByWhite").to_ext_fields(),
        )
        assert r.code == C.SUCCESS
    finally:
        anonymous.close()
    # a white list that does not match this peer: unsigned is refused again
    path.write_text("globalWhiteRemoteAddresses: ['10.9.*']\n" + ACL_FILE)
    assert broker.acl.reload_if_changed()
    anonymous = signed_client(broker.address, None)
    try:
        r = await call(anonymous, R.SEND_MESSAGE_V2, send_fields("Anything"), b"x")
        assert (r.code, r.remark) == (C.SYSTEM_ERROR, ACL_EXC + "No accessKey is configured")
    finally:
        anonymous.close()


async def test_account_white_address_trusts_without_signature(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    """RocketMQ 4.9: a request whose AccessKey's whiteRemoteAddress matches the peer is
    let through without its signature being checked."""
    path = tmp_path / "acct.yml"
    path.write_text(
        ACL_FILE.replace(
            "    secretKey: producer_sk\n",
            "    secretKey: producer_sk\n    whiteRemoteAddress: 127.0.0.1\n",
        )
    )
    broker = await broker_factory(acl_file=path, data_dir=tmp_path / "b2")
    client = signed_client(broker.address, PRODUCER, secret="wrong-secret")
    try:
        r = await call(client, R.SEND_MESSAGE_V2, send_fields("Orders"), b"x")
        assert r.code == C.SUCCESS, r.remark
    finally:
        client.close()


async def test_hot_reload_and_a_bad_file_keeps_the_rules(acl_broker: Broker) -> None:
    path = acl_broker.acl.path
    producer = signed_client(acl_broker.address, PRODUCER)
    try:

        async def audit_code() -> int:
            return (await call(producer, R.SEND_MESSAGE_V2, send_fields("Audit"), b"x")).code

        assert await audit_code() == C.NO_PERMISSION
        with structlog.testing.capture_logs() as logs:
            path.write_text(ACL_FILE.replace("Audit=SUB", "Audit=PUB|SUB"))
            await wait_until(lambda: acl_broker.acl.reloads == 1, 5.0)
            assert await audit_code() == C.SUCCESS
            # a broken file: logged, the rules in force stay
            path.write_text(ACL_FILE.replace("Audit=SUB", "Audit=PUB/SUB") + "\n")
            await wait_until(lambda: any(e["event"] == "acl.reload_failed" for e in logs), 5.0)
            assert await audit_code() == C.SUCCESS
            # removed: logged once, rules stay; put back (tightened): in force again
            path.unlink()
            await wait_until(lambda: sum(e["event"] == "acl.reload_failed" for e in logs) == 2)
            assert await audit_code() == C.SUCCESS
            path.write_text(ACL_FILE)
            await wait_until(lambda: acl_broker.acl.reloads == 2, 5.0)
            assert await audit_code() == C.NO_PERMISSION
        failed = [e for e in logs if e["event"] == "acl.reload_failed"]
        assert "PUB/SUB" in failed[0]["error"] and "rules in force stay" in failed[0]["error"]
        assert "producer_sk" not in str(failed)
        assert [e["accounts"] for e in logs if e["event"] == "acl.reloaded"] == [3, 3]
    finally:
        producer.close()


async def test_denials_are_logged_and_counted(acl_broker: Broker) -> None:
    producer = signed_client(acl_broker.address, PRODUCER)
    try:
        with structlog.testing.capture_logs() as logs:
            await call(producer, R.SEND_MESSAGE_V2, send_fields("Audit"), b"x")
    finally:
        producer.close()
    [event] = [e for e in logs if e["event"] == "acl.denied"]
    assert event["access_key"] == "producer_ak" and event["peer"].startswith("127.0.0.1:")
    assert (event["request_code"], event["resource"], event["perm"], event["code"]) == (
        R.SEND_MESSAGE_V2,
        "topic:Audit",
        "PUB",
        C.NO_PERMISSION,
    )
    assert event["listener"] == "broker" and event["reason"] == "permission"
    assert take_snapshot(acl_broker.metrics.sources)["acl_denied"] == {"permission": 1}


async def test_non_loopback_broker_without_acl_warns(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    with structlog.testing.capture_logs() as logs:
        await broker_factory(host="0.0.0.0", data_dir=tmp_path / "open")
        await broker_factory(host="127.0.0.1", data_dir=tmp_path / "local")
    warnings = [e for e in logs if e["event"] == "acl.disabled"]
    assert len(warnings) == 1 and warnings[0]["host"] == "0.0.0.0"
    assert warnings[0]["log_level"] == "warning"


async def test_signature_covers_what_the_bundled_client_encodes(acl_broker: Broker) -> None:
    """The hook signs the final extFields: the server sees AccessKey and a Signature it
    can verify (no field added after signing)."""
    seen: list[RemotingCommand] = []
    server = acl_broker.server
    check = server.auth
    assert check is not None

    def spy(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        return check(conn, cmd)

    server.auth = spy
    client = signed_client(acl_broker.address, CONSUMER)
    try:
        r = await call(client, R.GET_BROKER_RUNTIME_INFO)
        assert r.code == C.SUCCESS
    finally:
        client.close()
        server.auth = check
    ext = seen[0].ext_fields
    assert ext[ACCESS_KEY] == "consumer_ak"
    assert ext[SIGNATURE] == calc_signature(request_content(ext, seen[0].body), "consumer_sk")


async def test_unknown_codes_are_checked_before_they_are_looked_up(acl_broker: Broker) -> None:
    """As RocketMQ's RPC hook: an unsigned client does not learn which codes exist."""
    anonymous, consumer = (
        signed_client(acl_broker.address, None),
        signed_client(acl_broker.address, CONSUMER),
    )
    try:
        r = await call(anonymous, 4242)
        assert (r.code, r.remark) == (C.SYSTEM_ERROR, ACL_EXC + "No accessKey is configured")
        assert (await call(consumer, 4242)).code == C.REQUEST_CODE_NOT_SUPPORTED
    finally:
        anonymous.close()
        consumer.close()


async def test_field_confusion_cannot_smuggle_a_topic(acl_broker: Broker) -> None:
    """The ACL reads the topic from the field the handler stores under: a V1 send naming an
    allowed topic in the V2 field (and the reverse) is checked on the topic it would hit."""
    producer = signed_client(acl_broker.address, PRODUCER)
    v1 = {
        "producerGroup": "PG",
        "topic": "Other",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "b": "Orders",
    }
    try:
        r = await call(producer, R.SEND_MESSAGE, v1, b"x")
        assert r.code == C.NO_PERMISSION and "topic:Other" in r.remark
        r = await call(
            producer, R.SEND_MESSAGE_V2, {**send_fields("Other"), "topic": "Orders"}, b"x"
        )
        assert r.code == C.NO_PERMISSION and "topic:Other" in r.remark
        r = await call(producer, R.SEND_MESSAGE, {**v1, "topic": "Orders"}, b"x")
        assert r.code == C.SUCCESS, r.remark
    finally:
        producer.close()
    assert acl_broker.topics.get("Other") is None


async def test_send_back_needs_sub_on_the_copied_message_topic(acl_broker: Broker) -> None:
    """A send-back names a commit-log offset: the account must be able to read the message
    there, not only own the group (else it could copy any message into its retry topic)."""
    admin, consumer = (
        signed_client(acl_broker.address, ADMIN),
        signed_client(acl_broker.address, CONSUMER),
    )
    try:
        secret = await call(admin, R.SEND_MESSAGE_V2, send_fields("Secret"), b"classified")
        orders = await call(admin, R.SEND_MESSAGE_V2, send_fields("Orders"), b"fine")
        assert secret.code == orders.code == C.SUCCESS
        back = {
            "group": "OrdersCG",
            "delayLevel": "0",
            "originMsgId": "x",
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        }
        phy = {
            name: int(r.ext_fields["msgId"][-16:], 16)
            for name, r in (("Secret", secret), ("Orders", orders))
        }
        r = await call(
            consumer,
            R.CONSUMER_SEND_MSG_BACK,
            {**back, "offset": str(phy["Secret"]), "originTopic": "Orders"},
        )
        assert r.code == C.NO_PERMISSION and "topic:Secret" in r.remark, r.remark
        r = await call(
            consumer,
            R.CONSUMER_SEND_MSG_BACK,
            {**back, "offset": str(phy["Orders"]), "originTopic": "Orders"},
        )
        assert r.code == C.SUCCESS, r.remark
    finally:
        admin.close()
        consumer.close()
    # the Orders message comes back through the schedule (level 3), and only it
    retried = lambda: acl_broker.store.max_offset("%RETRY%OrdersCG", 0)  # noqa: E731
    await wait_until(lambda: retried() == 1, 5.0)
    assert await stays_false(lambda: retried() > 1, 0.5)


async def test_pending_message_codes_are_admin_only(acl_broker: Broker) -> None:
    """Browsing every topic's pending messages and dead letters, and acting on any
    producer's messages or transactions, needs admin."""
    addr = acl_broker.address
    consumer, admin = signed_client(addr, CONSUMER), signed_client(addr, ADMIN)
    try:
        for code, ext in (
            (R.KAIROS_BROWSE_PENDING, {}),
            (R.KAIROS_PENDING_HISTOGRAM, {"unit": "hour"}),
            (R.KAIROS_RESCHEDULE_PENDING, {"msgId": "X", "runNow": "true"}),
            (R.KAIROS_RECALL_PENDING, {"key": "k"}),
            (R.KAIROS_BROWSE_DLQ, {"consumerGroup": "OrdersCG", "withBody": "true"}),
            (R.KAIROS_END_HALF_MESSAGE, {"commitLogOffset": "0", "action": "commit"}),
        ):
            r = await call(consumer, code, ext)
            assert r.code == C.NO_PERMISSION, (code, r.remark)
            assert f"Need admin permission for request code={int(code)}" in r.remark
        r = await call(admin, R.KAIROS_BROWSE_PENDING, {"limit": "5"})
        assert r.code == C.SUCCESS, r.remark
        r = await call(admin, R.KAIROS_RECALL_PENDING, {"key": "k"})
        assert r.code == C.ILLEGAL_OPERATION and "no pending" in r.remark, r.remark
    finally:
        consumer.close()
        admin.close()
