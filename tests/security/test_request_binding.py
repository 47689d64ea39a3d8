"""kairosmq's request binding (protocol/acl.py) and the broker's request policy
(server/security/access.py ``RequestPolicy``, ``ReplayCache``), and the classification of every
request code the broker and the name servers serve (issue 29, rows 2, 6 and 8a).

The binding is read from the *signed content*, not from a field name: the attacks here
are the ones RocketMQ's name-blind content allows (rename the field, spread its
characters over other fields or into the body) and each is shown to keep the binding in
force. The replay cache never lets a replay through when full (its floor rises) and
starts at the broker's start. RocketMQ 4.9.8's own AclClientRPCHook (its jars) signs a
bound request exactly as kairosmq does, so Apache brokers verify kairosmq clients.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.client.credentials import AclRpcHook, SessionCredentials
from kairosmq.protocol.acl import (
    ACCESS_KEY,
    BINDING,
    SIGNATURE,
    UNIQUE_MSG_QUERY_FLAG,
    Binding,
    binding_value,
    find_binding,
    sign_ext_fields,
)
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.broker import Broker
from kairosmq.server.handlers import broker_table, namesrv_table
from kairosmq.server.namesrv.server import NameServer
from kairosmq.server.security.access import (
    ADMIN_CODES,
    AT_LEAST_ONCE,
    RESOURCE_CODES,
    SIGNED_ONLY,
    BindingMode,
    Denied,
    ReplayCache,
    RequestPolicy,
    check_request,
)
from kairosmq.server.security.acl_file import parse_text

from tests.security.acl_setup import ACL_FILE, ADMIN, PRODUCER
from tests.security.java_acl import java_missing, java_signatures

NONCE = "0123456789abcdef0123456789abcdef"
NOW = 1_800_000_000_000


def _bound(
    code: int,
    ext: dict[str, str],
    body: bytes = b"",
    *,
    creds: SessionCredentials = ADMIN,
    ts: int = NOW,
    nonce: str = NONCE,
) -> dict[str, str]:
    return sign_ext_fields(
        ext, body, creds.access_key, creds.secret_key, binding=binding_value(code, ts, nonce)
    )


def _cmd(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code=int(code), ext_fields=dict(ext), body=body)


def _check(cmd: RemotingCommand, policy: RequestPolicy, *, tls: bool = False) -> None:
    check_request(parse_text(ACL_FILE), "127.0.0.1", cmd, tls=tls, policy=policy)


def _policy(mode: str = "optional", **kw: object) -> RequestPolicy:
    return RequestPolicy(mode, 300_000, clock_ms=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_the_bundled_hook_binds_code_time_and_a_fresh_nonce() -> None:
    hook = AclRpcHook(PRODUCER, clock_ms=lambda: NOW)
    a, b = hook(202, {"topic": "T"}, b""), hook(202, {"topic": "T"}, b"")
    for signed in (a, b):
        assert find_binding(signed, b"") == Binding(202, NOW, signed[BINDING][-32:])
    assert a[BINDING] != b[BINDING]  # a retry is a new request: a new nonce
    # bind=False is RocketMQ's AclClientRPCHook byte for byte
    stock = AclRpcHook(PRODUCER, bind=False)(202, {"topic": "T"}, b"")
    assert stock == sign_ext_fields({"topic": "T"}, b"", PRODUCER.access_key, PRODUCER.secret_key)
    assert find_binding(stock, b"") is None


def test_stock_content_is_never_read_as_a_binding() -> None:
    for ext in (
        {"topic": "T"},
        {"OnsChannel": "ALIYUN", "a": "PG", "b": "Orders"},
        {UNIQUE_MSG_QUERY_FLAG: "true", "topic": "T", "key": "kairosmq1:202"},
        {},
    ):
        signed = sign_ext_fields(ext, b"kairosmq1:", "ak_12345", "sk_12345")
        assert find_binding(signed, b"kairosmq1:") is None, ext


@pytest.mark.parametrize("attack", ["rename", "spread", "into_the_body", "unique_flag"])
def test_the_binding_cannot_be_hidden_by_renaming_or_moving_its_characters(attack: str) -> None:
    """A captured bound read (GET_TOPIC_STATS_INFO) rewritten so the server would not see a
    ``KairosBinding`` field, then sent as DELETE_TOPIC_IN_BROKER: the signature still
    verifies (the content is the same), and the binding is still found and refuses it."""
    signed = _bound(R.GET_TOPIC_STATS_INFO, {"topic": "Orders"})
    value = signed.pop(BINDING)
    body = b""
    if attack == "rename":  # any name sorting between AccessKey and the next field
        signed["Binding"] = value
    elif attack == "spread":
        signed["B1"], signed["B2"], signed["B3"] = value[:7], value[7:30], value[30:]
    elif attack == "into_the_body":  # empty the fields, let the body carry the rest
        signed["topic"] = ""
        body = (value + "Orders").encode()
    elif attack == "unique_flag":  # out of RocketMQ's server form: only the client form
        signed[UNIQUE_MSG_QUERY_FLAG] = value  # verifies, and the binding is read from it
    policy = _policy()
    cmd = _cmd(R.DELETE_TOPIC_IN_BROKER, signed, body)
    with pytest.raises(Denied) as err:
        _check(cmd, policy)
    assert err.value.reason == "binding_code", err.value.remark
    assert "signed for request code=202, sent as request code=215" in err.value.remark


def test_a_binding_moved_into_the_body_is_still_found() -> None:
    """The characters after the access key's value may continue into the body: a request
    whose extFields after ``AccessKey`` are all empty still carries its binding."""
    value = binding_value(R.UPDATE_AND_CREATE_TOPIC, NOW, NONCE)
    body = value.encode() + b"payload"
    ext = sign_ext_fields({}, body, ADMIN.access_key, ADMIN.secret_key)
    assert find_binding(ext, body) == Binding(int(R.UPDATE_AND_CREATE_TOPIC), NOW, NONCE)


def test_what_only_starts_like_a_binding_is_none() -> None:
    """A stock client's user data may start with the prefix (a message key, a KV key):
    not a binding, so not refused; a bound client's content always parses."""
    for text in (
        "kairosmq1:202:17000:" + NONCE,
        "kairosmq1:0202x:" + str(NOW) + ":" + NONCE,
        "kairosmq1:202:" + str(NOW) + ":" + NONCE.upper(),
        "kairosmq1:",
    ):
        signed = sign_ext_fields(
            {"key": text, "namespace": "N", "value": "v"}, b"", ADMIN.access_key, ADMIN.secret_key
        )
        assert find_binding(signed, b"") is None
        _check(_cmd(R.PUT_KV_CONFIG, signed), _policy())


def test_policy_refuses_stale_future_and_replayed_bindings() -> None:
    policy = _policy()
    ok = _bound(R.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})
    _check(_cmd(R.UPDATE_AND_CREATE_TOPIC, ok), policy)
    with pytest.raises(Denied) as err:
        _check(_cmd(R.UPDATE_AND_CREATE_TOPIC, ok), policy)
    assert (
        err.value.reason == "binding_replay"
        and f"nonce {NONCE} was already used" in err.value.remark
    )
    for ts, word in ((NOW - 300_001, "300001 ms"), (NOW + 300_001, "-300001 ms")):
        late = _bound(R.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, ts=ts, nonce="f" * 32)
        with pytest.raises(Denied) as err:
            _check(_cmd(R.UPDATE_AND_CREATE_TOPIC, late), policy)
        assert err.value.reason == "binding_stale" and word in err.value.remark
    # the data path: code and time checked, the nonce not remembered (at-least-once)
    assert R.SEND_MESSAGE_V2 in AT_LEAST_ONCE
    send = _bound(R.SEND_MESSAGE_V2, {"a": "PG", "b": "Orders"}, creds=PRODUCER)
    _check(_cmd(R.SEND_MESSAGE_V2, send), policy)
    _check(_cmd(R.SEND_MESSAGE_V2, send), policy)
    assert len(policy.replays) == 1


def test_replay_cache_raises_its_floor_instead_of_forgetting() -> None:
    cache = ReplayCache(window_ms=60_000, per_key=3, floor=NOW - 50_000)
    stamps = [NOW - 10, NOW - 5, NOW - 7, NOW - 1]
    for i, ts in enumerate(stamps):
        assert cache.admit("k", Binding(1, ts, f"{i:032x}"), NOW) is None
    assert len(cache) == 3  # the first was evicted: its time is now the floor
    why = cache.admit("k", Binding(1, NOW - 10, f"{0:032x}"), NOW)
    assert why is not None and "at or before the oldest time" in why
    assert cache.admit("k", Binding(1, NOW - 11, "e" * 32), NOW) is not None
    assert cache.admit("k", Binding(1, NOW - 9, "e" * 32), NOW) is None
    # per access key: another key is not affected by this one's floor
    assert cache.admit("other", Binding(1, NOW - 20, "e" * 32), NOW) is None
    # signed before the broker started (the cache is not persisted): refused
    assert cache.admit("new", Binding(1, NOW - 50_000, "d" * 32), NOW) is not None
    # past the window: dropped, and the floor follows
    later = NOW + 70_000
    assert cache.admit("k", Binding(1, later, "c" * 32), later) is None
    assert len(cache) == 2  # "k": the new one; "other": one


def test_binding_modes_and_admin_over_tls() -> None:
    stock_admin = sign_ext_fields({"topic": "T"}, b"", ADMIN.access_key, ADMIN.secret_key)
    stock_producer = sign_ext_fields(
        {"a": "PG", "b": "Orders"}, b"", PRODUCER.access_key, PRODUCER.secret_key
    )
    read, send = _cmd(R.GET_TOPIC_STATS_INFO, stock_admin), _cmd(R.SEND_MESSAGE_V2, stock_producer)
    _check(read, _policy("optional"))
    _check(send, _policy("admin"))
    for mode, cmd in (("admin", read), ("all", send)):
        with pytest.raises(Denied) as err:
            _check(cmd, _policy(mode))
        assert (err.value.code, err.value.reason) == (C.NO_PERMISSION, "binding_required")
        assert f"aclRequestBinding={mode} requires" in err.value.remark
    _check(
        _cmd(R.GET_TOPIC_STATS_INFO, _bound(R.GET_TOPIC_STATS_INFO, {"topic": "T"})), _policy("all")
    )
    tls_only = _policy(admin_require_tls=True)
    with pytest.raises(Denied) as err:
        _check(read, tls_only)
    assert (err.value.code, err.value.reason) == (C.NO_PERMISSION, "admin_tls")
    _check(read, tls_only, tls=True)
    _check(send, tls_only)  # applications stay on plain connections
    assert BindingMode("admin") is BindingMode.ADMIN


async def test_every_served_code_is_classified_once(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    """The audit of the whole request-code table: each code the broker port, its
    name-server port and the standalone name server serve is admin-only, checked on the
    resources it names, or signature-only (documented in docs/security.md) - never
    forgotten. A new handler without a rule fails here."""
    broker = await broker_factory()
    served = set(broker_table(broker)) | set(namesrv_table(broker))
    served |= set(NameServer(port=0, data_dir=tmp_path / "ns").handlers)
    classes = (ADMIN_CODES, RESOURCE_CODES, SIGNED_ONLY)
    unclassified = sorted(c for c in served if not any(c in k for k in classes))
    assert not unclassified, f"request codes without an ACL rule: {unclassified}"
    twice = sorted(c for c in served if sum(c in k for k in classes) > 1)
    assert not twice, f"request codes in more than one ACL class: {twice}"
    # what stock producers and consumers call is never admin-only
    clients = {
        R.GET_ROUTEINFO_BY_TOPIC,
        R.HEART_BEAT,
        R.SEND_MESSAGE,
        R.SEND_MESSAGE_V2,
        R.SEND_BATCH_MESSAGE,
        R.PULL_MESSAGE,
        R.QUERY_CONSUMER_OFFSET,
        R.UPDATE_CONSUMER_OFFSET,
        R.GET_CONSUMER_LIST_BY_GROUP,
        R.GET_MAX_OFFSET,
        R.GET_MIN_OFFSET,
        R.SEARCH_OFFSET_BY_TIMESTAMP,
        R.GET_EARLIEST_MSG_STORETIME,
        R.LOCK_BATCH_MQ,
        R.UNLOCK_BATCH_MQ,
        R.END_TRANSACTION,
        R.CHECK_CLIENT_CONFIG,
        R.UNREGISTER_CLIENT,
        R.CONSUMER_SEND_MSG_BACK,
        R.SEND_REPLY_MESSAGE_V2,
        R.GET_KV_CONFIG,
    }
    assert not clients & ADMIN_CODES


@pytest.mark.slow  # javac and a JVM
@pytest.mark.skipif(java_missing() is not None, reason=f"RocketMQ oracle: {java_missing()}")
def test_rocketmq_signs_a_bound_request_as_kairosmq_does(tmp_path: Path) -> None:
    """RocketMQ 4.9.8's AclClientRPCHook over the same extFields, KairosBinding included,
    gives the Signature the bundled client sends: an Apache broker (PlainAccessValidator
    checks the same content) verifies bound requests and ignores the extra field."""
    hook = AclRpcHook(PRODUCER, clock_ms=lambda: NOW)
    cases = []
    for code, ext, body in (
        (310, {"a": "PG", "b": "Orders", "c": "TBW102"}, b"hello"),
        (11, {"consumerGroup": "CG", "topic": "Orders"}, b""),
        (105, {"topic": "Orders"}, b""),
    ):
        signed = hook(code, ext, body)
        fields = {k: v for k, v in signed.items() if k not in (ACCESS_KEY, SIGNATURE)}
        cases.append(
            (PRODUCER.access_key, PRODUCER.secret_key, code, body, fields, signed[SIGNATURE])
        )
    expected = java_signatures([c[:5] for c in cases], tmp_path)
    assert expected == [c[5] for c in cases]
