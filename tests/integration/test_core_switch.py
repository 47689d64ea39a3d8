"""The core switch on real broker processes: a broker started with
``KAIROSMQ_NO_EXTENSIONS=1`` runs the pure core and says so (``KAIROS_GET_BROKER_STATUS``'s
``core``), one started without it runs the native core when built; both serve the same
sends (JSON and binary headers, plain and delayed) and a store written by one core,
killed with ``kill -9``, is recovered and served whole by the other.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.helpers import pull_all, send_ext
from tests.integration.procs import BrokerProcess
from tests.twins import twin
from tests.wire import RawPeer

PURE = {"KAIROSMQ_NO_EXTENSIONS": "1"}
NATIVE = {"KAIROSMQ_NO_EXTENSIONS": ""}


async def _core(peer: RawPeer) -> str:
    r = await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return str(orjson.loads(r.body)["core"])


async def _send_all(peer: RawPeer, tag: str) -> list[bytes]:
    """Plain and delayed sends with JSON and binary headers; the bodies acked."""
    acked = []
    for i, (binary, props) in enumerate(
        [(False, {}), (True, {}), (False, {"DELAY": "1"}), (True, {"DELAY": "2", "KEYS": "k"})]
    ):
        body = f"{tag}-{i}".encode()
        ext = send_ext("CoreSwitch", {"UNIQ_KEY": f"{tag}{i}", **props}, queue_id=i % 2)
        r = await peer.call(RequestCode.SEND_MESSAGE_V2, ext, body, binary=binary)
        assert r.code == ResponseCode.SUCCESS, r.remark
        acked.append(body)
    return acked


async def _served(peer: RawPeer, expected: int) -> list[bytes]:
    for _ in range(100):  # the delayed ones are due within 100 ms
        got = await pull_all(peer, "CoreSwitch", queues=2)
        if len(got) >= expected:
            return sorted(m.body for m in got)
        await asyncio.sleep(0.05)
    return sorted(m.body for m in await pull_all(peer, "CoreSwitch", queues=2))


@pytest.mark.slow
@pytest.mark.parametrize("first", ["pure", "native"])
async def test_one_core_writes_the_other_recovers_after_kill9(tmp_path: Path, first: str) -> None:
    twin("protocol.codec")  # the native side needs the build (skip, or fail in CI)
    envs = {"pure": PURE, "native": NATIVE}
    second = "native" if first == "pure" else "pure"
    bp = BrokerProcess(tmp_path / "d", env=envs[first])
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    core = await _core(peer)
    assert core.startswith(
        "pure (codec: disabled (KAIROSMQ_NO_EXTENSIONS=1)" if first == "pure" else "native"
    ), core
    acked = await _send_all(peer, first)
    assert await _served(peer, len(acked)) == sorted(acked)
    bp.kill()
    await peer.close()

    bp.env = envs[second]
    await bp.start()
    peer = await RawPeer.connect(bp.address)
    assert (await _core(peer)).startswith("native" if second == "native" else "pure (")
    acked += await _send_all(peer, second)
    assert await _served(peer, len(acked)) == sorted(acked)  # nothing acked lost
    await peer.close()
    assert bp.terminate() == 0
