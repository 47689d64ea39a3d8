"""The native codec (protocol/_codec.pyx) against the reference (codec.py, whose frame
envelope and binary headers are parsed by the construct declarations in schema.py).

Same input, same outcome: the same ``RemotingCommand`` (every field, types included) or
the same exception class and message, the same encoded bytes, the same frames out of a
``FrameReader`` fed in the same chunks and the same bytes left buffered. Inputs: generated
commands in both header encodings, arbitrary and mutated frames, JSON headers of any
field types, and every captured stock-client frame in tests/fixtures.
"""

from __future__ import annotations

import dataclasses
import struct

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import codec
from kairosmq.protocol.codes import SerializeType
from kairosmq.protocol.commands import RemotingCommand, request

from tests.helpers import FIXTURES
from tests.twins import outcome, twin

ref = codec.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ALL_FRAMES = sorted(FIXTURES.rglob("*.hex"))


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("protocol.codec")


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    assert a == b
    if a[0] == "ok" and isinstance(a[1], RemotingCommand):  # types too, not only ==
        for f in dataclasses.fields(RemotingCommand):
            va, vb = getattr(a[1], f.name), getattr(b[1], f.name)
            assert type(va) is type(vb), f.name


text = st.text(max_size=16)
commands = st.builds(
    lambda code, opaque, flag, lang, version, ext, body, binary, remark: dataclasses.replace(
        request(code, ext, body, opaque=opaque),
        flag=flag,
        language=lang,
        version=version,
        remark=remark,
        serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
    ),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 3),
    st.sampled_from(list(codec.LanguageCode)),
    st.integers(-(2**15), 2**15 - 1),
    st.dictionaries(st.text(min_size=1, max_size=8), text, max_size=5),
    st.binary(max_size=64),
    st.booleans(),
    st.none() | text,
)


@PARITY
@given(commands)
def test_encode_and_decode_generated_commands(nat, cmd: RemotingCommand) -> None:  # type: ignore[no-untyped-def]
    frame = ref.encode_command(cmd)
    assert nat.encode_command(cmd) == frame
    _same(outcome(nat.decode_frame, frame), outcome(ref.decode_frame, frame))
    _same(outcome(nat.decode_payload, frame[4:]), outcome(ref.decode_payload, frame[4:]))
    buf = bytearray(b"xx" + frame + b"yy")  # a frame inside a buffer, as FrameReader reads
    _same(
        outcome(nat.decode_payload, buf, 6, 2 + len(frame)),
        outcome(ref.decode_payload, buf, 6, 2 + len(frame)),
    )


@PARITY
@given(
    st.integers(-(2**33), 2**33),
    st.integers(-(2**33), 2**33),
    st.integers(-(2**33), 2**33),
)
def test_encode_refuses_what_the_reference_refuses(
    nat, code: int, opaque: int, version: int
) -> None:  # type: ignore[no-untyped-def]
    for stype in SerializeType:
        cmd = dataclasses.replace(
            request(code, {"k": "v"}), opaque=opaque, version=version, serialize_type=stype
        )
        a, b = outcome(nat.encode_command, cmd), outcome(ref.encode_command, cmd)
        assert a[:2] == b[:2]  # same bytes, or the same exception class (struct.error)


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, val in edits:
        if buf:
            buf[pos % len(buf)] = val
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    return bytes(buf)


@PARITY
@given(
    commands,
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
    st.none() | st.integers(0, 400),
)
@example(
    request(10, {"k": "v"}, serialize_type=SerializeType.ROCKETMQ), [(13 + 8 + 2, 0xFF)], None
)  # a key that is not UTF-8
def test_decode_mutated_frames(nat, cmd, edits, cut) -> None:  # type: ignore[no-untyped-def]
    payload = _mutate(ref.encode_command(cmd)[4:], [(4 + p, v) for p, v in edits], cut)
    _same(outcome(nat.decode_payload, payload), outcome(ref.decode_payload, payload))


@PARITY
@given(st.binary(max_size=200))
def test_decode_any_bytes(nat, data: bytes) -> None:  # type: ignore[no-untyped-def]
    _same(outcome(nat.decode_frame, data), outcome(ref.decode_frame, data))
    _same(outcome(nat.decode_payload, data), outcome(ref.decode_payload, data))
    binary = struct.pack(">I", (1 << 24) | len(data)) + data
    _same(outcome(nat.decode_payload, binary), outcome(ref.decode_payload, binary))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.from_regex(r"-?[0-9]{1,12}", fullmatch=True),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
header_dicts = st.fixed_dictionaries(
    {},
    optional={
        k: json_values
        for k in ("code", "opaque", "flag", "version", "language", "remark", "extFields")
    },
)


@PARITY
@given(header_dicts | json_values, st.binary(max_size=8))
@example({"code": "12", "opaque": "-7", "extFields": {"a": 1, "b": True, "c": None}}, b"")
@example({"code": 10, "opaque": 1 << 63}, b"")
def test_decode_json_headers_of_any_field_types(nat, h, body: bytes) -> None:  # type: ignore[no-untyped-def]
    header = orjson.dumps(h)
    payload = struct.pack(">I", len(header)) + header + body
    _same(outcome(nat.decode_payload, payload), outcome(ref.decode_payload, payload))


def _read_all(reader_cls, data: bytes, cuts: list[int], **kw) -> list[object]:  # type: ignore[no-untyped-def]
    """Every frame (or the error) out of a reader fed in chunks, with what it holds."""
    reader, out, pos = reader_cls(**kw), [], 0
    for n in [*cuts, len(data)]:
        reader.feed(data[pos : pos + n])
        pos += n
        try:
            out.extend(reader)
        except Exception as err:  # noqa: BLE001 - compared
            out.append((type(err), str(err), reader.buffered))
            break
        out.append(reader.buffered)
    return out


@PARITY
@given(
    st.lists(commands, min_size=1, max_size=4),
    st.lists(st.integers(1, 50), max_size=12),
    st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), max_size=3),
    st.sampled_from([{}, {"max_frame": 200}, {"max_header": 40}]),
)
def test_frame_reader_any_chunking(nat, cmds, cuts, edits, limits) -> None:  # type: ignore[no-untyped-def]
    data = _mutate(b"".join(ref.encode_command(c) for c in cmds), edits, None)
    assert _read_all(nat.FrameReader, data, cuts, **limits) == _read_all(
        ref.FrameReader, data, cuts, **limits
    )


def test_frame_reader_stopped_early_keeps_the_rest(nat) -> None:  # type: ignore[no-untyped-def]
    frames = b"".join(ref.encode_command(request(i, {"i": str(i)})) for i in range(5))
    for cls in (nat.FrameReader, ref.FrameReader):
        reader = cls()
        reader.feed(frames)
        it = iter(reader)
        assert [next(it).code, next(it).code] == [0, 1]
        it.close()
        assert reader.buffered == len(frames) * 3 // 5
        assert [c.code for c in reader] == [2, 3, 4]
        assert reader.buffered == 0


def test_frame_reader_gathers_a_large_frame_in_parts(nat) -> None:  # type: ignore[no-untyped-def]
    big = ref.encode_command(request(10, {"k": "v"}, bytes(3 * codec.LARGE_FRAME)))
    for cls in (nat.FrameReader, ref.FrameReader):
        reader, got = cls(), []
        for i in range(0, len(big), 10_000):
            reader.feed(big[i : i + 10_000])
            assert reader.buffered == min(i + 10_000, len(big))
            got.extend(reader)
        assert len(got) == 1 and got[0].body == bytes(3 * codec.LARGE_FRAME)
        assert reader.buffered == 0


@pytest.mark.parametrize(
    "path", ALL_FRAMES, ids=[p.relative_to(FIXTURES).as_posix() for p in ALL_FRAMES]
)
def test_every_captured_stock_client_frame(nat, path) -> None:  # type: ignore[no-untyped-def]
    frame = bytes.fromhex(path.read_text().strip())
    a, b = outcome(nat.decode_frame, frame), outcome(ref.decode_frame, frame)
    _same(a, b)
    if a[0] == "ok":
        cmd = a[1]
        assert nat.encode_command(cmd) == ref.encode_command(cmd)
        answer = cmd.response(remark="ok", ext_fields={"queueId": "1"})
        assert nat.encode_command(answer) == ref.encode_command(answer)


def test_captured_frames_through_both_readers(nat) -> None:  # type: ignore[no-untyped-def]
    data = b"".join(
        f for p in ALL_FRAMES if (f := bytes.fromhex(p.read_text().strip()))[4:5] == b"\0"
    )
    assert len(data) > 10_000
    for cuts in ([], [1] * 50, [7, 1000, 3, 5000]):
        assert _read_all(nat.FrameReader, data, cuts) == _read_all(ref.FrameReader, data, cuts)
