"""Helpers for replaying real-client capture frames as raw bytes and reading the broker's
replies the way the stock clients do.

Deliberately independent of the codec under test: replies are split and parsed here by
hand (C++ and ali-ons read the whole word at offset 4 as the header length and parse
only JSON; they decode message records with fixed IPv4 host widths), so a reply that
passes these checks is one those clients can read.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from kairosmq.protocol.codes import BROKER_VERSION

from tests.wire import StreamPeer

MESSAGE_MAGIC = 0xDAA320A7


@dataclass
class Reply:
    code: int
    opaque: int
    header: dict[str, Any]
    header_bytes: bytes
    word: int
    body: bytes
    received_at: float = 0.0

    @property
    def ext(self) -> dict[str, Any]:
        return self.header.get("extFields") or {}


def header_json(frame: bytes) -> dict[str, Any]:
    """The JSON header of a captured request frame (type byte 0 in every capture)."""
    (hlen,) = struct.unpack_from(">I", frame, 4)
    return json.loads(frame[8 : 8 + hlen])


def patch_ext(frame: bytes, key: str, value: int) -> bytes:
    """The same frame with one numeric ext field changed, keeping its JSON spelling
    (number or quoted string) and everything else byte for byte; lengths recomputed."""
    (hlen,) = struct.unpack_from(">I", frame, 4)
    header, body = frame[8 : 8 + hlen], frame[8 + hlen :]
    pat = re.compile(rb'("' + re.escape(key.encode()) + rb'":)("?)(-?\d+)("?)')
    new, n = pat.subn(
        lambda m: m.group(1) + m.group(2) + str(value).encode() + m.group(4), header, count=1
    )
    assert n == 1, f"no numeric {key} in {header!r}"
    return struct.pack(">II", 4 + len(new) + len(body), len(new)) + new + body


class RawConn(StreamPeer):
    """One TCP connection that writes captured frames verbatim and matches raw replies by
    opaque. Several requests may be outstanding at once (as the stock clients do)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.replies: list[Reply] = []
        self.unsolicited: list[Reply] = []
        super().__init__(reader, writer)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                (length,) = struct.unpack(">I", await self.reader.readexactly(4))
                payload = await self.reader.readexactly(length)
                (word,) = struct.unpack_from(">I", payload, 0)
                # What C++/ali-ons do: the whole word is the header length.
                hbytes = payload[4 : 4 + word]
                header = json.loads(hbytes)
                reply = Reply(
                    header["code"],
                    header["opaque"],
                    header,
                    hbytes,
                    word,
                    payload[4 + word :],
                    loop.time(),
                )
                fut = self.pending.pop(reply.opaque, None) if header["flag"] & 1 else None
                if fut is None:
                    self.unsolicited.append(reply)
                else:
                    self.replies.append(reply)
                    fut.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def start(self, frame: bytes) -> asyncio.Future[Reply]:
        """Write a captured request frame; the future resolves with its reply."""
        opaque = header_json(frame)["opaque"]
        assert opaque not in self.pending, f"opaque {opaque} already in flight"
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        self.writer.write(frame)
        return fut

    async def call(self, frame: bytes, timeout: float = 5.0) -> Reply:
        return await asyncio.wait_for(self.start(frame), timeout)


def check_reply_envelope(reply: Reply, request_header: dict[str, Any]) -> None:
    """What every stock client needs from any reply to a JSON request."""
    assert reply.word >> 24 == 0, "serialize type byte must be 0 (JSON)"
    assert reply.word == len(reply.header_bytes)
    h = reply.header
    assert h["opaque"] == request_header["opaque"]
    assert h["flag"] & 1 == 1 and not h["flag"] & 2
    assert h["version"] == BROKER_VERSION == 409
    assert isinstance(h["language"], str) and isinstance(h["code"], int)
    assert h.get("serializeTypeCurrentRPC", "JSON") == "JSON"
    ext = h.get("extFields")
    assert ext is None or all(isinstance(v, str) for v in ext.values()), ext
    assert h.get("remark") is None or isinstance(h["remark"], str)


@dataclass
class WireRecord:
    """A message record decoded the way ali-ons' and C++'s decoders read it (IPv4 hosts,
    1-byte topic length), not with the codec under test."""

    total: int
    magic: int
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_host: str
    store_ts: int
    store_host: str
    reconsume_times: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)


def parse_ipv4_records(buf: bytes) -> list[WireRecord]:
    out: list[WireRecord] = []
    pos = 0
    while pos < len(buf):
        total, magic, _crc, qid, _flag, qoff, phy, sysflag, _born_ts = struct.unpack_from(
            ">iIiiiqqiq", buf, pos
        )
        born_ip, born_port, store_ts, store_ip, store_port, reconsume, _prep, blen = (
            struct.unpack_from(">4sIq4sIiqi", buf, pos + 48)
        )
        p = pos + 88
        body = buf[p : p + blen]
        p += blen
        tlen = buf[p]
        topic = buf[p + 1 : p + 1 + tlen].decode()
        p += 1 + tlen
        (plen,) = struct.unpack_from(">h", buf, p)
        raw_props = buf[p + 2 : p + 2 + plen].decode()
        p += 2 + plen
        assert p - pos == total, f"record at {pos}: fields end at {p - pos}, TOTALSIZE {total}"
        props = dict(kv.split("\x01", 1) for kv in raw_props.split("\x02") if "\x01" in kv)
        out.append(
            WireRecord(
                total,
                magic,
                qid,
                qoff,
                phy,
                sysflag,
                f"{'.'.join(map(str, born_ip))}:{born_port}",
                store_ts,
                f"{'.'.join(map(str, store_ip))}:{store_port}",
                reconsume,
                body,
                topic,
                props,
            )
        )
        pos += total
    return out


def loads_route(body: bytes) -> dict[str, Any]:
    """Parse route JSON; fastjson-style unquoted numeric keys (the mock) are quoted first."""
    return json.loads(re.sub(rb"([{,])(\d+):", rb'\1"\2":', body))
