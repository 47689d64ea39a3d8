"""The native restores of due records (server/schedule/_reput.pyx) against the reference
(``reput.reference``, held to the object path by tests/server/test_reput_parity.py).

Same record, same outcome: the same ``RecordView``, target topic and queue, and the same
properties in the same order (so the same bytes stored), or the same ``RequeueError``.
Records: generated (client and internal properties in any order, REAL_QID and
REAL_TOPIC of any text, IPv4 and IPv6 hosts), the same records cut or with a byte
changed, and arbitrary bytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: results compared whole across the two cores

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.message import encode_record
from kairosmq.protocol.naming import TIMER_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, REAL_QID, REAL_TOPIC, encode_properties
from kairosmq.protocol.timer import TIMER_OUT_MS
from kairosmq.server.schedule import reput
from kairosmq.server.store import MessageStore, PutResult, PutStatus

from tests.server.test_reput_parity import _record
from tests.twins import outcome, twin

ref = reput.reference
HOST = (b"\x7f\x00\x00\x01", 10911)
TS = 1_700_000_000_000
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.schedule.reput")


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    assert a == b
    if a[0] == "ok":
        va, vb = a[1], b[1]
        assert isinstance(va, tuple) and isinstance(vb, tuple)
        assert list(va[3].items()) == list(vb[3].items())  # the order: the stored bytes
        assert encode_properties(va[3]) == encode_properties(vb[3])


@PARITY
@given(_record(), st.integers(1, 18), st.integers(0, 1 << 62), st.integers(0, 1 << 62))
def test_restores_of_generated_records(
    nat: ModuleType, record: bytes, level: int, off: int, phy: int
) -> None:
    _same(
        outcome(nat.restore_delayed_view, record, level, off),
        outcome(ref.restore_delayed_view, record, level, off),
    )
    _same(
        outcome(nat.restore_timer_view, record, off, phy),
        outcome(ref.restore_timer_view, record, off, phy),
    )


@PARITY
@given(_record(), st.integers(0, 400), st.integers(0, 255), st.booleans())
def test_restores_of_damaged_records(
    nat: ModuleType, record: bytes, at: int, byte: int, cut: bool
) -> None:
    at %= len(record)
    bad = record[:at] if cut else record[:at] + bytes([byte]) + record[at + 1 :]
    for fn in ("restore_delayed_view", "restore_timer_view"):
        _same(outcome(getattr(nat, fn), bad, 3, 7), outcome(getattr(ref, fn), bad, 3, 7))


@PARITY
@given(st.binary(max_size=200))
def test_restores_of_any_bytes(nat: ModuleType, data: bytes) -> None:
    for fn in ("restore_delayed_view", "restore_timer_view"):
        _same(outcome(getattr(nat, fn), data, 1, 0), outcome(getattr(ref, fn), data, 1, 0))


# properties' text as a client or a damaged record may hold it: a name twice (internal
# or not), pairs with no separator, an empty name or value, a value holding \x01,
# separators at either end
_piece = st.one_of(
    st.tuples(
        st.sampled_from(
            [REAL_QID, REAL_TOPIC, DELIVER_TIME, "DELAY", "UNIQ_KEY", "TAGS", "a", "", "ü"]
            + ["KAIROS_SCHEDULE_ORIGIN", "TIMER_DELIVER_MS", TIMER_OUT_MS]
            # names the twin's table holds, their neighbours (one character more or
            # less, another case) and names outside one byte per character
            + ["WAIT", "KEYS", "TTL", "REAL_QI", "REAL_QIDX", "real_qid", "DELAYé", "€"]
        ),
        st.one_of(
            st.sampled_from(["", "0", "3", "12", "x", "Real", "a\x01b"]), st.text(max_size=4)
        ),
    ).map(lambda p: f"{p[0]}\x01{p[1]}"),
    st.sampled_from(["", "junk", "\x01", "\x01v", "n\x01"]),
)


@PARITY
@given(st.lists(_piece, max_size=10), st.sampled_from(["", "\x02"]), st.integers(1, 18))
def test_restores_of_raw_properties(
    nat: ModuleType, pieces: list[str], edge: str, level: int
) -> None:
    """The twin reads the properties' text in one pass (no decoded dict first): names
    given twice, junk pairs and stray separators come out as the reference's decode
    gives them (the first place, the last value), or defer alike."""
    text = edge + "\x02".join(pieces) + edge
    rec = encode_record(
        topic=b"SCHEDULE_TOPIC_XXXX",
        body=b"x",
        properties=text.encode(),
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=0,
        born_host=HOST,
        store_timestamp=0,
        store_host=HOST,
        reconsume_times=0,
    )
    _same(
        outcome(nat.restore_delayed_view, rec, level, 9),
        outcome(ref.restore_delayed_view, rec, level, 9),
    )
    _same(outcome(nat.restore_timer_view, rec, 5, 9), outcome(ref.restore_timer_view, rec, 5, 9))


@pytest.mark.parametrize(
    "a, b",
    [(0, 0), (-7, 3), (2**63 - 1, -(2**63)), (2**64, 5), (-(2**70), 1), (True, False), (1.5, "x")],
)
def test_the_origin_of_any_values(nat: ModuleType, a: Any, b: Any) -> None:
    """The origin's ``a:b`` is written in C for two ``int``: the f-string's text for any
    values, the ones past 64 bits and those of other types included."""
    rec = encode_record(
        topic=b"SCHEDULE_TOPIC_XXXX",
        body=b"x",
        properties=encode_properties({REAL_TOPIC: "Real", REAL_QID: "1", "k": "v"}).encode(),
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=0,
        born_host=HOST,
        store_timestamp=0,
        store_host=HOST,
        reconsume_times=0,
    )
    for fn in ("restore_delayed_view", "restore_timer_view"):
        _same(outcome(getattr(nat, fn), rec, a, b), outcome(getattr(ref, fn), rec, a, b))


def test_the_queue_id_rule(nat: ModuleType) -> None:
    """REAL_QID: 1..9 ASCII digits, else the record is skipped (both restores)."""
    from kairosmq.protocol.message import encode_record

    for qid in ("0", "7", "999999999", "1000000000", "", "-1", "1.0", "\u0663", " 1", "00"):
        for topic in ("Real", ""):
            props = {REAL_QID: qid, **({REAL_TOPIC: topic} if topic else {}), "a": "b"}
            rec = encode_record(
                topic=b"SCHEDULE_TOPIC_XXXX",
                body=b"x",
                properties=encode_properties(props).encode(),
                queue_id=0,
                flag=0,
                queue_offset=0,
                physical_offset=0,
                sys_flag=0,
                born_timestamp=0,
                born_host=(b"\x7f\x00\x00\x01", 1),
                store_timestamp=0,
                store_host=(b"\x7f\x00\x00\x01", 2),
                reconsume_times=0,
            )
            for fn in ("restore_delayed_view", "restore_timer_view"):
                a = outcome(getattr(nat, fn), rec, 2, 5)
                _same(a, outcome(getattr(ref, fn), rec, 2, 5))
    assert (
        outcome(nat.restore_delayed_view, bytearray(rec), 1, 0)[:2]
        == outcome(ref.restore_delayed_view, bytearray(rec), 1, 0)[:2]
    )


def _batch_run(
    put_many: Any,
    root: Path,
    items: list[tuple[bytes | None, int, int]],
    fail_at: int,
    restore: Any = None,
    wrap: bool = True,
) -> tuple[Any, ...]:
    """``put_many`` over ``items`` on a fresh store (fixed clock); with ``wrap``, the
    ``fail_at``-th store write fails (SERVICE_NOT_AVAILABLE), else the re-puts are the
    store's own ``put_patched`` (the twin calls the store twin's as C). What it
    returned, settled, dispatched and stored."""
    store = MessageStore(root, store_host=HOST, segment_size=1 << 20, clock_ms=lambda: TS)
    store.open()
    reputs: reput.Reputs[None] = reput.Reputs(store, restore or reput.restore_timer_view)
    writes = 0

    def put_patched(*args: Any) -> PutResult:
        nonlocal writes
        writes += 1
        if writes == fail_at:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="injected")
        return store.put_patched(*args)

    if wrap:
        reputs.put_patched = put_patched
    seen: list[tuple[Any, ...]] = []
    store.dispatchers.append(
        lambda req: seen.append((reputs.in_flight, req.properties is reputs.in_flight_props))
    )
    settled: list[tuple[Any, ...]] = []

    def settle(attempt: reput.Attempt, a: int, b: int) -> None:
        t = attempt.target
        target = None if t is None else (t.topic, t.queue_id, t.properties, t.reconsume_times)
        settled.append((attempt.outcome, attempt.result, target, attempt.reason, a, b))

    async def go() -> int:
        n: int = put_many(reputs, items, "unread", settle)
        store.write_out()
        return n

    n = asyncio.run(go())
    stored = store.commitlog.read_many([(0, store.commitlog.max_offset)])
    retry = reputs.last_retry
    store.close()
    return n, settled, seen, retry.outcome, retry.reason, stored


def _items() -> list[tuple[bytes | None, int, int]]:
    """Due timers: a fine one, an unreadable one, one whose REAL_QID is no queue id,
    more fine ones."""
    items: list[tuple[bytes | None, int, int]] = []
    for i, qid in enumerate(["0", None, "x", "1", "2", "3"]):
        if qid is None:
            items.append((None, 1_000 + i, 77 + i))
            continue
        rec = encode_record(
            topic=TIMER_TOPIC.encode(),
            body=f"m{i}".encode(),
            properties=encode_properties(
                {"UNIQ_KEY": f"K{i}", REAL_TOPIC: "Real", REAL_QID: qid, TIMER_OUT_MS: "1000"}
            ).encode(),
            queue_id=0,
            flag=0,
            queue_offset=i,
            physical_offset=100 * i,
            sys_flag=0,
            born_timestamp=TS - 5,
            born_host=HOST,
            store_timestamp=TS - 4,
            store_host=HOST,
            reconsume_times=i,
        )
        items.append((rec, 1_000 + i, 100 * i))
    return items


@pytest.mark.parametrize("fail_at", [0, 1, 4])
def test_put_many_stores_the_same_bytes_and_settles_alike(
    nat: ModuleType, tmp_path: Path, fail_at: int
) -> None:
    """The same due timers re-put by the twin's ``put_many`` and the reference's: the
    same count, the same attempts settled in the same order, the origin in flight
    around each write, and the same bytes in the commit log."""
    items = _items()
    a = _batch_run(ref.put_many, tmp_path / "ref", items, fail_at)
    b = _batch_run(nat.put_many, tmp_path / "nat", items, fail_at)
    assert a == b
    n, settled, seen, _o, _r, stored = a
    # writes are made for items 0, 3, 4, 5 (1 and 2 never reach one): a RETRY stops there
    assert n == {0: len(items), 1: 0, 4: 5}[fail_at]
    assert len(settled) == n
    assert [s[0] for s in settled][:3] == [
        reput.Outcome.DONE,
        reput.Outcome.SKIP,
        reput.Outcome.SKIP,
    ][: len(settled)]
    assert all(flying is not None and same for flying, same in seen)


@pytest.mark.parametrize("kind", ["timer", "delayed"])
def test_put_many_with_the_chosen_restore_and_store_put_stores_the_same(
    nat: ModuleType, tmp_path: Path, kind: str
) -> None:
    """The services' wiring: the chosen core's restore and the store's own
    ``put_patched`` (on the native core the twin calls both as C functions, no Python
    call): the same count, settles, origins in flight and bytes as the reference's
    ``put_many`` over the reference's restore and put."""
    items = _items()
    chosen = reput.restore_timer_view if kind == "timer" else reput.restore_delayed_view
    pure = ref.restore_timer_view if kind == "timer" else ref.restore_delayed_view
    a = _batch_run(ref.put_many, tmp_path / "ref", items, 0, pure, wrap=False)
    b = _batch_run(nat.put_many, tmp_path / "nat", items, 0, chosen, wrap=False)
    assert a == b
    assert a[0] == len(items)
    if reput.restore_timer_view is not ref.restore_timer_view:  # the native core
        assert nat.c_calls() == {"MessageStore.put_patched"}
