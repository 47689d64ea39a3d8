"""The plain_acl.yml format (server/security/acl_file.py): address patterns, permissions, errors,
and which permission each request needs (server/security/access.py ``needed_access``)."""

from __future__ import annotations

import pytest
from kairosmq.protocol.acl import DENY, PUB, SUB, check_permission, parse_perm, sign_ext_fields
from kairosmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.server.security.access import Denied, Need, check_request, needed_access
from kairosmq.server.security.acl_file import AclConfigError, AddressPattern, parse_text

RMQ_SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def test_rocketmq_sample_file_parses() -> None:
    """RocketMQ 4.9's distribution/conf/plain_acl.yml, as shipped."""
    rules = parse_text(RMQ_SAMPLE)
    assert set(rules.accounts) == {"RocketMQ", "rocketmq2"}
    a = rules.accounts["RocketMQ"]
    assert a.secret_key == "12345678"  # a YAML number read as text
    assert (a.admin, a.default_topic_perm, a.default_group_perm) == (False, DENY, SUB)
    assert a.topic_perms == {"topicA": DENY, "topicB": PUB | SUB, "topicC": SUB}
    assert a.group_perms == {"groupA": DENY, "groupB": PUB | SUB, "groupC": SUB}
    assert a.white_address is None
    b = rules.accounts["rocketmq2"]
    assert b.admin and b.white_address is not None and b.white_address.match("192.168.1.77")
    assert rules.white_listed("10.10.103.5") and rules.white_listed("192.168.0.200")
    assert not rules.white_listed("10.10.104.5") and not rules.white_listed("127.0.0.1")


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["1.2.3.4"], []),
        ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2"]),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
        ("192.168.1.1,10.0.0.9", ["192.168.1.1", "10.0.0.9"], ["10.0.0.1"]),
        ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.0", "192.168.1.6"]),
        ("192.168.*", ["192.168.0.1", "192.168.255.255"], ["192.169.0.1", "10.168.0.1"]),
        ("192.168.*.*", ["192.168.7.8"], ["192.167.7.8"]),
        ("10.*.*.*", ["10.1.2.3"], ["11.1.2.3"]),
        ("10.1-3.*.*", ["10.2.0.0"], ["10.4.0.0"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2", "127.0.0.1"]),
        ("fe80:0:0:0:0:0:0:1-ff", ["fe80::1", "fe80::ff"], ["fe80::100"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    p = AddressPattern.parse(pattern)
    assert p is not None
    assert all(p.match(a) for a in yes), [a for a in yes if not p.match(a)]
    assert not any(p.match(a) for a in no), [a for a in no if p.match(a)]


def test_blank_address_matches_nothing_and_garbage_never_matches() -> None:
    assert AddressPattern.parse("") is None and AddressPattern.parse(None) is None
    p = AddressPattern.parse("10.*")
    assert p is not None and p.match("10.0.0.1") and not p.match("not-an-ip")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("accounts: [{accessKey: short, secretKey: 12345678}]", "accessKey"),
        ("accounts: [{accessKey: longenough, secretKey: short}]", "secretKey"),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, topicPerms: [topicA]}]",
            "name=PERM",
        ),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, topicPerms: [a=PUB/SUB]}]",
            "PUB|SUB",
        ),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, defaultTopicPerm: ALL}]",
            "defaultTopicPerm",
        ),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678},"
            " {accessKey: longenough, secretKey: 87654321}]",
            "twice",
        ),
        ("globalWhiteRemoteAddresses: [192.168.1.300-400]", "out of"),
        ("globalWhiteRemoteAddresses: [192.168.x.*]", "not a number"),
        ("globalWhiteRemoteAddresses: [not.an.address]", "not an IP"),
        ("accounts: {accessKey: x}", "list"),
        ("- just\n- a list", "mapping"),
        ("accounts: [\n  - broken", "YAML"),
    ],
)
def test_bad_files_are_refused_naming_the_entry(text: str, needle: str) -> None:
    with pytest.raises(AclConfigError, match=needle) as err:
        parse_text(text)
    assert "87654321" not in str(err.value) and "12345678" not in str(err.value)


def test_empty_file_is_no_accounts() -> None:
    rules = parse_text("")
    assert rules.accounts == {} and rules.global_white == ()


def test_permission_words_and_checks() -> None:
    assert [parse_perm(t) for t in ("PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY", None, "x")] == [
        PUB,
        SUB,
        PUB | SUB,
        PUB | SUB,
        DENY,
        DENY,
        DENY,
    ]
    assert check_permission(PUB, PUB | SUB) and not check_permission(PUB, SUB)
    assert not check_permission(SUB, DENY | SUB)


def _cmd(code: int, body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand(code=int(code), ext_fields=dict(ext), body=body)


def test_needed_access_per_request_code() -> None:
    topic, group = Need("topic", "T", SUB), Need("group", "G", SUB)
    assert needed_access(_cmd(R.SEND_MESSAGE_V2, a="PG", b="T")) == [Need("topic", "T", PUB)]
    assert needed_access(_cmd(R.SEND_MESSAGE, producerGroup="PG", topic="T")) == [
        Need("topic", "T", PUB)
    ]
    assert needed_access(_cmd(R.SEND_BATCH_MESSAGE, a="PG", b="T")) == [Need("topic", "T", PUB)]
    # the topic is read from the field the handler will use, whatever else is sent
    assert needed_access(_cmd(R.SEND_MESSAGE, topic="Secret", b="T")) == [
        Need("topic", "Secret", PUB)
    ]
    assert needed_access(_cmd(R.SEND_MESSAGE_V2, topic="T", b="Secret")) == [
        Need("topic", "Secret", PUB)
    ]
    # a send to a retry topic (the consumer's fallback) is checked on its group
    assert needed_access(_cmd(R.SEND_MESSAGE_V2, a="X", b="%RETRY%G")) == [group]
    assert needed_access(_cmd(R.PULL_MESSAGE, consumerGroup="G", topic="T")) == [topic, group]
    assert needed_access(_cmd(R.PULL_MESSAGE, consumerGroup="G", topic="%RETRY%G")) == [
        group,
        group,
    ]
    assert needed_access(_cmd(R.PULL_MESSAGE, consumerGroup="G", topic="%DLQ%H")) == [
        Need("group", "H", SUB),
        group,
    ]
    assert needed_access(_cmd(R.CONSUMER_SEND_MSG_BACK, group="G", offset="1")) == [group]
    for code in (R.UPDATE_CONSUMER_OFFSET, R.QUERY_CONSUMER_OFFSET):
        assert needed_access(_cmd(code, consumerGroup="G", topic="T", queueId="0")) == [
            topic,
            group,
        ]
    for code in (R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP):
        assert needed_access(_cmd(code, consumerGroup="G", clientID="c")) == [group]
    assert needed_access(_cmd(R.UNREGISTER_CLIENT, producerGroup="PG", clientID="c")) == []
    assert needed_access(_cmd(R.QUERY_MESSAGE, topic="T", key="k")) == [topic]
    assert needed_access(_cmd(370, producerGroup="PG", topic="T", recallHandle="h")) == [
        Need("topic", "T", PUB)
    ]  # RECALL_MESSAGE
    hb = HeartbeatData(
        "cid",
        ["PG"],
        [ConsumerData("G", [SubscriptionData("T", "*"), SubscriptionData("%RETRY%G", "*")])],
    )
    assert needed_access(_cmd(R.HEART_BEAT, hb.to_json())) == [group, topic, group]
    lock = b'{"consumerGroup":"G","clientId":"c","mqSet":[]}'
    assert needed_access(_cmd(R.LOCK_BATCH_MQ, lock)) == [group]
    assert needed_access(_cmd(R.GET_ROUTEINFO_BY_TOPIC, topic="T")) == []
    with pytest.raises(ValueError):
        needed_access(_cmd(R.HEART_BEAT, b"{not json"))


def test_check_request_order_security_token_and_unreadable_bodies() -> None:
    rules = parse_text(RMQ_SAMPLE)
    ext = sign_ext_fields(
        {"topic": "topicB", "b": "topicB"}, b"x", "RocketMQ", "12345678", security_token="tok"
    )  # SecurityToken is signed with the rest
    assert ext["SecurityToken"] == "tok"
    cmd = RemotingCommand(code=int(R.SEND_MESSAGE_V2), ext_fields=ext, body=b"x")
    assert check_request(rules, "127.0.0.1", cmd) is rules.accounts["RocketMQ"]
    # white-listed peers pass before anything else is looked at
    assert check_request(rules, "10.10.103.7", RemotingCommand(code=int(R.SEND_MESSAGE_V2))) is None
    # a body the broker cannot read is refused, never let through
    hb = sign_ext_fields({}, b"{not json", "RocketMQ", "12345678")
    with pytest.raises(Denied) as err:
        check_request(
            rules,
            "127.0.0.1",
            RemotingCommand(code=int(R.HEART_BEAT), ext_fields=hb, body=b"{not json"),
        )
    assert err.value.reason == "unreadable" and err.value.code == 1
