"""Soak: many kill -9 rounds of a real broker under concurrent mixed load.

Each round starts the broker on the same files and runs, at once: four producer
connections sending plain, level-delayed and timer messages (due 0.05-3 s ahead, a few
20-70 s ahead, in later minute buckets) and
recalling some of the delayed ones (half of the recalls the newest, racing its fire), plus
one consumer long-polling every queue and sending a fifth of what it pulls back for a
retry (RocketMQ's consumer-send-back, delay level 1-3), and transaction half messages
committed, rolled back or left open; then SIGKILL at a random instant
(wall clock, so it lands mid-request) and the next round. A third of the rounds first
start a broker and kill it 0.05-1 s later, before or while it recovers and opens its
port (a crash during recovery must not stop the next start). At the end the broker must
start, and the topic's queues (read from offset 0) must hold:

* every acked message that was not recalled, exactly once;
* no message whose recall was answered SUCCESS, and every message whose recall was
  refused as already delivered;
* a delayed message never stored in its topic before its due instant;
* nothing that was never sent;

and the group's retry topic one copy per acked send-back of a message. Then a producer
registers and answers every transaction check-back with COMMIT: every acked commit and
every half message left open is delivered exactly once, no acked rollback ever.

Requests in flight at a kill have no answer: such a send or send-back may or may not be
stored, such a recall may or may not have taken; each is allowed either way. The consumer
starts from offset 0 every round, so a message can be sent back more than once.

Off by default (minutes of real processes): ``KAIROSMQ_SOAK=<rounds>`` runs it, e.g.
``KAIROSMQ_SOAK=30 .venv/bin/python -m pytest tests/integration/test_crash_soak.py``;
``KAIROSMQ_SOAK_SEED`` fixes the seed of the random choices (printed with the result and
on failure); the interleaving of the five connections and the kill instants still vary
from run to run, so a seed narrows a failure down rather than replaying it.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.protocol.timer import decode_recall_handle

from tests.helpers import pull, pull_all, send
from tests.integration.procs import BrokerProcess
from tests.transaction.txpeer import (
    commit_every_check,
    end,
    half,
    pending,
    register_producer,
)
from tests.wire import RawPeer

ROUNDS = int(os.environ.get("KAIROSMQ_SOAK", "0") or 0)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ROUNDS <= 0, reason="soak: set KAIROSMQ_SOAK=<rounds>"),
]
TOPIC, QUEUES, GROUP = "Soak", 4, "SoakCG"


@dataclass
class Ledger:
    """What the clients know: acked sends, their due instants, recall outcomes."""

    attempted: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    due: dict[str, int] = field(default_factory=dict)  # delayed key -> due ms
    handles: list[tuple[str, str]] = field(default_factory=list)  # recallable (key, handle)
    recalled: set[str] = field(default_factory=set)  # recall answered SUCCESS
    recall_unknown: set[str] = field(default_factory=set)  # recall in flight at a kill
    refused: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> code, remark
    sent_back: Counter[str] = field(default_factory=Counter)  # acked send-backs per key
    send_back_unknown: Counter[str] = field(default_factory=Counter)  # in flight at a kill
    tx_committed: set[str] = field(default_factory=set)  # END_TRANSACTION commit acked
    tx_rolled: set[str] = field(default_factory=set)  # rollback acked
    tx_open: set[str] = field(default_factory=set)  # half acked, no end sent
    tx_unknown: set[str] = field(default_factory=set)  # half or end in flight at a kill
    n: int = 0


async def _producer(peer: RawPeer, led: Ledger, rnd: random.Random, pid: int) -> None:
    while True:
        if led.handles and rnd.random() < 0.15:
            pick = -1 if rnd.random() < 0.5 else rnd.randrange(len(led.handles))
            key, handle = led.handles.pop(pick)
            led.recall_unknown.add(key)
            r = await peer.call(
                RequestCode.RECALL_MESSAGE,
                {"producerGroup": "PG", "topic": TOPIC, "recallHandle": handle},
                timeout=10,
            )
            led.recall_unknown.discard(key)
            if r.code == ResponseCode.SUCCESS:
                led.recalled.add(key)
            else:
                led.refused[key] = (r.code, r.remark or "")
            continue
        led.n += 1
        if rnd.random() < 0.08:
            await _transaction(peer, led, rnd, f"T{pid}-{led.n:07d}")
            continue
        key = f"K{pid}-{led.n:07d}"
        led.attempted.add(key)
        props = {"UNIQ_KEY": key}
        kind = rnd.random()
        if kind < 0.35:
            props["DELAY"] = str(rnd.randint(1, 18))
        elif kind < 0.65:
            props["TIMER_DELAY_MS"] = str(rnd.randint(50, 3000))
        elif kind < 0.7:  # absolute, into later minute buckets (loaded ahead of their due)
            props["TIMER_DELIVER_MS"] = str(int(time.time() * 1000) + rnd.randint(20_000, 70_000))
        r = await send(peer, TOPIC, key.encode(), props, queue_id=rnd.randrange(QUEUES), timeout=10)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        led.acked.add(key)
        handle = r.ext_fields.get("recallHandle")
        if handle:
            led.due[key] = decode_recall_handle(handle).deliver_ms
            led.handles.append((key, handle))
        if rnd.random() < 0.05:
            await asyncio.sleep(rnd.random() * 0.02)


async def _transaction(peer: RawPeer, led: Ledger, rnd: random.Random, key: str) -> None:
    led.attempted.add(key)
    led.tx_unknown.add(key)
    r = await half(peer, TOPIC, key, body=key.encode(), queue_id=str(rnd.randrange(QUEUES)))
    how = rnd.random()
    if how < 0.3:
        led.tx_unknown.discard(key)
        led.tx_open.add(key)
        return
    commit = how < 0.65
    r = await end(peer, r, 8 if commit else 12)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    led.tx_unknown.discard(key)
    (led.tx_committed if commit else led.tx_rolled).add(key)


async def _resolve_transactions(address: str) -> None:
    """A producer of the group answers every check-back with COMMIT until none is
    pending."""
    producer = await RawPeer.connect(address)
    await register_producer(producer)

    task = asyncio.ensure_future(commit_every_check(producer))
    try:
        for _ in range(600):
            if await pending(producer) == 0:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("transactions still pending after 60 s of check-backs")
    finally:
        task.cancel()
        await producer.close()


async def _consumer(peer: RawPeer, led: Ledger, rnd: random.Random) -> None:
    offsets = [0] * QUEUES

    async def send_back(m: MessageExt) -> None:
        key = m.body.decode()
        led.send_back_unknown[key] += 1
        r = await peer.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": m.commit_log_offset,
                "group": GROUP,
                "delayLevel": rnd.randint(1, 3),
                "originMsgId": m.msg_id,
                "originTopic": m.topic,
            },
            timeout=10,
        )
        led.send_back_unknown[key] -= 1
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        led.sent_back[key] += 1

    async def one(q: int) -> None:
        while True:
            r = await pull(
                peer,
                TOPIC,
                queue_id=q,
                offset=offsets[q],
                sys_flag=2,
                suspend_ms=500,
                max_n=64,
                group=GROUP,
                timeout=10,
            )
            if "nextBeginOffset" in r.ext_fields:
                offsets[q] = int(r.ext_fields["nextBeginOffset"])
            if r.code == ResponseCode.SUCCESS:
                for m in decode_records(r.body):
                    if rnd.random() < 0.2:
                        await send_back(m)

    await asyncio.gather(*(one(q) for q in range(QUEUES)))


async def _round(proc: BrokerProcess, led: Ledger, rnd: random.Random) -> None:
    if rnd.random() < 1 / 3:  # killed during its recovery or start-up
        proc.launch()
        await asyncio.sleep(rnd.uniform(0.05, 1.0))
        proc.kill()
    await proc.start()
    peers = [await RawPeer.connect(proc.address) for _ in range(5)]
    tasks = [asyncio.ensure_future(_producer(p, led, rnd, i)) for i, p in enumerate(peers[:4])]
    tasks.append(asyncio.ensure_future(_consumer(peers[4], led, rnd)))
    await asyncio.sleep(rnd.uniform(0.3, 2.0))
    for t in tasks:
        if t.done():  # a producer failed before the kill: that is the finding
            t.result()
    proc.kill()
    await asyncio.gather(*tasks, return_exceptions=True)
    for p in peers:
        await p.close()


async def test_soak_kill9_rounds_under_mixed_load(tmp_path: Path) -> None:
    seed = int(os.environ.get("KAIROSMQ_SOAK_SEED", str(time.time_ns() % 1_000_000)))
    rnd = random.Random(seed)
    proc = BrokerProcess(
        tmp_path / "data",
        "--segment-size-mb",
        "1",
        "--max-message-size",
        "65536",
        "--transaction-timeout",
        "0.5",
        "--transaction-check-interval",
        "0.5",
    )
    led = Ledger()
    try:
        for _ in range(ROUNDS):
            await _round(proc, led, rnd)
        await proc.start()
        await _resolve_transactions(proc.address)
        wait_s = (max(led.due.values(), default=0) - time.time() * 1000) / 1000 + 2.0
        await asyncio.sleep(max(0.0, wait_s))
        peer = await RawPeer.connect(proc.address)
        got = await pull_all(peer, TOPIC, QUEUES)
        retried = await pull_all(peer, f"%RETRY%{GROUP}", 1)
        await peer.close()
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.terminate()
    where = f"seed {seed}, {ROUNDS} rounds"
    counts = Counter(m.body.decode() for m in got)
    dup = [k for k, c in counts.items() if c > 1]
    assert not dup, f"{where}: duplicated {dup[:5]}"
    never_sent = sorted(set(counts) - led.attempted)
    assert not never_sent, f"{where}: never sent {never_sent[:5]}"
    lost = (
        (led.acked | led.tx_committed | led.tx_open)
        - led.recalled
        - led.recall_unknown
        - set(counts)
    )
    assert not lost, f"{where}: acked and lost {sorted(lost)[:5]}"
    rolled = led.tx_rolled & set(counts)
    assert not rolled, f"{where}: rolled back and delivered {sorted(rolled)[:5]}"
    fired = led.recalled & set(counts)
    assert not fired, f"{where}: recalled and delivered {sorted(fired)[:5]}"
    not_delivered = {
        k: v for k, v in led.refused.items() if "already delivered" not in v[1] or k not in counts
    }
    assert not not_delivered, (
        f"{where}: recall refused, yet not delivered {list(not_delivered.items())[:3]}"
    )
    early = [
        (key, led.due[key] - m.store_timestamp)
        for m in got
        if (key := m.body.decode()) in led.due and m.store_timestamp < led.due[key]
    ]
    assert not early, f"{where}: stored before due (key, ms early) {early[:5]}"
    copies = Counter(m.body.decode() for m in retried)
    wrong = {
        k: (copies[k], led.sent_back[k], led.send_back_unknown[k])
        for k in set(copies) | set(led.sent_back)
        if not led.sent_back[k] <= copies[k] <= led.sent_back[k] + led.send_back_unknown[k]
    }
    assert not wrong, (
        f"{where}: retry copies vs acked send-backs (copies, acked, unknown) "
        f"{list(wrong.items())[:5]}"
    )
    assert len(led.acked) > 100 * ROUNDS, f"{where}: only {len(led.acked)} acked"
    print(
        f"{where}: {len(led.acked)} acked, {len(led.recalled)} recalled, "
        f"{len(counts)} stored, {len(led.refused)} recalls refused as already delivered, "
        f"{sum(led.sent_back.values())} send-backs acked, {len(retried)} retry copies, "
        f"transactions: {len(led.tx_committed)} committed, {len(led.tx_rolled)} rolled back, "
        f"{len(led.tx_open)} left open, {len(led.tx_unknown)} in flight at a kill"
    )
