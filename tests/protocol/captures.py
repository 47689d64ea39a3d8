"""Helpers over the real-client captures in tests/fixtures/real-client-frames.

Expectations come from each folder's index.json (written by the capture tool), never
from the codec under test. Also owns the frame-test data shared by test_codec.py and
test_frame_reader.py: hand-built frames (``hand_frame``), binary-header cases (``BINARY_CASES``,
``bin_cmd``) and the index comparison (``assert_matches_index``).
"""

from __future__ import annotations

import json
import struct
from functools import cache
from typing import Any

import pytest
from kairosmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand

from tests.helpers import FIXTURES

REQUEST_CLIENTS = ("ali-ons-3.12.0", "cpp-client-1.x", "cpp-client-2.1.0")
MOCK_REPLIES = "mock-replies-accepted"


@cache
def index(folder: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads((FIXTURES / folder / "index.json").read_text()))


def frame_bytes(folder: str, file: str) -> bytes:
    return bytes.fromhex((FIXTURES / folder / file).read_text().strip())


def request_entries() -> list[tuple[str, dict[str, Any]]]:
    return [(c, e) for c in REQUEST_CLIENTS for e in index(c)]


def entries_with_code(code: int) -> list[tuple[str, dict[str, Any]]]:
    return [(c, e) for c, e in request_entries() if e["code"] == code]


def entry(folder: str, file: str) -> dict[str, Any]:
    return next(e for e in index(folder) if e["file"] == file)


def java_to_string(value: Any) -> str:
    """What Java's toString gives for a JSON scalar (as RocketMQ's decoder stores it)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if isinstance(value, str) else repr(value)


def expected_ext(header: dict[str, Any]) -> dict[str, str]:
    return {
        k: java_to_string(v) for k, v in (header.get("extFields") or {}).items() if v is not None
    }


REQUESTS = request_entries()  # (client folder, index entry) for every request capture


MOCKS = list(index(MOCK_REPLIES))


def hand_frame(word_type: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame built by hand: length, (type << 24 | header length), header, body."""
    return struct.pack(">II", 4 + len(header) + len(body), (word_type << 24) | len(header)) + (
        header + body
    )


def assert_matches_index(cmd: RemotingCommand, e: dict[str, Any]) -> None:
    h = e["header"]
    assert cmd.code == h["code"]
    assert cmd.opaque == h["opaque"]
    assert cmd.flag == h["flag"]
    assert cmd.language is LanguageCode[h["language"]]
    assert cmd.version == h["version"]
    assert cmd.remark == h.get("remark")
    assert cmd.ext_fields == expected_ext(h)
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert cmd.serialize_type is SerializeType.JSON
    assert len(cmd.body) == e["body_length"]


BINARY_CASES = [
    pytest.param(
        RequestCode.SEND_MESSAGE_V2,
        LanguageCode.JAVA,
        409,
        1,
        0,
        None,
        {"a": "PG", "b": "TopicTest", "e": "0"},
        b"hello",
        id="send",
    ),
    pytest.param(0, LanguageCode.CPP, 333, 2**31 - 1, 1, "ok", {}, b"", id="empty-ext"),
    pytest.param(
        ResponseCode.SYSTEM_ERROR,
        LanguageCode.PYTHON,
        -1,
        -5,
        3,
        "h\u00e9llo \u2713 \u4e2d",
        {"\u952e": "\u503c\U0001f600", "k": ""},
        b"\x00\xff",
        id="unicode-negative",
    ),
    pytest.param(
        RequestCode.HEART_BEAT, LanguageCode.RUST, 121, 0, 2, None, {}, b"{}", id="oneway-no-remark"
    ),
    pytest.param(
        32767,
        LanguageCode.NODE_JS,
        32767,
        -(2**31),
        0,
        "x" * 300,
        {f"k{i}": "v" * i for i in range(20)},
        b"b" * 1000,
        id="limits-many-fields",
    ),
]


BINARY_ARGS = ("code", "lang", "version", "opaque", "flag", "remark", "ext", "body")


def bin_cmd(
    code: int,
    lang: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
) -> RemotingCommand:
    return RemotingCommand(
        code=int(code),
        opaque=opaque,
        flag=flag,
        language=lang,
        version=version,
        remark=remark,
        ext_fields=dict(ext),
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )
