"""Message records in RocketMQ's commit-log layout, batch bodies, and hashing helpers.

Owns: ``MessageExt`` (a decoded record), ``encode_record`` (what the store appends and
what a pull response carries), ``decode_record``/``decode_records``, ``record_properties``
(a record's properties without its body: the SQL92 filter's input), the batch-body codec
(SEND_BATCH_MESSAGE / V2 ``m=true``), body CRC and Java's ``String.hashCode`` for tags.

Invariants:
* Record layout is RocketMQ ``MessageDecoder`` magic V1 (1-byte topic length, topics <= 127 B),
  the layout ``schema.MessageRecord`` declares; the ``struct`` fast paths here are held
  to it by a parity test.
* ``decode_records`` stops at the first record whose size, magic or lengths do not fit
  the buffer, like the Java client; ``decode_record`` with ``check_crc`` raises instead.
* ``view_record``/``patch_record`` re-address a stored record (the scheduler's re-put)
  without a decode/encode round trip; a parity test holds them to ``encode_record``.
* A record is self-consistent: ``encode_record`` derives the BORNHOST_V6/STOREHOST_V6
  sys-flag bits from the lengths of the addresses it writes (4 or 16 bytes), whatever
  bits the caller passed, so the decoder and recovery always find the body where it is.
* This module is the reference core. Its native twin ``_message.pyx`` replaces the record
  functions (encode, decode, view, patch, summaries, properties read) when ``native.py``
  chooses it; ``reference`` keeps the pure ones and tests/protocol/test_native_message.py
  holds the twin to them. The twin hands every record it finds out of shape to the
  function here, so the error rules stay written once.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType, SimpleNamespace
from typing import NamedTuple

from . import native
from .codes import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from .errors import MessageDecodeError
from .ids import create_offset_msg_id
from .properties import KEYS, TAGS, UNIQ_KEY, decode_properties
from .schema import MESSAGE_MAGIC_CODE

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYOFFSET SYSFLAG BORNTS
_HEAD = struct.Struct(">iIiiiqqiq")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">H")
_ZERO64 = bytes(8)
_HOST_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
RECORD_OVERHEAD_V4 = 91  # record size = 91 + body + topic + properties with IPv4 hosts

# offset of STORETIMESTAMP inside a record with an IPv4 born host
STORE_TIMESTAMP_POS = 56


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` (signed 32-bit over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def _tags_hash(tags: str) -> int:
    return java_string_hash(tags)


def tags_code(tags: str | None) -> int:
    """Consume-queue tagsCode of a TAGS value (cached: a few tags repeat on every message)."""
    return _tags_hash(tags) if tags else 0


@dataclass(slots=True)
class MessageExt:
    """A stored message as consumers and the broker see it."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    store_timestamp: int = 0
    store_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(KEYS)

    @property
    def offset_msg_id(self) -> str:
        return create_offset_msg_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY if the producer set one, else the offset msg id (Java's getMsgId)."""
        return self.properties.get(UNIQ_KEY) or self.offset_msg_id


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[bytes, int],
    store_timestamp: int,
    store_host: tuple[bytes, int],
    reconsume_times: int,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """Encode one record. ``topic``/``properties`` are UTF-8 bytes (lengths <= 127/32767).

    The host-format bits of ``sys_flag`` are set from the address lengths; an address
    that is neither 4 nor 16 bytes raises ``ValueError`` (as do out-of-range integers,
    as ``struct.error``).
    """
    bh_ip, bh_port = born_host
    sh_ip, sh_port = store_host
    if len(bh_ip) not in (4, 16) or len(sh_ip) not in (4, 16):
        raise ValueError(f"host addresses must be 4 or 16 bytes, got {len(bh_ip)}/{len(sh_ip)}")
    sys_flag = (
        (sys_flag & ~_HOST_V6_BITS)
        | (SYSFLAG_BORNHOST_V6 if len(bh_ip) == 16 else 0)
        | (SYSFLAG_STOREHOST_V6 if len(sh_ip) == 16 else 0)
    )
    total = RECORD_OVERHEAD_V4 + len(body) + len(topic) + len(properties)
    total += len(bh_ip) - 4 + len(sh_ip) - 4
    if crc is None:
        crc = zlib.crc32(body) & 0x7FFFFFFF
    return b"".join(
        (
            _HEAD.pack(
                total,
                MESSAGE_MAGIC_CODE,
                crc,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
            ),
            bh_ip,
            _I32.pack(bh_port),
            _I64.pack(store_timestamp),
            sh_ip,
            _I32.pack(sh_port),
            _I32.pack(reconsume_times),
            _I64.pack(prepared_transaction_offset),
            _I32.pack(len(body)),
            body,
            bytes((len(topic),)),
            topic,
            _I16.pack(len(properties)),
            properties,
        )
    )


def decode_record(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = False) -> MessageExt:
    """Decode the record at ``pos``; raise ``MessageDecodeError`` if it does not fit."""
    n = len(buf)
    if n - pos < _HEAD.size:
        raise MessageDecodeError(
            f"record at {pos}: {n - pos} bytes left, header needs {_HEAD.size}"
        )
    (total, magic, crc, qid, flag, qoff, phy, sysflag, born_ts) = _HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise MessageDecodeError(f"record at {pos}: bad magic {magic:#x}")
    end = pos + total
    if total < RECORD_OVERHEAD_V4 or end > n:
        raise MessageDecodeError(f"record at {pos}: size {total} does not fit")
    p = pos + _HEAD.size
    try:
        blen = 16 if sysflag & SYSFLAG_BORNHOST_V6 else 4
        born_host = (bytes(buf[p : p + blen]), _I32.unpack_from(buf, p + blen)[0])
        p += blen + 4
        (store_ts,) = _I64.unpack_from(buf, p)
        p += 8
        slen = 16 if sysflag & SYSFLAG_STOREHOST_V6 else 4
        store_host = (bytes(buf[p : p + slen]), _I32.unpack_from(buf, p + slen)[0])
        p += slen + 4
        (reconsume,) = _I32.unpack_from(buf, p)
        (prep,) = _I64.unpack_from(buf, p + 4)
        (body_len,) = _I32.unpack_from(buf, p + 12)
        p += 16
        if body_len < 0 or p + body_len > end:
            raise MessageDecodeError(f"record at {pos}: body length {body_len} does not fit")
        body = bytes(buf[p : p + body_len])
        p += body_len
        tlen = buf[p]
        topic = bytes(buf[p + 1 : p + 1 + tlen]).decode()
        p += 1 + tlen
        (plen,) = _I16.unpack_from(buf, p)
        p += 2
        if p + plen != end:
            raise MessageDecodeError(f"record at {pos}: lengths do not add up to size {total}")
        props = decode_properties(bytes(buf[p : p + plen]).decode())
    except (IndexError, struct.error, UnicodeDecodeError) as err:
        raise MessageDecodeError(f"record at {pos}: truncated or corrupt ({err})") from err
    if check_crc and body_crc(body) != crc:
        raise MessageDecodeError(f"record at {pos}: body CRC mismatch")
    return MessageExt(
        topic=topic,
        body=body,
        queue_id=qid,
        flag=flag,
        queue_offset=qoff,
        commit_log_offset=phy,
        sys_flag=sysflag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prep,
        properties=props,
        body_crc=crc,
        store_size=total,
    )


_decode_record = decode_record  # the reference's own (the public name may be the twin's)


def decode_records(buf: bytes | memoryview) -> list[MessageExt]:
    """Decode back-to-back records (a pull body); stop silently at the first bad one."""
    out: list[MessageExt] = []
    pos, n = 0, len(buf)
    while pos < n:
        try:
            m = _decode_record(buf, pos)
        except MessageDecodeError:
            break
        out.append(m)
        pos += m.store_size
    return out


class RecordView(NamedTuple):
    """Where the parts of one stored record are (``view_record``), for ``patch_record``."""

    total: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_end: int  # end of BORNHOST + port (STORETIMESTAMP follows)
    reconsume_pos: int  # RECONSUMETIMES
    reconsume_times: int
    body_start: int  # BODYLEN is the 4 bytes before it
    body_end: int
    topic: str
    props_start: int
    props_end: int


def view_record(buf: bytes) -> RecordView:
    """The layout of the one record filling ``buf``, checked as ``decode_record`` checks
    it (magic, lengths adding up, UTF-8 topic), without building a message or copying
    the body; raises ``MessageDecodeError``."""
    n = len(buf)
    if n < _HEAD.size:
        raise MessageDecodeError(f"record: {n} bytes, header needs {_HEAD.size}")
    total, magic, _crc, _qid, flag, _qoff, _phy, sysflag, born_ts = _HEAD.unpack_from(buf)
    if magic != MESSAGE_MAGIC_CODE:
        raise MessageDecodeError(f"record: bad magic {magic:#x}")
    if total < RECORD_OVERHEAD_V4 or total > n:
        raise MessageDecodeError(f"record: size {total} does not fit")
    try:
        born_end = _HEAD.size + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8)
        rpos = born_end + 8 + (20 if sysflag & SYSFLAG_STOREHOST_V6 else 8)
        (reconsume,) = _I32.unpack_from(buf, rpos)
        (body_len,) = _I32.unpack_from(buf, rpos + 12)
        body_start = rpos + 16
        body_end = body_start + body_len
        if body_len < 0 or body_end > total:
            raise MessageDecodeError(f"record: body length {body_len} does not fit")
        tlen = buf[body_end]
        topic = buf[body_end + 1 : body_end + 1 + tlen].decode()
        ppos = body_end + 1 + tlen
        (plen,) = _I16.unpack_from(buf, ppos)
        ppos += 2
        if ppos + plen != total:
            raise MessageDecodeError(f"record: lengths do not add up to size {total}")
    except (IndexError, struct.error, UnicodeDecodeError) as err:
        raise MessageDecodeError(f"record: truncated or corrupt ({err})") from err
    return RecordView(
        total,
        flag,
        sysflag,
        born_ts,
        born_end,
        rpos,
        reconsume,
        body_start,
        body_end,
        topic,
        ppos,
        ppos + plen,
    )


def patched_size(
    view: RecordView, topic: bytes, properties: bytes, store_host: tuple[bytes, int]
) -> int:
    """The size of ``patch_record``'s result."""
    return (
        RECORD_OVERHEAD_V4
        + (view.body_end - view.body_start)
        + len(topic)
        + len(properties)
        + (view.born_end - _HEAD.size - 8)
        + len(store_host[0])
        - 4
    )


_patched_size = patched_size  # the reference's own (the public name may be the twin's)


def patch_record(
    buf: bytes,
    view: RecordView,
    *,
    topic: bytes,
    properties: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: tuple[bytes, int],
) -> bytes:
    """A new record from the one in ``buf``: the same body, flag, born time and host and
    reconsume count, with a new topic, queue, properties, offsets, store time and host,
    the body CRC computed again and no prepared-transaction offset. Byte for byte what
    ``encode_record`` writes for those fields (a parity test holds it). The CRC is not
    copied: the source is read without a check (the fire and drain reads), and a copy
    with a mismatching CRC would be where recovery's scan cuts the log
    (``server/store/record_check.py``), dropping every record after it."""
    sh_ip, sh_port = store_host
    if len(sh_ip) not in (4, 16):
        raise ValueError(f"host addresses must be 4 or 16 bytes, got {len(sh_ip)}")
    mv = memoryview(buf)
    body = mv[view.body_start : view.body_end]
    sys_flag = (view.sys_flag & ~SYSFLAG_STOREHOST_V6) | (
        SYSFLAG_STOREHOST_V6 if len(sh_ip) == 16 else 0
    )
    return b"".join(
        (
            _HEAD.pack(
                _patched_size(view, topic, properties, store_host),
                MESSAGE_MAGIC_CODE,
                zlib.crc32(body) & 0x7FFFFFFF,
                queue_id,
                view.flag,
                queue_offset,
                physical_offset,
                sys_flag,
                view.born_timestamp,
            ),
            mv[_HEAD.size : view.born_end],
            _I64.pack(store_timestamp),
            sh_ip,
            _I32.pack(sh_port),
            mv[view.reconsume_pos : view.reconsume_pos + 4],
            _ZERO64,
            mv[view.body_start - 4 : view.body_end],
            bytes((len(topic),)),
            topic,
            _I16.pack(len(properties)),
            properties,
        )
    )


# ------------------------------------------------------------------ batch bodies

_BATCH_HEAD = struct.Struct(">iiiii")  # total, magic, crc, flag, body len


@dataclass(frozen=True, slots=True)
class BatchItem:
    body: bytes
    flag: int = 0
    properties: str = ""


def encode_batch(items: list[BatchItem]) -> bytes:
    parts: list[bytes] = []
    for it in items:
        props = it.properties.encode()
        total = 4 + 4 + 4 + 4 + 4 + len(it.body) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, it.flag, len(it.body)))
        parts.append(it.body)
        parts.append(_I16.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def iter_batch(buf: bytes) -> Iterator[BatchItem]:
    """The items of a batch body one by one (a big batch is validated over several loop
    turns); raise ``MessageDecodeError`` at the first inconsistency."""
    pos, n = 0, len(buf)
    while pos < n:
        if n - pos < _BATCH_HEAD.size + 2:
            raise MessageDecodeError(f"batch item at {pos}: truncated header")
        total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(buf, pos)
        end = pos + total
        p = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or end > n or blen < 0 or p + blen + 2 > end:
            raise MessageDecodeError(f"batch item at {pos}: size {total} does not fit")
        body = buf[p : p + blen]
        p += blen
        (plen,) = _I16.unpack_from(buf, p)
        p += 2
        if p + plen != end:
            raise MessageDecodeError(f"batch item at {pos}: lengths do not add up")
        try:
            props = buf[p : p + plen].decode()
        except UnicodeDecodeError as err:
            raise MessageDecodeError(f"batch item at {pos}: properties not UTF-8") from err
        yield BatchItem(body=body, flag=flag, properties=props)
        pos = end


def decode_batch(buf: bytes) -> list[BatchItem]:
    """Decode a batch body; raise ``MessageDecodeError`` on any inconsistency."""
    out = list(iter_batch(buf))
    if not out:
        raise MessageDecodeError("empty batch")
    return out


@dataclass(frozen=True, slots=True)
class RecordSummary:
    """The fields of a stored record the broker logs, read without a full decode."""

    size: int
    queue_offset: int
    phy_offset: int
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    msg_id: str


_UNIQ_MARK = UNIQ_KEY.encode() + b"\x01"


def summarize_records(buf: bytes) -> list[RecordSummary]:
    """Summaries of back-to-back IPv4-host records (the pull path's logging); like
    ``decode_records``, stops at the first record whose lengths do not fit the buffer."""
    out: list[RecordSummary] = []
    pos, n = 0, len(buf)
    while pos + RECORD_OVERHEAD_V4 <= n:
        total, _magic, _crc, _q, _f, qoff, phy, sysflag, born = _HEAD.unpack_from(buf, pos)
        end = pos + total
        if (
            sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
            or total < RECORD_OVERHEAD_V4
            or end > n
        ):
            break
        store_ts = _I64.unpack_from(buf, pos + STORE_TIMESTAMP_POS)[0]
        reconsume = _I32.unpack_from(buf, pos + 72)[0]
        body_len = _I32.unpack_from(buf, pos + 84)[0]
        tpos = pos + 88 + body_len
        if body_len < 0 or tpos >= end:
            break
        ppos = tpos + 1 + buf[tpos] + 2
        i = buf.find(_UNIQ_MARK, ppos, end)
        while i > ppos and buf[i - 1] != 0x02:  # only a whole key (e.g. not XUNIQ_KEY)
            i = buf.find(_UNIQ_MARK, i + 1, end)
        msg_id = ""
        if i >= 0:
            j = buf.find(b"\x02", i, end)
            try:
                msg_id = buf[i + len(_UNIQ_MARK) : end if j < 0 else j].decode()
            except UnicodeDecodeError:
                break
        if not msg_id:  # no UNIQ_KEY (or an empty one, which decode_properties skips)
            msg_id = create_offset_msg_id(
                buf[pos + 64 : pos + 68], _I32.unpack_from(buf, pos + 68)[0], phy
            )
        out.append(RecordSummary(total, qoff, phy, born, store_ts, reconsume, msg_id))
        pos = end
    return out


def record_properties(buf: bytes | memoryview, pos: int = 0) -> dict[str, str]:
    """The properties of the record at ``pos`` without decoding its body (the broker's
    SQL92 filter reads these); ``{}`` if the record's lengths do not fit ``buf``."""
    try:
        total = _I32.unpack_from(buf, pos)[0]
        sysflag = _I32.unpack_from(buf, pos + 36)[0]
        blen_pos = (
            pos
            + 84
            + (12 if sysflag & SYSFLAG_BORNHOST_V6 else 0)
            + (12 if sysflag & SYSFLAG_STOREHOST_V6 else 0)
        )
        body_len = _I32.unpack_from(buf, blen_pos)[0]
        tpos = blen_pos + 4 + body_len
        ppos = tpos + 1 + buf[tpos]
        plen = _I16.unpack_from(buf, ppos)[0]
        if body_len < 0 or ppos + 2 + plen != pos + total or pos + total > len(buf):
            return {}
        return decode_properties(bytes(buf[ppos + 2 : ppos + 2 + plen]).decode())
    except (IndexError, struct.error, UnicodeDecodeError):
        return {}


# ------------------------------------------------------------------ the native twin

# The pure functions above are the reference (parity tests hold the twin to them); the
# public names become the twin's (``_message.pyx``) when protocol/native.py chooses it.
reference = SimpleNamespace(
    encode_record=encode_record,
    decode_record=decode_record,
    decode_records=decode_records,
    view_record=view_record,
    patched_size=patched_size,
    patch_record=patch_record,
    summarize_records=summarize_records,
    record_properties=record_properties,
)


def _load_twin() -> ModuleType:
    from . import _message  # type: ignore[attr-defined]

    twin: ModuleType = _message  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    encode_record = _twin.encode_record
    decode_record = _twin.decode_record
    decode_records = _twin.decode_records
    view_record = _twin.view_record
    patched_size = _twin.patched_size
    patch_record = _twin.patch_record
    summarize_records = _twin.summarize_records
    record_properties = _twin.record_properties
