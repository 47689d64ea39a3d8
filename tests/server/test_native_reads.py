"""The native unit walk of pull reads (server/store/_reads.pyx) against the reference
(``reads.walk_units``): the same units taken, the same queue offsets, walked count, bytes
and flags from any units and bounds, from a real queue file's map; and a real store
answering the same pulls with the same bytes on both cores."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.message import summarize_records, tags_code
from kairosmq.server.store import reads
from kairosmq.server.store.consumequeue import HOLE, UNIT

from tests.twins import outcome, twin

ref = reads.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
I64 = st.integers(-(2**63), 2**63 - 1)
CODES = st.integers(0, 5)  # few distinct tagsCodes: filters both take and skip
unit = st.one_of(
    st.just(HOLE),
    st.tuples(st.integers(0, 10_000), st.integers(-3, 400), CODES),
    st.tuples(I64, st.integers(-(2**31), 2**31 - 1), I64),
)


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("server.store.reads")


def walk(fn, buf, args, pre):  # type: ignore[no-untyped-def]
    units, offsets = list(pre), [7] * len(pre)
    got = outcome(fn, buf, *args, units, offsets)
    return got, units, offsets


@PARITY
@given(
    st.lists(unit, max_size=24),
    st.integers(-2, 26),
    st.integers(-2, 26),
    st.integers(0, 2**40) | I64,
    st.integers(-5, 3000) | I64,
    st.none() | st.integers(-5, 12_000) | I64,
    st.none() | st.frozensets(CODES) | st.sets(I64, max_size=3),
    st.integers(1, 8),
    st.integers(0, 2000) | st.integers(0, 2**62),
    st.integers(0, 500),
    st.lists(st.tuples(st.integers(0, 99), st.integers(1, 99), CODES), max_size=2),
)
def test_any_units_any_bounds(  # type: ignore[no-untyped-def]
    nat, units, first, count, index, log_min, limit, match, max_count, max_bytes, total, pre
) -> None:
    buf = b"".join(UNIT.pack(*u) for u in units) + b"\x00" * 7  # a torn unit at the end
    args = (first, count, index, log_min, limit, match, max_count, max_bytes, total)
    a, b = walk(nat.walk_units, buf, args, pre), walk(ref.walk_units, buf, args, pre)
    assert a[0][:2] == b[0][:2]
    if a[0][0] == "ok":
        assert a == b


def test_a_python_test_as_filter(nat) -> None:  # type: ignore[no-untyped-def]
    """A ``match`` that is not a set (a test's lambda) gives the reference's answer."""
    buf = b"".join(UNIT.pack(i * 100, 100, i % 3) for i in range(30))
    for m in (lambda c: c == 1, None, frozenset({2})):
        args = (0, 30, 5, 0, None, m, 4, 1 << 20, 0)
        assert walk(nat.walk_units, buf, args, []) == walk(ref.walk_units, buf, args, [])


def test_a_real_queue_file(nat, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    units = [(i * 1000, 100 + i, i % 4) for i in range(500)]
    units[7] = HOLE
    units[9] = (20, 5, 1)  # below a log minimum of 1000
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"".join(UNIT.pack(*u) for u in units) + bytes(20 * 12))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        for args in [
            (0, 500, 0, 1000, None, None, 32, 4 << 20, 0),
            (0, 500, 0, 1000, None, frozenset({3}), 32, 4 << 20, 0),
            (3, 64, 3, 1000, 40_000, frozenset({1, 2}), 500, 4 << 20, 0),
            (0, 500, 0, 0, None, frozenset({0}), 500, 2_000, 0),
            (490, 22, 490, 0, None, None, 64, 4 << 20, 0),
            (0, 0, 0, 0, None, None, 1, 1, 0),
        ]:
            assert walk(nat.walk_units, mm, args, []) == walk(ref.walk_units, mm, args, [])
        with pytest.raises(struct.error):
            nat.walk_units(mm, 500, 13, 0, 0, None, None, 1000, 1 << 30, 0, [], [])
    # the map closes: the twin holds no export of its buffer


async def test_a_store_answers_the_same_pulls_on_both_cores(  # type: ignore[no-untyped-def]
    broker_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real broker's store, tagged messages in one queue: ``get`` with each walk gives
    the same result, the same bytes, for pulls with and without a tag filter."""
    from tests.helpers import send
    from tests.wire import RawPeer

    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    for i in range(300):
        r = await send(peer, "Walk", b"m%d" % i, {"TAGS": f"T{i % 5}"})
        assert r.code == 0
    await peer.close()
    store = b.store
    pulls = [
        (0, 32, None, 4 << 20),
        (0, 32, frozenset({tags_code("T3")}), 4 << 20),
        (17, 5, frozenset({tags_code("T0"), tags_code("T4")}), 4 << 20),
        (0, 512, frozenset({tags_code("T1")}), 700),
        (250, 512, frozenset({tags_code("nope")}), 4 << 20),
        (299, 3, None, 4 << 20),
    ]
    answers = {}
    for name, fn in (("native", nat_walk()), ("pure", ref.walk_units)):
        monkeypatch.setattr(reads, "walk_units", fn)
        answers[name] = [
            store.get("Walk", 0, off, n, max_bytes=mb, match=m) for off, n, m, mb in pulls
        ]
    assert answers["native"] == answers["pure"]
    found = answers["pure"][1]
    assert found.units and all(u[2] == tags_code("T3") for u in found.units)
    assert len(summarize_records(b"".join(found.chunks))) == len(found.units)


def nat_walk():  # type: ignore[no-untyped-def]
    return twin("server.store.reads").walk_units


async def test_get_reads_alike_on_both_cores(tmp_path: Path) -> None:
    """``StoreReads.get``, reference and twin, on a real store with small queue files
    and segments (runs that end at a file end, records in several segments): the same
    result for any offset, count, byte bound, scan bound and tag filter."""
    from kairosmq.server.store.message_store import MessageStore
    from kairosmq.server.store.types import MessageInner

    get = twin("server.store.reads").get
    store = MessageStore(
        tmp_path / "s",
        store_host=(b"\x7f\x00\x00\x01", 10911),
        segment_size=16 << 10,
        units_per_file=8,
        max_message_size=4 << 10,
    )
    store.open()
    try:
        for i in range(200):
            tag = f"T{i % 3 if i % 7 else 1}"
            msg = MessageInner("G", i % 2, b"m%d" % i * (1 + i % 9), {"TAGS": tag})
            store.put(msg)
        store.write_out()
        for i in range(30):  # pending: not written yet (no loop turn)
            store.put(MessageInner("G", i % 2, b"p%d" % i, {"TAGS": "T2"}))
        codes = [tags_code(f"T{t}") for t in range(4)]

        @PARITY
        @given(
            st.integers(0, 1),
            st.integers(-2, 120),
            st.integers(1, 40),
            st.sampled_from([4 << 20, 700, 1, 2500]),
            st.sampled_from([16_000, 1, 5, 9]),
            st.none() | st.frozensets(st.sampled_from(codes)) | st.sets(st.sampled_from(codes)),
            st.none() | st.integers(0, 40_000),
        )
        def check(q, offset, n, max_bytes, max_scan, match, confirm) -> None:  # type: ignore[no-untyped-def]
            store.confirm_offset = confirm  # a SYNC_MASTER's slave ack
            args = ("G", q, offset, n)
            kw = {"max_bytes": max_bytes, "match": match, "max_scan": max_scan}
            assert outcome(get, store, *args, **kw) == outcome(ref.get, store, *args, **kw)

        check()
        store.confirm_offset = None
        for args in [("G", 0, 0, 0), ("Nope", 0, 0, 1), ("G", 5, 0, 1), ("G", 0, 2**70, 1)]:
            assert outcome(get, store, *args) == outcome(ref.get, store, *args)
        assert outcome(get, store, "G", 0, 0, 4, match=lambda c: c == codes[1]) == outcome(
            ref.get, store, "G", 0, 0, 4, match=lambda c: c == codes[1]
        )
    finally:
        store.close()


async def test_a_failed_log_read_raises_alike(tmp_path: Path) -> None:
    """A segment whose ``pread`` fails (its descriptor now a directory's: EISDIR) makes
    ``get`` raise the same ``OSError`` on both cores; once it reads again, both answer
    the same records."""
    import os

    from kairosmq.server.store.message_store import MessageStore
    from kairosmq.server.store.types import MessageInner

    get = twin("server.store.reads").get
    store = MessageStore(
        tmp_path / "s",
        store_host=(b"\x7f\x00\x00\x01", 10911),
        segment_size=16 << 10,
        units_per_file=8,
        max_message_size=4 << 10,
    )
    store.open()
    bad = os.open(tmp_path, os.O_RDONLY)
    try:
        for i in range(5):
            store.put(MessageInner("G", 0, b"m%d" % i, {}))
        store.write_out()
        seg = store.commitlog.segments[0]
        fd, seg.fd = seg.fd, bad
        try:
            failed = [outcome(fn, store, "G", 0, 1, 2) for fn in (get, ref.get)]
        finally:
            seg.fd = fd
        assert failed[0] == failed[1] and failed[0][:2] == ("raised", IsADirectoryError)
        found = [outcome(fn, store, "G", 0, 1, 2) for fn in (get, ref.get)]
        assert found[0] == found[1] and len(found[0][1].units) == 2
    finally:
        os.close(bad)
        store.close()
