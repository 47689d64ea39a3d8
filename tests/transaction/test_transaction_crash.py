"""Transactions under repeated kill -9 of a real broker process.

Rounds of half messages, each ended by an acked commit, an acked rollback, a one-way
commit sent just before the kill (in doubt), or nothing (pending), then SIGKILL and a
restart on the same files. Then a producer registers and answers every check-back with
COMMIT. At the end: every acked commit is delivered exactly once, no rollback is ever
delivered or checked, no acked end is checked, every in-doubt and pending half message
is delivered exactly once, and an end repeated after the restarts is ignored.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import request

from tests.helpers import pull_all
from tests.integration.procs import BrokerProcess
from tests.transaction.txpeer import (
    commit_every_check,
    end,
    end_ext,
    half,
    pending,
    register_producer,
)
from tests.wire import RawPeer

pytestmark = pytest.mark.slow
TOPIC = "TxCrash"


async def test_transactions_exact_across_kill9(tmp_path: Path) -> None:
    rnd = random.Random(20261114)
    proc = BrokerProcess(
        tmp_path / "data", "--transaction-timeout", "0.5", "--transaction-check-interval", "0.5"
    )
    await proc.start()
    answers: dict[str, Any] = {}
    committed: set[str] = set()
    rolled: set[str] = set()
    doubt: set[str] = set()
    open_: set[str] = set()
    try:
        for rnd_no in range(3):
            peer = await RawPeer.connect(proc.address)
            for i in range(rnd.randrange(30, 50)):
                key = f"R{rnd_no}-{i}"
                r = await half(peer, TOPIC, key, body=key.encode(), queue_id=str(i % 4))
                answers[key] = r
                x = rnd.random()
                if x < 0.35:
                    assert (await end(peer, r, 8)).code == ResponseCode.SUCCESS
                    committed.add(key)
                elif x < 0.55:
                    assert (await end(peer, r, 12)).code == ResponseCode.SUCCESS
                    rolled.add(key)
                elif x < 0.75:
                    peer.send_raw(
                        encode_command(
                            request(
                                RequestCode.END_TRANSACTION,
                                {k: str(v) for k, v in end_ext(r, 8).items()},
                                oneway=True,
                            )
                        )
                    )
                    doubt.add(key)
                else:
                    open_.add(key)
            proc.kill()
            await peer.close()
            await proc.start()
        producer = await RawPeer.connect(proc.address)
        await register_producer(producer)
        checked: list[str] = []

        task = asyncio.ensure_future(commit_every_check(producer, checked))
        try:
            for _ in range(200):
                if await pending(producer) == 0:
                    break
                await asyncio.sleep(0.1)
            assert await pending(producer) == 0
        finally:
            task.cancel()
        for key in sorted(committed | rolled):  # a repeated end after the kills: ignored
            r = await end(producer, answers[key], 8 if key in committed else 12)
            assert r.code == ResponseCode.SUCCESS and "ignored" in (r.remark or ""), key
        expected = committed | doubt | open_
        got = await pull_all(producer, TOPIC)
        await producer.close()
    finally:
        proc.terminate()
    counts = Counter(m.body.decode() for m in got)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert not rolled & set(counts), "a rolled-back message was delivered"
    lost = expected - set(counts)
    assert not lost, (
        f"lost: committed {sorted(lost & committed)} doubt "
        f"{sorted(lost & doubt)} open {sorted(lost & open_)}"
    )
    assert not (committed | rolled) & set(checked), "an acked end was checked"
    assert open_ <= set(checked)
    assert committed and rolled and doubt and open_
