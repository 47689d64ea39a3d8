"""Frame codec: golden captures from real clients, binary-header parity with the construct
schema, and every malformed-input error path (the FrameReader: test_frame_reader.py).

Expectations are taken from the captures' index.json, from construct parsing of
``schema`` declarations, or from bytes written out by hand, never from the codec itself.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kairosmq.protocol import codec, schema
from kairosmq.protocol.codec import (
    FrameReader,
    decode_frame,
    decode_payload,
    encode_command,
)
from kairosmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.errors import (
    FrameTooLarge,
    HeaderError,
    MalformedFrame,
    MessageDecodeError,
    ProtocolError,
)
from kairosmq.protocol.headers import PullMessageResponseHeader, SendMessageResponseHeader

from .captures import (
    BINARY_ARGS,
    BINARY_CASES,
    MOCK_REPLIES,
    MOCKS,
    REQUESTS,
    assert_matches_index,
    bin_cmd,
    frame_bytes,
    hand_frame,
)

REQUEST_IDS = [f"{c}/{e['file']}" for c, e in REQUESTS]


# ---------------------------------------------------------------- captured requests


@pytest.mark.parametrize(("client", "e"), REQUESTS, ids=REQUEST_IDS)
def test_captured_request_decodes_to_indexed_header(client: str, e: dict[str, Any]) -> None:
    raw = frame_bytes(client, e["file"])
    assert len(raw) == e["total_length"] + 4
    cmd = decode_frame(raw)
    assert_matches_index(cmd, e)
    # construct's Frame declaration splits the same bytes independently
    parsed = schema.Frame.parse(raw)
    assert parsed.serialize_type == 0
    assert parsed.header == e["header_json_text"].encode()
    assert cmd.body == parsed.body
    if e["body"] is not None and "utf8" in e["body"]:
        assert cmd.body.decode() == e["body"]["utf8"]


@pytest.mark.parametrize(("client", "e"), REQUESTS, ids=REQUEST_IDS)
def test_captured_request_json_round_trip_is_identical(client: str, e: dict[str, Any]) -> None:
    cmd = decode_frame(frame_bytes(client, e["file"]))
    again = decode_frame(encode_command(cmd))
    assert again == cmd
    assert encode_command(again) == encode_command(cmd)


def test_captures_cover_numbers_and_booleans_in_ext_fields() -> None:
    # guard: the coercion tests above only mean something if the captures have such values
    kinds = {type(v) for _, e in REQUESTS for v in (e["header"].get("extFields") or {}).values()}
    assert {int, bool, str} <= kinds
    ons = decode_frame(frame_bytes("ali-ons-3.12.0", "flow-09-broker-310-SEND_MESSAGE_V2.hex"))
    assert ons.ext_fields["k"] == "false"  # JSON false -> Java Boolean.toString
    assert ons.ext_fields["d"] == "4"
    assert ons.ext_fields["g"] == "1795314771937"


@pytest.mark.parametrize("e", MOCKS, ids=[m["file"] for m in MOCKS])
def test_mock_replies_accepted_by_clients_decode(e: dict[str, Any]) -> None:
    raw = frame_bytes(MOCK_REPLIES, e["file"])
    cmd = decode_frame(raw)
    assert_matches_index(cmd, e)
    assert cmd.is_response
    assert decode_frame(encode_command(cmd)) == cmd


def test_grpc_folder_is_not_a_request_capture() -> None:
    assert all(c != "grpc-5.x-client" for c, _ in REQUESTS)


# ---------------------------------------------------------------- JSON we write


def _header_json_pairs(frame: bytes) -> list[tuple[str, Any]]:
    (hlen,) = struct.unpack_from(">I", frame, 4)
    assert hlen >> 24 == 0
    return json.loads(frame[8 : 8 + (hlen & 0xFFFFFF)], object_pairs_hook=list)


RESPONSES = [
    pytest.param(
        RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=7, language=LanguageCode.CPP).response(
            ext_fields=SendMessageResponseHeader(
                "7F00000100002A9F0000000000000000", 3, 42
            ).to_ext_fields()
        ),
        id="send-response",
    ),
    pytest.param(
        RemotingCommand(RequestCode.PULL_MESSAGE, opaque=8).response(
            ResponseCode.PULL_NOT_FOUND,
            remark="no new message",
            ext_fields=PullMessageResponseHeader(0, 5, 0, 5).to_ext_fields(),
        ),
        id="pull-response-with-remark",
    ),
    pytest.param(RemotingCommand(RequestCode.HEART_BEAT, opaque=2).response(), id="empty-ext"),
]


@pytest.mark.parametrize("resp", RESPONSES)
def test_json_responses_have_string_ext_values_and_java_key_order(resp: RemotingCommand) -> None:
    raw = encode_command(resp)
    pairs = _header_json_pairs(raw)
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)  # fastjson writes bean fields alphabetically
    assert len(keys) == len(set(keys))
    d = dict(pairs)
    assert d["flag"] == 1 and d["serializeTypeCurrentRPC"] == "JSON" and d["language"] == "JAVA"
    assert "remark" in d if resp.remark is not None else "remark" not in d
    for _, v in d.get("extFields", []):
        assert isinstance(v, str)
    # the C++ client reads only the JSON type byte 0 with a header-length word
    assert raw[4] == 0


def test_json_response_golden_bytes_both_directions() -> None:
    header = (
        b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"0",'
        b'"queueOffset":"0"},"flag":1,"language":"JAVA","opaque":2,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    golden = hand_frame(0, header)
    cmd = RemotingCommand(
        code=0,
        opaque=2,
        flag=1,
        version=409,
        ext_fields={
            "msgId": "7F00000100002A9F0000000000000000",
            "queueId": "0",
            "queueOffset": "0",
        },
    )
    assert encode_command(cmd) == golden
    assert decode_frame(golden) == cmd


def test_response_echoes_opaque_and_serialize_type() -> None:
    req = request(
        RequestCode.GET_MAX_OFFSET,
        {"topic": "T", "queueId": "0"},
        opaque=99,
        serialize_type=SerializeType.ROCKETMQ,
    )
    resp = req.response(ext_fields={"offset": "3"})
    assert (resp.opaque, resp.serialize_type, resp.flag) == (99, SerializeType.ROCKETMQ, 1)
    assert encode_command(resp)[4] == SerializeType.ROCKETMQ


# ---------------------------------------------------------------- binary (ROCKETMQ) header


@pytest.mark.parametrize(BINARY_ARGS, BINARY_CASES)
def test_binary_header_round_trip(
    code: int,
    lang: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
) -> None:
    cmd = bin_cmd(code, lang, version, opaque, flag, remark, ext, body)
    raw = encode_command(cmd)
    assert raw[4] == 1
    assert decode_frame(raw) == cmd


@pytest.mark.parametrize(BINARY_ARGS, BINARY_CASES)
def test_binary_encoder_agrees_with_schema(
    code: int,
    lang: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
) -> None:
    cmd = bin_cmd(code, lang, version, opaque, flag, remark, ext, body)
    raw = encode_command(cmd)
    frame = schema.Frame.parse(raw)
    assert frame.serialize_type == SerializeType.ROCKETMQ
    assert frame.body == body
    h = schema.BinaryHeader.parse(frame.header)
    assert (h.code, h.language, h.version, h.opaque, h.flag) == (
        int(code),
        int(lang),
        version,
        opaque,
        flag,
    )
    assert h.remark == (remark or "")
    assert [(f.key, f.value) for f in h.ext_fields] == list(ext.items())
    built = schema.BinaryHeader.build(
        dict(
            code=int(code),
            language=int(lang),
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark or "",
            ext_fields=[dict(key=k, value=v) for k, v in ext.items()],
        )
    )
    assert built == frame.header
    assert schema.Frame.build(dict(serialize_type=1, header=built, body=body)) == raw


@pytest.mark.parametrize(BINARY_ARGS, BINARY_CASES)
def test_binary_decoder_agrees_with_schema(
    code: int,
    lang: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
) -> None:
    header = schema.BinaryHeader.build(
        dict(
            code=int(code),
            language=int(lang),
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark or "",
            ext_fields=[dict(key=k, value=v) for k, v in ext.items()],
        )
    )
    raw = schema.Frame.build(dict(serialize_type=1, header=header, body=body))
    cmd = decode_frame(raw)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (
        int(code),
        lang,
        version,
        opaque,
        flag,
    )
    assert cmd.remark == (remark or None)  # Java: a zero-length string decodes as null
    assert cmd.ext_fields == ext
    assert cmd.body == body
    assert cmd.serialize_type is SerializeType.ROCKETMQ


def test_binary_empty_remark_encodes_as_length_zero_and_decodes_as_none() -> None:
    cmd = bin_cmd(10, LanguageCode.JAVA, 409, 1, 0, "", {}, b"")
    raw = encode_command(cmd)
    assert schema.BinaryHeader.parse(schema.Frame.parse(raw).header).remark == ""
    assert decode_frame(raw).remark is None


def test_binary_golden_vector_both_directions() -> None:
    header = bytes.fromhex(
        "000a"  # code 10
        "00"  # language JAVA
        "0199"  # version 409
        "00000001"  # opaque
        "00000000"  # flag
        "00000000"  # remark: length 0 = null
        "00000008"  # extFields block: 8 bytes
        "0001"
        "61"
        "00000001"
        "62"  # "a" -> "b"
    )
    golden = bytes.fromhex("000000210100001d") + header  # 4 + 29 header bytes, type 1
    cmd = RemotingCommand(
        code=10,
        opaque=1,
        flag=0,
        language=LanguageCode.JAVA,
        version=409,
        ext_fields={"a": "b"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_command(cmd) == golden
    assert decode_frame(golden) == cmd


# ---------------------------------------------------------------- malformed input


def _bad(raw: bytes, match: str, id: str) -> Any:  # noqa: A002 - mirrors pytest.param
    return pytest.param(raw, match, id=id)


# code 10, language 0, version 409, opaque 1, flag 0: the fixed 13 bytes of a binary header
_FIXED = "000a0001990000000100000000"
_NO_REMARK = "00000000"


def _bin(*hex_parts: str) -> bytes:
    return hand_frame(1, bytes.fromhex(_FIXED + "".join(hex_parts)))


def _json(header: bytes) -> bytes:
    return hand_frame(0, header)


MALFORMED = [
    _bad(
        struct.pack(">II", 4 + 10, 100) + b"x" * 10,
        "exceeds the frame",
        id="header-length-beyond-frame",
    ),
    _bad(hand_frame(2, b'{"code":1}'), "serialize type 2", id="unknown-serialize-type-2"),
    _bad(hand_frame(0x7F, b'{"code":1}'), "serialize type 127", id="unknown-serialize-type-127"),
    _bad(_json(b"{not json"), "does not parse", id="non-json-header"),
    _bad(_json(b"\xff\xfe{}"), "does not parse", id="non-utf8-header"),
    _bad(_json(b"[1,2,3]"), "not an object", id="json-array-header"),
    _bad(_json(b'"code"'), "not an object", id="json-string-header"),
    _bad(_json(b'{"code":1,"extFields":{"a":[1]}}'), "list is not a scalar", id="ext-value-list"),
    _bad(
        _json(b'{"code":1,"extFields":{"a":{"b":"c"}}}'),
        "dict is not a scalar",
        id="ext-value-object",
    ),
    _bad(
        _json(b'{"code":1,"extFields":["a"]}'),
        "extFields is not an object",
        id="ext-fields-not-object",
    ),
    _bad(_json(b'{"opaque":1}'), "'code'", id="missing-code"),
    _bad(_json(b'{"code":"ten"}'), "'code'", id="non-integer-code"),
    _bad(_json(b'{"code":true}'), "'code'", id="boolean-code"),
    # key length 5, only 2 key bytes in a 4-byte ext block
    _bad(
        _bin(_NO_REMARK, "00000004", "00056162"),
        "truncated extFields key$",
        id="binary-truncated-ext-key",
    ),
    # value length 10, only 1 value byte
    _bad(
        _bin(_NO_REMARK, "00000008", "0001610000000a62"),
        "truncated extFields value",
        id="binary-truncated-ext-value",
    ),
    _bad(
        _bin(_NO_REMARK, "00000001", "00"),
        "truncated extFields key length",
        id="binary-truncated-ext-key-length",
    ),
    _bad(
        _bin(_NO_REMARK, "00000009", "0001610000000162"),
        "does not match",
        id="binary-ext-block-longer-than-header",
    ),
    _bad(_bin("00000010", "6869", "00000000"), "remark length", id="binary-remark-beyond-header"),
    _bad(
        hand_frame(1, bytes.fromhex("000a000199000000010000")),
        "shorter than its fixed part",
        id="binary-too-short",
    ),
    _bad(_bin(_NO_REMARK, "00000008", "0001ff0000000162"), "not UTF-8", id="binary-key-not-utf8"),
]


@pytest.mark.parametrize(("raw", "match"), MALFORMED)
def test_malformed_frames_raise_malformed_frame(raw: bytes, match: str) -> None:
    with pytest.raises(MalformedFrame, match=match) as info:
        decode_frame(raw)
    assert info.value.close_connection
    reader = FrameReader()
    reader.feed(raw)
    with pytest.raises(MalformedFrame):
        list(reader)


@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_decode_frame_wrong_length_prefix(delta: int) -> None:
    raw = frame_bytes("ali-ons-3.12.0", "flow-02-broker-34-HEART_BEAT.hex")
    bad = (int.from_bytes(raw[:4], "big") + delta).to_bytes(4, "big") + raw[4:]
    with pytest.raises(MalformedFrame):
        decode_frame(bad)


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x00\x00"])
def test_decode_frame_shorter_than_prefix(raw: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_frame(raw)


@pytest.mark.parametrize("payload", [b"", b"\x00\x00", b"\x00\x00\x00"])
def test_decode_payload_without_header_word(payload: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_payload(payload)


def test_json_header_lenient_details() -> None:
    # null ext values are skipped; missing optional fields get defaults; floats stringify;
    # an unknown language name maps to OTHER; numeric strings are accepted for ints
    raw = hand_frame(0, b'{"code":"11","language":"COBOL","extFields":{"a":null,"b":1.5,"c":-7}}')
    cmd = decode_frame(raw)
    assert cmd.code == 11
    assert (cmd.opaque, cmd.flag, cmd.version, cmd.remark) == (0, 0, 0, None)
    assert cmd.language is LanguageCode.OTHER
    assert cmd.ext_fields == {"b": "1.5", "c": "-7"}
    ordinal = decode_frame(hand_frame(0, b'{"code":1,"language":1}'))
    assert ordinal.language is LanguageCode.CPP


def test_header_and_body_split_uses_header_length() -> None:
    header = b'{"code":34,"opaque":3}\n'  # C++ clients end the header with a newline
    cmd = decode_frame(hand_frame(0, header, b"BODY\n"))
    assert (cmd.code, cmd.opaque, cmd.body) == (34, 3, b"BODY\n")


# ---------------------------------------------------------------- errors


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        ProtocolError("boom")


@pytest.mark.parametrize(
    ("exc", "closes"),
    [
        (FrameTooLarge(10, 5), True),
        (MalformedFrame("x"), True),
        (HeaderError("x"), False),
        (MessageDecodeError("x"), False),
    ],
)
def test_error_subclasses_say_whether_to_close(exc: ProtocolError, closes: bool) -> None:
    assert isinstance(exc, ProtocolError)
    assert exc.close_connection is closes


def test_error_response_codes() -> None:
    assert HeaderError("x").response_code == ResponseCode.SYSTEM_ERROR
    assert HeaderError("x", ResponseCode.MESSAGE_ILLEGAL).response_code == 13
    assert MessageDecodeError("x").response_code == ResponseCode.MESSAGE_ILLEGAL


def test_codec_struct_twins_match_schema_sizes() -> None:
    # the hand-written fixed part of the binary header is the first five schema fields
    fixed = schema.BinaryHeader.build(
        dict(code=1, language=2, version=3, opaque=4, flag=5, remark="", ext_fields=[])
    )
    assert codec._BIN_FIXED.size == len(fixed) - 8
    assert codec._BIN_FIXED.pack(1, 2, 3, 4, 5) == fixed[:-8]


_JSON_SCALAR = st.one_of(
    st.text(max_size=8),
    st.integers(-(1 << 40), 1 << 40),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(
    ext=st.dictionaries(st.text(max_size=6), _JSON_SCALAR, max_size=6),
    lang=st.one_of(
        st.sampled_from(["JAVA", "CPP", "GO", "NOPE"]),
        st.integers(-3, 20),
        st.booleans(),
        st.none(),
    ),
)
def test_json_header_ext_values_and_language_as_java_reads_them(
    ext: dict[str, Any], lang: Any
) -> None:
    """The fast path (orjson's dict kept when every value is a string) and the coercing
    path read the same: strings as they are, numbers and booleans as Java's toString,
    nulls left out; a language as a name, an ordinal, or anything else as OTHER."""
    header = {"code": 310, "opaque": 4, "flag": 0, "version": 0, "language": lang, "extFields": ext}
    raw = json.dumps(header).encode()
    cmd = codec.decode_frame(struct.pack(">II", 4 + len(raw), len(raw)) + raw)

    def java(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    assert cmd.ext_fields == {k: java(v) for k, v in ext.items() if v is not None}
    by_name = {m.name: m for m in LanguageCode}
    by_value = {m.value: m for m in LanguageCode}
    want = (
        by_name.get(lang, LanguageCode.OTHER)
        if isinstance(lang, str)
        else by_value.get(lang, LanguageCode.OTHER)
        if isinstance(lang, int) and not isinstance(lang, bool)
        else by_name.get(str(lang), LanguageCode.OTHER)
    )
    assert cmd.language == want
