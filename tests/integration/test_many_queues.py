"""Many consume queues under a low open-file limit (issue 29), against real broker processes.

The audit's client made 1-byte sends to new (topic, queue) pairs: each new queue took
6 MB of zeros and two descriptors for ever, so under ``ulimit -n 256`` sends failed with
EMFILE after ~107 queues and, after a restart, the broker sat at 255/256 descriptors
refusing connections. Here a broker started with ``RLIMIT_NOFILE`` 256 (soft and hard,
restarts included) gets a few thousand new queues by 1-byte sends, must ack every one,
stay under its limit and its logged budget (``KAIROS_GET_BROKER_STATUS``'s ``fds``) and
keep accepting connections and sends; then kill -9, a restart under the same limit, and
every acked message is served (``verify_after_kill9`` plus every new queue pulled).

Opt-in, the 100k case: ``KAIROSMQ_MANY_QUEUES=100000 pytest tests/integration/
test_many_queues.py -k opt_in`` (figures: ``python bench/bench_queues.py --queues 100000``).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records

from tests.helpers import pull, send
from tests.hostile.harness import HostileBroker, describe, verify_after_kill9
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

NOFILE = 256
CI_QUEUES = 3000
PER_TOPIC = 1000  # queues per topic (UPDATE_AND_CREATE_TOPIC allows 1024)
WINDOW = 128  # requests in flight on one connection
OPT_IN = int(os.environ.get("KAIROSMQ_MANY_QUEUES", "0") or 0)


def broker_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_of(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no 'Max open files' line")


async def status_fds(peer: RawPeer) -> dict[str, Any]:
    r = await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})
    assert r.code == ResponseCode.SUCCESS, describe(r)
    fds: dict[str, Any] = json.loads(r.body)["fds"]
    return fds


async def windowed(calls: list[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(0, len(calls), WINDOW):
        out += await asyncio.gather(*calls[i : i + WINDOW])
    return out


async def make_queues(peer: RawPeer, n: int, prefix: str) -> list[tuple[str, int, str]]:
    """``n`` new queues (topics of PER_TOPIC queues), one 1-byte send each; every send
    must be acked. Returns (topic, queue, UNIQ_KEY) of each."""
    pairs: list[tuple[str, int, str]] = []
    for t in range((n + PER_TOPIC - 1) // PER_TOPIC):
        topic, count = f"{prefix}{t:03d}", min(PER_TOPIC, n - t * PER_TOPIC)
        r = await peer.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": count, "writeQueueNums": count, "perm": 6},
        )
        assert r.code == ResponseCode.SUCCESS, describe(r)
        pairs += [(topic, q, f"{topic}-{q}") for q in range(count)]
    answers = await windowed(
        [send(peer, t, b"x", {"UNIQ_KEY": k}, queue_id=q) for t, q, k in pairs]
    )
    refused = [
        (p, describe(r))
        for p, r in zip(pairs, answers, strict=True)
        if r.code != ResponseCode.SUCCESS
    ]
    assert not refused, f"{len(refused)} of {n} sends refused, e.g. {refused[:3]}"
    return pairs


async def served_once(peer: RawPeer, pairs: list[tuple[str, int, str]]) -> None:
    """Each queue serves exactly its one message, body and key intact."""
    answers = await windowed(
        [pull(peer, t, queue_id=q, group="ManyQueuesCheck", suspend_ms=0) for t, q, _k in pairs]
    )
    bad = []
    for (t, q, k), r in zip(pairs, answers, strict=True):
        msgs = decode_records(r.body) if r.code == ResponseCode.SUCCESS else []
        if [(m.body, m.properties.get("UNIQ_KEY")) for m in msgs] != [(b"x", k)]:
            bad.append((t, q, r.code, len(msgs)))
    assert not bad, f"{len(bad)} of {len(pairs)} queues lost their acked message: {bad[:5]}"


async def still_serving(hb: HostileBroker, tag: str, n: int = 20) -> None:
    """New connections are accepted and each one's send to a new queue is acked."""
    peers = [await RawPeer.connect(hb.address) for _ in range(n)]
    try:
        answers = await asyncio.gather(
            *(send(p, f"ManyQueuesProbe{tag}{i}", b"p") for i, p in enumerate(peers))
        )
        assert all(r.code == ResponseCode.SUCCESS for r in answers), [
            describe(r) for r in answers if r.code != ResponseCode.SUCCESS
        ][:3]
    finally:
        for p in peers:
            await p.close()


def check_budget(pid: int, fds: dict[str, Any], limit: int) -> None:
    now = broker_fds(pid)
    assert now <= fds["budget"] <= limit == fds["limit"], (now, fds)
    assert fds["open"] <= fds["budget"] and fds["queueFilesOpen"] <= fds["maxOpenQueueFiles"]
    assert fds["maxConnections"] + fds["maxOpenQueueFiles"] < limit, fds


async def many_queues_kill9(tmp_path: Path, n: int) -> None:
    hb = HostileBroker(tmp_path / "broker", nofile=NOFILE)
    await hb.start()
    try:
        peer = await hb.connect()
        assert hb.proc.proc is not None
        assert nofile_of(hb.proc.proc.pid) == (NOFILE, NOFILE)
        await hb.setup_bystander(peer)
        pairs = await make_queues(peer, n, "ManyQ")
        check_budget(hb.proc.proc.pid, await status_fds(peer), NOFILE)
        await still_serving(hb, "a")
        await verify_after_kill9(hb)  # restarted under the same limit
        pid = hb.proc.proc.pid
        assert nofile_of(pid) == (NOFILE, NOFILE)
        peer = hb.peers[-1]
        check_budget(pid, await status_fds(peer), NOFILE)
        await served_once(peer, pairs)  # every queue read again: the LRU reopens them
        check_budget(pid, await status_fds(peer), NOFILE)
        await still_serving(hb, "b")
        more = await make_queues(peer, min(n, 500), "MoreQ")  # new queues after it, too
        await served_once(peer, more)
        check_budget(pid, await status_fds(peer), NOFILE)
        await hb.close_peers()
        hb.graceful_stop()
    finally:
        hb.stop_process()


@pytest.mark.slow
async def test_thousands_of_queues_under_256_fds_survive_kill9(tmp_path: Path) -> None:
    await many_queues_kill9(tmp_path, CI_QUEUES)


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.skipif(OPT_IN <= 0, reason="opt-in: KAIROSMQ_MANY_QUEUES=<queues>, e.g. 100000")
async def test_opt_in_many_queues_under_256_fds_survive_kill9(tmp_path: Path) -> None:
    await many_queues_kill9(tmp_path, OPT_IN)


@pytest.mark.slow
async def test_the_soft_limit_is_raised_to_the_hard_one_at_start(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1024:
        pytest.skip(f"the hard open-file limit here is {hard}")
    b = BrokerProcess(tmp_path / "broker", nofile=(256, hard))
    await b.start()
    try:
        assert b.proc is not None
        assert nofile_of(b.proc.pid) == (hard, hard)
        peer = await RawPeer.connect(b.address)
        fds = await status_fds(peer)
        assert fds["limit"] == hard and fds["open"] <= fds["budget"] <= hard
        await peer.close()
    finally:
        b.kill()


@pytest.mark.slow
async def test_a_limit_too_low_for_a_broker_says_so_and_exits_2(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", nofile=40)
    with pytest.raises(RuntimeError) as info:
        await b.start()
    assert "broker exited with 2" in str(info.value)
    assert "the open-file limit 40 leaves" in str(info.value)
    assert "raise the hard limit" in str(info.value)
