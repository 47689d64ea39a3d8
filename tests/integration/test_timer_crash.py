"""Timers and recalls under repeated kill -9 of a real broker process.

Rounds of timer sends (due 0.2-2.5 s ahead, seeded) mixed with recalls, each round ended
by SIGKILL at a count-based point and a restart on the same files. At the end every
acked timer that was not recalled is served exactly once, at or after its due instant;
every recall answered SUCCESS is never served; every recall refused as "already
delivered" was served once.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.timer import decode_recall_handle

from tests.helpers import pull_all, send
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

pytestmark = pytest.mark.slow
TOPIC = "TimerCrash"


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_timers_and_recalls_exact_across_kill9(tmp_path: Path) -> None:
    rnd = random.Random(20261122)
    proc = BrokerProcess(tmp_path / "data")
    await proc.start()
    due: dict[str, int] = {}  # acked timer key -> due ms
    recalled: set[str] = set()  # recall answered SUCCESS
    delivered_before_recall: set[str] = set()  # recall answered "already delivered"
    try:
        for _round in range(4):
            peer = await RawPeer.connect(proc.address)
            handles: list[tuple[str, str]] = []
            kill_after = rnd.randrange(40, 70)
            for i in range(kill_after):
                if handles and rnd.random() < 0.3:
                    key, handle = handles.pop(rnd.randrange(len(handles)))
                    r = await peer.call(
                        RequestCode.RECALL_MESSAGE,
                        {"producerGroup": "PG", "topic": TOPIC, "recallHandle": handle},
                    )
                    if r.code == ResponseCode.SUCCESS:
                        recalled.add(key)
                    else:
                        assert "already delivered" in (r.remark or ""), r.remark
                        delivered_before_recall.add(key)
                    continue
                key = uuid.uuid4().hex.upper()
                delay = rnd.randrange(200, 2500)
                r = await send(
                    peer,
                    TOPIC,
                    key.encode(),
                    {"UNIQ_KEY": key, "TIMER_DELAY_MS": str(delay)},
                    queue_id=i % 4,
                )
                assert r.code == ResponseCode.SUCCESS, r.remark
                due[key] = decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms
                handles.append((key, r.ext_fields["recallHandle"]))
                if rnd.random() < 0.2:
                    await asyncio.sleep(rnd.random() * 0.3)
            proc.kill()
            await peer.close()
            await proc.start()
        await asyncio.sleep((max(due.values()) - now_ms()) / 1000 + 1.0)
        # a loaded machine may take longer to restart and fire the last ones: pull again
        # until every expected timer is served or 15 s have passed (a lost one never is),
        # then once more after a pause, so that a late duplicate shows too
        peer = await RawPeer.connect(proc.address)
        expected, give_up = set(due) - recalled, time.monotonic() + 15
        got = await pull_all(peer, TOPIC)
        while not expected <= {m.body.decode() for m in got} and time.monotonic() < give_up:
            await asyncio.sleep(0.25)
            got = await pull_all(peer, TOPIC)
        await asyncio.sleep(0.5)
        got = await pull_all(peer, TOPIC)
        await peer.close()
    finally:
        proc.terminate()
    counts = Counter(m.body.decode() for m in got)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert not recalled & set(counts), "a recalled timer fired"
    assert delivered_before_recall <= set(counts)
    assert set(counts) == set(due) - recalled, "an acked timer was lost"
    for m in got:
        assert m.store_timestamp >= due[m.body.decode()], "a timer fired early"
    assert recalled and len(counts) > 50
