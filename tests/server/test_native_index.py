"""The native key-index dispatcher (server/store/_index.pyx) against the reference
(``index.reference``): two real indexes of one store get the same dispatches (any
UNIQ_KEY and KEYS text, offsets up to the int64 edge, replays) and must hold the same
files byte for byte (entries, chain heads, count, indexed end), the same counters and
raise the same errors. Small files, so dispatches fill files and reach their halves
(the cases the twin hands to the reference) all the time."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.properties import KEYS, UNIQ_KEY
from kairosmq.server.store import index
from kairosmq.server.store.index import KeyIndex
from kairosmq.server.store.message_store import MessageStore
from kairosmq.server.store.types import DispatchRequest

from tests.twins import outcome, twin

ref = index.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_word = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["", " ", "a b", "  a  b ", "\ud800", "k1 k2 k3 k4 k5", "ü ∑"]),
    # ASCII (hashed in C by the twin), up to past its 32 hashes a record
    st.text(alphabet=st.characters(codec="ascii"), max_size=40),
    st.lists(st.sampled_from(["k", "key-1", "", "\x00", "~"]), max_size=40).map(" ".join),
)
_req = st.builds(
    DispatchRequest,
    topic=st.just("T"),
    queue_id=st.just(0),
    phy_offset=st.one_of(st.integers(0, 2**40), st.sampled_from([2**63 - 1, 2**63, -1])),
    size=st.one_of(st.integers(0, 4096), st.sampled_from([2**63])),
    tags_code=st.just(0),
    queue_offset=st.just(0),
    store_timestamp=st.just(0),
    properties=st.dictionaries(st.sampled_from([UNIQ_KEY, KEYS, "x"]), _word, max_size=3),
    replay=st.booleans(),
)


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.store.index")


def _files(ix: KeyIndex) -> list[bytes]:
    return [f.path.read_bytes() for f in ix.files]


@PARITY
@given(st.lists(_req, min_size=1, max_size=40), st.sampled_from([(3, 7), (5, 16), (1, 2)]))
def test_same_dispatches_same_files(
    nat: ModuleType, reqs: list[DispatchRequest], shape: tuple[int, int]
) -> None:
    slots, capacity = shape
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(Path(d) / "store", store_host=(b"\x7f\x00\x00\x01", 1))
        store.open()
        a = KeyIndex(Path(d) / "a", store, slots=slots, capacity=capacity)
        b = KeyIndex(Path(d) / "b", store, slots=slots, capacity=capacity)
        a.open()
        b.open()
        try:
            for r in reqs:
                ra, rb = outcome(ref.dispatch, a, r), outcome(nat.dispatch, b, r)
                assert ra[:2] == rb[:2], r
                assert (a.indexed, len(a.files)) == (b.indexed, len(b.files))
                cur_a, cur_b = a._cur, b._cur
                assert cur_a is not None and cur_b is not None
                assert (cur_a.count, cur_a.end_phy) == (cur_b.count, cur_b.end_phy)
            a.flush()
            b.flush()
            assert _files(a) == _files(b)
        finally:
            a.close()
            b.close()
            store.close()


def test_replays_and_a_closed_index_write_nothing(nat: ModuleType, tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "store", store_host=(b"\x7f\x00\x00\x01", 1))
    store.open()
    ix = KeyIndex(tmp_path / "ix", store, slots=3, capacity=8)
    ix.open()
    try:
        req = DispatchRequest("T", 0, 100, 50, 0, 0, 0, {UNIQ_KEY: "u", KEYS: "a b"}, replay=True)
        before = _files(ix)
        assert nat.dispatch(ix, req) is None and _files(ix) == before and ix.indexed == 0
        req.replay = False
        nat.dispatch(ix, req)
        assert ix.indexed == 3 and ix._cur is not None and ix._cur.end_phy == 150
        assert ix.lookup(index.KIND_UNIQ, "u") == [100]
        assert ix.lookup(index.KIND_KEY, "b") == [100]
    finally:
        ix.close()
        store.close()


def test_an_index_of_another_class_is_dispatched_alike(nat: ModuleType, tmp_path: Path) -> None:
    """The twin reads a ``KeyIndex``'s own fields in their slots; an index of a subclass
    is read through its attributes: the same files and counters as the reference."""

    class Sub(KeyIndex):
        __slots__ = ()

    store = MessageStore(tmp_path / "store", store_host=(b"\x7f\x00\x00\x01", 1))
    store.open()
    a = KeyIndex(tmp_path / "a", store, slots=3, capacity=8)
    b = Sub(tmp_path / "b", store, slots=3, capacity=8)
    a.open()
    b.open()
    try:
        for i in range(10):
            props = {UNIQ_KEY: f"u{i}", KEYS: "a b" if i % 2 else ""}
            req = DispatchRequest("T", 0, 100 * i, 50, 0, i, 0, props)
            assert outcome(ref.dispatch, a, req) == outcome(nat.dispatch, b, req)
            assert (a.indexed, a.end_phy, len(a.files)) == (b.indexed, b.end_phy, len(b.files))
            assert _files(a) == _files(b)
    finally:
        a.close()
        b.close()
        store.close()
