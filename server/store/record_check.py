"""The one record check and the typed reasons a commit-log read or write can fail.

Owns: ``check_record`` (magic, size, body-length fit, body CRC: the rule recovery's scan,
the checked reads at client-given offsets and the index scan all apply),
``stored_physical_offset`` (the record's own offset field), ``RecordProblem``
(why an offset holds no stored message; its value is the remark a client gets) and
``WriteFailed`` (what a failed ``pwrite`` kept and dropped).

Invariant: ``check_record`` reads only inside ``buf`` and never trusts a size before
checking it against the buffer, so a hostile 4-byte size cannot make it allocate.

``stored_physical_offset`` here is the reference; its native twin (``_record_check.pyx``,
chosen by ``protocol/native.py``) reads the same field in C
(tests/server/test_native_timer_fire.py).
"""

from __future__ import annotations

import struct
import zlib
from enum import Enum
from types import ModuleType, SimpleNamespace

from kairosmq.protocol import native
from kairosmq.protocol.schema import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

_SIZE_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PHY_OFFSET_POS = 28  # the record's own PHYSICALOFFSET field
_BODY_LEN_POS_V4 = 84  # TOTALSIZE..PREPARED_TX_OFFSET with IPv4 hosts
MIN_RECORD = 91


class RecordProblem(Enum):
    """Why the bytes at a commit-log offset are not a stored message (checked reads)."""

    OUT_OF_RANGE = "the offset is outside the commit log"
    BLANK = "the offset holds a segment end marker, not a message"
    BAD_MAGIC = "no message record starts there (bad magic code)"
    BAD_SIZE = "the record size there is impossible"
    BAD_LENGTHS = "the record's body length does not fit its size"
    BAD_CRC = "the record's body CRC does not match"
    NOT_RECORD_START = "no stored message starts at that offset"
    UNREADABLE = "the record cannot be decoded"


# check_record's negative answers, in the order it checks
_TRUNCATED, _BAD_MAGIC, _BAD_SIZE, _BAD_LENGTHS, _BAD_CRC = -1, -2, -3, -4, -5
PROBLEMS = {
    _TRUNCATED: RecordProblem.BAD_SIZE,
    _BAD_MAGIC: RecordProblem.BAD_MAGIC,
    _BAD_SIZE: RecordProblem.BAD_SIZE,
    _BAD_LENGTHS: RecordProblem.BAD_LENGTHS,
    _BAD_CRC: RecordProblem.BAD_CRC,
}


def stored_physical_offset(buf: bytes | bytearray) -> int | None:
    """The PHYSICALOFFSET field of the record at the start of ``buf`` (None if too short):
    bytes read at an offset are the record stored there only if it names that offset."""
    if len(buf) < _PHY_OFFSET_POS + 8:
        return None
    return int(_I64.unpack_from(buf, _PHY_OFFSET_POS)[0])


def check_record(buf: bytes | bytearray, pos: int) -> int:
    """The one record check: size of a valid record at ``pos`` in ``buf``; 0 for a BLANK
    marker; negative if invalid (-1 truncated, -2 magic, -3 size, -4 lengths, -5 CRC).

    A record whose sysFlag claims IPv6 hosts it does not have (written by a broker that
    trusted a client's bits, before ``encode_record`` derived them) is accepted when it
    checks out with IPv4 hosts, so recovery does not cut every later message at it.
    """
    if pos + 8 > len(buf):
        return _TRUNCATED
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return 0
    if magic != MESSAGE_MAGIC_CODE:
        return _BAD_MAGIC
    if size < MIN_RECORD:
        return _BAD_SIZE
    if pos + size > len(buf):
        return _TRUNCATED
    flags = _I32.unpack_from(buf, pos + 36)[0]
    blen_pos = _BODY_LEN_POS_V4 + (12 if flags & 0x10 else 0) + (12 if flags & 0x20 else 0)
    code = _check_body(buf, pos, size, blen_pos)
    if code < 0 and flags & 0x30:
        legacy = _check_body(buf, pos, size, _BODY_LEN_POS_V4)
        if legacy > 0:
            return legacy
    return code


def _check_body(buf: bytes | bytearray, pos: int, size: int, blen_pos: int) -> int:
    if blen_pos + 4 > size:
        return _BAD_LENGTHS
    crc = _I32.unpack_from(buf, pos + 8)[0]
    body_len = _I32.unpack_from(buf, pos + blen_pos)[0]
    body_start = pos + blen_pos + 4
    if body_len < 0 or body_start + body_len > pos + size:
        return _BAD_LENGTHS
    if zlib.crc32(memoryview(buf)[body_start : body_start + body_len]) & 0x7FFFFFFF != crc:
        return _BAD_CRC
    return size


class WriteFailed(Exception):
    """``write_out`` could not hand every pending byte to the OS.

    ``kept`` is the new end of written data (the end of the last record written whole),
    ``lost`` the end of the dropped bytes, ``last_record`` the start of the last message
    record kept by this write (None if none), ``cause`` the ``OSError``.
    """

    def __init__(self, cause: OSError, kept: int, lost: int, last_record: int | None) -> None:
        super().__init__(f"commit-log write failed at {kept}: {cause}")
        self.cause = cause
        self.kept = kept
        self.lost = lost
        self.last_record = last_record


# ``stored_physical_offset`` above is the reference (tests/server/test_native_timer_fire.py
# holds the twin to it); the twin's (``_record_check.pyx``) replaces it when
# protocol/native.py chooses it.
reference = SimpleNamespace(stored_physical_offset=stored_physical_offset)


def _load_twin() -> ModuleType:
    from . import _record_check  # type: ignore[attr-defined]

    twin: ModuleType = _record_check  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    stored_physical_offset = _twin.stored_physical_offset
