"""Frame codec: RemotingCommand <-> bytes, and an incremental FrameReader.

Owns: the remoting frame (4-byte length, serialize-type byte + 3-byte header length,
header, body), both header encodings (JSON and ROCKETMQ binary) and the stream reader.

Invariants:
* ``FrameReader`` rejects a declared length above ``max_frame`` as soon as the 4-byte
  prefix is visible, before buffering the rest (RocketMQ's 16 MiB NettyDecoder limit).
* ``FrameReader.buffered`` is every byte it holds; a checked partial frame of
  ``LARGE_FRAME`` (1 MiB) or more is held as a list of parts and joined once complete
  (the broker's budget of unfinished frames counts ``buffered``: server/remoting/transport.py).
* Every length inside a frame is checked against the bytes present before it is used;
  a violation raises ``MalformedFrame`` (close the connection), never IndexError.
* ``code``/``opaque``/``flag``/``version`` are Java ``int``s: a JSON number or ASCII
  decimal string outside the int32 range is ``MalformedFrame`` (as Java's decoder fails).
* JSON ext-field values of any JSON scalar type come out as strings (``true``/``false``
  for booleans, as Java's toString); JSON we write always has string values, because
  the C++ client drops non-string fields.
* construct at runtime: every frame's envelope is parsed by ``schema.FramePayload`` and
  every ROCKETMQ binary header by ``schema.BinaryHeaderCounted``, both compiled once.
  Lengths are validated first (the header length against the frame; the remark, the
  extFields block and each key and value against the header) and counted, because the
  compiled parsers do not detect truncation; only then does construct parse. A parser
  error after validation (bad UTF-8) is ``MalformedFrame`` too. The codec calls the
  compiled parse functions directly (``Compiled.parsefunc``, with one small context dict)
  instead of ``parse()``'s wrapper chain, and reads the results by key: the same
  generated code, without four calls and a context Container per frame. Measured cost:
  docs/performance.md ("construct at runtime").
* This module is the reference core. Its native twin ``_codec.pyx`` (the same rules over
  C pointers, without construct; the stock clients' flat JSON header scanned without
  orjson, a plain JSON answer written without it) replaces the public functions and
  ``FrameReader`` when ``native.py`` chooses it; ``reference`` keeps the pure ones, and
  tests/protocol/test_native_codec.py holds the twin to them (generated and captured
  frames, JSON headers in every spelling, every code point written), so the construct
  declarations and orjson stay the grammar the twin is proven against.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Generator
from types import ModuleType, SimpleNamespace

import orjson
from construct import ConstructError

from . import native, schema
from .codes import LanguageCode, SerializeType
from .commands import RemotingCommand
from .errors import FrameTooLarge, MalformedFrame, shown

MAX_FRAME_LENGTH = 16 * 1024 * 1024

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">II")
_BIN_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">H")
_LANG_BY_NAME = {m.name: m for m in LanguageCode}
_LANG_VALUES = {m.value: m for m in LanguageCode}
# compiled once; parse only validated bytes (see the module invariants). Every parse's
# context has ``_root`` None: by default each construct context is its own ``_root``, a
# reference cycle holding the parsed bytes (the whole frame) until the cyclic GC runs -
# measured +17 MB broker RSS at 500 msgs/s. No declaration in schema.py reads ``_root``.
_FRAME_PAYLOAD = schema.FramePayload.compile()
_BINARY_HEADER = schema.BinaryHeaderCounted.compile()
# The generated functions themselves, ``parsefunc(stream, context)``: ``context`` needs
# ``_params`` (the parse's parameters) and ``_root`` (None: no cycle, see above). The
# envelope takes no parameters, so one read-only context serves every frame.
_PARSE_PAYLOAD = _FRAME_PAYLOAD.parsefunc
_PARSE_BINARY_HEADER = _BINARY_HEADER.parsefunc
_PAYLOAD_CONTEXT: dict[str, object] = {"_params": {}, "_root": None}
# the in-memory stream the generated code reads (its own ``restream`` uses it); taken
# from there so that this module imports no I/O module (tests/protocol/test_sans_io.py)
BytesIO = _PARSE_PAYLOAD.__globals__["BytesIO"]


# ---------------------------------------------------------------- encoding


def _json_header(cmd: RemotingCommand) -> bytes:
    # fastjson order (alphabetical), nulls left out, like the Java broker.
    h: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        h["extFields"] = cmd.ext_fields
    h["flag"] = cmd.flag
    h["language"] = cmd.language.name
    h["opaque"] = cmd.opaque
    if cmd.remark is not None:
        h["remark"] = cmd.remark
    h["serializeTypeCurrentRPC"] = "JSON"
    h["version"] = cmd.version
    return orjson.dumps(h)


def _binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [b""]
    for k, v in cmd.ext_fields.items():
        kb, vb = k.encode(), v.encode()
        parts.append(len(kb).to_bytes(2, "big") + kb + len(vb).to_bytes(4, "big") + vb)
    ext = b"".join(parts)
    return b"".join(
        (
            _BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag),
            len(remark).to_bytes(4, "big"),
            remark,
            len(ext).to_bytes(4, "big"),
            ext,
        )
    )


def encode_command(cmd: RemotingCommand) -> bytes:
    """Encode one command as a complete frame, length prefix included."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _binary_header(cmd)
    else:
        header = _json_header(cmd)
    hlen = len(header)
    return b"".join(
        (
            _PREFIX.pack(4 + hlen + len(cmd.body), (int(cmd.serialize_type) << 24) | hlen),
            header,
            cmd.body,
        )
    )


# ---------------------------------------------------------------- decoding


def _coerce(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise MalformedFrame(f"extFields value of type {type(value).__name__} is not a scalar")


_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_JUST_STR = frozenset((str,))
_ASCII_INT = re.compile(r"-?[0-9]{1,10}")


def _int_field(h: dict[str, object], name: str, default: int | None = None) -> int:
    """code/opaque/flag/version: Java ``int`` fields, as a JSON number or a decimal string."""
    v = h.get(name, default)
    if type(v) is str and _ASCII_INT.fullmatch(v):
        v = int(v)
    if type(v) is not int or not _I32_MIN <= v <= _I32_MAX:
        raise MalformedFrame(f"header field {name!r} must be a 32-bit integer, got {shown(v, 40)}")
    return v


def _decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    try:
        h = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise MalformedFrame(f"JSON header does not parse: {err}") from err
    if not isinstance(h, dict):
        raise MalformedFrame("JSON header is not an object")
    fields = h.get("extFields") or {}
    if type(fields) is not dict:  # orjson makes plain dicts only
        raise MalformedFrame("extFields is not an object")
    if not set(map(type, fields.values())) <= _JUST_STR:  # the usual case keeps orjson's dict
        fields = {
            k: v if type(v) is str else _coerce(v) for k, v in fields.items() if v is not None
        }
    lang = h.get("language", "JAVA")
    if type(lang) is str:
        language = _LANG_BY_NAME.get(lang, LanguageCode.OTHER)
    elif isinstance(lang, int) and not isinstance(lang, bool):
        language = _LANG_VALUES.get(lang, LanguageCode.OTHER)
    else:
        language = _LANG_BY_NAME.get(str(lang), LanguageCode.OTHER)
    remark = h.get("remark")
    code, opaque, flag, version = (
        h.get("code"),
        h.get("opaque", 0),
        h.get("flag", 0),
        h.get("version", 0),
    )
    if not (
        type(code) is int
        and type(opaque) is int
        and type(flag) is int
        and type(version) is int
        and _I32_MIN <= opaque <= _I32_MAX
        and _I32_MIN <= code <= _I32_MAX
        and _I32_MIN <= flag <= _I32_MAX
        and _I32_MIN <= version <= _I32_MAX
    ):  # the common case skips four calls
        code, opaque = _int_field(h, "code"), _int_field(h, "opaque", 0)
        flag, version = _int_field(h, "flag", 0), _int_field(h, "version", 0)
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=language,
        version=version,
        remark=None if remark is None else str(remark),
        ext_fields=fields,
        body=body,
        serialize_type=SerializeType.JSON,
    )


def _count_ext_fields(raw: bytes) -> int:
    """Validate every length of a binary header; return its number of extFields."""
    n = len(raw)
    if n < _BIN_FIXED.size + 8:
        raise MalformedFrame(f"binary header of {n} bytes is shorter than its fixed part")
    pos = _BIN_FIXED.size
    (rlen,) = _U32.unpack_from(raw, pos)
    pos += 4
    if pos + rlen + 4 > n:
        raise MalformedFrame("binary header remark length runs past the header")
    pos += rlen
    (elen,) = _U32.unpack_from(raw, pos)
    pos += 4
    end = pos + elen
    if end != n:
        raise MalformedFrame("binary header extFields length does not match the header")
    count = 0
    while pos < end:
        kstart = pos + 2
        if kstart > end:
            raise MalformedFrame("truncated extFields key length")
        kend = kstart + ((raw[pos] << 8) | raw[pos + 1])
        vstart = kend + 4
        if vstart > end:
            raise MalformedFrame("truncated extFields key")
        pos = vstart + int.from_bytes(raw[kend:vstart], "big")
        if pos > end:
            raise MalformedFrame("truncated extFields value")
        count += 1
    return count


def _decode_binary_header(raw: bytes, body: bytes) -> RemotingCommand:
    count = _count_ext_fields(raw)
    try:
        h = _PARSE_BINARY_HEADER(BytesIO(raw), {"_params": {"ext_count": count}, "_root": None})
    except (UnicodeDecodeError, ConstructError) as err:
        raise MalformedFrame(f"binary header text is not UTF-8: {err}") from err
    return RemotingCommand(
        code=h["code"],
        opaque=h["opaque"],
        flag=h["flag"],
        language=_LANG_VALUES.get(h["language"], LanguageCode.OTHER),
        version=h["version"],
        remark=h["remark"] or None,
        ext_fields=dict(h["ext_fields"]),
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_payload(
    payload: bytes | bytearray, start: int = 0, end: int | None = None
) -> RemotingCommand:
    """Decode a frame without its 4-byte length prefix (``payload[start:end]``)."""
    end = len(payload) if end is None else end
    size = end - start
    if size < 4:
        raise MalformedFrame(f"frame of {size} bytes has no header-length word")
    hlen = _U32.unpack_from(payload, start)[0] & 0xFFFFFF
    if hlen > size - 4:
        raise MalformedFrame(f"header length {hlen} exceeds the frame ({size - 4} bytes)")
    frame = _PARSE_PAYLOAD(BytesIO(payload[start:end]), _PAYLOAD_CONTEXT)
    stype = frame["serialize_type"]
    if stype == 0:  # SerializeType.JSON
        return _decode_json_header(frame["header"], frame["body"])
    if stype == 1:  # SerializeType.ROCKETMQ
        return _decode_binary_header(frame["header"], frame["body"])
    raise MalformedFrame(f"unknown serialize type {stype}")


_decode_payload = decode_payload  # the reference's own (the public name may be the twin's)


def decode_frame(frame: bytes) -> RemotingCommand:
    """Decode exactly one complete frame, length prefix included."""
    if len(frame) < 4:
        raise MalformedFrame("frame shorter than its length prefix")
    (length,) = _U32.unpack_from(frame, 0)
    if length != len(frame) - 4:
        raise MalformedFrame(f"length prefix says {length}, frame has {len(frame) - 4} bytes")
    return _decode_payload(frame[4:])


LARGE_FRAME = 1024 * 1024  # a partial frame this big is gathered in parts (FrameReader)
_PART = 64 * 1024  # smaller reads are coalesced into parts of at least this size


class FrameReader:
    """Incremental reader: ``feed(bytes)``, then iterate for the complete commands.

    Raises ``FrameTooLarge`` or ``MalformedFrame`` from iteration; after either, the
    stream is unusable and the connection should be closed. ``max_header`` (if given)
    caps the declared header length, checked as soon as the header-length word arrives
    (before the rest of the frame is buffered).

    A frame of ``LARGE_FRAME`` bytes or more whose prefix was checked but whose rest has
    not arrived is gathered as a list of parts (reads as received, small ones coalesced
    into ``_PART``-sized ones) and joined once when complete, instead of growing one
    buffer read by read: growing many large buffers at once (concurrent big frames)
    fragments the allocator's heap, which kept far more memory than the bytes held.
    ``buffered`` counts every byte held either way.
    """

    __slots__ = ("_buf", "_need", "_parts", "_parts_len", "_tail", "max_frame", "max_header")

    def __init__(self, max_frame: int = MAX_FRAME_LENGTH, *, max_header: int | None = None) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self.max_header = max_header
        self._parts: list[bytes] = []  # a large frame's parts (complete ones)
        self._tail = bytearray()  # the part being coalesced
        self._parts_len = 0  # bytes in _parts and _tail
        self._need = 0  # the large frame's size, prefix included (0: not gathering)

    def feed(self, data: bytes) -> None:
        if not self._need:
            self._buf += data
            return
        if len(data) >= _PART and not self._tail:
            self._parts.append(data)
        else:
            self._tail += data
            if len(self._tail) >= _PART:
                self._parts.append(bytes(self._tail))
                self._tail = bytearray()
        self._parts_len += len(data)
        if self._parts_len >= self._need:  # complete: one buffer, one copy
            if self._tail:
                self._parts.append(bytes(self._tail))
            self._buf = bytearray().join(self._parts)
            self._parts, self._tail, self._parts_len, self._need = [], bytearray(), 0, 0

    @property
    def buffered(self) -> int:
        return len(self._buf) + self._parts_len

    def clear(self) -> None:
        """Drop every buffered byte (the stream is closed)."""
        self._buf = bytearray()
        self._parts, self._tail, self._parts_len, self._need = [], bytearray(), 0, 0

    def _gather(self, need: int) -> None:
        """The buffer holds only the start of a large frame of ``need`` bytes whose prefix
        and header length passed the checks: hold the rest in parts until complete."""
        self._need = need
        self._parts = [bytes(self._buf)]
        self._parts_len = len(self._buf)
        self._buf = bytearray()

    def __iter__(self) -> Generator[RemotingCommand, None, None]:
        # a caller that stops early must close() it: the consumed frames leave the buffer
        # in the ``finally`` (the native twin drops them on close() or when done, as here)
        buf = self._buf
        pos = 0
        partial = 0  # the size of a checked frame whose rest has not arrived
        try:
            while len(buf) - pos >= 4:
                (length,) = _U32.unpack_from(buf, pos)
                if length > self.max_frame:
                    raise FrameTooLarge(length, self.max_frame)
                if length < 4:
                    raise MalformedFrame(f"frame length {length} is below the minimum 4")
                if len(buf) - pos < 8:
                    break
                if self.max_header is not None:
                    hlen = _U32.unpack_from(buf, pos + 4)[0] & 0xFFFFFF
                    if hlen > self.max_header:
                        raise MalformedFrame(
                            f"header length {hlen} exceeds the maximum {self.max_header}"
                        )
                end = pos + 4 + length
                if len(buf) < end:
                    partial = end - pos
                    break
                start, pos = pos + 4, end
                yield _decode_payload(buf, start, end)  # slices header and body, no other copy
        finally:
            if pos:
                del buf[:pos]
            if partial >= LARGE_FRAME and buf is self._buf:
                self._gather(partial)


# ---------------------------------------------------------------- the native twin

# The pure functions above are the reference (parity tests hold the twin to them); the
# public names become the twin's (``_codec.pyx``) when protocol/native.py chooses it.
reference = SimpleNamespace(
    FrameReader=FrameReader,
    decode_frame=decode_frame,
    decode_payload=decode_payload,
    encode_command=encode_command,
)


def _load_twin() -> ModuleType:
    from . import _codec  # type: ignore[attr-defined]

    twin: ModuleType = _codec  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    FrameReader = _twin.FrameReader  # type: ignore[misc]  # noqa: F811
    decode_frame = _twin.decode_frame
    decode_payload = _twin.decode_payload
    encode_command = _twin.encode_command
