"""The plain-ACL request signature (protocol/acl.py) against RocketMQ's algorithm.

Three independent oracles: the documented algorithm written out again here with ``hmac``
(values of every extField but ``Signature``, sorted by name, concatenated, then the body;
base64 of HMAC-SHA1 keyed with the secret), RocketMQ 4.9.8's own ``AclClientRPCHook``
run from its jars (skipped without ``java``), and the signatures real C++ clients put on
the captured frames (they sign with an empty secret when given no credentials).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from kairosmq.protocol.acl import (
    ACCESS_KEY,
    SIGNATURE,
    UNIQUE_MSG_QUERY_FLAG,
    calc_signature,
    content_variants,
    request_content,
    sign_ext_fields,
)
from kairosmq.protocol.codec import decode_frame

from tests.helpers import FIXTURES
from tests.security.java_acl import java_missing, java_signatures

SEND_V2 = {
    "a": "PG",
    "b": "TopicA",
    "c": "TBW102",
    "d": "4",
    "e": "0",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01TagA\x02",
    "j": "0",
    "k": "false",
}
CASES = [
    ("RocketMQ", "12345678", 310, b"hello", SEND_V2),
    (
        "RocketMQ",
        "12345678",
        11,
        b"",
        {
            "consumerGroup": "CG",
            "topic": "TopicA",
            "queueId": "3",
            "queueOffset": "17",
            "maxMsgNums": "32",
            "sysFlag": "2",
            "commitOffset": "0",
            "suspendTimeoutMillis": "20000",
            "subscription": "*",
            "subVersion": "1",
        },
    ),
    # upper case sorts before lower case (AccessKey before a); non-ASCII names and values
    ("ak-ünï", "sécret✓key", 105, b"", {"topic": "T", "Zed": "z", "ü": "é✓"}),
    # a body alone, and an already-present Signature/AccessKey being replaced
    (
        "admin_key",
        "admin_secret",
        34,
        json.dumps({"clientID": "c"}).encode(),
        {SIGNATURE: "stale", ACCESS_KEY: "other"},
    ),
]


def documented(ext: dict[str, str], body: bytes, secret: str) -> str:
    """RocketMQ's algorithm, written out independently of protocol/acl.py."""
    text = ""
    for key in sorted(k for k in ext if k != "Signature"):  # names here are BMP: same order
        text += ext[key]
    mac = hmac.new(secret.encode("utf-8"), text.encode("utf-8") + body, hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"code{c[2]}")
def test_signature_matches_the_documented_algorithm(case: tuple) -> None:
    ak, sk, _code, body, ext = case
    signed = sign_ext_fields(ext, body, ak, sk)
    assert signed[ACCESS_KEY] == ak and SIGNATURE in signed
    assert ext.get(SIGNATURE) != signed[SIGNATURE]  # the caller's dict is untouched
    assert signed[SIGNATURE] == documented(signed, body, sk)


def test_known_vector_from_rocketmq() -> None:
    """Printed by RocketMQ 4.9.8's AclClientRPCHook (its jars) for this request."""
    signed = sign_ext_fields(
        {"b": "TopicA", "a": "PG", "e": "0", "ü": "é✓"}, b"hello", "RocketMQ", "12345678"
    )
    assert signed[SIGNATURE] == "0f+BJqZeWgpOdcr3O5yBP6OeCJU="


def test_every_value_and_the_body_count() -> None:
    base = sign_ext_fields({"topic": "T"}, b"x", "RocketMQ", "12345678")[SIGNATURE]
    assert sign_ext_fields({"topic": "U"}, b"x", "RocketMQ", "12345678")[SIGNATURE] != base
    assert sign_ext_fields({"topic": "T"}, b"y", "RocketMQ", "12345678")[SIGNATURE] != base
    assert sign_ext_fields({"topic": "T"}, b"x", "RocketMQ", "12345679")[SIGNATURE] != base
    # values are concatenated without separators: moving a character between two adjacent
    # values keeps the content (a property of RocketMQ's scheme, kept for compatibility)
    assert request_content({"a": "xy", "b": "z"}, b"") == request_content(
        {"a": "x", "b": "yz"}, b""
    )


def test_server_side_content_also_accepts_the_unique_key_query_flag() -> None:
    ext = {"topic": "T", "key": "k", UNIQUE_MSG_QUERY_FLAG: "true"}
    signed = sign_ext_fields(ext, b"", "RocketMQ", "12345678")  # a Java client signs it
    variants = content_variants(signed, b"")
    assert len(variants) == 2
    assert calc_signature(variants[1], "12345678") == signed[SIGNATURE]
    # RocketMQ's server form leaves the flag out
    assert variants[0] == request_content(
        {k: v for k, v in signed.items() if k != UNIQUE_MSG_QUERY_FLAG}, b""
    )


@pytest.mark.slow  # javac and a JVM
@pytest.mark.skipif(java_missing() is not None, reason=f"RocketMQ oracle: {java_missing()}")
def test_signatures_equal_rocketmq_aclclientrpchook(tmp_path: Path) -> None:
    expected = java_signatures(CASES, tmp_path)
    ours = [sign_ext_fields(ext, body, ak, sk)[SIGNATURE] for ak, sk, _c, body, ext in CASES]
    assert ours == expected


def _captured(client: str) -> list:
    index = json.loads((FIXTURES / client / "index.json").read_text())
    return [
        decode_frame(bytes.fromhex((FIXTURES / client / e["file"]).read_text().strip()))
        for e in index
    ]


@pytest.mark.parametrize("client", ["cpp-client-2.1.0", "cpp-client-1.x"])
def test_captured_cpp_client_signatures_verify(client: str) -> None:
    """The C++ clients sign every request, with an empty secret when given none; their
    JSON numbers arrive as strings, as the server sees them, and still verify."""
    cmds = [c for c in _captured(client) if SIGNATURE in c.ext_fields]
    assert len(cmds) >= 10
    for cmd in cmds:
        assert cmd.ext_fields[ACCESS_KEY] == ""
        expected = documented(cmd.ext_fields, cmd.body, "")
        assert cmd.ext_fields[SIGNATURE] == expected, cmd.code
        assert calc_signature(content_variants(cmd.ext_fields, cmd.body)[0], "") == expected


def test_captured_alions_frames_are_unsigned_without_credentials() -> None:
    assert all(SIGNATURE not in c.ext_fields for c in _captured("ali-ons-3.12.0"))
