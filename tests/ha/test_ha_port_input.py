"""Bad input on the HA port, both ways, against real broker processes: garbage, offsets
that do not match, acks out of range, a different segment size, a hostile "master".
Each is refused with a logged reason, nothing is appended or lost, and the broker (and a
real slave beside it) keeps serving."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.schema import BLANK_MAGIC_CODE

from tests.ha.pair import LoggedBroker, log_bytes, master, pull_all, slave, status, wait_for
from tests.helpers import send
from tests.integration.procs import free_port
from tests.wire import RawPeer

pytestmark = pytest.mark.slow

HELLO = struct.pack(">q", -1)


def q(v: int) -> bytes:
    return struct.pack(">q", v)


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 5.0) -> bytes:
    """Read until the peer closes; what it sent before."""
    out = b""
    while True:
        data = await asyncio.wait_for(reader.read(65536), timeout)
        if not data:
            return out
        out += data


async def test_master_refuses_garbage_and_bad_offsets_and_keeps_replicating(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m)
    await s.start()
    mp = await RawPeer.connect(m.address)
    ha = ("127.0.0.1", m.ha_port)  # type: ignore[attr-defined]
    try:
        for i in range(20):
            r = await send(mp, "In", b"x" * 200, {"UNIQ_KEY": f"A{i:03d}"})
            assert r.code == ResponseCode.SUCCESS
        end = len(log_bytes(tmp_path / "m"))

        # garbage: an HTTP request read as longs (a start past the log's end)
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await closed_by_peer(reader) == b""
        # a negative start that is not HELLO
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(q(-7))
        assert await closed_by_peer(reader) == b""
        # after HELLO: the segment header (offset -1, the master's segment size) ...
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(HELLO)
        head = await asyncio.wait_for(reader.readexactly(12), 5)
        assert struct.unpack(">qi", head) == (-1, 16 * 1024 * 1024)
        # ... then a start inside a record: refused, nothing streamed
        writer.write(q(5))
        assert await closed_by_peer(reader) == b""
        # a start past the master's end (a slave holding bytes the master lacks)
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(q(end + 1000))
        assert await closed_by_peer(reader) == b""
        # a good start, then an ack above what was sent
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(q(end))
        writer.write(q(end + 4096))
        got = await closed_by_peer(reader)
        assert len(got) % 12 == 0  # at most heartbeats: nothing past ``end`` exists
        # a half long, then silence: the master keeps the connection until its
        # housekeeping (20 s); we close it ourselves
        reader, writer = await asyncio.open_connection(*ha)
        writer.write(b"\x00\x00\x00")
        await asyncio.sleep(0.2)
        writer.close()

        # the broker serves, the real slave still replicates everything
        for i in range(20, 40):
            r = await send(mp, "In", b"y" * 200, {"UNIQ_KEY": f"A{i:03d}"})
            assert r.code == ResponseCode.SUCCESS

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the real slave unaffected")
        st = await status(mp)
        assert len(st["ha"]["slaves"]) == 1
    finally:
        await mp.close()
        s.terminate()
        m.terminate()
    reasons = [e["reason"] for e in m.events("ha.bad_report")]
    assert len(reasons) >= 5, reasons
    assert any("no record of this master starts at 5" in r for r in reasons), reasons
    assert any("past this master's" in r for r in reasons), reasons
    assert any("must be >= 0 (got -7)" in r for r in reasons), reasons
    assert any(f"ack {end + 4096} is outside" in r for r in reasons), reasons


async def test_slave_with_another_segment_size_is_refused_at_connect(tmp_path) -> None:
    m = master(tmp_path / "m")
    await m.start()
    s = slave(tmp_path / "s", m, "--segment-size-mb", "8")
    await s.start()
    mp = await RawPeer.connect(m.address)
    sp = await RawPeer.connect(s.address)
    try:
        r = await send(mp, "Seg", b"x" * 100)
        assert r.code == ResponseCode.SUCCESS
        await asyncio.sleep(4)  # HELLO answered; the slave compares and refuses
        assert not (tmp_path / "s" / "store" / "commitlog").exists() or not log_bytes(
            tmp_path / "s"
        ), "nothing appended"
        st = await status(sp)
        assert st["ha"]["masterSegmentSize"] == 16 * 1024 * 1024
        assert st["ha"]["maxOffset"] == 0
        assert (await status(mp))["running"]
    finally:
        await mp.close()
        await sp.close()
        s.terminate()
        m.terminate()
    (ev, *_more) = s.events("ha.segment_size_mismatch")
    assert (ev["master_segment_size"], ev["segment_size"]) == (16 << 20, 8 << 20)
    assert "--segment-size-mb" in ev["reason"]


async def _fake_master(frames: list[bytes]) -> tuple[asyncio.AbstractServer, int, list[bytes]]:
    """An HA "master" that answers HELLO properly, then sends ``frames`` raw."""
    reports: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reports.append(await reader.readexactly(8))  # HELLO
        writer.write(struct.pack(">qi", -1, 16 * 1024 * 1024))
        reports.append(await reader.readexactly(8))  # the start
        for f in frames:
            writer.write(f)
        await writer.drain()
        try:
            while data := await reader.read(8):
                reports.append(data)
        except ConnectionError:
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], reports


# a BLANK marker ending the first 16 MiB segment: 8 valid bytes a slave may take
BLANK = struct.pack(">qi", 0, 8) + struct.pack(">iI", 16 << 20, BLANK_MAGIC_CODE)


@pytest.mark.parametrize(
    ("frames", "event", "kept"),
    [
        ([struct.pack(">qi", 0, -5)], "ha.master_disconnected", 0),  # a negative size
        ([struct.pack(">qi", 4096, 16) + b"\x00" * 16], "ha.replica_refused", 0),
        ([BLANK, struct.pack(">qi", 100, 0)], "ha.offset_mismatch", 8),  # a gap
        ([struct.pack(">qi", 0, 120) + b"\xff" * 120], "ha.replica_refused", 0),
        ([struct.pack(">qi", -1, 4096)], "ha.master_disconnected", 0),  # a second HELLO
    ],
    ids=["negative-size", "misaligned-start", "offset-gap", "not-a-record", "second-hello"],
)
async def test_slave_refuses_a_hostile_master_and_keeps_only_valid_bytes(
    tmp_path, frames, event, kept
) -> None:
    server, port, _reports = await _fake_master(frames)
    s = LoggedBroker(
        tmp_path / "s",
        "--broker-role",
        "SLAVE",
        "--ha-master-address",
        f"127.0.0.1:{port}",
        "--ha-listen-port",
        str(free_port()),
    )
    await s.start()
    sp = await RawPeer.connect(s.address)
    try:
        await asyncio.sleep(2.0)
        st = await status(sp)
        assert st["ha"]["maxOffset"] == kept, "nothing of the bad frame appended"
        assert await pull_all(sp, "Any", 1) == []
    finally:
        await sp.close()
        s.terminate()
        server.close()
    assert s.events(event), s.log_path.read_text()[-2000:]
