"""KeyIndex (store/index.py) over a real broker's store: lookups, collisions, file
rollover, restart, rebuild after loss, and a clamped end after the log lost its tail."""

from __future__ import annotations

import shutil

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_record, decode_records
from kairosmq.server.store.index import KIND_KEY, KIND_UNIQ, KeyIndex, key_hash

from tests.helpers import send
from tests.wire import RawPeer


async def _fill(broker, n: int) -> list[str]:
    peer = await RawPeer.connect(broker.address)
    ids = []
    for i in range(n):
        r = await send(
            peer,
            "Idx",
            f"b{i}".encode(),
            {"UNIQ_KEY": f"ID{i:04d}", "KEYS": f"k{i % 5} all"},
            queue_id=i % 3,
        )
        assert r.code == 0
        ids.append(f"ID{i:04d}")
    await peer.close()
    return ids


def _bodies(broker, index: KeyIndex, kind: str, key: str) -> list[bytes]:
    out = []
    for phy in index.lookup(kind, key, limit=1000):
        m = decode_record(broker.store.read_at(phy))
        ok = (
            m.properties.get("UNIQ_KEY") == key
            if kind == KIND_UNIQ
            else key in m.properties.get("KEYS", "").split()
        )
        if ok:
            out.append(m.body)
    return out


async def test_live_lookups_newest_first(broker) -> None:
    await _fill(broker, 30)
    assert _bodies(broker, broker.index, KIND_UNIQ, "ID0007") == [b"b7"]
    assert _bodies(broker, broker.index, KIND_KEY, "k2") == [
        f"b{i}".encode() for i in (27, 22, 17, 12, 7, 2)
    ]
    assert len(broker.index.lookup(KIND_KEY, "all", limit=10)) == 10
    assert broker.index.lookup(KIND_UNIQ, "k2") == []  # kinds do not mix
    assert broker.index.end_phy == broker.store.commitlog.max_offset


async def test_tiny_index_rebuilds_with_collisions_and_rollover(broker, tmp_path) -> None:
    ids = await _fill(broker, 40)
    tiny = KeyIndex(tmp_path / "tiny", broker.store, slots=3, capacity=7)
    info = tiny.open()  # indexes the whole log: the rebuild path
    assert info["index_caught_up"] == 40 * 3 and len(tiny.files) > 10
    for i in (0, 13, 39):
        assert _bodies(broker, tiny, KIND_UNIQ, ids[i]) == [f"b{i}".encode()]
    assert len(_bodies(broker, tiny, KIND_KEY, "k4")) == 8
    assert len(tiny.lookup(KIND_UNIQ, ids[5], limit=1000)) == 1  # chains share 3 slots
    tiny.close()


async def test_query_verifies_candidates(broker) -> None:
    await _fill(broker, 3)
    (right,) = broker.index.lookup(KIND_UNIQ, "ID0001")
    (wrong,) = broker.index.lookup(KIND_UNIQ, "ID0002")
    broker.index._add(key_hash(KIND_UNIQ, "ID0001"), wrong)  # a colliding entry
    broker.index._add(key_hash(KIND_UNIQ, "ID0001"), wrong + 3)  # not a record start
    assert broker.index.lookup(KIND_UNIQ, "ID0001")[:2] == [wrong + 3, wrong]
    peer = await RawPeer.connect(broker.address)
    r = await peer.call(
        RequestCode.QUERY_MESSAGE,
        {
            "topic": "Idx",
            "key": "ID0001",
            "maxNum": 32,
            "beginTimestamp": 0,
            "endTimestamp": 0,
            "_UNIQUE_KEY_QUERY": "true",
        },
    )
    assert r.code == ResponseCode.SUCCESS
    assert [m.commit_log_offset for m in decode_records(r.body)] == [right]
    r = await peer.call(RequestCode.QUERY_MESSAGE, {"topic": "Other", "key": "k1", "maxNum": 32})
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    await peer.close()


async def test_survives_restart_and_is_rebuilt_when_lost(broker_factory, tmp_path) -> None:
    b = await broker_factory()
    await _fill(b, 10)
    await b.stop()
    b = await broker_factory()
    assert _bodies(b, b.index, KIND_UNIQ, "ID0003") == [b"b3"]
    await _fill(b, 2)  # ids repeat: both copies are found, newest first
    assert _bodies(b, b.index, KIND_UNIQ, "ID0001") == [b"b1", b"b1"]
    await b.stop()
    shutil.rmtree(tmp_path / "broker" / "store" / "index")
    b = await broker_factory()
    assert _bodies(b, b.index, KIND_UNIQ, "ID0009") == [b"b9"]
    assert len(_bodies(b, b.index, KIND_KEY, "all")) == 12


async def test_end_beyond_log_is_clamped(broker_factory, tmp_path) -> None:
    b = await broker_factory()
    await _fill(b, 5)
    end = b.index.end_phy
    b.index._set_end(end + 10_000)  # as if the commit log lost a tail in recovery
    await b.stop()
    b = await broker_factory()
    assert b.index.end_phy == end
    await _fill(b, 1)  # new records after the clamped end are indexed
    assert len(_bodies(b, b.index, KIND_UNIQ, "ID0000")) == 2
