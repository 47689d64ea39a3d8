# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native twin of ``codec.py`` (chosen by ``native.py``; ``codec.py`` is the reference).

Owns nothing of its own: the same frame, the same two header encodings and the same
``FrameReader``, written over C pointers into the frame's bytes: the prefix, the header
length word, every binary-header length and the extFields are read in place, checked in
the order and with the messages ``codec.py`` uses, and turned into Python objects once
(the strings, the dict, the ``RemotingCommand``). The JSON header is parsed by orjson
as in the reference; its rare paths (a non-string extFields value, an integer field
given as a string) call the reference's own helpers. ``tests/protocol/test_native_codec.py``
holds every function here to ``codec.py`` over generated frames and every captured
stock-client frame.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

import struct

import orjson

from .codec import _coerce, _int_field
from .codes import LanguageCode, SerializeType
from .commands import RemotingCommand
from .errors import FrameTooLarge, MalformedFrame

cdef object _JSON = SerializeType.JSON
cdef object _ROCKETMQ = SerializeType.ROCKETMQ
cdef dict _LANG_BY_NAME = {m.name: m for m in LanguageCode}
cdef dict _LANG_VALUES = {m.value: m for m in LanguageCode}
cdef dict _LANG_NAMES = {m: m.name for m in LanguageCode}  # .name without enum's frames
cdef object _OTHER = LanguageCode.OTHER
cdef object _JAVA = LanguageCode.JAVA
cdef object _loads = orjson.loads
cdef object _dumps = orjson.dumps
cdef object _JSONDecodeError = orjson.JSONDecodeError
cdef int64_t _I32_MIN = -(1 << 31)
cdef int64_t _I32_MAX = (1 << 31) - 1
cdef enum:
    _BIN_FIXED = 13  # code(2) language(1) version(2) opaque(4) flag(4)

MAX_FRAME_LENGTH = 16 * 1024 * 1024
LARGE_FRAME = 1024 * 1024
cdef Py_ssize_t _LARGE_FRAME = LARGE_FRAME
cdef Py_ssize_t _PART = 64 * 1024


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t _u16(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 8) | p[1]


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put16(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 8
    p[1] = v


# ---------------------------------------------------------------- decoding


cdef inline bint _is_i32(object v):
    return type(v) is int and _I32_MIN <= v <= _I32_MAX


cdef object _decode_json_header(bytes raw, bytes body):
    try:
        h = _loads(raw)
    except _JSONDecodeError as err:
        raise MalformedFrame(f"JSON header does not parse: {err}") from err
    if type(h) is not dict:
        raise MalformedFrame("JSON header is not an object")
    fields = h.get("extFields") or {}
    if type(fields) is not dict:
        raise MalformedFrame("extFields is not an object")
    for v in (<dict>fields).values():
        if type(v) is not str:
            fields = {
                k: v if type(v) is str else _coerce(v)
                for k, v in (<dict>fields).items()
                if v is not None
            }
            break
    lang = h.get("language", "JAVA")
    if type(lang) is str:
        language = _LANG_BY_NAME.get(lang, _OTHER)
    elif isinstance(lang, int) and not isinstance(lang, bool):
        language = _LANG_VALUES.get(lang, _OTHER)
    else:
        language = _LANG_BY_NAME.get(str(lang), _OTHER)
    remark = h.get("remark")
    code = h.get("code")
    opaque = h.get("opaque", 0)
    flag = h.get("flag", 0)
    version = h.get("version", 0)
    if not (_is_i32(code) and _is_i32(opaque) and _is_i32(flag) and _is_i32(version)):
        code, opaque = _int_field(h, "code"), _int_field(h, "opaque", 0)
        flag, version = _int_field(h, "flag", 0), _int_field(h, "version", 0)
    return RemotingCommand(
        code,
        opaque,
        flag,
        language,
        version,
        None if remark is None else str(remark),
        fields,
        body,
        _JSON,
    )


cdef object _decode_binary_header(const uint8_t* raw, Py_ssize_t n, bytes body):
    # every length first, in codec._count_ext_fields' order and words
    cdef Py_ssize_t pos, end, kstart, kend, vstart, rlen
    if n < _BIN_FIXED + 8:
        raise MalformedFrame(f"binary header of {n} bytes is shorter than its fixed part")
    pos = _BIN_FIXED
    rlen = _u32(raw + pos)
    pos += 4
    if pos + rlen + 4 > n:
        raise MalformedFrame("binary header remark length runs past the header")
    pos += rlen
    end = pos + 4 + <Py_ssize_t>_u32(raw + pos)
    pos += 4
    if end != n:
        raise MalformedFrame("binary header extFields length does not match the header")
    while pos < end:
        kstart = pos + 2
        if kstart > end:
            raise MalformedFrame("truncated extFields key length")
        kend = kstart + _u16(raw + pos)
        vstart = kend + 4
        if vstart > end:
            raise MalformedFrame("truncated extFields key")
        pos = vstart + _u32(raw + kend)
        if pos > end:
            raise MalformedFrame("truncated extFields value")
    # then the values (text as construct's PascalString "utf8": strict UTF-8)
    cdef dict fields = {}
    cdef object remark
    try:
        remark = PyUnicode_DecodeUTF8(<const char*>raw + _BIN_FIXED + 4, rlen, NULL)
        pos = _BIN_FIXED + 8 + rlen
        while pos < end:
            kend = pos + 2 + _u16(raw + pos)
            vstart = kend + 4
            key = PyUnicode_DecodeUTF8(<const char*>raw + pos + 2, kend - pos - 2, NULL)
            pos = vstart + _u32(raw + kend)
            fields[key] = PyUnicode_DecodeUTF8(<const char*>raw + vstart, pos - vstart, NULL)
    except UnicodeDecodeError as err:
        raise MalformedFrame(f"binary header text is not UTF-8: {err}") from err
    return RemotingCommand(
        <int16_t>_u16(raw),
        <int32_t>_u32(raw + 5),
        <int32_t>_u32(raw + 9),
        _LANG_VALUES.get(raw[2], _OTHER),
        <int16_t>_u16(raw + 3),
        remark or None,
        fields,
        body,
        _ROCKETMQ,
    )


cdef object _decode(const uint8_t* p, Py_ssize_t size):
    """The frame at ``p`` without its length prefix, ``size`` bytes."""
    if size < 4:
        raise MalformedFrame(f"frame of {size} bytes has no header-length word")
    cdef uint32_t word = _u32(p)
    cdef Py_ssize_t hlen = word & 0xFFFFFF
    cdef int stype = word >> 24
    if hlen > size - 4:
        raise MalformedFrame(f"header length {hlen} exceeds the frame ({size - 4} bytes)")
    cdef bytes body = PyBytes_FromStringAndSize(<const char*>p + 4 + hlen, size - 4 - hlen)
    if stype == 0:
        return _decode_json_header(PyBytes_FromStringAndSize(<const char*>p + 4, hlen), body)
    if stype == 1:
        return _decode_binary_header(p + 4, hlen, body)
    raise MalformedFrame(f"unknown serialize type {stype}")


cdef const uint8_t* _pointer(object buf, Py_ssize_t* size) except NULL:
    if type(buf) is bytes:
        size[0] = PyBytes_GET_SIZE(buf)
        return <const uint8_t*>PyBytes_AS_STRING(buf)
    if type(buf) is bytearray:
        size[0] = PyByteArray_GET_SIZE(buf)
        return <const uint8_t*>PyByteArray_AS_STRING(buf)
    raise TypeError(f"a bytes or bytearray frame, not {type(buf).__name__}")


def decode_payload(payload, Py_ssize_t start=0, end=None):
    """Decode a frame without its 4-byte length prefix (``payload[start:end]``)."""
    cdef Py_ssize_t n
    if type(payload) is not bytes and type(payload) is not bytearray:
        payload = bytes(payload)
    cdef const uint8_t* p = _pointer(payload, &n)
    cdef Py_ssize_t stop = n if end is None else end
    if start < 0 or stop > n or start > stop:  # the reference slices: clamp as slicing does
        return decode_payload(payload[start:stop])
    return _decode(p + start, stop - start)


def decode_frame(frame):
    """Decode exactly one complete frame, length prefix included."""
    cdef Py_ssize_t n
    if type(frame) is not bytes and type(frame) is not bytearray:
        frame = bytes(frame)
    cdef const uint8_t* p = _pointer(frame, &n)
    if n < 4:
        raise MalformedFrame("frame shorter than its length prefix")
    cdef uint32_t length = _u32(p)
    if length != n - 4:
        raise MalformedFrame(f"length prefix says {length}, frame has {n - 4} bytes")
    return _decode(p + 4, n - 4)


# ---------------------------------------------------------------- encoding

_BIN = struct.Struct(">hBhii")


cdef bytes _binary_header(object cmd):
    remark = cmd.remark
    cdef bytes rb = remark.encode() if remark else b""
    cdef list parts = []
    cdef Py_ssize_t size = _BIN_FIXED + 8 + len(rb)
    cdef bytes kb, vb
    for k, v in (<dict>cmd.ext_fields).items():
        kb = k.encode()
        vb = v.encode()
        parts.append(kb)
        parts.append(vb)
        size += 6 + len(kb) + len(vb)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    # the fixed part: struct's range checks and errors, as the reference packs it
    memcpy(p, PyBytes_AS_STRING(_BIN.pack(cmd.code, cmd.language, cmd.version, cmd.opaque,
                                          cmd.flag)), _BIN_FIXED)
    cdef Py_ssize_t pos = _BIN_FIXED
    _put32(p + pos, len(rb))
    memcpy(p + pos + 4, PyBytes_AS_STRING(rb), len(rb))
    pos += 4 + len(rb)
    _put32(p + pos, size - pos - 4)
    pos += 4
    cdef Py_ssize_t i, kl, vl
    for i in range(0, len(parts), 2):
        kb = parts[i]
        vb = parts[i + 1]
        kl = len(kb)
        vl = len(vb)
        _put16(p + pos, kl)
        memcpy(p + pos + 2, PyBytes_AS_STRING(kb), kl)
        pos += 2 + kl
        _put32(p + pos, vl)
        memcpy(p + pos + 4, PyBytes_AS_STRING(vb), vl)
        pos += 4 + vl
    return out


cdef bytes _json_header(object cmd):
    # fastjson order (alphabetical), nulls left out, like the Java broker (as codec.py)
    cdef dict h = {"code": cmd.code}
    ext = cmd.ext_fields
    if ext:
        h["extFields"] = ext
    h["flag"] = cmd.flag
    lang = cmd.language
    h["language"] = _LANG_NAMES[lang] if type(lang) is LanguageCode else lang.name
    h["opaque"] = cmd.opaque
    remark = cmd.remark
    if remark is not None:
        h["remark"] = remark
    h["serializeTypeCurrentRPC"] = "JSON"
    h["version"] = cmd.version
    return _dumps(h)


def encode_command(cmd):
    """Encode one command as a complete frame, length prefix included."""
    cdef bytes header
    if cmd.serialize_type == _ROCKETMQ:
        header = _binary_header(cmd)
    else:
        header = _json_header(cmd)
    cdef bytes body = cmd.body
    if type(body) is not bytes:
        body = bytes(body)
    cdef Py_ssize_t hlen = len(header), blen = len(body)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8 + hlen + blen)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef long stype = int(cmd.serialize_type)
    if hlen > 0xFFFFFF or not 0 <= stype <= 255 or 4 + hlen + blen > 0xFFFFFFFF:
        raise struct.error("frame does not fit its length words")
    _put32(p, 4 + hlen + blen)
    _put32(p + 4, (<uint32_t>stype << 24) | hlen)
    memcpy(p + 8, PyBytes_AS_STRING(header), hlen)
    memcpy(p + 8 + hlen, PyBytes_AS_STRING(body), blen)
    return out


# ---------------------------------------------------------------- the stream reader


cdef class FrameReader:
    """``codec.FrameReader`` (its docstring is the contract): ``feed(bytes)``, then
    iterate for the complete commands; a caller that stops early closes the iterator."""

    cdef public object max_frame
    cdef public object max_header
    cdef bytearray _buf
    cdef list _parts
    cdef bytearray _tail
    cdef Py_ssize_t _parts_len
    cdef Py_ssize_t _need

    def __init__(self, max_frame=MAX_FRAME_LENGTH, *, max_header=None):
        self._buf = bytearray()
        self.max_frame = max_frame
        self.max_header = max_header
        self._parts = []
        self._tail = bytearray()
        self._parts_len = 0
        self._need = 0

    def feed(self, data):
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
        if self._parts_len >= self._need:
            if self._tail:
                self._parts.append(bytes(self._tail))
            self._buf = bytearray().join(self._parts)
            self._parts, self._tail, self._parts_len, self._need = [], bytearray(), 0, 0

    @property
    def buffered(self):
        return PyByteArray_GET_SIZE(self._buf) + self._parts_len

    def clear(self):
        """Drop every buffered byte (the stream is closed)."""
        self._buf = bytearray()
        self._parts, self._tail, self._parts_len, self._need = [], bytearray(), 0, 0

    cdef void _gather(self, Py_ssize_t need):
        self._need = need
        self._parts = [bytes(self._buf)]
        self._parts_len = PyByteArray_GET_SIZE(self._buf)
        self._buf = bytearray()

    def __iter__(self):
        return _Frames(self)


cdef class _Frames:
    """One pass over a ``FrameReader``'s complete frames (the reference's generator): the
    frames handled leave the buffer when it ends, raises or is closed."""

    cdef FrameReader reader
    cdef bytearray buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t partial
    cdef bint done

    def __cinit__(self, FrameReader reader not None):
        self.reader = reader
        self.buf = reader._buf
        self.pos = 0
        self.partial = 0
        self.done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        cdef Py_ssize_t n, pos = self.pos, end, hlen, length
        cdef const uint8_t* p
        try:
            n = PyByteArray_GET_SIZE(self.buf)
            p = <const uint8_t*>PyByteArray_AS_STRING(self.buf)
            if n - pos >= 4:
                length = _u32(p + pos)
                if length > self.reader.max_frame:
                    raise FrameTooLarge(length, self.reader.max_frame)
                if length < 4:
                    raise MalformedFrame(f"frame length {length} is below the minimum 4")
                if n - pos >= 8:
                    if self.reader.max_header is not None:
                        hlen = _u32(p + pos + 4) & 0xFFFFFF
                        if hlen > self.reader.max_header:
                            raise MalformedFrame(
                                f"header length {hlen} exceeds the maximum "
                                f"{self.reader.max_header}"
                            )
                    end = pos + 4 + length
                    if n < end:
                        self.partial = end - pos
                    else:
                        self.pos = end
                        return _decode(p + pos + 4, length)
        except BaseException:
            self.close()
            raise
        self.close()
        raise StopIteration

    def close(self):
        if self.done:
            return
        self.done = True
        if self.pos:
            del self.buf[: self.pos]
        if self.partial >= _LARGE_FRAME and self.buf is self.reader._buf:
            self.reader._gather(self.partial)

    def __dealloc__(self):
        if not self.done and self.pos and self.buf is not None:
            del self.buf[: self.pos]
