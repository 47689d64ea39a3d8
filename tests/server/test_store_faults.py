"""MessageStore under hostile content (issue 10, durability).

Real files on tmp_path. Disk faults (failed writes, a full disk) are in
test_store_write_faults.py; the shared helpers in store_fault_helpers.py.

What these catch: a record whose sysFlag claims IPv6 hosts it does not have (recovery
used to cut the log there and lose every later acked message), a record that replay
cannot decode or dispatch (the broker used to refuse to start), a checked read that
takes a record hidden inside a body or allocates a client-given size, and lost
consume-queue units that would end a queue at the next load.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from kairosmq.protocol.message import decode_record, encode_record
from kairosmq.protocol.properties import SCHEDULE_ORIGIN
from kairosmq.protocol.schema import MESSAGE_MAGIC_CODE
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.schedule.delay.service import ScheduleService
from kairosmq.server.store import MessageInner, MessageStore, PutStatus
from kairosmq.server.store.commitlog import RecordProblem, check_record
from kairosmq.server.store.consumequeue import HOLE
from kairosmq.server.store.index import KeyIndex

from tests.server.store_fault_helpers import (
    HOST,
    SEG,
    V6,
    bodies_of,
    make_msg,
    open_store,
    reopen,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


# ---------------------------------------------------------------- host-format bits


@pytest.mark.parametrize(
    ("born", "claimed", "expected"),
    [
        (HOST, SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6 | 0x1, 0x1),  # lies: bits cleared
        (HOST, SYSFLAG_BORNHOST_V6, 0),
        (V6, 0, SYSFLAG_BORNHOST_V6),  # a real 16-byte host sets its bit
    ],
)
def test_encode_record_derives_host_bits_from_addresses(
    born: tuple[bytes, int], claimed: int, expected: int
) -> None:
    rec = encode_record(
        topic=b"T",
        body=b"body",
        properties=b"",
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=claimed,
        born_timestamp=1,
        born_host=born,
        store_timestamp=2,
        store_host=HOST,
        reconsume_times=0,
    )
    m = decode_record(rec, check_crc=True)
    assert m.sys_flag == expected
    assert (m.born_host, m.store_host, m.body, m.store_size) == (born, HOST, b"body", len(rec))
    assert check_record(rec, 0) == len(rec)  # recovery's rule finds the body too


def test_encode_record_refuses_a_host_of_another_length() -> None:
    with pytest.raises(ValueError, match="4 or 16 bytes"):
        encode_record(
            topic=b"T",
            body=b"",
            properties=b"",
            queue_id=0,
            flag=0,
            queue_offset=0,
            physical_offset=0,
            sys_flag=0,
            born_timestamp=1,
            born_host=(b"\x01\x02\x03", 1),
            store_timestamp=2,
            store_host=HOST,
            reconsume_times=0,
        )


async def test_v6_sysflag_from_an_ipv4_client_loses_nothing_after_restart(root: Path) -> None:
    """The issue's first row at the store: a send claiming IPv6 hosts, then ordinary sends;
    a full replay (no checkpoint, as after kill -9) must keep every one of them."""
    s = open_store(root)
    odd = s.put(make_msg(b"odd", sys_flag=SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6))
    assert odd.status is PutStatus.PUT_OK
    for i in range(20):
        assert s.put(make_msg(b"after-%d" % i)).status is PutStatus.PUT_OK
    s.write_out()
    s2, summary = reopen(s, root)
    try:
        assert summary["truncated_bytes"] == 0
        assert bodies_of(s2) == [b"odd"] + [b"after-%d" % i for i in range(20)]
        # the stored flag tells the truth, so readers find the body
        assert decode_record(s2.read_at(odd.phy_offset)).sys_flag == 0
    finally:
        s2.close()


async def test_a_lying_record_from_an_older_broker_no_longer_cuts_the_log(root: Path) -> None:
    """Data written before the fix: a record whose sysFlag claims IPv6 hosts it does not
    have (the flag is outside the CRC). Recovery accepts it with IPv4 hosts instead of
    truncating there, replay skips it (logged), and every later message is kept."""
    s = open_store(root)
    assert s.put(make_msg(b"first")).status is PutStatus.PUT_OK
    cl = s.commitlog
    rec = bytearray(
        encode_record(
            topic=b"T",
            body=b"liar",
            properties=b"",
            queue_id=0,
            flag=0,
            queue_offset=1,
            physical_offset=cl.max_offset,
            sys_flag=0,
            born_timestamp=1,
            born_host=HOST,
            store_timestamp=2,
            store_host=HOST,
            reconsume_times=0,
        )
    )
    struct.pack_into(">i", rec, 36, SYSFLAG_BORNHOST_V6)  # what the old encoder stored
    cl.append(bytes(rec))
    for i in range(5):
        s.put(make_msg(b"later-%d" % i))
    s.write_out()
    s2, summary = reopen(s, root)
    try:
        assert summary["truncated_bytes"] == 0
        assert bodies_of(s2)[0] == b"first"
        assert bodies_of(s2)[-5:] == [b"later-%d" % i for i in range(5)]
    finally:
        s2.close()


async def test_v6_born_host_record_size_matches_its_unit(root: Path) -> None:
    s = open_store(root)
    try:
        r = s.put(make_msg(b"from-v6", born_host=V6))
        assert r.status is PutStatus.PUT_OK
        rec = s.read_record(r.phy_offset)
        assert isinstance(rec, bytes) and len(rec) == r.size  # the unit's size is the record's
        assert decode_record(rec).born_host == V6
    finally:
        s.close()


# ---------------------------------------------------------------- replay never refuses


async def test_replay_skips_records_it_cannot_decode_or_dispatch(root: Path) -> None:
    s = open_store(root)
    assert s.put(make_msg(b"before")).status is PutStatus.PUT_OK
    # A record that passes the CRC check but cannot be decoded (topic not UTF-8), as an
    # older broker or a damaged-but-consistent file could leave.
    cl = s.commitlog
    bad = encode_record(
        topic=b"\xff\xfe",
        body=b"x",
        properties=b"",
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=cl.max_offset,
        sys_flag=0,
        born_timestamp=1,
        born_host=HOST,
        store_timestamp=2,
        store_host=HOST,
        reconsume_times=0,
    )
    cl.append(bad)
    assert s.put(make_msg(b"after", props={"KEYS": "boom"})).status is PutStatus.PUT_OK
    s.write_out()
    s.close()
    (root / "checkpoint.json").unlink(missing_ok=True)

    s2 = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=100)

    def explode(req: Any) -> None:  # a dispatch listener that raises on one record
        if req.properties.get("KEYS") == "boom":
            raise RuntimeError("listener bug")

    s2.dispatchers.append(explode)
    try:
        summary = s2.open()
        assert summary["records_skipped"] == 2  # the undecodable one, the listener failure
        assert summary["records_replayed"] == 2
        assert bodies_of(s2) == [b"before", b"after"]  # "after" is dispatched all the same
        index = KeyIndex(root / "index", s2)  # the broker's next step at start
        index.open()
        assert isinstance(s2.read_record(index.lookup("K", "boom")[0]), bytes)
        index.close()
        assert s2.put(make_msg(b"later")).status is PutStatus.PUT_OK  # and writable
    finally:
        s2.close()


@pytest.mark.parametrize(
    "origin", ["x", "1:99999999999999999999", "1:5", "99:0", "1:-1", "1:\u0661"]
)
async def test_schedule_origin_from_content_never_raises_nor_moves_progress(
    root: Path, origin: str
) -> None:
    """Online and on replay: an origin the scheduler did not put is ignored."""
    s = open_store(root)
    sched = ScheduleService(s, ArrivalNotifier(), (1000, 2000))
    s.providers.append(sched)
    s.dispatchers.append(sched.on_dispatch)
    for i in range(3):  # level 1 has 3 pending messages
        s.put(
            MessageInner(
                topic="SCHEDULE_TOPIC_XXXX",
                queue_id=0,
                body=b"d%d" % i,
                properties={"KAIROS_DELIVER_MS": "1", "REAL_TOPIC": "T", "REAL_QID": "0"},
            )
        )
    r = s.put(make_msg(b"hostile", props={SCHEDULE_ORIGIN: origin}))
    assert r.status is PutStatus.PUT_OK
    assert sched.progress == {1: 0, 2: 0}
    s.write_out()
    s.close()
    (root / "checkpoint.json").unlink(missing_ok=True)
    s2 = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=100)
    sched2 = ScheduleService(s2, ArrivalNotifier(), (1000, 2000))
    s2.providers.append(sched2)
    s2.dispatchers.append(sched2.on_dispatch)
    try:
        summary = s2.open()
        assert summary["records_skipped"] == 0
        # on replay only "1:<offset below the queue's end>" counts ("1:5" is past it)
        assert sched2.progress[2] == 0
        assert sched2.progress[1] == 0
        assert bodies_of(s2) == [b"hostile"]
    finally:
        s2.close()


async def test_unreadable_checkpoint_means_a_full_replay_not_a_failed_start(root: Path) -> None:
    s = open_store(root)
    for i in range(5):
        s.put(make_msg(b"m%d" % i))
    s.write_out()
    s.persist_checkpoint(s.checkpoint_snapshot())
    s.close()
    (root / "checkpoint.json").write_bytes(b'{"dispatched_offset": "x", "queues": [')
    s2 = MessageStore(root, store_host=HOST, segment_size=SEG, units_per_file=100)
    try:
        summary = s2.open()
        assert summary["records_replayed"] == 5
        assert bodies_of(s2) == [b"m%d" % i for i in range(5)]
    finally:
        s2.close()


# ---------------------------------------------------------------- checked reads


async def test_read_record_checks_everything_a_client_offset_could_fake(root: Path) -> None:
    s = open_store(root)
    try:
        real = s.put(make_msg(b"real"))
        # A body carrying a complete, CRC-valid record that claims to start where it
        # sits (its PHYSICALOFFSET field is right): only the consume-queue unit can tell.
        prefix = b"junk----"
        carrier_at = s.commitlog.max_offset
        fake_at = carrier_at + 88 + len(prefix)  # the body starts after an 88-byte head
        fake = encode_record(
            topic=b"T",
            body=b"stolen",
            properties=b"",
            queue_id=0,
            flag=0,
            queue_offset=0,
            physical_offset=fake_at,
            sys_flag=0,
            born_timestamp=1,
            born_host=HOST,
            store_timestamp=2,
            store_host=HOST,
            reconsume_times=0,
        )
        huge = struct.pack(">iI", 0x7FFFFFF0, MESSAGE_MAGIC_CODE)  # "2 GiB record here"
        carrier = s.put(make_msg(prefix + fake + huge + b"tail"))
        assert carrier.status is PutStatus.PUT_OK and carrier.phy_offset == carrier_at
        body_at = carrier_at + 88
        assert s.commitlog.read(fake_at, len(fake)) == fake  # it is really there, valid
        assert check_record(fake, 0) == len(fake)
        huge_at = fake_at + len(fake)

        assert s.read_record(real.phy_offset) == s.commitlog.read(real.phy_offset, real.size)
        assert s.read_record(fake_at) is RecordProblem.NOT_RECORD_START
        assert s.read_record(huge_at) is RecordProblem.BAD_SIZE
        assert s.read_record(body_at) is RecordProblem.BAD_MAGIC
        assert s.read_record(real.phy_offset + 1) is RecordProblem.BAD_MAGIC
        assert s.read_record(s.commitlog.max_offset) is RecordProblem.OUT_OF_RANGE
        assert s.read_record(-5) is RecordProblem.OUT_OF_RANGE
        assert s.read_record(1 << 62) is RecordProblem.OUT_OF_RANGE
        assert s.read_at(fake_at) is None
        # corrupt the stored body of the real record: the CRC check refuses it
        s.write_out()
        seg = s.commitlog.segments[0]
        os.pwrite(seg.fd, b"R", real.phy_offset + 88)
        assert s.read_record(real.phy_offset) is RecordProblem.BAD_CRC
    finally:
        s.close()


# ---------------------------------------------------------------- lost consume-queue units


def test_lost_units_read_as_holes_and_the_queue_end_survives_a_reload(tmp_path: Path) -> None:
    """Replay continuing past lost consume-queue units (``skip_to``) fills them with holes:
    a zero unit would end the queue at the next load and hide every unit after it."""
    from kairosmq.server.store.consumequeue import ConsumeQueue

    cq = ConsumeQueue(tmp_path, "T", 0, 100)
    cq.append(0, 100, 0)
    cq.skip_to(5)
    cq.append(500, 100, 0)
    assert [cq.get(i) for i in range(1, 5)] == [HOLE] * 4
    cq.close()
    again = ConsumeQueue(tmp_path, "T", 0, 100)
    again.load()
    assert again.max_offset == 6 and again.get(5) == (500, 100, 0)
    again.skip_to(250)  # a later file: only its own lost units are filled
    again.append(2500, 100, 0)
    assert (again.max_offset, again.get(249), again.get(200)) == (251, HOLE, HOLE)
    assert again.get(250) == (2500, 100, 0)
    # the lost file in between reads as holes, so a reader moves past it
    assert again.get(150) is None and again.units(150, 10) == [HOLE] * 10
    assert again.units(195, 10) == [HOLE] * 5  # up to the next file
    again.close()
