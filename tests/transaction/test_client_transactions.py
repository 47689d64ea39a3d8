"""The bundled TransactionProducer (client/producer/transaction.py) against a real broker:
commit, rollback, unknown -> check-back -> commit, a raising callback, async callbacks,
and a producer gone -> the check goes to a new producer of the group."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kairosmq.client import LocalTransactionState, Message, TransactionProducer
from kairosmq.protocol.message import MessageExt

from tests.helpers import stays_false, wait_until
from tests.transaction.txpeer import FAST, messages
from tests.wire import RawPeer

S = LocalTransactionState


async def delivered(broker: Any, topic: str) -> list[str]:
    peer = await RawPeer.connect(broker.address)
    try:
        got: list[str] = []
        for q in range(4):
            got += [m.body.decode() for m in await messages(peer, topic, q)]
        return got
    finally:
        await peer.close()


@pytest.mark.parametrize(("state", "expect"), [(S.COMMIT_MESSAGE, ["c"]), (S.ROLLBACK_MESSAGE, [])])
async def test_commit_and_rollback(broker: Any, state: S, expect: list[str]) -> None:
    seen: list[tuple[str, Any]] = []

    def execute(msg: Message, arg: Any) -> S:
        seen.append((msg.body.decode(), arg))
        return state

    async with TransactionProducer(
        "TxPG", broker.namesrv_address, execute_local_transaction=execute
    ) as p:
        r = await p.send_message_in_transaction(Message("TxCli", b"c"), arg=42)
    assert r.local_transaction_state is state and seen == [("c", 42)]
    assert r.transaction_id == r.send_result.msg_id
    await wait_until(lambda: not broker.transactions.pending, 5)
    assert await delivered(broker, "TxCli") == expect


async def test_unknown_then_check_back_commits(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    checked: list[MessageExt] = []

    async def check(msg: MessageExt) -> S:
        checked.append(msg)
        await asyncio.sleep(0)
        return S.COMMIT

    async with TransactionProducer(
        "TxPG2",
        broker.namesrv_address,
        execute_local_transaction=lambda m, a: S.UNKNOWN,
        check_local_transaction=check,
    ) as p:
        r = await p.send_message_in_transaction(Message("TxCli2", b"later", tags="t"))
        assert r.local_transaction_state is S.UNKNOW
        await wait_until(lambda: not broker.transactions.pending, 10)
    assert [m.msg_id for m in checked] == [r.send_result.msg_id]
    assert checked[0].topic == "TxCli2" and checked[0].body == b"later"
    assert await delivered(broker, "TxCli2") == ["later"]


async def test_raising_callback_is_unknown_then_rolled_back_by_check(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)

    def execute(msg: Message, arg: Any) -> S:
        raise RuntimeError("db down")

    async with TransactionProducer(
        "TxPG3",
        broker.namesrv_address,
        execute_local_transaction=execute,
        check_local_transaction=lambda m: S.ROLLBACK,
    ) as p:
        r = await p.send_message_in_transaction(Message("TxCli3", b"x"))
        assert r.local_transaction_state is S.UNKNOW
        await wait_until(lambda: broker.transactions.counters["rolled_back"] == 1, 10)
    assert await delivered(broker, "TxCli3") == []


@pytest.mark.slow  # waits for check-backs
async def test_producer_gone_then_a_new_one_of_the_group_is_checked(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    async with TransactionProducer(
        "TxPG4", broker.namesrv_address, execute_local_transaction=lambda m, a: S.UNKNOW
    ) as p:
        await p.send_message_in_transaction(Message("TxCli4", b"orphan"))
    assert await stays_false(lambda: not broker.transactions.pending, 1.0)
    assert broker.transactions.counters["no_producer"] >= 1
    assert broker.transactions.counters["checked"] == 0
    async with TransactionProducer(
        "TxPG4",
        broker.namesrv_address,
        execute_local_transaction=lambda m, a: S.COMMIT,
        check_local_transaction=lambda m: S.COMMIT,
    ) as p2:
        await p2.send_message_in_transaction(Message("TxCli4", b"fresh"))  # registers
        await wait_until(lambda: not broker.transactions.pending, 10)
    assert sorted(await delivered(broker, "TxCli4")) == ["fresh", "orphan"]
