"""Message ids: the broker's offset msg id and the client's UNIQ_KEY.

Owns: ``create_offset_msg_id``/``decode_offset_msg_id`` (store host + port + commit-log
offset, upper-case hex, RocketMQ ``MessageDecoder.createMessageId``) and ``UniqIdGenerator``
(RocketMQ ``MessageClientIDSetter`` layout: ip 4 B, pid 2 B, a per-process 4 B hash, ms since
the start of the month 4 B, counter 2 B; 32 upper-case hex characters).

Invariant: 32 hex characters mean an IPv4 host, 56 mean IPv6; anything else is rejected.
"""

from __future__ import annotations

import calendar
import itertools
import os
import random
import struct
import time

_OFFSET_V4 = struct.Struct(">4siq")
_OFFSET_V6 = struct.Struct(">16siq")


def create_offset_msg_id(ip: bytes, port: int, commit_log_offset: int) -> str:
    s = _OFFSET_V4 if len(ip) == 4 else _OFFSET_V6
    return s.pack(ip, port, commit_log_offset).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """Return (ip bytes, port, commit-log offset); ValueError if not an offset msg id."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset msg id must be 32 or 56 hex characters, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    s = _OFFSET_V4 if len(raw) == 16 else _OFFSET_V6
    ip, port, offset = s.unpack(raw)
    return ip, port, offset


class UniqIdGenerator:
    """Client-side UNIQ_KEY ids, unique per process, in Java's 16-byte layout."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01", pid: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        self._prefix = (
            ip[:4] + struct.pack(">H", pid & 0xFFFF) + struct.pack(">I", random.getrandbits(32))
        )
        self._counter = itertools.count(random.getrandbits(16))
        self._month_start = 0.0
        self._next_month = 0.0

    def _roll_month(self, now: float) -> None:
        t = time.localtime(now)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        days = calendar.monthrange(t.tm_year, t.tm_mon)[1]
        self._month_start = start
        self._next_month = start + days * 86400

    def next_id(self) -> str:
        now = time.time()
        if now >= self._next_month or now < self._month_start:
            self._roll_month(now)
        ms = int((now - self._month_start) * 1000) & 0xFFFFFFFF
        tail = struct.pack(">IH", ms, next(self._counter) & 0xFFFF)
        return (self._prefix + tail).hex().upper()
