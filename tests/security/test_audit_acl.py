"""Issue 29's ACL audit, replayed against a real ``kairosmq broker --acl`` process.

The audit's ACL file has an admin, a producer (PUB on ``Orders``), a consumer (SUB by
default, SUB on group ``OrdersCG``) and an account with no permission
(``acl_setup.AUDIT_ACL_FILE``). Each test sends exactly what the audit sent, as raw
frames signed the way a stock RocketMQ client signs (``stock_signed``) or the way the
bundled client signs (``AclRpcHook``: with the request binding), and checks what must
happen:

* row 2: END_TRANSACTION by an account without PUB on the half message's real topic is
  refused with NO_PERMISSION and a remark, answered or one-way, pending or already
  ended; the half messages stay pending until the rightful producer commits and rolls
  back; the transaction-status call that leaked the offsets needs admin;
* row 6: a signed read captured and resent as DELETE_TOPIC_IN_BROKER, and a signed frame
  resent as is. With the request binding (kairosmq's clients) both are refused in every
  mode, also after a restart; a stock-signed frame (mqadmin) is refused with
  ``--acl-request-binding admin`` and on a plain connection with
  ``--acl-admin-require-tls``, and - asserted as documented in docs/security.md - taken
  in the default mode, as Apache RocketMQ 4.9.8 takes it;
* row 8a: GET_CONSUMER_RUNNING_INFO (relayed to a consumer) needs SUB on the group, the
  offset-reset relay needs admin, and the listing codes the audit named need admin or SUB
  on the group they ask about, while what stock clients call stays open to them.

Every test ends with ``verify_after_kill9`` (tests/hostile/harness.py): kill -9, restart
on the same files, every acked message served exactly once, new sends work. The harness
signs its own requests as the admin through the bundled client's hook.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from kairosmq.client.credentials import AclRpcHook, SessionCredentials
from kairosmq.protocol.acl import BINDING
from kairosmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from kairosmq.protocol.codec import decode_frame, encode_command
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.headers import CreateTopicRequestHeader
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import decode_records

from tests.helpers import pull, send
from tests.hostile.harness import Acked, HostileBroker, now_ms, verify_after_kill9
from tests.security.acl_setup import (
    ADMIN,
    AUDIT_ACL_FILE,
    CONSUMER,
    NOPERM,
    PRODUCER,
    SignedPeer,
    stock_signed,
)
from tests.security.certs import make_certs, openssl_missing
from tests.transaction.txpeer import end_ext
from tests.wire import RawPeer

pytestmark = pytest.mark.slow
ACL_EXC = "org.apache.rocketmq.acl.common.AclException: "


class AclBroker(HostileBroker):
    """The hostile harness's broker process started with ``--acl``; the harness's own
    peers (its ledger's sends, the drains after kill -9) sign as the admin the way the
    bundled client does, over TLS when ``tls`` is given."""

    def __init__(
        self, data_dir: Path, acl: Path, *extra: str, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(data_dir, "--acl", str(acl), *extra)
        self.tls = tls

    @property
    def namesrv_address(self) -> str:
        return f"127.0.0.1:{self.proc.namesrv_port}"

    async def connect(self) -> RawPeer:
        peer = await SignedPeer.open(self.address, ADMIN, tls=self.tls)
        self.peers.append(peer)
        return peer

    async def peer(
        self,
        creds: SessionCredentials,
        *,
        stock: bool = True,
        address: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> SignedPeer:
        """A peer of ``creds`` (signing as a stock client unless ``stock=False``)."""
        p = await SignedPeer.open(address or self.address, creds, stock=stock, tls=tls)
        self.peers.append(p)
        return p

    async def raw(self, tls: ssl.SSLContext | None = None) -> RawPeer:
        """An attacker's connection: it sends captured frames byte for byte."""
        host, port = self.address.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port), ssl=tls)
        p = RawPeer(r, w)
        self.peers.append(p)
        return p


@pytest_asyncio.fixture
async def acl_proc(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[AclBroker]]]:
    """``await acl_proc(*extra_cli_args, tls=ctx)``: a started ``--acl`` broker process
    with ``AUDIT_ACL_FILE``; stopped at teardown with SIGTERM (it must exit 0)."""
    made: list[AclBroker] = []

    async def make(*extra: str, tls: ssl.SSLContext | None = None) -> AclBroker:
        acl = tmp_path / "plain_acl.yml"
        acl.write_text(AUDIT_ACL_FILE)
        hb = AclBroker(tmp_path / "d", acl, *extra, tls=tls)
        made.append(hb)
        await hb.start()
        return hb

    yield make
    for hb in made:
        await hb.close_peers()
        p = hb.proc.proc
        if p is not None and p.poll() is None:
            hb.graceful_stop()


_opaques = iter(range(1_000_000, 2_000_000))


def frame(code: int, ext: dict[str, str], body: bytes = b"", *, oneway: bool = False) -> bytes:
    """A signed request as it crosses the wire (what an on-path observer captures)."""
    return encode_command(request(code, dict(ext), body, opaque=next(_opaques), oneway=oneway))


async def resend(peer: RawPeer, data: bytes, timeout: float = 5.0) -> RemotingCommand:
    """Send a captured frame byte for byte and return its answer."""
    opaque = decode_frame(data).opaque
    fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    peer.pending[opaque] = fut
    peer.send_raw(data)
    return await asyncio.wait_for(fut, timeout)


def bound(
    code: int, ext: dict[str, Any], creds: SessionCredentials = ADMIN, **hook: Any
) -> dict[str, str]:
    """``ext`` signed by the bundled client's hook (request binding included)."""
    return AclRpcHook(creds, **hook)(int(code), {k: str(v) for k, v in ext.items()}, b"")


async def pending_halves(admin: RawPeer) -> dict[int, str]:
    """commit-log offset -> msgId of every pending half message (the admin's view)."""
    r = await admin.call(R.KAIROS_GET_TRANSACTION_STATUS)
    assert r.code == C.SUCCESS, r.remark
    groups = orjson.loads(r.body)["groups"]
    return {m["commitLogOffset"]: m["msgId"] for g in groups.values() for m in g["messages"]}


async def bodies(peer: RawPeer, topic: str, group: str = "AuditReader") -> list[bytes]:
    out = []
    for q in range(4):
        r = await pull(peer, topic, queue_id=q, group=group, suspend_ms=0, max_n=64)
        if r.code == C.SUCCESS:
            out += [m.body for m in decode_records(r.body)]
    return out


def refused_admin(r: RemotingCommand, code: int, access_key: str) -> bool:
    return (r.code, r.remark) == (
        C.NO_PERMISSION,
        ACL_EXC
        + (
            f"Need admin permission for request code={int(code)}, but accessKey={access_key} is not"
        ),
    )


# ---------------------------------------------------------------------- row 2


async def test_end_transaction_needs_pub_on_the_half_topic_and_status_needs_admin(
    acl_proc: Callable[..., Awaitable[AclBroker]],
) -> None:
    hb = await acl_proc()
    admin = await hb.connect()
    await hb.setup_bystander(admin)
    producer, noperm, consumer = [await hb.peer(c) for c in (PRODUCER, NOPERM, CONSUMER)]
    sent = now_ms()
    halves: dict[str, RemotingCommand] = {}
    for key in ("AUDIT-TX-COMMIT", "AUDIT-TX-ROLLBACK"):  # a stock producer's half sends
        r = await send(
            producer,
            "Orders",
            key.encode(),
            {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": key},
            queue_id=0,
            f=4,
        )
        assert r.code == C.SUCCESS, r.remark
        halves[key] = r
    offsets = {decode_offset_msg_id(r.ext_fields["msgId"])[2] for r in halves.values()}
    # the status call that gave the audit the offsets: admin only
    for peer, who in ((noperm, NOPERM), (consumer, CONSUMER), (producer, PRODUCER)):
        r = await peer.call(R.KAIROS_GET_TRANSACTION_STATUS)
        assert refused_admin(r, R.KAIROS_GET_TRANSACTION_STATUS, who.access_key), r.remark
    assert set(await pending_halves(admin)) == offsets
    # the audit's END_TRANSACTIONs: commit one, roll back the other, by accounts without
    # PUB on Orders (answered requests, then one-way as stock producers send them)
    commit = end_ext(halves["AUDIT-TX-COMMIT"], 8)
    rollback = end_ext(halves["AUDIT-TX-ROLLBACK"], 12)
    for peer, who, held in (
        (noperm, NOPERM, "DENY (its default)"),
        (consumer, CONSUMER, "SUB (its default)"),
    ):
        for ext in (commit, rollback):
            r = await peer.call(R.END_TRANSACTION, ext)
            assert (r.code, r.remark) == (
                C.NO_PERMISSION,
                ACL_EXC
                + (f"No PUB permission for topic:Orders: accessKey={who.access_key} has {held}"),
            )
    for ext in (commit, rollback):
        noperm.send_raw(frame(R.END_TRANSACTION, stock_signed(NOPERM, ext), oneway=True))
    # a request after the one-way ones on the same connection: they were handled
    assert (await noperm.call(R.GET_BROKER_RUNTIME_INFO)).code == C.SUCCESS
    assert set(await pending_halves(admin)) == offsets, "a refused end changed a half message"
    assert not {b"AUDIT-TX-COMMIT", b"AUDIT-TX-ROLLBACK"} & set(await bodies(admin, "Orders"))
    # the rightful producer ends both
    assert (await producer.call(R.END_TRANSACTION, commit)).code == C.SUCCESS
    assert (await producer.call(R.END_TRANSACTION, rollback)).code == C.SUCCESS
    assert await pending_halves(admin) == {}
    assert await bodies(admin, "Orders") == [b"AUDIT-TX-COMMIT"]
    # an ended half message still names its topic (read from the log): still refused
    r = await noperm.call(R.END_TRANSACTION, commit)
    assert r.code == C.NO_PERMISSION and "topic:Orders" in r.remark, r.remark
    hb.ledger.acked["AUDIT-TX-COMMIT"] = Acked(
        "AUDIT-TX-COMMIT", "Orders", 0, b"AUDIT-TX-COMMIT", 0, sent
    )
    hb.ledger.refused_bodies.add(b"AUDIT-TX-ROLLBACK")
    peer = await verify_after_kill9(hb)
    assert await pending_halves(peer) == {}
    noperm = await hb.peer(NOPERM)
    r = await noperm.call(R.END_TRANSACTION, rollback)
    assert r.code == C.NO_PERMISSION and "topic:Orders" in r.remark, r.remark


# ---------------------------------------------------------------------- row 6


async def test_default_mode_refuses_bound_replays_and_takes_stock_ones_as_documented(
    acl_proc: Callable[..., Awaitable[AclBroker]],
) -> None:
    hb = await acl_proc()
    admin = await hb.connect()
    await hb.setup_bystander(admin)
    victim = CreateTopicRequestHeader(topic="AuditVictim").to_ext_fields()
    assert (await admin.call(R.UPDATE_AND_CREATE_TOPIC, victim)).code == C.SUCCESS
    operator, attacker = await hb.raw(), await hb.raw()

    async def victim_exists() -> bool:
        r = await admin.call(R.GET_TOPIC_STATS_INFO, {"topic": "AuditVictim"})
        assert r.code in (C.SUCCESS, C.TOPIC_NOT_EXIST), r.remark
        return r.code == C.SUCCESS

    # 1. signed as stock mqadmin signs (`topicStatus -t AuditVictim`): RocketMQ's signature
    # covers neither the code nor a time, and this mode keeps stock tools working -
    # the captured read is taken again, and as a delete (docs/security.md, residual risk)
    read = stock_signed(ADMIN, {"topic": "AuditVictim"})
    captured = frame(R.GET_TOPIC_STATS_INFO, read)
    assert (await resend(operator, captured)).code == C.SUCCESS
    assert (await resend(attacker, captured)).code == C.SUCCESS
    r = await resend(attacker, frame(R.DELETE_TOPIC_IN_BROKER, read))
    assert r.code == C.SUCCESS, r.remark
    assert not await victim_exists()
    # 2. signed by the bundled client (kairosmq admin, Producer, PushConsumer): the same
    # capture is refused as a replay and as a delete, however the field is disguised
    assert (await admin.call(R.UPDATE_AND_CREATE_TOPIC, victim)).code == C.SUCCESS
    read = bound(R.GET_TOPIC_STATS_INFO, {"topic": "AuditVictim"})
    captured = frame(R.GET_TOPIC_STATS_INFO, read)
    assert (await resend(operator, captured)).code == C.SUCCESS  # the operator's request
    r = await resend(attacker, captured)
    nonce = read[BINDING].rsplit(":", 1)[1]
    assert (r.code, r.remark) == (
        C.SYSTEM_ERROR,
        ACL_EXC + (f"Request replayed for accessKey=admin_ak_1: nonce {nonce} was already used"),
    )
    renamed = {k: v for k, v in read.items() if k != BINDING} | {"Binding": read[BINDING]}
    for ext in (read, renamed):
        r = await resend(attacker, frame(R.DELETE_TOPIC_IN_BROKER, ext))
        assert (r.code, r.remark) == (
            C.SYSTEM_ERROR,
            ACL_EXC
            + (
                "Request binding mismatch for accessKey=admin_ak_1: signed for request "
                "code=202, sent as request code=215"
            ),
        )
    assert await victim_exists()
    # a state change replayed after a later one does not undo it
    made = CreateTopicRequestHeader(
        topic="AuditMade", read_queue_nums=2, write_queue_nums=2
    ).to_ext_fields()
    create = frame(R.UPDATE_AND_CREATE_TOPIC, bound(R.UPDATE_AND_CREATE_TOPIC, made))
    assert (await resend(operator, create)).code == C.SUCCESS
    grown = {**made, "readQueueNums": "8", "writeQueueNums": "8"}
    assert (await admin.call(R.UPDATE_AND_CREATE_TOPIC, grown)).code == C.SUCCESS
    r = await resend(attacker, create)
    assert r.code == C.SYSTEM_ERROR and "Request replayed" in r.remark, r.remark
    stats = await admin.call(R.GET_TOPIC_STATS_INFO, {"topic": "AuditMade"})
    assert stats.body.count(b'"queueId"') == 8
    # signed ten minutes ago (a capture kept, or a client clock that far off): refused
    old = bound(
        R.UPDATE_AND_CREATE_TOPIC,
        {**made, "topic": "AuditOld"},
        clock_ms=lambda: now_ms() - 600_000,
    )
    r = await resend(attacker, frame(R.UPDATE_AND_CREATE_TOPIC, old))
    assert (
        r.code == C.SYSTEM_ERROR
        and "Request binding expired for accessKey=admin_ak_1" in r.remark
        and "(aclRequestWindow 300000 ms)" in r.remark
    ), r.remark
    # the data path keeps RocketMQ's at-least-once: a replayed bound send is a duplicate
    # (documented; its nonce is not remembered), within the window only
    fields = {
        k: str(v)
        for k, v in {
            "a": "PG",
            "b": "Orders",
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": now_ms(),
            "h": 0,
            "i": "UNIQ_KEY\x01AUDIT-DUP\x02",
        }.items()
    }
    dup = frame(R.SEND_MESSAGE_V2, AclRpcHook(PRODUCER)(R.SEND_MESSAGE_V2, fields, b"dup"), b"dup")
    assert (await resend(operator, dup)).code == C.SUCCESS
    assert (await resend(attacker, dup)).code == C.SUCCESS
    assert (await bodies(admin, "Orders")).count(b"dup") == 2
    # captured before a kill -9, replayed after the restart: refused (the replay cache is
    # not kept; it starts at the broker's start)
    later = frame(R.UPDATE_AND_CREATE_TOPIC, bound(R.UPDATE_AND_CREATE_TOPIC, grown))
    assert (await resend(operator, later)).code == C.SUCCESS
    await verify_after_kill9(hb)
    attacker = await hb.raw()
    r = await resend(attacker, later)
    assert (
        r.code == C.SYSTEM_ERROR
        and "at or before the oldest time the replay cache still covers" in r.remark
    ), r.remark


async def test_binding_required_for_admins_refuses_the_audits_frames(
    acl_proc: Callable[..., Awaitable[AclBroker]],
) -> None:
    """``--acl-request-binding admin``: an admin signature without the binding (stock
    mqadmin) is refused for every code; the bundled client's admin requests work; stock
    applications on non-admin accounts are not affected."""
    hb = await acl_proc("--acl-request-binding", "admin")
    admin = await hb.connect()
    await hb.setup_bystander(admin)
    victim = CreateTopicRequestHeader(topic="AuditVictim").to_ext_fields()
    assert (await admin.call(R.UPDATE_AND_CREATE_TOPIC, victim)).code == C.SUCCESS
    attacker = await hb.raw()
    read = stock_signed(ADMIN, {"topic": "AuditVictim"})
    for code in (R.GET_TOPIC_STATS_INFO, R.DELETE_TOPIC_IN_BROKER):
        r = await resend(attacker, frame(code, read))
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC
            + (
                f"aclRequestBinding=admin requires an admin account's requests to carry the "
                f"KairosBinding field (kairosmq clients and kairosmq admin sign it; RocketMQ's "
                f"stock clients cannot): accessKey=admin_ak_1, request code={int(code)}"
            ),
        )
    read = bound(R.GET_TOPIC_STATS_INFO, {"topic": "AuditVictim"})
    captured = frame(R.GET_TOPIC_STATS_INFO, read)
    assert (await resend(await hb.raw(), captured)).code == C.SUCCESS
    assert "Request replayed" in (await resend(attacker, captured)).remark
    r = await resend(attacker, frame(R.DELETE_TOPIC_IN_BROKER, read))
    assert r.code == C.SYSTEM_ERROR and "Request binding mismatch" in r.remark, r.remark
    assert (await admin.call(R.GET_TOPIC_STATS_INFO, {"topic": "AuditVictim"})).code == C.SUCCESS
    # stock applications: a producer's send and a consumer's pull, signed as RocketMQ's
    producer, consumer = await hb.peer(PRODUCER), await hb.peer(CONSUMER)
    assert (await send(producer, "Orders", b"stock-app", queue_id=1)).code == C.SUCCESS
    assert b"stock-app" in await bodies(consumer, "Orders", "OrdersCG")
    await verify_after_kill9(hb)


@pytest.mark.skipif(openssl_missing() is not None, reason=f"{openssl_missing()}")
async def test_admin_over_tls_only_refuses_a_plain_admin_signature(
    acl_proc: Callable[..., Awaitable[AclBroker]], tmp_path: Path
) -> None:
    """``--acl-admin-require-tls`` (with ``--tls-mode permissive``): an admin's signed
    frame on a plain connection is refused whatever its code, so an admin signature never
    crosses the network in clear; stock mqadmin over TLS and plain applications work."""
    certs = make_certs(tmp_path / "certs")
    tls = certs.client_context()
    hb = await acl_proc(
        "--tls-mode",
        "permissive",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--acl-admin-require-tls",
        tls=tls,
    )
    admin = await hb.connect()
    await hb.setup_bystander(admin)
    victim = CreateTopicRequestHeader(topic="AuditVictim").to_ext_fields()
    assert (await admin.call(R.UPDATE_AND_CREATE_TOPIC, victim)).code == C.SUCCESS
    read = stock_signed(ADMIN, {"topic": "AuditVictim"})
    attacker = await hb.raw()
    for code in (R.GET_TOPIC_STATS_INFO, R.DELETE_TOPIC_IN_BROKER):
        r = await resend(attacker, frame(code, read))
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC
            + (
                f"accessKey=admin_ak_1 is an admin account: with aclAdminRequireTls its "
                f"requests are taken over TLS only (request code={int(code)})"
            ),
        )
    over_tls = await hb.raw(tls)  # stock mqadmin with -Dtls.enable=true
    assert (await resend(over_tls, frame(R.GET_TOPIC_STATS_INFO, read))).code == C.SUCCESS
    producer = await hb.peer(PRODUCER)  # plain
    assert (await send(producer, "Orders", b"plain-app")).code == C.SUCCESS
    await verify_after_kill9(hb)


# ---------------------------------------------------------------------- row 8a


async def test_relays_and_listings_need_the_group_or_admin(
    acl_proc: Callable[..., Awaitable[AclBroker]],
) -> None:
    hb = await acl_proc()
    admin = await hb.connect()
    await hb.setup_bystander(admin)
    member = await hb.peer(CONSUMER)  # a stock consumer of OrdersCG, online
    beat = HeartbeatData(
        "audit-consumer", [], [ConsumerData("OrdersCG", [SubscriptionData("Orders")])]
    )
    assert (await member.call(R.HEART_BEAT, body=beat.to_json())).code == C.SUCCESS
    assert (await send(admin, "Orders", b"for-stats")).code == C.SUCCESS
    noperm, producer = await hb.peer(NOPERM), await hb.peer(PRODUCER)
    running = {"consumerGroup": "OrdersCG", "clientId": "audit-consumer", "jstackEnable": "false"}
    reset = {"topic": "Orders", "group": "OrdersCG", "timestamp": "0", "isForce": "true"}
    for peer, who in ((noperm, NOPERM), (producer, PRODUCER)):
        r = await peer.call(R.GET_CONSUMER_RUNNING_INFO, running)
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC
            + (
                f"No SUB permission for group:OrdersCG: accessKey={who.access_key} has DENY "
                f"(its default)"
            ),
        )
    for peer, who in ((noperm, NOPERM), (producer, PRODUCER), (member, CONSUMER)):
        r = await peer.call(R.INVOKE_BROKER_TO_RESET_OFFSET, reset)
        assert refused_admin(r, R.INVOKE_BROKER_TO_RESET_OFFSET, who.access_key), r.remark
    await asyncio.sleep(0.3)
    relayed = []
    while not member.requests.empty():
        relayed.append(member.requests.get_nowait().code)
    assert not {R.GET_CONSUMER_RUNNING_INFO, R.RESET_CONSUMER_CLIENT_OFFSET} & set(relayed)
    # the group's own account (SUB on OrdersCG) is relayed, and gets the client's answer
    asker = await hb.peer(CONSUMER)
    answer = asyncio.ensure_future(asker.call(R.GET_CONSUMER_RUNNING_INFO, running, timeout=10.0))
    while (
        req := await asyncio.wait_for(member.requests.get(), 5.0)
    ).code != R.GET_CONSUMER_RUNNING_INFO:
        pass
    member.send_raw(encode_command(req.response(body=b'{"properties":{"audit":"yes"}}')))
    r = await answer
    assert r.code == C.SUCCESS and b'"audit":"yes"' in r.body, r.remark
    # listings of other accounts' groups, clients and data: admin
    admin_reads: list[tuple[int, dict[str, str]]] = [
        (R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}),
        (R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}),
        (R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Orders"}),
        (R.GET_BROKER_CONSUME_STATS, {}),
        (R.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "Orders"}),
        (R.KAIROS_GET_CONSUMER_GROUPS, {}),
        (R.KAIROS_GET_SCHEDULE_BACKLOG, {}),
        (R.KAIROS_GET_TIMER_STATUS, {}),
        (R.KAIROS_GET_TRANSACTION_STATUS, {}),
        (R.GET_BROKER_CONFIG, {}),
    ]
    for code, ext in admin_reads:
        for peer, who in ((noperm, NOPERM), (member, CONSUMER)):
            assert refused_admin(await peer.call(code, ext), code, who.access_key), code
        r = await admin.call(code, ext)
        assert r.code != C.NO_PERMISSION and not (r.remark or "").startswith(ACL_EXC), code
    ns_noperm = await hb.peer(NOPERM, address=hb.namesrv_address)
    r = await ns_noperm.call(R.GET_NAMESRV_CONFIG)
    assert refused_admin(r, R.GET_NAMESRV_CONFIG, NOPERM.access_key), r.remark
    assert (
        await ns_noperm.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
    ).code == C.SUCCESS  # routes: any signed account, as RocketMQ
    # reads about one group: SUB on it (the consumer's own group passes)
    group_reads: list[tuple[int, dict[str, str]]] = [
        (R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "OrdersCG"}),
        (R.GET_CONSUME_STATS, {"consumerGroup": "OrdersCG", "topic": "Orders"}),
        (R.KAIROS_GET_CONSUMER_LAG, {"consumerGroup": "OrdersCG"}),
        (
            R.QUERY_CONSUME_QUEUE,
            {
                "topic": "Orders",
                "queueId": "0",
                "index": "0",
                "count": "1",
                "consumerGroup": "OrdersCG",
            },
        ),
    ]
    for code, ext in group_reads:
        r = await noperm.call(code, ext)
        assert r.code == C.NO_PERMISSION and "accessKey=noperm_ak has DENY" in r.remark, code
        r = await member.call(code, ext)
        assert r.code == C.SUCCESS, (code, r.remark)
    # a topic's queue metadata (what stock consumers and producers call): PUB or SUB on it
    queue = {"topic": "Orders", "queueId": "0"}
    for code, ext in (
        (R.GET_MAX_OFFSET, queue),
        (R.GET_MIN_OFFSET, queue),
        (R.GET_EARLIEST_MSG_STORETIME, queue),
        (R.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": "0"}),
        (R.GET_TOPIC_STATS_INFO, {"topic": "Orders"}),
    ):
        for peer in (producer, member):
            r = await peer.call(code, ext)
            assert r.code == C.SUCCESS, (code, r.remark)
        r = await noperm.call(code, ext)
        assert (r.code, r.remark) == (
            C.NO_PERMISSION,
            ACL_EXC
            + (
                "No PUB or SUB permission for topic:Orders: accessKey=noperm_ak has DENY "
                "(its default)"
            ),
        ), code
    await verify_after_kill9(hb)
