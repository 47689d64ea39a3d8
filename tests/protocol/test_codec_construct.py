"""construct at runtime: the frame envelope and the binary header are parsed by the
compiled ``schema`` declarations, after the lengths are validated.

Held to the interpreted spec (``schema.Frame``/``schema.BinaryHeader``, which detect
truncation themselves): for random headers both read the same fields; for every cut or
overwritten byte the runtime path refuses (``MalformedFrame``) whenever the spec refuses
(it also refuses bytes after the extFields block, which the spec ignores), so the
compiled parser's silent truncation never shows.
"""

from __future__ import annotations

import gc

import pytest
from construct import (
    Array,
    ConstructError,
    Int16ub,
    Int32ub,
    PascalString,
    Sequence,
    this,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kairosmq.protocol import codec, schema
from kairosmq.protocol.codes import LanguageCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MalformedFrame

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_i32 = st.integers(-(1 << 31), (1 << 31) - 1)
_i16 = st.integers(-(1 << 15), (1 << 15) - 1)


@st.composite
def _binary_frame(draw: st.DrawFn) -> bytes:
    header = schema.BinaryHeader.build(
        dict(
            code=draw(_i16),
            language=draw(st.integers(0, 255)),
            version=draw(_i16),
            opaque=draw(_i32),
            flag=draw(_i32),
            remark=draw(_text),
            ext_fields=[
                dict(key=k, value=v) for k, v in draw(st.lists(st.tuples(_text, _text), max_size=8))
            ],
        )
    )
    return schema.Frame.build(
        dict(serialize_type=1, header=header, body=draw(st.binary(max_size=64)))
    )


def _spec(frame: bytes) -> RemotingCommand:
    """The interpreted declarations' reading of a frame (the spec)."""
    f = schema.Frame.parse(frame)
    h = schema.BinaryHeader.parse(f.header)
    return RemotingCommand(
        code=h.code,
        opaque=h.opaque,
        flag=h.flag,
        language=LanguageCode(h.language)
        if h.language in LanguageCode._value2member_map_
        else LanguageCode.OTHER,
        version=h.version,
        remark=h.remark or None,
        ext_fields={e.key: e.value for e in h.ext_fields},
        body=f.body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _same(a: RemotingCommand, b: RemotingCommand) -> None:
    assert (
        a.code,
        a.opaque,
        a.flag,
        a.language,
        a.version,
        a.remark,
        a.ext_fields,
        a.body,
        a.serialize_type,
    ) == (
        b.code,
        b.opaque,
        b.flag,
        b.language,
        b.version,
        b.remark,
        b.ext_fields,
        b.body,
        b.serialize_type,
    )


@settings(max_examples=400, deadline=None)
@given(frame=_binary_frame())
def test_runtime_construct_reads_what_the_spec_reads(frame: bytes) -> None:
    _same(codec.decode_frame(frame), _spec(frame))
    h = schema.FramePayload.parse(frame[4:]).header
    counted = codec._BINARY_HEADER.parse(h, ext_count=codec._count_ext_fields(h))
    spec = schema.BinaryHeader.parse(h)
    assert [list(e) for e in counted.ext_fields] == [[e.key, e.value] for e in spec.ext_fields]


@settings(max_examples=300, deadline=None)
@given(
    frame=_binary_frame(),
    cut=st.integers(1, 200),
    at=st.integers(0, 400),
    junk=st.binary(min_size=1, max_size=3),
)
def test_damaged_headers_are_refused_as_the_spec_refuses(
    frame: bytes, cut: int, at: int, junk: bytes
) -> None:
    payload = frame[4:]
    hlen = int.from_bytes(payload[1:4], "big")
    header = payload[4 : 4 + hlen]
    damaged = [header[: max(0, len(header) - cut)]]
    if header:
        i = at % len(header)
        damaged.append(header[:i] + junk + header[i + len(junk) :])
    for h in damaged:
        raw = schema.Frame.build(dict(serialize_type=1, header=h, body=b"body"))
        try:
            expected: RemotingCommand | None = _spec(raw)
        except (ConstructError, UnicodeDecodeError):
            expected = None
        try:
            got = codec.decode_frame(raw)
        except MalformedFrame:
            continue  # stricter than the spec is fine (bytes after the extFields block)
        assert expected is not None, "the runtime parser accepted what the spec refuses"
        _same(got, expected)


def test_a_field_cut_short_is_not_silently_dropped() -> None:
    """The compiled GreedyRange alone would return the fields before a truncated one."""
    header = schema.BinaryHeader.build(
        dict(
            code=10,
            language=0,
            version=1,
            opaque=2,
            flag=0,
            remark="",
            ext_fields=[dict(key="a", value="1"), dict(key="b", value="2")],
        )
    )
    short = header[:-1]
    short = short[: 17 + 4 - 4] + (len(short) - 21).to_bytes(4, "big") + short[21:]
    raw = schema.Frame.build(dict(serialize_type=1, header=short, body=b""))
    with pytest.raises(MalformedFrame, match="truncated extFields"):
        codec.decode_frame(raw)


def test_envelope_runtime_parser_matches_the_spec() -> None:
    cmd = RemotingCommand(
        code=310, opaque=9, ext_fields={"topic": "T", "queueId": "1"}, body=b"x" * 100
    )
    frame = codec.encode_command(cmd)
    spec = schema.Frame.parse(frame)
    got = codec._FRAME_PAYLOAD.parse(frame[4:])
    assert (got.serialize_type, got.header, got.body) == (
        spec.serialize_type,
        spec.header,
        spec.body,
    )
    _same(codec.decode_frame(frame), cmd)


def test_pair_compiled_reads_and_writes_what_the_interpreted_form_does() -> None:
    """``schema.Pair`` (the binary header's inline (key, value) item) against itself
    interpreted, and against the ``Sequence`` it stands for."""
    pair = schema.Pair(PascalString(Int16ub, "utf8"), PascalString(Int32ub, "utf8"))
    seq = Sequence(PascalString(Int16ub, "utf8"), PascalString(Int32ub, "utf8"))
    raw = seq.build(["clé", "värde" * 3])
    assert pair.build(("clé", "värde" * 3)) == raw
    assert pair.parse(raw) == ("clé", "värde" * 3) == tuple(seq.parse(raw))
    many = Array(this._params.n, pair)
    data = raw * 3 + Int16ub.build(1) + b"k" + Int32ub.build(0)
    want = [("clé", "värde" * 3)] * 3 + [("k", "")]
    assert many.parse(data, n=4) == want
    assert many.compile().parse(data, n=4) == want
    with pytest.raises(ConstructError):  # interpreted: truncation is an error
        many.parse(data[:-1], n=4)


def test_runtime_parsing_leaves_no_frame_in_reference_cycles() -> None:
    """construct's default context is its own ``_root`` (a cycle holding the frame's bytes
    until the cyclic GC runs: +17 MB broker RSS under load); the codec calls the compiled
    parse functions with a context whose ``_root`` is None (and no ``_params`` cycle)."""
    cmd = RemotingCommand(
        code=310,
        opaque=1,
        ext_fields={f"k{i}": "v" * i for i in range(12)},
        body=b"x" * 1024,
        serialize_type=SerializeType.ROCKETMQ,
    )
    frame = codec.encode_command(cmd)
    body = cmd.body
    gc.disable()
    try:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection frees stays in gc.garbage
        for _ in range(200):
            codec.decode_frame(frame)
        gc.collect()
        # (other threads of the test process may leave garbage too: only the frames'
        # own bytes count, and none may be held by a cycle)
        held = [
            o
            for o in gc.garbage
            if isinstance(o, bytes | bytearray | memoryview) and bytes(o[:1024]) == body
        ]
        assert held == []
        # construct.parse() left its params cycle (2 objects) per parse; the direct
        # compiled call leaves none (fewer than one object per parse: slack for threads)
        assert len(gc.garbage) < 200
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
