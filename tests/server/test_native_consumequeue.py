"""The native consume-queue unit read (server/store/_consumequeue.pyx) against the
reference (``consumequeue.read_units``): the same units from a real queue file's map and
from any bytes, the same error for a run past the end."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.server.store import consumequeue
from kairosmq.server.store.consumequeue import HOLE, UNIT

from tests.twins import outcome, twin

ref = consumequeue.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("server.store.consumequeue")


@PARITY
@given(st.binary(max_size=200), st.integers(-3, 12), st.integers(-3, 12))
def test_any_bytes_any_run(nat, data: bytes, first: int, count: int) -> None:  # type: ignore[no-untyped-def]
    a, b = outcome(nat.read_units, data, first, count), outcome(ref.read_units, data, first, count)
    assert a[:2] == b[:2]
    if a[0] == "ok":
        assert a == b


def test_units_of_a_real_queue_file(nat, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    units = [(i * 1000, 100 + i, (-1) ** i * (1 << 40) + i) for i in range(500)]
    units[7] = HOLE
    units[8] = (2**63 - 1, -(2**31), -(2**63))
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"".join(UNIT.pack(*u) for u in units) + bytes(20 * 12))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        for first, count in [(0, 500), (3, 1), (499, 1), (0, 512), (500, 12), (0, 0)]:
            assert nat.read_units(mm, first, count) == ref.read_units(mm, first, count)
        assert nat.read_units(mm, 0, 500) == units
        with pytest.raises(struct.error):
            nat.read_units(mm, 500, 13)
        far = (2**61, 2**61)  # past the map and past any offset: the reference's error
        assert outcome(nat.read_units, mm, *far)[:2] == outcome(ref.read_units, mm, *far)[:2]
    # the map closes: the twin holds no export of its buffer


async def test_the_store_reads_through_the_twin(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """A pull of many units goes through ``read_units`` (whichever core runs)."""
    from tests.helpers import pull, send
    from tests.wire import RawPeer

    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    for i in range(40):
        assert (await send(peer, "Units", b"m%d" % i)).code == 0
    r = await pull(peer, "Units", 0, 0, max_n=32, suspend_ms=0)
    assert r.code == 0 and r.ext_fields["nextBeginOffset"] == "32"
    cq = b.store.find_queue("Units", 0)
    assert cq is not None and cq.units(0, 40) == ref.read_units(
        b.store.maps.map(cq.files[-1]), 0, 40
    )
    await peer.close()
