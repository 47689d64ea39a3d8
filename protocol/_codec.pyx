# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native twin of ``codec.py`` (chosen by ``native.py``; ``codec.py`` is the reference).

Owns nothing of its own: the same frame, the same two header encodings and the same
``FrameReader``, written over C pointers into the frame's bytes: the prefix, the header
length word, every binary-header length and the extFields are read in place, checked in
the order and with the messages ``codec.py`` uses, and turned into Python objects once
(the strings, the dict, the ``RemotingCommand``, whose slots are set through their
descriptors). A JSON header of the stock clients' flat shape is scanned in place
(``_scan_json_header``: the values orjson would give, the reference's rules on them);
any other JSON header (an unknown or repeated key, a null, a float, a nested value, an
escape or byte it does not take, anything that might not parse) is parsed by orjson as
in the reference, whose rare paths (a non-string extFields value, an integer field given
as a string) call the reference's own helpers. Short ASCII texts of the headers come
from a small cache of recent ones (``_texts``). ``FrameReader`` holds a read that arrives
while nothing is buffered as it is and decodes its frames in place (no copy into the
buffer; see its docstring), with the reference's frames, errors and ``buffered`` at every
step; its ``feed`` and ``buffered`` are also exported as C functions (``FEED``,
``BUFFERED``: the transport twin's calls). A JSON answer of plain values is written
directly (``_frame_json``: orjson's bytes, escapes included); any other goes through
orjson. ``tests/protocol/test_native_codec.py`` holds every function here to
``codec.py`` over generated frames, JSON headers in every spelling (escapes, unicode,
odd numbers, repeated keys, whitespace, broken ones), every code point written, and
every captured stock-client frame.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.unicode cimport (
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DATA,
    PyUnicode_DecodeASCII,
    PyUnicode_DecodeUTF8,
    PyUnicode_GET_LENGTH,
)
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    bint PyLong_Check(object o)
    bint PyBool_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    PyObject* PyDict_SetDefault(object d, object key, object default) except NULL

import struct
import types

import orjson

from .codec import _coerce, _int_field
from .codes import LanguageCode, SerializeType
from .commands import RemotingCommand
from .errors import FrameTooLarge, MalformedFrame

cdef object _JSON = SerializeType.JSON
cdef object _ROCKETMQ = SerializeType.ROCKETMQ
cdef dict _LANG_BY_NAME = {m.name: m for m in LanguageCode}
cdef dict _LANG_VALUES = {m.value: m for m in LanguageCode}
cdef object _OTHER = LanguageCode.OTHER
cdef object _JAVA = LanguageCode.JAVA
cdef tuple _LANG_MEMBERS = tuple(LanguageCode)
cdef tuple _LANG_NAMES = tuple(m.name for m in LanguageCode)
cdef object _LanguageCode = LanguageCode
cdef dict _NAME_OF_LANG = {m: m.name for m in LanguageCode}
cdef object _RemotingCommand = RemotingCommand
cdef object _new = object.__new__
cdef tuple _NO_ARGS = ()
cdef object _JOIN = b"".join


def _slot(attr):
    """The member descriptor ``setattr(cmd, attr, ...)`` calls on a RemotingCommand."""
    slot = next((k.__dict__[attr] for k in _RemotingCommand.__mro__ if attr in k.__dict__), None)
    return slot if type(slot) is types.MemberDescriptorType else None


cdef tuple _SLOTS = tuple(
    _slot(name)
    for name in (
        "code", "opaque", "flag", "language", "version", "remark", "ext_fields", "body",
        "serialize_type",
    )
)
# set the slots through their descriptors (what setattr ends in, without its lookups)
cdef bint _DIRECT = None not in _SLOTS and _RemotingCommand.__setattr__ is object.__setattr__


cdef inline int _set(object slot, object obj, object value) except -1:
    return (<PyTypeObject*>Py_TYPE(slot)).tp_descr_set(slot, obj, value)


cdef inline object _get(object slot, object obj):
    """``getattr(obj, name)`` for the slot ``name`` of a RemotingCommand (not a subclass)."""
    return (<PyTypeObject*>Py_TYPE(slot)).tp_descr_get(slot, obj, _RemotingCommand)


cdef bint _OBJECT_NEW = _RemotingCommand.__new__ is object.__new__


cdef object _command(
    code, opaque, flag, language, version, remark, fields, body, serialize_type
):
    """``RemotingCommand(...)``: the dataclass's fields set without running its ``__init__``."""
    if _DIRECT and _OBJECT_NEW:  # object.__new__(RemotingCommand) is its type's tp_new
        cmd = (<PyTypeObject*>_RemotingCommand).tp_new(_RemotingCommand, <PyObject*>_NO_ARGS, NULL)
    else:
        cmd = _new(_RemotingCommand)
    if _DIRECT:
        _set(_SLOTS[0], cmd, code)
        _set(_SLOTS[1], cmd, opaque)
        _set(_SLOTS[2], cmd, flag)
        _set(_SLOTS[3], cmd, language)
        _set(_SLOTS[4], cmd, version)
        _set(_SLOTS[5], cmd, remark)
        _set(_SLOTS[6], cmd, fields)
        _set(_SLOTS[7], cmd, body)
        _set(_SLOTS[8], cmd, serialize_type)
        return cmd
    cmd.code = code
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.language = language
    cmd.version = version
    cmd.remark = remark
    cmd.ext_fields = fields
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


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


cdef inline bint _is_i32(object v) except -1:
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    return not overflow and _I32_MIN <= x <= _I32_MAX


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
    return _command(
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
    return _command(
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


# ---------------------------------------------------------------- the flat JSON header
#
# What stock clients send: one object of top-level scalars (code, extFields, flag,
# language, opaque, remark, serializeTypeCurrentRPC, version) whose extFields is one flat
# object of string (the C++ client: also integer and boolean) values. ``_scan_json_header``
# reads that shape in place and gives what ``codec._decode_json_header`` gives for it; it
# gives None (the reference decode runs: orjson and its rules) for anything else, before
# building anything a caller sees: an unknown or repeated key, a null, a float, an integer
# with a sign of zero, more than 18 digits or outside the Java int range where one is
# needed, a nested value, an escape it does not decode (``\uD800``-``\uDFFF``, anything
# but the JSON ones), a control byte or bytes that are not UTF-8 in a string, other
# whitespace than JSON's four, anything after the object. So everything it accepts is
# a JSON text orjson accepts with the same values.

cdef enum:
    _K_CODE = 1
    _K_EXT = 2
    _K_FLAG = 4
    _K_LANG = 8
    _K_OPAQUE = 16
    _K_REMARK = 32
    _K_STYPE = 64
    _K_VERSION = 128

cdef str _TRUE = "true"
cdef str _FALSE = "false"


cdef inline Py_ssize_t _skip_ws(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and (p[i] == 0x20 or p[i] == 0x0A or p[i] == 0x0D or p[i] == 0x09):
        i += 1
    return i


cdef inline int _hex(uint8_t c) noexcept nogil:
    if 0x30 <= c <= 0x39:
        return c - 0x30
    if 0x61 <= c <= 0x66:
        return c - 0x61 + 10
    if 0x41 <= c <= 0x46:
        return c - 0x41 + 10
    return -1


cdef Py_ssize_t _unescape(
    const uint8_t* p, Py_ssize_t i, Py_ssize_t end, uint8_t* out
) noexcept nogil:
    """The string body ``p[i:end]`` (escapes in it) as UTF-8 into ``out`` (as long as the
    body at most); its length, or -1 for an escape the scanner defers."""
    cdef Py_ssize_t o = 0
    cdef uint8_t c
    cdef int h0, h1, h2, h3
    cdef uint32_t cp
    while i < end:
        c = p[i]
        if c != 0x5C:
            out[o] = c
            o += 1
            i += 1
            continue
        c = p[i + 1]  # a backslash never ends the body (the closing quote follows it)
        i += 2
        if c == 0x22 or c == 0x5C or c == 0x2F:
            out[o] = c
        elif c == 0x6E:
            out[o] = 0x0A
        elif c == 0x74:
            out[o] = 0x09
        elif c == 0x72:
            out[o] = 0x0D
        elif c == 0x62:
            out[o] = 0x08
        elif c == 0x66:
            out[o] = 0x0C
        elif c == 0x75:
            if i + 4 > end:
                return -1
            h0, h1, h2, h3 = _hex(p[i]), _hex(p[i + 1]), _hex(p[i + 2]), _hex(p[i + 3])
            if h0 < 0 or h1 < 0 or h2 < 0 or h3 < 0:
                return -1
            cp = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3
            i += 4
            if 0xD800 <= cp <= 0xDFFF:
                return -1
            if cp < 0x80:
                out[o] = cp
            elif cp < 0x800:
                out[o] = 0xC0 | (cp >> 6)
                out[o + 1] = 0x80 | (cp & 0x3F)
                o += 1
            else:
                out[o] = 0xE0 | (cp >> 12)
                out[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
                out[o + 2] = 0x80 | (cp & 0x3F)
                o += 2
        else:
            return -1
        o += 1
    return o


cdef enum:
    _TEXT_SLOTS = 512  # a power of two
    _TEXT_MAX = 40

# short ASCII texts of recent frames (owned references, NULL: empty), by a hash of their
# bytes: extFields keys and most values (numbers, topic and group names) repeat frame
# after frame, and a str taken from here is neither built again nor hashed again (a
# dict keeps its hash). A new text replaces the one in its slot; nothing is interned.
cdef PyObject* _texts[_TEXT_SLOTS]


cdef object _cached_text(const uint8_t* s, Py_ssize_t n, uint32_t h):
    """The ASCII text ``s[:n]`` (``h``: its ``_scan_str`` hash) as a str, from the cache
    (put there when not found)."""
    cdef Py_ssize_t slot = (h ^ (h >> 13) ^ <uint32_t>n) & (_TEXT_SLOTS - 1)
    cdef PyObject* hit = _texts[slot]
    if (
        hit != NULL
        and PyUnicode_GET_LENGTH(<object>hit) == n
        and memcmp(PyUnicode_DATA(<object>hit), s, n) == 0
    ):
        return <object>hit
    text = PyUnicode_DecodeASCII(<const char*>s, n, NULL)
    Py_INCREF(text)
    Py_XDECREF(hit)
    _texts[slot] = <PyObject*>text
    return text


# the string scanner's byte classes: 0 printable ASCII but ``"`` and ``\``
cdef uint8_t _PLAIN_NOT[256]
for _b in range(256):
    _PLAIN_NOT[_b] = _b < 0x20 or _b >= 0x80 or _b == 0x22 or _b == 0x5C


cdef inline object _scan_str(const uint8_t* p, Py_ssize_t* at, Py_ssize_t n):
    """The JSON string at ``p[at]`` (its opening quote) as a str, ``at`` moved past its
    closing quote; None to defer."""
    cdef Py_ssize_t start = at[0] + 1, i = start
    cdef uint32_t h = 0
    while i < n and not _PLAIN_NOT[p[i]]:  # the usual string: printable ASCII
        h = h * 31 + p[i]
        i += 1
    if i < n and p[i] == 0x22:
        at[0] = i + 1
        if i - start <= _TEXT_MAX:
            return _cached_text(p + start, i - start, h)
        return PyUnicode_DecodeASCII(<const char*>p + start, i - start, NULL)
    return _scan_str_rest(p, at, n, i)


cdef object _scan_str_rest(const uint8_t* p, Py_ssize_t* at, Py_ssize_t n, Py_ssize_t i):
    """``_scan_str`` from ``p[i]``, the first byte that is not printable ASCII."""
    cdef Py_ssize_t start = at[0] + 1, length
    cdef uint8_t c
    cdef bint escaped = False
    cdef uint8_t small[256]
    cdef uint8_t* buf
    while True:
        if i >= n:
            return None
        c = p[i]
        if c == 0x22:
            break
        if c < 0x20:
            return None
        if c == 0x5C:
            escaped = True
            i += 2  # the escaped byte is checked by _unescape
            continue
        i += 1
    if i >= n or p[i] != 0x22:  # an escape ran into the end
        return None
    at[0] = i + 1
    if not escaped:
        return _utf8(<const char*>p + start, i - start)
    buf = small
    if i - start > 256:
        buf = <uint8_t*>PyMem_Malloc(i - start)
    if buf == NULL:
        raise MemoryError()
    try:
        length = _unescape(p, start, i, buf)
        if length < 0:
            return None
        return _utf8(<const char*>buf, length)
    finally:
        if buf != small:
            PyMem_Free(buf)


cdef object _utf8(const char* s, Py_ssize_t length):
    """Strict UTF-8 (as orjson checks it) to str; None when it is not UTF-8."""
    try:
        return PyUnicode_DecodeUTF8(s, length, NULL)
    except UnicodeDecodeError:
        return None


cdef bint _scan_int(
    const uint8_t* p, Py_ssize_t* at, Py_ssize_t n, int64_t* out
) noexcept nogil:
    """A JSON integer ``-?(0|[1-9][0-9]{0,17})`` at ``p[at]`` (not ``-0``, not followed by
    a fraction or exponent) into ``out``, ``at`` moved past it; False to defer."""
    cdef Py_ssize_t i = at[0], digits = 0
    cdef bint neg = False
    cdef int64_t v = 0
    if i < n and p[i] == 0x2D:
        neg = True
        i += 1
    if i >= n or not (0x30 <= p[i] <= 0x39):
        return False
    if p[i] == 0x30:
        if neg:
            return False
        i += 1
        digits = 1
    else:
        while i < n and 0x30 <= p[i] <= 0x39:
            v = v * 10 + (p[i] - 0x30)
            i += 1
            digits += 1
            if digits > 18:
                return False
    if i < n and (p[i] == 0x2E or p[i] == 0x65 or p[i] == 0x45 or 0x30 <= p[i] <= 0x39):
        return False
    at[0] = i
    out[0] = -v if neg else v
    return True


cdef inline bint _key_is(const uint8_t* p, Py_ssize_t i, Py_ssize_t length, const char* name,
                         Py_ssize_t name_length) noexcept nogil:
    return length == name_length and memcmp(p + i, name, length) == 0


cdef object _scan_ext_fields(const uint8_t* p, Py_ssize_t* at, Py_ssize_t n):
    """The flat extFields object at ``p[at]`` (its ``{``) as a dict of str, ``at`` moved
    past its ``}``; None to defer."""
    cdef Py_ssize_t i = _skip_ws(p, at[0] + 1, n), start
    cdef dict fields = {}
    cdef int64_t ignored
    cdef object key, value
    cdef uint8_t c
    if i < n and p[i] == 0x7D:
        at[0] = i + 1
        return fields
    while True:
        if i >= n or p[i] != 0x22:
            return None
        key = _scan_str(p, &i, n)
        if key is None:
            return None
        i = _skip_ws(p, i, n)
        if i >= n or p[i] != 0x3A:
            return None
        i = _skip_ws(p, i + 1, n)
        if i >= n:
            return None
        c = p[i]
        if c == 0x22:
            value = _scan_str(p, &i, n)
            if value is None:
                return None
        elif c == 0x2D or 0x30 <= c <= 0x39:  # a number: codec._coerce's str(int)
            start = i
            if not _scan_int(p, &i, n, &ignored):
                return None
            value = PyUnicode_DecodeASCII(<const char*>p + start, i - start, NULL)
        elif c == 0x74 and i + 4 <= n and memcmp(p + i, b"true", 4) == 0:
            value = _TRUE
            i += 4
        elif c == 0x66 and i + 5 <= n and memcmp(p + i, b"false", 5) == 0:
            value = _FALSE
            i += 5
        else:
            return None
        if PyDict_SetDefault(fields, key, value) is not <PyObject*>value:
            return None  # a repeated key (orjson keeps the last): the reference decides
        i = _skip_ws(p, i, n)
        if i >= n:
            return None
        if p[i] == 0x2C:
            i = _skip_ws(p, i + 1, n)
            continue
        if p[i] == 0x7D:
            at[0] = i + 1
            return fields
        return None


cdef object _scan_json_header(const uint8_t* p, Py_ssize_t n, bytes body):
    """``codec._decode_json_header`` of the flat header ``p[:n]``, or None to defer."""
    cdef Py_ssize_t i = _skip_ws(p, 0, n), kstart, klen
    cdef int seen = 0, k
    cdef int64_t code = 0, opaque = 0, flag = 0, version = 0, v
    cdef object fields = None, language = _JAVA, remark = None, text
    if i >= n or p[i] != 0x7B:
        return None
    i = _skip_ws(p, i + 1, n)
    while True:
        if i >= n or p[i] != 0x22:
            return None
        kstart = i + 1
        i = kstart
        while i < n and p[i] != 0x22 and p[i] != 0x5C and p[i] >= 0x20:
            i += 1
        if i >= n or p[i] != 0x22:
            return None
        klen = i - kstart
        i = _skip_ws(p, i + 1, n)
        if i >= n or p[i] != 0x3A:
            return None
        i = _skip_ws(p, i + 1, n)
        if i >= n:
            return None
        if _key_is(p, kstart, klen, b"code", 4):
            k = _K_CODE
        elif _key_is(p, kstart, klen, b"extFields", 9):
            k = _K_EXT
        elif _key_is(p, kstart, klen, b"flag", 4):
            k = _K_FLAG
        elif _key_is(p, kstart, klen, b"language", 8):
            k = _K_LANG
        elif _key_is(p, kstart, klen, b"opaque", 6):
            k = _K_OPAQUE
        elif _key_is(p, kstart, klen, b"remark", 6):
            k = _K_REMARK
        elif _key_is(p, kstart, klen, b"serializeTypeCurrentRPC", 23):
            k = _K_STYPE
        elif _key_is(p, kstart, klen, b"version", 7):
            k = _K_VERSION
        else:
            return None
        if seen & k:
            return None
        seen |= k
        if k == _K_EXT:
            if p[i] != 0x7B:
                return None
            fields = _scan_ext_fields(p, &i, n)
            if fields is None:
                return None
        elif k == _K_LANG or k == _K_REMARK or k == _K_STYPE:
            if p[i] != 0x22:
                return None
            text = _scan_str(p, &i, n)
            if text is None:
                return None
            if k == _K_LANG:
                language = _LANG_BY_NAME.get(text, _OTHER)
            elif k == _K_REMARK:
                remark = text
        else:
            if not _scan_int(p, &i, n, &v) or not _I32_MIN <= v <= _I32_MAX:
                return None
            if k == _K_CODE:
                code = v
            elif k == _K_FLAG:
                flag = v
            elif k == _K_OPAQUE:
                opaque = v
            else:
                version = v
        i = _skip_ws(p, i, n)
        if i >= n:
            return None
        if p[i] == 0x2C:
            i = _skip_ws(p, i + 1, n)
            continue
        if p[i] == 0x7D:
            break
        return None
    if _skip_ws(p, i + 1, n) != n or not seen & _K_CODE:
        return None
    return _command(
        code, opaque, flag, language, version, remark, {} if fields is None else fields, body,
        _JSON,
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
        cmd = _scan_json_header(p + 4, hlen, body)
        if cmd is not None:
            return cmd
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
    h["language"] = _NAME_OF_LANG[lang] if type(lang) is _LanguageCode else lang.name
    h["opaque"] = cmd.opaque
    remark = cmd.remark
    if remark is not None:
        h["remark"] = remark
    h["serializeTypeCurrentRPC"] = "JSON"
    h["version"] = cmd.version
    return _dumps(h)


# ---------------------------------------------------------------- the answer's JSON header
#
# ``_json_header``'s dict through orjson, written directly when every value is plain:
# the four numbers ints (int subclasses such as a RequestCode too, not bool) in the
# int64 range, the language a LanguageCode, the remark None or a str, the extFields a
# dict of at most _MAX_EXT str keys and str values, every string without a lone
# surrogate. orjson writes such an int as its decimal text and such a string as its
# UTF-8 bytes between quotes with ``"`` and ``\`` escaped by a backslash, the control
# bytes ``\b \t \n \f \r`` by their letter and the others as ``\u00xx`` (lowercase
# hex), and no whitespace: so does this writer (test_native_codec.py holds the bytes
# equal over every code point). Anything else goes through orjson (``_json_header``).

cdef enum:
    _MAX_EXT = 32
cdef int64_t _U24_MAX = 0xFFFFFF
cdef int64_t _U32_MAX = 0xFFFFFFFF

# extra bytes each byte takes escaped, as orjson escapes it (0: written as it is)
cdef uint8_t _ESC_EXTRA[256]
for _b in range(256):
    _ESC_EXTRA[_b] = (
        1 if _b in (0x22, 0x5C, 0x08, 0x09, 0x0A, 0x0C, 0x0D) else 5 if _b < 0x20 else 0
    )
cdef const char* _HEX = b"0123456789abcdef"


ctypedef struct _Text:
    const char* data
    Py_ssize_t size  # its UTF-8 bytes
    Py_ssize_t escaped  # the bytes written for it, quotes left out


cdef bint _plain_text(object s, _Text* out) except -1:
    """``s`` (a str) as the UTF-8 JSON writes; False when it is not a str or holds a
    lone surrogate (orjson refuses it, with its own message)."""
    cdef const uint8_t* d
    cdef Py_ssize_t i, n, extra = 0
    if type(s) is not str:
        return False
    if PyUnicode_IS_COMPACT_ASCII(s):
        d = <const uint8_t*>PyUnicode_DATA(s)
        n = PyUnicode_GET_LENGTH(s)
    else:
        try:
            d = <const uint8_t*>PyUnicode_AsUTF8AndSize(s, &n)
        except UnicodeEncodeError:
            return False
    for i in range(n):
        extra += _ESC_EXTRA[d[i]]
    out.data = <const char*>d
    out.size = n
    out.escaped = n + extra
    return True


cdef bint _plain_int(object v, int64_t* out) except -1:
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int and (not PyLong_Check(v) or PyBool_Check(v)):
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        return False
    out[0] = x
    return True


cdef inline Py_ssize_t _int_size(int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>(-(v + 1)) + 1 if v < 0 else <uint64_t>v
    cdef Py_ssize_t n = 2 if v < 0 else 1
    while u >= 10:
        u //= 10
        n += 1
    return n


cdef inline Py_ssize_t _put_int(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>(-(v + 1)) + 1 if v < 0 else <uint64_t>v
    cdef Py_ssize_t n = _int_size(v), i = n
    if v < 0:
        p[0] = 0x2D
    while True:
        i -= 1
        p[i] = 0x30 + <uint8_t>(u % 10)
        u //= 10
        if u == 0:
            break
    return n


cdef inline Py_ssize_t _put_raw(uint8_t* p, const char* s, Py_ssize_t n) noexcept nogil:
    memcpy(p, s, n)
    return n


cdef inline Py_ssize_t _put_text(uint8_t* p, _Text t) noexcept nogil:
    cdef Py_ssize_t i, o = 1
    cdef uint8_t c
    p[0] = 0x22
    if t.escaped == t.size:
        memcpy(p + 1, t.data, t.size)
    else:
        for i in range(t.size):
            c = <uint8_t>t.data[i]
            if not _ESC_EXTRA[c]:
                p[o] = c
                o += 1
                continue
            p[o] = 0x5C
            if c == 0x22 or c == 0x5C:
                p[o + 1] = c
            elif c == 0x08:
                p[o + 1] = 0x62
            elif c == 0x09:
                p[o + 1] = 0x74
            elif c == 0x0A:
                p[o + 1] = 0x6E
            elif c == 0x0C:
                p[o + 1] = 0x66
            elif c == 0x0D:
                p[o + 1] = 0x72
            else:
                p[o + 1] = 0x75
                p[o + 2] = 0x30
                p[o + 3] = 0x30
                p[o + 4] = _HEX[c >> 4]
                p[o + 5] = _HEX[c & 15]
                o += 4
            o += 2
    p[1 + t.escaped] = 0x22
    return t.escaped + 2


cdef bytes _frame_json(object cmd, const char* body, Py_ssize_t blen):
    """The whole frame of a JSON command whose header is plain (see above), or None."""
    cdef int64_t code, flag, opaque, version
    cdef _Text lang, remark
    cdef _Text keys[_MAX_EXT]
    cdef _Text values[_MAX_EXT]
    cdef bint has_remark
    cdef Py_ssize_t n_ext = 0, hlen, i
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef bint slots = _DIRECT and type(cmd) is _RemotingCommand  # read through the slots
    if not (
        _plain_int(_get(_SLOTS[0], cmd) if slots else cmd.code, &code)
        and _plain_int(_get(_SLOTS[2], cmd) if slots else cmd.flag, &flag)
        and _plain_int(_get(_SLOTS[1], cmd) if slots else cmd.opaque, &opaque)
        and _plain_int(_get(_SLOTS[4], cmd) if slots else cmd.version, &version)
    ):
        return None
    language = _get(_SLOTS[3], cmd) if slots else cmd.language
    for i in range(len(_LANG_MEMBERS)):  # by identity: an enum's hash is Python code
        if language is _LANG_MEMBERS[i]:
            _plain_text(_LANG_NAMES[i], &lang)
            break
    else:
        return None
    r = _get(_SLOTS[5], cmd) if slots else cmd.remark
    has_remark = r is not None
    if has_remark and not _plain_text(r, &remark):
        return None
    ext = _get(_SLOTS[6], cmd) if slots else cmd.ext_fields
    if type(ext) is not dict or PyDict_Size(ext) > _MAX_EXT:
        return None
    while PyDict_Next(ext, &pos, &k, &v):
        if not _plain_text(<object>k, &keys[n_ext]) or not _plain_text(<object>v, &values[n_ext]):
            return None
        n_ext += 1
    # {"code":N,"extFields":{...},"flag":N,"language":"L","opaque":N,"remark":"R",
    #  "serializeTypeCurrentRPC":"JSON","version":N}
    hlen = (
        8 + _int_size(code) + 8 + _int_size(flag) + 12 + lang.escaped + 2 + 10
        + _int_size(opaque) + 33 + 11 + _int_size(version) + 1
    )
    if has_remark:
        hlen += 10 + remark.escaped + 2
    if n_ext:
        hlen += 14 + n_ext * 6
        for i in range(n_ext):
            hlen += keys[i].escaped + values[i].escaped
    if hlen > _U24_MAX or 4 + hlen + blen > _U32_MAX:
        return None  # encode_command's own checks refuse it
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8 + hlen + blen)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    _put32(p, 4 + hlen + blen)
    _put32(p + 4, <uint32_t>hlen)  # serialize type 0 (JSON)
    cdef uint8_t* q = p + 8
    q += _put_raw(q, b'{"code":', 8)
    q += _put_int(q, code)
    if n_ext:
        q += _put_raw(q, b',"extFields":{', 14)
        for i in range(n_ext):
            if i:
                q[0] = 0x2C
                q += 1
            q += _put_text(q, keys[i])
            q[0] = 0x3A
            q += 1
            q += _put_text(q, values[i])
        q[0] = 0x7D
        q += 1
    q += _put_raw(q, b',"flag":', 8)
    q += _put_int(q, flag)
    q += _put_raw(q, b',"language":', 12)
    q += _put_text(q, lang)
    q += _put_raw(q, b',"opaque":', 10)
    q += _put_int(q, opaque)
    if has_remark:
        q += _put_raw(q, b',"remark":', 10)
        q += _put_text(q, remark)
    q += _put_raw(q, b',"serializeTypeCurrentRPC":"JSON"', 33)
    q += _put_raw(q, b',"version":', 11)
    q += _put_int(q, version)
    q[0] = 0x7D
    q += 1
    if q - p != 8 + hlen:
        raise AssertionError(f"JSON header of {q - p - 8} bytes, {hlen} counted")
    memcpy(q, body, blen)
    return out


def encode_command(cmd):
    """Encode one command as a complete frame, length prefix included."""
    cdef bytes header
    cdef object framed
    cdef Py_buffer view
    cdef bint slots = _DIRECT and type(cmd) is _RemotingCommand  # read through the slots
    if (_get(_SLOTS[8], cmd) if slots else cmd.serialize_type) is _JSON:
        raw = _get(_SLOTS[7], cmd) if slots else cmd.body
        if type(raw) is bytes:
            framed = _frame_json(cmd, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
            if framed is not None:
                return framed
        elif type(raw) is memoryview or type(raw) is bytearray:
            # what bytes.join reads of it (the reference joins it): a contiguous buffer
            try:
                PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE)
            except BufferError:  # not contiguous: the general path below
                pass
            else:
                try:
                    framed = _frame_json(cmd, <const char*>view.buf, view.len)
                finally:
                    PyBuffer_Release(&view)
                if framed is not None:
                    return framed
    if cmd.serialize_type == _ROCKETMQ:
        header = _binary_header(cmd)
    else:
        header = _json_header(cmd)
    cdef bytes body
    raw = cmd.body
    body = raw if type(raw) is bytes else _JOIN((raw,))  # as the reference joins it
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
    iterate for the complete commands; a caller that stops early closes the iterator.

    A read that arrives while nothing is buffered is held as it is (``_data``), not
    copied into the buffer: the usual read holds whole frames, which are decoded from it
    in place; what a pass leaves of it (a partial frame) is copied into the buffer when
    the pass ends, and a read arriving before that copies it first (``_spill``: the
    buffer then begins with its bytes, so a pass reading it goes on in the buffer at the
    same position). ``buffered`` counts it either way: the same figures as the reference."""

    cdef public object max_frame
    cdef public object max_header
    cdef bytearray _buf
    cdef list _parts
    cdef bytearray _tail
    cdef Py_ssize_t _parts_len
    cdef Py_ssize_t _need
    cdef bytes _data  # a read held as received (the buffer is empty meanwhile)
    cdef PyObject* _over  # the open pass reading ``_data`` (borrowed: it clears this)

    def __init__(self, max_frame=MAX_FRAME_LENGTH, *, max_header=None):
        self._buf = bytearray()
        self.max_frame = max_frame
        self.max_header = max_header
        self._parts = []
        self._tail = bytearray()
        self._parts_len = 0
        self._need = 0
        self._data = None
        self._over = NULL

    def feed(self, data):
        self._feed(data)

    cdef int _feed(self, data) except -1:
        """``feed``'s body (the transport twin calls it through ``FEED``)."""
        if not self._need:
            if type(data) is bytes and self._data is None and PyByteArray_GET_SIZE(self._buf) == 0:
                self._data = data  # held, not copied
                return 0
            self._spill()
            self._buf += data
            return 0
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
        return 0

    cdef int _spill(self) except -1:
        """The held read into the (empty) buffer; the pass reading it reads the buffer."""
        if self._data is None:
            return 0
        self._buf += self._data
        self._data = None
        if self._over != NULL:
            (<_Frames>self._over).src = self._buf
            self._over = NULL
        return 0

    @property
    def buffered(self):
        return self._buffered()

    cdef Py_ssize_t _buffered(self) noexcept:
        """``buffered``'s value (the transport twin reads it through ``BUFFERED``)."""
        return (
            PyByteArray_GET_SIZE(self._buf)
            + self._parts_len
            + (PyBytes_GET_SIZE(self._data) if self._data is not None else 0)
        )

    def clear(self):
        """Drop every buffered byte (the stream is closed)."""
        self._buf = bytearray()
        self._data = None
        self._over = NULL  # an open pass goes on over what it read, the reader holds none
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
    cdef object src  # the reader's held read (bytes) or its buffer (bytearray)
    cdef Py_ssize_t pos
    cdef Py_ssize_t partial
    cdef bint done

    def __cinit__(self, FrameReader reader not None):
        self.reader = reader
        self.src = None  # taken at the first step, as the reference's generator starts
        self.pos = 0
        self.partial = 0
        self.done = False

    cdef int _start(self) except -1:
        cdef FrameReader reader = self.reader
        if reader._data is not None and reader._over != NULL:
            reader._spill()  # a second open pass: both read the buffer, as the reference's
        if reader._data is not None:
            self.src = reader._data
            reader._over = <PyObject*>self
        else:
            self.src = reader._buf
        return 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        cdef Py_ssize_t n, pos = self.pos, end, hlen, length
        cdef const uint8_t* p
        if self.src is None:
            self._start()
        try:
            if type(self.src) is bytes:
                n = PyBytes_GET_SIZE(self.src)
                p = <const uint8_t*>PyBytes_AS_STRING(self.src)
            else:
                n = PyByteArray_GET_SIZE(self.src)
                p = <const uint8_t*>PyByteArray_AS_STRING(self.src)
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
            self._finish()
            raise
        self._finish()
        raise StopIteration

    def close(self):
        self._finish()

    cdef int _finish(self) except -1:
        """``close()`` as a C call (each pass over the frames ends with it)."""
        if self.done:
            return 0
        self.done = True
        cdef FrameReader reader = self.reader
        cdef bytes data
        if self.src is None:  # never started: nothing read
            return 0
        if type(self.src) is bytes:
            if reader._over != <PyObject*>self:  # the reader was cleared meanwhile
                return 0
            reader._over = NULL
            data = reader._data
            reader._data = None
            if self.pos < PyBytes_GET_SIZE(data):  # what is left (a partial frame) is held
                reader._buf += data[self.pos:]
            if self.partial >= _LARGE_FRAME:
                reader._gather(self.partial)
            return 0
        if self.pos:
            del self.src[: self.pos]
        if self.partial >= _LARGE_FRAME and self.src is reader._buf:
            reader._gather(self.partial)
        return 0

    def __dealloc__(self):
        if self.done or self.reader is None:
            return
        if type(self.src) is bytes:
            if self.reader._over == <PyObject*>self:
                try:
                    self._finish()
                except Exception:  # nothing can be raised from here: the rest stays held
                    self.reader._over = NULL
        elif self.pos and self.src is not None:
            del self.src[: self.pos]


# ``FrameReader.feed`` and ``buffered`` as C functions for the transport twin (its reader
# is exactly a ``FrameReader`` of this module, checked by the caller)
cdef int _reader_feed(object reader, object data) except -1:
    return (<FrameReader>reader)._feed(data)


cdef Py_ssize_t _reader_buffered(object reader) noexcept:
    return (<FrameReader>reader)._buffered()


FEED = PyCapsule_New(<void*>_reader_feed, "kairosmq.protocol._codec.FEED", NULL)
BUFFERED = PyCapsule_New(<void*>_reader_buffered, "kairosmq.protocol._codec.BUFFERED", NULL)
