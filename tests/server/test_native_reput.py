"""The native restores of due records (server/schedule/_reput.pyx) against the reference
(``reput.reference``, held to the object path by tests/server/test_reput_parity.py).

Same record, same outcome: the same ``RecordView``, target topic and queue, and the same
properties in the same order (so the same bytes stored), or the same ``RequeueError``.
Records: generated (client and internal properties in any order, REAL_QID and
REAL_TOPIC of any text, IPv4 and IPv6 hosts), the same records cut or with a byte
changed, and arbitrary bytes.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.properties import REAL_QID, REAL_TOPIC, encode_properties
from kairosmq.server.schedule import reput

from tests.server.test_reput_parity import _record
from tests.twins import outcome, twin

ref = reput.reference
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
