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
from kairosmq.protocol.codes import RequestCode, SerializeType
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


@pytest.mark.twin_parity
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


# ---- the flat JSON header scanner (``_scan_json_header``) and the answer writer
# (``_frame_json``): JSON texts written every way JSON allows (and some ways it does not),
# decoded by both cores; commands of every kind of value encoded by both.

TOP_KEYS = (
    "code",
    "extFields",
    "flag",
    "language",
    "opaque",
    "remark",
    "serializeTypeCurrentRPC",
    "version",
)
JSON_WS = ["", "", " ", "\n", "\t", "\r", " \n "]
ODD_WS = ["\x0c", "\xa0", "\x00"]
SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
ODD_TEXT = ["\\x", "\\u12", "\\ud800", "\\udc00x", "\\uD83D\\u0041", "\x01", '"', "\\", "\ud800"]
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
GOOD_NUMBERS = st.integers(-(2**31), 2**31 - 1).map(str)
ODD_NUMBERS = st.integers(-(2**64), 2**64).map(str) | st.sampled_from(
    ["0", "-0", "00", "01", "-", "1.0", "1e2", "1E2", "-1.5e-3", "2147483648", "-2147483649",
     "9223372036854775807", "99999999999999999999", "+1", "0x1", "1_0"]
)  # fmt: skip


class Odd:
    """How odd a drawn JSON text may be: ``rate`` in 1000 of each choice is odd (0: a
    text the stock clients could send, in any JSON spelling)."""

    def __init__(self, draw, rate: int) -> None:  # type: ignore[no-untyped-def]
        self.draw, self.rate = draw, rate

    def odd(self) -> bool:
        return self.rate > 0 and self.draw(st.integers(0, 999)) < self.rate

    def ws(self) -> str:
        return self.draw(st.sampled_from(ODD_WS if self.odd() else JSON_WS))

    def number(self) -> str:
        return self.draw(ODD_NUMBERS if self.odd() else GOOD_NUMBERS)

    def string(self, of: st.SearchStrategy[str] = texts) -> str:
        """A JSON string literal of a drawn text: each character raw, escaped by its
        letter or as ``\\uXXXX`` (either case; astral ones as a surrogate pair)."""
        out = ['"']
        for ch in self.draw(of):
            cp = ord(ch)
            how = self.draw(st.integers(0, 9))
            if self.odd():
                out.append(self.draw(st.sampled_from(ODD_TEXT)))
            elif (how >= 6 or cp < 0x20 or ch in '"\\') and cp <= 0xFFFF:
                if ch in SHORT_ESCAPES and how % 2:
                    out.append(SHORT_ESCAPES[ch])
                else:
                    out.append(f"\\u{cp:04x}" if how % 3 else f"\\u{cp:04X}")
            elif cp > 0xFFFF and how >= 6:
                hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                out.append(f"\\u{hi:04x}\\u{lo:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def scalar(self) -> str:
        """An extFields value: a string mostly, a number or a boolean (the C++ client)."""
        kind = self.draw(st.integers(0, 9))
        if self.odd():
            return self.draw(
                st.sampled_from(["null", "[]", "{}", '["a"]', '{"a":"b"}', "tru", "1.5"])
            )
        if kind < 7:
            return self.string()
        return self.number() if kind < 9 else self.draw(st.sampled_from(["true", "false"]))

    def obj(self, entries: list[tuple[str, str]]) -> str:
        parts = [self.ws() + k + self.ws() + ":" + self.ws() + v + self.ws() for k, v in entries]
        return "{" + (",".join(parts) if parts else self.ws()) + "}"

    def ext_fields(self) -> str:
        keys = st.sampled_from(["a", "b", "topic", "queueId", "", "k\u00e9y"]) | texts
        n = self.draw(st.integers(0, 8))
        names = self.draw(st.lists(keys, min_size=n, max_size=n, unique=not self.odd()))
        return self.obj([(self.string(st.just(k)), self.scalar()) for k in names])

    def header(self) -> str:
        keys = list(self.draw(st.permutations(TOP_KEYS)))
        keys = [k for k in keys if k == "code" or self.draw(st.booleans())]
        if self.odd():
            keys.append(self.draw(st.sampled_from([*TOP_KEYS, "other", "Code"])))
        value = {
            "extFields": self.ext_fields,
            "language": lambda: self.string(st.sampled_from(["JAVA", "CPP", "GO", "x"])),
            "remark": self.string,
            "serializeTypeCurrentRPC": lambda: self.string(st.just("JSON")),
        }
        entries = []
        for k in keys:
            v = value[k]() if k in value else self.number()
            if self.odd():
                v = self.draw(st.sampled_from(["null", "true", "[]", '"12"', "{}", self.string()]))
            entries.append((self.string(st.just(k)) if self.odd() else f'"{k}"', v))
        tail = self.draw(st.sampled_from(["x", "}", ",", "\x00", "{}"])) if self.odd() else ""
        return self.ws() + self.obj(entries) + self.ws() + tail


@st.composite
def flat_headers(draw) -> bytes:  # type: ignore[no-untyped-def]
    """A header of a stock client's shape in any JSON spelling (half of them), or one
    with odd parts (a few in a thousand choices, or many)."""
    rate = draw(st.sampled_from([0, 0, 0, 5, 20, 100]))
    data = Odd(draw, rate).header().encode("utf-8", "surrogatepass")
    if rate and draw(st.integers(0, 9)) == 0:  # a byte that may not be UTF-8
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        data = data[:pos] + bytes([draw(st.integers(0x80, 0xFF))]) + data[pos + 1 :]
    return data


@pytest.mark.twin_parity
@settings(PARITY, max_examples=1500)
@given(flat_headers(), st.binary(max_size=4))
@example(b'{"code":10,"extFields":{"a":"1","a":"1"},"opaque":3}', b"")  # a key repeated
@example(b'{"code":10,"extFields":{"a":"1","a":1}}', b"")
@example(b'{"code":10,"extFields":{"a":true,"a":"true"}}', b"")
@example(b'{"code":10,"extFields":{"a":-0,"b":01}}', b"")
@example(b'{"code":10,"extFields":{"k":"\\ud83d\\ude00 \\u00e9\\n"}}', b"")
@example(b'{"code":2147483647,"opaque":-2147483648,"flag":0,"version":-0}', b"")
@example(b'{"code":10,"code":11}', b"")
@example(b'{"code":10,"language":"JAVA","remark":null}', b"")
@example(b'\xef\xbb\xbf{"code":10}', b"")
def test_flat_json_headers(nat, header: bytes, body: bytes) -> None:  # type: ignore[no-untyped-def]
    payload = struct.pack(">I", len(header)) + header + body
    _same(outcome(nat.decode_payload, payload), outcome(ref.decode_payload, payload))
    frame = struct.pack(">I", len(payload)) + payload
    for cuts in ([], [3, len(frame) // 2]):
        assert _read_all(nat.FrameReader, frame * 2, cuts) == _read_all(
            ref.FrameReader, frame * 2, cuts
        )


@PARITY
@given(st.data())
def test_flat_json_headers_of_captured_frames_mutated(nat, data) -> None:  # type: ignore[no-untyped-def]
    """Every captured JSON header, with bytes replaced, cut or repeated."""
    frames = [f for p in ALL_FRAMES if (f := bytes.fromhex(p.read_text().strip()))[4:5] == b"\0"]
    frame = data.draw(st.sampled_from(frames))
    hlen = struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF
    header = bytearray(frame[8 : 8 + hlen])
    for _ in range(data.draw(st.integers(0, 3))):
        pos = data.draw(st.integers(0, len(header) - 1))
        header[pos] = data.draw(st.sampled_from(b'{}[]",:\\ \n0-9aeE\x00\x80\xff'))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(header)))
        header = header[:cut] + header[cut - 1 if cut else 0 :]
    payload = struct.pack(">I", len(header)) + bytes(header) + frame[8 + hlen :]
    _same(outcome(nat.decode_payload, payload), outcome(ref.decode_payload, payload))


def test_answer_header_bytes_over_every_code_point(nat) -> None:  # type: ignore[no-untyped-def]
    """The writer escapes as orjson does: every code point (surrogates are refused by both,
    below) in extFields keys and values and in the remark, the same frame bytes."""
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(chars), 4096):
        s = "".join(chars[i : i + 4096])
        cmd = dataclasses.replace(request(10, {s[:50]: s, "k": s[::-1]}), remark=s)
        assert nat.encode_command(cmd) == ref.encode_command(cmd)
    for s in ["\ud800", "a\udfffb"]:
        remarked = dataclasses.replace(request(10), remark=s)
        for cmd in (request(10, {"k": s}), request(10, {s: "v"}), remarked):
            _same(outcome(nat.encode_command, cmd), outcome(ref.encode_command, cmd))


@PARITY
@given(
    st.sampled_from(
        list(RequestCode)[:5]
        + [True, False, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 1.0, "1", None]
    ),  # fmt: skip
    st.sampled_from(["opaque", "code", "flag", "version"]),
    st.sampled_from(
        [b"", b"body", bytearray(b"ba"), memoryview(b"xyz"), memoryview(b"abcd")[::2]]
    ),  # fmt: skip
    st.sampled_from([None, "", "r", 5]),
    st.sampled_from([{}, {"k": "v"}, {"k": 1}, {1: "v"}, {"k": None}]),
)
def test_answer_header_of_any_value_types(nat, value, field, body, remark, ext) -> None:  # type: ignore[no-untyped-def]
    cmd = dataclasses.replace(request(10, dict(ext), body), remark=remark, **{field: value})
    a, b = outcome(nat.encode_command, cmd), outcome(ref.encode_command, cmd)
    assert a[:2] == b[:2]
    for lang in codec.LanguageCode:
        cmd = dataclasses.replace(request(10, {"k": "v"}), language=lang)
        assert nat.encode_command(cmd) == ref.encode_command(cmd)


def _script(reader_cls, data: bytes, ops: list[tuple[str, int]]) -> list[object]:  # type: ignore[no-untyped-def]
    """``ops`` run on a reader: feeds (bytes or bytearray chunks of ``data``) while a pass
    is open or not, steps of the open pass, a second pass, close, clear, a pass dropped
    unclosed; what each gives, with ``buffered`` after it."""
    reader, out, pos, passes = reader_cls(max_frame=1 << 20), [], 0, []
    for op, n in ops:
        try:
            if op in ("feed", "feed_array"):
                chunk = data[pos : pos + n]
                pos += n
                reader.feed(chunk if op == "feed" else bytearray(chunk))
            elif op == "open":
                passes.append(iter(reader))
            elif op == "next" and passes:
                cmd = next(passes[-1], None)
                out.append(None if cmd is None else (cmd.code, cmd.opaque, cmd.body))
            elif op == "close" and passes:
                passes.pop().close()
            elif op == "drop" and passes:
                del passes[-1]  # never closed: its frames leave when it is released
            elif op == "clear":
                reader.clear()
        except Exception as err:  # noqa: BLE001 - compared
            out.append((type(err), str(err)))
        out.append(reader.buffered)
    for p in passes:
        p.close()
    try:
        out.append([(c.code, c.opaque) for c in reader])
    except Exception as err:  # noqa: BLE001 - compared
        out.append((type(err), str(err)))
    out.append(reader.buffered)
    return out


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["feed", "feed", "feed_array", "open", "next", "next", "next", "close", "drop", "clear"]
        ),
        st.integers(1, 300),
    ),
    max_size=30,
)


@PARITY
@given(st.lists(commands, min_size=1, max_size=6), OPS)
def test_frame_reader_held_reads_any_order(nat, cmds, ops) -> None:  # type: ignore[no-untyped-def]
    """A read held as received (the twin's): fed again while a pass reads it, cleared
    under an open pass, read by a second pass, dropped unclosed: the reference's frames,
    errors and ``buffered`` at every step."""
    data = b"".join(ref.encode_command(c) for c in cmds)
    assert _script(nat.FrameReader, data, ops) == _script(ref.FrameReader, data, ops)


def test_frame_reader_held_reads_cases(nat) -> None:  # type: ignore[no-untyped-def]
    """The held read's cases one by one (sizes in whole frames): a read fed while a pass
    reads the held one, a pass left with a partial frame, a reader cleared under an open
    pass, a pass dropped unclosed, a second pass opened over it."""
    frames = [ref.encode_command(request(i, {"i": str(i) * i})) for i in range(1, 5)]
    data = b"".join(frames)
    n1, n2, n3 = (len(f) for f in frames[:3])
    cases = [
        [("feed", n1 + n2), ("open", 0), ("next", 0), ("feed", n3), ("next", 0), ("next", 0)],
        [("feed", n1 + n2), ("open", 0), ("next", 0), ("feed", 5), ("close", 0), ("feed", n3)],
        [("feed", n1 + 9), ("open", 0), ("next", 0), ("next", 0), ("feed", n2 - 9)],
        [("feed", n1 + n2), ("open", 0), ("next", 0), ("clear", 0), ("next", 0), ("feed", n3)],
        [("feed", n1 + n2), ("open", 0), ("next", 0), ("drop", 0), ("feed", n3)],
        [("feed", n1 + n2), ("open", 0), ("next", 0), ("open", 0), ("next", 0), ("close", 0)],
        [("feed", n1), ("open", 0), ("clear", 0), ("next", 0), ("feed", n2), ("next", 0)],
        [("feed", n1), ("open", 0), ("feed_array", n2), ("next", 0), ("next", 0)],
    ]
    for ops in cases:
        assert _script(nat.FrameReader, data, ops) == _script(ref.FrameReader, data, ops), ops
