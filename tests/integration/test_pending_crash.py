"""An operator's reschedule, run-now and recall of pending messages under kill -9 of a
real broker process (``tests/hostile/harness.py``'s ledger and ``verify_after_kill9``).

Each case acts on pending timers and level-delayed messages, then kills the broker at a
point of its own: at once after the answers (the action records only in the commit log,
no checkpoint since), after a checkpoint, or with the broker kept down past the old due
instants; after the restart every moved message is served exactly once, never before its
new instant, every recalled one never, and the rest as acked. A randomized run repeats
sends, actions (by ref, msgId and key, some aimed at the instant the message falls due)
and kill -9 at count-based points, and checks the same at the end.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.timer import decode_recall_handle

from tests.helpers import pull_all, send
from tests.hostile.harness import Acked, HostileBroker, describe, verify_after_kill9
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

pytestmark = pytest.mark.slow
TOPIC = "PendingCrash"


def now_ms() -> int:
    return int(time.time() * 1000)


async def timer_send(hb: HostileBroker, peer: RawPeer, due: int, keys: str = "") -> Acked:
    """A timer send booked in the ledger (``delay_ms``: its due instant - the send)."""
    uniq = "PC" + uuid.uuid4().hex[:20].upper()
    props = {"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(due)}
    if keys:
        props["KEYS"] = keys
    sent = now_ms() - 1
    r = await send(peer, TOPIC, uniq.encode(), props, queue_id=len(hb.ledger.acked) % 4)
    assert r.code == ResponseCode.SUCCESS, describe(r)
    due = decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms
    a = Acked(uniq, TOPIC, 0, uniq.encode(), due - sent, sent)
    hb.ledger.acked[uniq] = a
    return a


async def act(peer: RawPeer, code: int, **fields: Any) -> dict[str, Any]:
    r = await peer.call(code, {k: str(v) for k, v in fields.items()})
    assert r.code == ResponseCode.SUCCESS, describe(r)
    return orjson.loads(r.body)


def moved(hb: HostileBroker, a: Acked, new_due: int) -> None:
    """The ledger's promise for a moved message: served once, not before ``new_due``."""
    a.delay_ms = new_due - a.sent_ms


def recalled(hb: HostileBroker, a: Acked) -> None:
    """A recalled message must never be served."""
    del hb.ledger.acked[a.key]
    hb.ledger.refused_bodies.add(a.body)
    hb.ledger.watch.add(a.topic)


async def operator_actions(hb: HostileBroker, peer: RawPeer) -> None:
    """On 12 timers due in 2.5 s and 3 level-delayed messages (900 ms): move 3 earlier,
    3 later, run 2 now, recall 2 by msgId and 2 by key; run one level message now and
    recall another; the rest stay as they are."""
    base = now_ms() + 2_500
    ts = [await timer_send(hb, peer, base + i, keys="bulk" if i >= 10 else "") for i in range(12)]
    levels = [await hb.good_send(peer, TOPIC, delay_level=18, tag="lvl") for _ in range(3)]
    for a in ts[:3]:
        new = now_ms() + 700
        out = await act(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=a.key, dueMs=new)
        moved(hb, a, out["results"][0]["newDueMs"])
    for a in ts[3:6]:
        new = base + 1_500
        out = await act(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=a.key, dueMs=new)
        moved(hb, a, new)
    for a in ts[6:8]:
        out = await act(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=a.key, runNow="true")
        moved(hb, a, out["results"][0]["newDueMs"])
    for a in ts[8:10]:
        await act(peer, R.KAIROS_RECALL_PENDING, msgId=a.key)
        recalled(hb, a)
    out = await act(peer, R.KAIROS_RECALL_PENDING, key="bulk")
    assert out["done"] == 2
    for a in ts[10:]:
        recalled(hb, a)
    out = await act(peer, R.KAIROS_RESCHEDULE_PENDING, msgId=levels[0].key, runNow="true")
    assert out["results"][0]["kind"] == "level"
    moved(hb, levels[0], out["results"][0]["newDueMs"])
    await act(peer, R.KAIROS_RECALL_PENDING, msgId=levels[1].key)
    recalled(hb, levels[1])


@pytest_asyncio.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[HostileBroker]]]:
    """``await hostile(*extra)``: a broker process (tests/hostile's fixture, here)."""
    made: list[HostileBroker] = []

    async def make(*extra: str) -> HostileBroker:
        hb = HostileBroker(tmp_path / "d", *extra)
        made.append(hb)
        await hb.start()
        return hb

    yield make
    for hb in made:
        await hb.close_peers()
        p = hb.proc.proc
        if p is not None and p.poll() is None:
            hb.graceful_stop()


async def test_actions_then_kill9_at_once(hostile) -> None:
    # no checkpoint after the actions: their records are only in the commit log
    hb = await hostile("--checkpoint-interval", "60")
    await verify_after_kill9(hb, offsets=False, before_kill=lambda p: operator_actions(hb, p))


async def test_actions_then_checkpoint_then_kill9(hostile) -> None:
    hb = await hostile()  # a checkpoint every 0.3 s

    async def then_wait(peer: RawPeer) -> None:
        await operator_actions(hb, peer)
        await asyncio.sleep(0.8)  # checkpoints hold the cancels, the marks and the cursor

    await verify_after_kill9(hb, offsets=False, before_kill=then_wait)


async def test_kept_down_past_the_old_instants(hostile) -> None:
    started = time.monotonic()
    hb = await hostile("--checkpoint-interval", "60")
    # the browse after the restart must come before the new instant, and a loaded 2-core
    # box takes seconds to start a broker (the restart, as long): the timeline follows
    # how long this start took (at least 1 s), so the moved timers are still pending
    pace = max(1_000, int((time.monotonic() - started) * 1000))
    peer = await hb.connect()
    base = now_ms() + pace * 3 // 2  # the actions below come before the old instants
    later = [await timer_send(hb, peer, base + i) for i in range(5)]
    gone = [await timer_send(hb, peer, base + 10 + i) for i in range(3)]
    # the restart after base + 500, then the browse: a restart on a loaded box can take
    # twice the first start, so the new instant leaves it four starts
    new_due = base + 500 + pace * 4
    for a in later:
        out = await act(
            peer, R.KAIROS_RESCHEDULE_PENDING, ref=_ref(await _find(peer, a)), dueMs=new_due
        )
        assert out["results"][0]["newDueMs"] == new_due
        moved(hb, a, new_due)
    for a in gone:
        await act(peer, R.KAIROS_RECALL_PENDING, ref=_ref(await _find(peer, a)))
        recalled(hb, a)
    hb.proc.kill()
    await hb.close_peers()
    await asyncio.sleep(max(0.0, (base + 500 - now_ms()) / 1000))  # the old instants pass
    await hb.start()
    peer = await hb.connect()
    early = [m for m in await pull_all(peer, TOPIC) if m.store_timestamp < new_due]
    assert early == [], "a moved or recalled timer fired at its old instant after restart"
    pending = await act(peer, R.KAIROS_BROWSE_PENDING, topic=TOPIC)
    assert pending["nowMs"] < new_due, (
        f"browsed {pending['nowMs'] - new_due} ms after the new instant: the restart took "
        f"too long for this timeline, the moved timers fired (rightly) before the browse"
    )
    assert sorted(r["msgId"] for r in pending["rows"]) == sorted(a.key for a in later)
    assert {r["dueMs"] for r in pending["rows"]} == {new_due}
    await verify_after_kill9(hb, offsets=False)  # and once more, down to the new instant


async def _find(peer: RawPeer, a: Acked) -> dict[str, Any]:
    (row,) = (await act(peer, R.KAIROS_BROWSE_PENDING, msgId=a.key))["rows"]
    return row


def _ref(row: dict[str, Any]) -> str:
    return str(row["ref"])


async def test_randomized_actions_and_kill9_rounds(tmp_path: Path) -> None:
    """Rounds of timer sends and actions (some at the instant the message falls due: the
    fire or the action wins, never both), each round ended by SIGKILL; at the end every
    message is served exactly once at or after its last instant, or never if recalled."""
    rnd = random.Random(20261128)
    proc = BrokerProcess(tmp_path / "data", "--checkpoint-interval", "0.5")
    await proc.start()
    due: dict[str, int] = {}  # key -> the instant it must not be served before
    gone: set[str] = set()  # recall answered SUCCESS
    fired_first: set[str] = set()  # an action answered "no pending" / "already fired"
    try:
        for _round in range(4):
            peer = await RawPeer.connect(proc.address)
            keys: list[str] = []
            for i in range(rnd.randrange(50, 80)):
                if keys and rnd.random() < 0.35:
                    key = keys.pop(rnd.randrange(len(keys)))
                    if rnd.random() < 0.3:  # aim at the instant it falls due
                        await asyncio.sleep(max(0.0, (due[key] - now_ms() - 1) / 1000))
                    how = rnd.choice(("later", "earlier", "now", "recall"))
                    if how == "recall":
                        r = await peer.call(R.KAIROS_RECALL_PENDING, {"msgId": key})
                    else:
                        fields = {"msgId": key}
                        if how == "now":
                            fields["runNow"] = "true"
                        else:
                            shift = rnd.randrange(300, 1500) * (1 if how == "later" else -1)
                            fields["dueMs"] = str(max(now_ms(), due[key] + shift))
                        r = await peer.call(R.KAIROS_RESCHEDULE_PENDING, fields)
                    if r.code == ResponseCode.SUCCESS:
                        res = orjson.loads(r.body)["results"][0]
                        if how == "recall":
                            gone.add(key)
                        else:
                            due[key] = res["newDueMs"]
                            keys.append(key)  # it may be acted on again
                    else:
                        assert r.code == ResponseCode.ILLEGAL_OPERATION, describe(r)
                        fired_first.add(key)
                    continue
                key = "PR" + uuid.uuid4().hex[:20].upper()
                r = await send(
                    peer,
                    TOPIC,
                    key.encode(),
                    {"UNIQ_KEY": key, "TIMER_DELAY_MS": str(rnd.randrange(200, 2500))},
                    queue_id=i % 4,
                )
                assert r.code == ResponseCode.SUCCESS, describe(r)
                due[key] = decode_recall_handle(r.ext_fields["recallHandle"]).deliver_ms
                keys.append(key)
                if rnd.random() < 0.15:
                    await asyncio.sleep(rnd.random() * 0.2)
            proc.kill()
            await peer.close()
            await proc.start()
        # the last restart can outlast the last instant (3 s on a loaded 2-core box), and
        # what fell due meanwhile fires only once the timer task runs, a moment after the
        # port listens: poll until nothing is listed pending and every message is served
        # (or a deadline), as verify_after_kill9 does, instead of a fixed time after the
        # restart; browse first, so the pull sees every copy fired before the empty list
        await asyncio.sleep(max(0.0, (max(due.values()) - now_ms()) / 1000))
        peer = await RawPeer.connect(proc.address)
        deadline = time.monotonic() + 20
        while True:
            left = await peer.call(R.KAIROS_BROWSE_PENDING, {"topic": TOPIC})
            got = await pull_all(peer, TOPIC)
            served = {m.body.decode() for m in got}
            idle = left.code == ResponseCode.SUCCESS and not orjson.loads(left.body)["rows"]
            if (idle and set(due) - gone <= served) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        await peer.close()
    finally:
        proc.terminate()
    counts = Counter(m.body.decode() for m in got)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert not gone & set(counts), "a recalled message fired"
    assert set(counts) == set(due) - gone, "an acked message was lost"
    assert fired_first <= set(counts)
    for m in got:
        assert m.store_timestamp >= due[m.body.decode()], "served before its last instant"
    assert orjson.loads(left.body)["rows"] == []
    assert gone and len(counts) > 100
