# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native twin of ``message.py`` (chosen by ``native.py``; ``message.py`` is the reference).

Owns nothing of its own: the commit-log record's encode, decode, view, patch, summary and
properties read, over C pointers into the record's bytes (one allocation per record
written, every field read in place; BODYCRC computed in C, with carry-less multiplies
where the CPU has them, else by ``zlib.crc32``: the same value). The well-formed record
takes the fast path; any record the fast path finds out of shape (a length that does not fit, a bad magic, text
that is not UTF-8, a CRC mismatch, an integer out of its field's range) is handed to the
reference function itself, which raises (or returns) exactly what the reference does: the
error rules stay written once, in ``message.py``. ``tests/protocol/test_native_message.py``
holds every function here to ``message.py`` (and so to ``schema.MessageRecord``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

import zlib

from protocol._slots cimport BASE_OBJECT, OBJECT_NEW, _fresh, _plain, _put, _slot

from . import message as _ref
from .ids import create_offset_msg_id
from .properties import decode_properties

cdef object _pure = _ref.reference  # the reference functions (never the twin's names)
cdef object MessageExt = _ref.MessageExt
cdef object RecordView = _ref.RecordView
cdef object RecordSummary = _ref.RecordSummary
_plain(RecordSummary, BASE_OBJECT | OBJECT_NEW, 7)  # summarize_records fills every field
# RecordSummary's fields (frozen: its __init__ sets each through object.__setattr__)
cdef Py_ssize_t S_SIZE = _slot(RecordSummary, "size")
cdef Py_ssize_t S_QOFF = _slot(RecordSummary, "queue_offset")
cdef Py_ssize_t S_PHY = _slot(RecordSummary, "phy_offset")
cdef Py_ssize_t S_BORN = _slot(RecordSummary, "born_timestamp")
cdef Py_ssize_t S_STORE = _slot(RecordSummary, "store_timestamp")
cdef Py_ssize_t S_RECONSUME = _slot(RecordSummary, "reconsume_times")
cdef Py_ssize_t S_MSG_ID = _slot(RecordSummary, "msg_id")
cdef object _tuple_new = tuple.__new__
cdef object _crc32 = zlib.crc32
cdef object _decode_properties = decode_properties

cdef enum:
    HEAD = 48  # TOTALSIZE .. BORNTIMESTAMP
    OVERHEAD = 91  # message.RECORD_OVERHEAD_V4
    BORN_V6 = 0x10
    STORE_V6 = 0x20
    PYBUF_READ = 0x100

cdef uint32_t MAGIC = 0xDAA320A7
cdef bytes _UNIQ_MARK = b"UNIQ_KEY\x01"
cdef bytes _SEP = b"\x02"


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t _i32(const uint8_t* p) noexcept nogil:
    return <int32_t>_u32(p)


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef extern from *:
    """
    /* CRC-32 (zlib's, the record's BODYCRC): the body folded 64 bytes at a time with
       carry-less multiplies where the CPU has them (Intel's "Fast CRC Computation for
       Generic Polynomials Using PCLMULQDQ", the Linux kernel's crc32-pclmul and
       Chromium's zlib constants), the last bytes of it by the byte table. Elsewhere
       kairos_crc_simd stays 0 and the caller uses zlib.crc32. */
    #include <stddef.h>
    #include <stdint.h>
    static uint32_t kairos_crc_table[256];
    static int kairos_crc_simd = 0;

    static uint32_t kairos_crc_bytes(uint32_t crc, const uint8_t *p, size_t n) {
        crc = ~crc;
        while (n--) crc = kairos_crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        return ~crc;
    }

    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    __attribute__((target("pclmul,sse4.1")))
    static uint32_t kairos_crc_fold(const uint8_t *buf, size_t len, uint32_t crc) {
        /* len >= 64, a multiple of 16; crc and the result in the inverted (internal) form */
        static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
        static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
        static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
        static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
        __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
        x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
        x0 = _mm_load_si128((const __m128i *)k1k2);
        buf += 64;
        len -= 64;
        while (len >= 64) {
            x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
            x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
            x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
            x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
            x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
            x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
            x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
            x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
            y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
            y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
            y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
            y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
            x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
            x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
            x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
            x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
            buf += 64;
            len -= 64;
        }
        x0 = _mm_load_si128((const __m128i *)k3k4);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
        while (len >= 16) {
            x2 = _mm_loadu_si128((const __m128i *)buf);
            x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
            x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
            x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
            buf += 16;
            len -= 16;
        }
        x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
        x3 = _mm_setr_epi32(~0, 0, ~0, 0);
        x1 = _mm_srli_si128(x1, 8);
        x1 = _mm_xor_si128(x1, x2);
        x0 = _mm_loadl_epi64((const __m128i *)k5k0);
        x2 = _mm_srli_si128(x1, 4);
        x1 = _mm_and_si128(x1, x3);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_xor_si128(x1, x2);
        x0 = _mm_load_si128((const __m128i *)poly);
        x2 = _mm_and_si128(x1, x3);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
        x2 = _mm_and_si128(x2, x3);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x1 = _mm_xor_si128(x1, x2);
        return (uint32_t)_mm_extract_epi32(x1, 1);
    }
    #endif

    static void kairos_crc_init(void) {
        uint32_t n, c;
        int k;
        for (n = 0; n < 256; n++) {
            c = n;
            for (k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            kairos_crc_table[n] = c;
        }
    #if defined(__GNUC__) && defined(__x86_64__)
        __builtin_cpu_init();
        kairos_crc_simd = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    #endif
    }

    /* zlib's crc32(0, p, n), for kairos_crc_simd only */
    static uint32_t kairos_crc32(const uint8_t *p, size_t n) {
        uint32_t crc = 0;
    #if defined(__GNUC__) && defined(__x86_64__)
        if (n >= 64) {
            size_t chunk = n & ~(size_t)15;
            crc = ~kairos_crc_fold(p, chunk, 0xFFFFFFFFu);
            p += chunk;
            n -= chunk;
        }
    #endif
        return kairos_crc_bytes(crc, p, n);
    }
    """
    int kairos_crc_simd
    void kairos_crc_init()
    uint32_t kairos_crc32(const uint8_t* p, size_t n) nogil


kairos_crc_init()


cdef inline int _crc(const uint8_t* p, Py_ssize_t n) except -1:
    """``zlib.crc32`` of the ``n`` bytes at ``p``, as the record's BODYCRC (31 bits)."""
    if kairos_crc_simd:
        return <int>(kairos_crc32(p, <size_t>n) & 0x7FFFFFFF)
    return _crc32(PyMemoryView_FromMemory(<char*>p, n, PYBUF_READ)) & 0x7FFFFFFF


# ------------------------------------------------------------------ encode


def encode_record(
    *,
    topic,
    body,
    properties,
    queue_id,
    flag,
    queue_offset,
    physical_offset,
    sys_flag,
    born_timestamp,
    born_host,
    store_timestamp,
    store_host,
    reconsume_times,
    prepared_transaction_offset=0,
    crc=None,
):
    """``message.encode_record``: one record in one allocation."""
    cdef int32_t c_qid, c_flag, c_sys, c_bport, c_sport, c_recon, c_crc
    cdef int64_t c_qoff, c_phy, c_born, c_store, c_prep
    bh_ip, bh_port = born_host
    sh_ip, sh_port = store_host
    if (
        type(topic) is not bytes
        or type(body) is not bytes
        or type(properties) is not bytes
        or type(bh_ip) is not bytes
        or type(sh_ip) is not bytes
    ):
        return _fallback_encode(topic, body, properties, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, crc)
    cdef Py_ssize_t bl = PyBytes_GET_SIZE(bh_ip), sl = PyBytes_GET_SIZE(sh_ip)
    cdef Py_ssize_t tl = PyBytes_GET_SIZE(topic), pl = PyBytes_GET_SIZE(properties)
    cdef Py_ssize_t nb = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t total = OVERHEAD + nb + tl + pl + bl - 4 + sl - 4
    if (bl != 4 and bl != 16) or (sl != 4 and sl != 16) or tl > 255 or pl > 65535:
        return _fallback_encode(topic, body, properties, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, crc)
    try:
        c_qid, c_flag, c_sys = queue_id, flag, sys_flag
        c_qoff, c_phy, c_born = queue_offset, physical_offset, born_timestamp
        c_bport, c_sport, c_store = bh_port, sh_port, store_timestamp
        c_recon, c_prep = reconsume_times, prepared_transaction_offset
        c_crc = _crc(<const uint8_t*>PyBytes_AS_STRING(body), nb) if crc is None else crc
    except (OverflowError, TypeError):  # struct's error, from the reference
        return _fallback_encode(topic, body, properties, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, crc)
    if total > 0x7FFFFFFF or nb > 0x7FFFFFFF:
        return _fallback_encode(topic, body, properties, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, crc)
    c_sys = (c_sys & ~(BORN_V6 | STORE_V6)) | (BORN_V6 if bl == 16 else 0) | (
        STORE_V6 if sl == 16 else 0
    )
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    _put32(p, <uint32_t>total)
    _put32(p + 4, MAGIC)
    _put32(p + 8, <uint32_t>c_crc)
    _put32(p + 12, <uint32_t>c_qid)
    _put32(p + 16, <uint32_t>c_flag)
    _put64(p + 20, <uint64_t>c_qoff)
    _put64(p + 28, <uint64_t>c_phy)
    _put32(p + 36, <uint32_t>c_sys)
    _put64(p + 40, <uint64_t>c_born)
    cdef Py_ssize_t q = HEAD
    memcpy(p + q, PyBytes_AS_STRING(bh_ip), bl)
    _put32(p + q + bl, <uint32_t>c_bport)
    q += bl + 4
    _put64(p + q, <uint64_t>c_store)
    memcpy(p + q + 8, PyBytes_AS_STRING(sh_ip), sl)
    _put32(p + q + 8 + sl, <uint32_t>c_sport)
    q += 12 + sl
    _put32(p + q, <uint32_t>c_recon)
    _put64(p + q + 4, <uint64_t>c_prep)
    _put32(p + q + 12, <uint32_t>nb)
    memcpy(p + q + 16, PyBytes_AS_STRING(body), nb)
    q += 16 + nb
    p[q] = <uint8_t>tl
    memcpy(p + q + 1, PyBytes_AS_STRING(topic), tl)
    q += 1 + tl
    p[q] = <uint8_t>(pl >> 8)
    p[q + 1] = <uint8_t>pl
    memcpy(p + q + 2, PyBytes_AS_STRING(properties), pl)
    return out


cdef object _fallback_encode(topic, body, properties, queue_id, flag, queue_offset,
                             physical_offset, sys_flag, born_timestamp, born_host,
                             store_timestamp, store_host, reconsume_times,
                             prepared_transaction_offset, crc):
    return _pure.encode_record(
        topic=topic,
        body=body,
        properties=properties,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        crc=crc,
    )


# ------------------------------------------------------------------ decode


cdef object _decode(const uint8_t* b, Py_ssize_t n, Py_ssize_t pos, bint check_crc):
    """The record at ``pos`` as a MessageExt, or None where the reference would raise."""
    if pos < 0 or n - pos < HEAD or _u32(b + pos + 4) != MAGIC:
        return None
    cdef Py_ssize_t total = _i32(b + pos), end = pos + total
    if total < OVERHEAD or end > n:
        return None
    cdef int32_t sysflag = _i32(b + pos + 36)
    cdef Py_ssize_t p = pos + HEAD
    cdef Py_ssize_t bl = 16 if sysflag & BORN_V6 else 4
    cdef Py_ssize_t sl = 16 if sysflag & STORE_V6 else 4
    if p + bl + 12 + sl + 20 > n:
        return None
    born_host = (PyBytes_FromStringAndSize(<const char*>b + p, bl), _i32(b + p + bl))
    p += bl + 4
    cdef int64_t store_ts = _i64(b + p)
    p += 8
    store_host = (PyBytes_FromStringAndSize(<const char*>b + p, sl), _i32(b + p + sl))
    p += sl + 4
    cdef int32_t reconsume = _i32(b + p)
    cdef int64_t prep = _i64(b + p + 4)
    cdef Py_ssize_t body_len = _i32(b + p + 12)
    p += 16
    if body_len < 0 or p + body_len > end:
        return None
    cdef Py_ssize_t body_at = p
    p += body_len
    if p >= n:
        return None
    cdef Py_ssize_t tlen = b[p], topic_at = p + 1
    p += 1 + tlen
    if p + 2 > n:
        return None
    cdef Py_ssize_t plen = (<Py_ssize_t>b[p] << 8) | b[p + 1]
    p += 2
    if p + plen != end:
        return None
    cdef int32_t crc = _i32(b + pos + 8)
    if check_crc and _crc(b + body_at, body_len) != crc:
        return None
    try:
        topic = PyUnicode_DecodeUTF8(<const char*>b + topic_at, tlen, NULL)
        props = PyUnicode_DecodeUTF8(<const char*>b + p, plen, NULL)
    except UnicodeDecodeError:
        return None
    return MessageExt(
        topic,
        PyBytes_FromStringAndSize(<const char*>b + body_at, body_len),
        _i32(b + pos + 12),
        _i32(b + pos + 16),
        _i64(b + pos + 20),
        _i64(b + pos + 28),
        sysflag,
        _i64(b + pos + 40),
        born_host,
        store_ts,
        store_host,
        reconsume,
        prep,
        _decode_properties(props),
        crc,
        total,
    )


def decode_record(buf, Py_ssize_t pos=0, *, bint check_crc=False):
    """``message.decode_record``."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        m = _decode(<const uint8_t*>view.buf, view.len, pos, check_crc)
    finally:
        PyBuffer_Release(&view)
    if m is None:
        return _pure.decode_record(buf, pos, check_crc=check_crc)  # raises its error
    return m


def decode_records(buf):
    """``message.decode_records``: stops silently at the first bad record."""
    cdef Py_buffer view
    cdef list out = []
    cdef Py_ssize_t pos = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        while pos < view.len:
            m = _decode(<const uint8_t*>view.buf, view.len, pos, False)
            if m is None:
                break
            out.append(m)
            pos += m.store_size
    finally:
        PyBuffer_Release(&view)
    return out


def view_record(buf):
    """``message.view_record``."""
    if type(buf) is not bytes:
        return _pure.view_record(buf)
    cdef const uint8_t* b = <const uint8_t*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    if n < HEAD or _u32(b + 4) != MAGIC:
        return _pure.view_record(buf)
    cdef Py_ssize_t total = _i32(b)
    if total < OVERHEAD or total > n:
        return _pure.view_record(buf)
    cdef int32_t sysflag = _i32(b + 36)
    cdef Py_ssize_t born_end = HEAD + (20 if sysflag & BORN_V6 else 8)
    cdef Py_ssize_t rpos = born_end + 8 + (20 if sysflag & STORE_V6 else 8)
    if rpos + 16 > n:
        return _pure.view_record(buf)
    cdef Py_ssize_t body_len = _i32(b + rpos + 12)
    cdef Py_ssize_t body_start = rpos + 16, body_end = body_start + body_len
    if body_len < 0 or body_end > total or body_end >= n:
        return _pure.view_record(buf)
    cdef Py_ssize_t tlen = b[body_end], ppos = body_end + 1 + tlen
    if ppos + 2 > n:
        return _pure.view_record(buf)
    cdef Py_ssize_t plen = (<Py_ssize_t>b[ppos] << 8) | b[ppos + 1]
    ppos += 2
    if ppos + plen != total:
        return _pure.view_record(buf)
    try:
        topic = PyUnicode_DecodeUTF8(<const char*>b + body_end + 1, tlen, NULL)
    except UnicodeDecodeError:
        return _pure.view_record(buf)
    # the named tuple made by tuple.__new__ (what its generated __new__ does, without
    # that Python frame): the same RecordView
    return _tuple_new(RecordView, (
        total,
        _i32(b + 16),
        sysflag,
        _i64(b + 40),
        born_end,
        rpos,
        _i32(b + rpos),
        body_start,
        body_end,
        topic,
        ppos,
        ppos + plen,
    ))


def patched_size(view, topic, properties, store_host):
    """``message.patched_size``."""
    cdef tuple t
    cdef int64_t be, bs, bn
    if type(view) is RecordView and type(topic) is bytes and type(properties) is bytes:
        # the view's fields by index (the named tuple's own layout), not by property
        t = <tuple>view
        sh_ip = store_host[0]
        if type(sh_ip) is bytes and type(t[8]) is int and type(t[7]) is int and type(t[4]) is int:
            try:
                be, bs, bn = t[8], t[7], t[4]
            except OverflowError:
                be = bs = bn = -1
            if 0 <= bs <= 0x7FFFFFFF and 0 <= be <= 0x7FFFFFFF and 0 <= bn <= 0x7FFFFFFF:
                return (
                    OVERHEAD
                    + (be - bs)
                    + PyBytes_GET_SIZE(topic)
                    + PyBytes_GET_SIZE(properties)
                    + (bn - HEAD - 8)
                    + PyBytes_GET_SIZE(sh_ip)
                    - 4
                )
    return (
        OVERHEAD
        + (view.body_end - view.body_start)
        + len(topic)
        + len(properties)
        + (view.born_end - HEAD - 8)
        + len(store_host[0])
        - 4
    )


def patch_record(
    buf,
    view,
    *,
    topic,
    properties,
    queue_id,
    queue_offset,
    physical_offset,
    store_timestamp,
    store_host,
):
    """``message.patch_record``: the re-addressed record in one allocation."""
    cdef int32_t c_qid, c_sport, c_flag, c_sys
    cdef int64_t c_qoff, c_phy, c_store, c_born
    cdef Py_ssize_t body_start, body_end, born_end, rpos
    sh_ip, sh_port = store_host
    if (
        type(buf) is not bytes
        or type(topic) is not bytes
        or type(properties) is not bytes
        or type(sh_ip) is not bytes
    ):
        return _fallback_patch(buf, view, topic, properties, queue_id, queue_offset,
                               physical_offset, store_timestamp, store_host)
    cdef Py_ssize_t sl = PyBytes_GET_SIZE(sh_ip), tl = PyBytes_GET_SIZE(topic)
    cdef Py_ssize_t pl = PyBytes_GET_SIZE(properties), n = PyBytes_GET_SIZE(buf)
    cdef tuple t
    try:
        c_qid, c_qoff, c_phy, c_store, c_sport = (
            queue_id, queue_offset, physical_offset, store_timestamp, sh_port
        )
        if type(view) is RecordView:  # by index (the named tuple's layout), no properties
            t = <tuple>view
            c_flag, c_sys, c_born = t[1], t[2], t[3]
            body_start, body_end, born_end, rpos = t[7], t[8], t[4], t[5]
        else:
            c_flag, c_sys, c_born = view.flag, view.sys_flag, view.born_timestamp
            body_start, body_end, born_end, rpos = (
                view.body_start, view.body_end, view.born_end, view.reconsume_pos
            )
    except (OverflowError, TypeError):
        return _fallback_patch(buf, view, topic, properties, queue_id, queue_offset,
                               physical_offset, store_timestamp, store_host)
    cdef Py_ssize_t nb = body_end - body_start
    cdef Py_ssize_t total = OVERHEAD + nb + tl + pl + (born_end - HEAD - 8) + sl - 4
    if (
        (sl != 4 and sl != 16)
        or tl > 255
        or pl > 65535
        or total > 0x7FFFFFFF
        or body_start < 4
        or nb < 0
        or body_end > n
        or born_end < HEAD
        or born_end > n
        or rpos < 0
        or rpos + 4 > n
    ):
        return _fallback_patch(buf, view, topic, properties, queue_id, queue_offset,
                               physical_offset, store_timestamp, store_host)
    cdef const uint8_t* src = <const uint8_t*>PyBytes_AS_STRING(buf)
    c_sys = (c_sys & ~STORE_V6) | (STORE_V6 if sl == 16 else 0)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    _put32(p, <uint32_t>total)
    _put32(p + 4, MAGIC)
    _put32(p + 8, <uint32_t>_crc(src + body_start, nb))  # computed again (message.patch_record)
    _put32(p + 12, <uint32_t>c_qid)
    _put32(p + 16, <uint32_t>c_flag)
    _put64(p + 20, <uint64_t>c_qoff)
    _put64(p + 28, <uint64_t>c_phy)
    _put32(p + 36, <uint32_t>c_sys)
    _put64(p + 40, <uint64_t>c_born)
    cdef Py_ssize_t q = HEAD
    memcpy(p + q, src + HEAD, born_end - HEAD)  # born host and port, as stored
    q = born_end
    _put64(p + q, <uint64_t>c_store)
    memcpy(p + q + 8, PyBytes_AS_STRING(sh_ip), sl)
    _put32(p + q + 8 + sl, <uint32_t>c_sport)
    q += 12 + sl
    memcpy(p + q, src + rpos, 4)  # the reconsume count, as stored
    _put64(p + q + 4, 0)  # no prepared-transaction offset
    memcpy(p + q + 12, src + body_start - 4, nb + 4)  # BODYLEN and the body
    q += 16 + nb
    p[q] = <uint8_t>tl
    memcpy(p + q + 1, PyBytes_AS_STRING(topic), tl)
    q += 1 + tl
    p[q] = <uint8_t>(pl >> 8)
    p[q + 1] = <uint8_t>pl
    memcpy(p + q + 2, PyBytes_AS_STRING(properties), pl)
    return out


cdef object _fallback_patch(buf, view, topic, properties, queue_id, queue_offset,
                            physical_offset, store_timestamp, store_host):
    return _pure.patch_record(
        buf,
        view,
        topic=topic,
        properties=properties,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_timestamp=store_timestamp,
        store_host=store_host,
    )


# ------------------------------------------------------------------ summaries, properties


cdef Py_ssize_t _find(const uint8_t* b, Py_ssize_t start, Py_ssize_t end,
                      const uint8_t* sub, Py_ssize_t m) noexcept:
    """``bytes.find(sub, start, end)`` (``m`` >= 1)."""
    cdef const uint8_t* hit
    while start + m <= end:
        hit = <const uint8_t*>memchr(b + start, sub[0], end - start - m + 1)
        if hit == NULL:
            return -1
        if memcmp(hit, sub, m) == 0:
            return hit - b
        start = hit - b + 1
    return -1


def summarize_records(buf):
    """``message.summarize_records``."""
    cdef Py_buffer view
    cdef list out = []
    cdef Py_ssize_t pos = 0, n, total, end, body_len, tpos, ppos, i, j
    cdef int32_t sysflag
    cdef const uint8_t* b
    cdef const uint8_t* mark = <const uint8_t*>PyBytes_AS_STRING(_UNIQ_MARK)
    cdef Py_ssize_t ml = PyBytes_GET_SIZE(_UNIQ_MARK)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t*>view.buf
        n = view.len
        while pos + OVERHEAD <= n:
            total = _i32(b + pos)
            end = pos + total
            sysflag = _i32(b + pos + 36)
            if sysflag & (BORN_V6 | STORE_V6) or total < OVERHEAD or end > n:
                break
            body_len = _i32(b + pos + 84)
            tpos = pos + 88 + body_len
            if body_len < 0 or tpos >= end:
                break
            ppos = tpos + 1 + b[tpos] + 2
            i = _find(b, ppos, end, mark, ml) if ppos >= 0 else -1
            while i > ppos and b[i - 1] != 0x02:
                i = _find(b, i + 1, end, mark, ml)
            msg_id = ""
            if i >= 0:
                j = _find(b, i, end, <const uint8_t*>PyBytes_AS_STRING(_SEP), 1)
                try:
                    msg_id = PyUnicode_DecodeUTF8(
                        <const char*>b + i + ml, (end if j < 0 else j) - i - ml, NULL
                    )
                except UnicodeDecodeError:
                    break
            if not msg_id:
                msg_id = create_offset_msg_id(
                    PyBytes_FromStringAndSize(<const char*>b + pos + 64, 4),
                    _i32(b + pos + 68),
                    _i64(b + pos + 28),
                )
            # RecordSummary(...) without its __init__: each field put in its slot
            summary = _fresh(RecordSummary)
            _put(summary, S_SIZE, total)
            _put(summary, S_QOFF, _i64(b + pos + 20))
            _put(summary, S_PHY, _i64(b + pos + 28))
            _put(summary, S_BORN, _i64(b + pos + 40))
            _put(summary, S_STORE, _i64(b + pos + 56))
            _put(summary, S_RECONSUME, _i32(b + pos + 72))
            _put(summary, S_MSG_ID, msg_id)
            out.append(summary)
            pos = end
    finally:
        PyBuffer_Release(&view)
    return out


def record_properties(buf, Py_ssize_t pos=0):
    """``message.record_properties``: ``{}`` when the record's lengths do not fit."""
    cdef Py_buffer view
    cdef Py_ssize_t n, total, blen_pos, body_len, tpos, ppos, plen
    cdef const uint8_t* b
    if pos < 0:
        return _pure.record_properties(buf, pos)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t*>view.buf
        n = view.len
        if pos + 40 > n:
            return {}
        total = _i32(b + pos)
        blen_pos = (
            pos
            + 84
            + (12 if _i32(b + pos + 36) & BORN_V6 else 0)
            + (12 if _i32(b + pos + 36) & STORE_V6 else 0)
        )
        if blen_pos + 4 > n:
            return {}
        body_len = _i32(b + blen_pos)
        tpos = blen_pos + 4 + body_len
        if tpos < 0 or tpos >= n:
            return {}
        ppos = tpos + 1 + b[tpos]
        if ppos + 2 > n:
            return {}
        plen = (<Py_ssize_t>b[ppos] << 8) | b[ppos + 1]
        if body_len < 0 or ppos + 2 + plen != pos + total or pos + total > n:
            return {}
        try:
            text = PyUnicode_DecodeUTF8(<const char*>b + ppos + 2, plen, NULL)
        except UnicodeDecodeError:
            return {}
    finally:
        PyBuffer_Release(&view)
    return _decode_properties(text)
