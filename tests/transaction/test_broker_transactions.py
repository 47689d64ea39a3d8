"""Transactional messages against a real in-process broker, on the wire (RawPeer).

Half message stored in the half topic and invisible; END_TRANSACTION commit (same
msgId, delay applied then), rollback, a second end ignored, wrong group refused;
check-back to a live producer, check max -> discard, no producer -> checked once one
appears; the admin status; a restart keeps pending and ended half messages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import CheckTransactionStateRequestHeader
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import decode_record

from tests.helpers import send, stays_false, wait_until
from tests.transaction.txpeer import (
    FAST,
    HALF,
    OP,
    end,
    end_ext,
    half,
    messages,
    register_producer,
    stored,
)
from tests.wire import RawPeer


async def test_half_message_is_stored_invisible_with_transaction_id(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxA", "UNIQ-A")
    assert r.ext_fields["transactionId"] == "UNIQ-A"
    assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == "0"
    assert await messages(peer, "TxA") == []
    rec = broker.store.read_at(decode_offset_msg_id(r.ext_fields["msgId"])[2])
    m = decode_record(rec)
    assert (m.topic, m.queue_id) == (HALF, 0)
    assert m.properties["REAL_TOPIC"] == "TxA" and m.properties["REAL_QID"] == "0"
    assert m.sys_flag & 0xC == 0  # stored with the transaction type NOT_TYPE (RocketMQ)
    assert broker.transactions.status()["groups"]["PG"]["pending"] == 1
    await peer.close()


async def test_commit_delivers_once_with_the_same_msg_id(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxB", "UNIQ-B", KEYS="k1")
    c = await end(peer, r, 8)
    assert c.code == ResponseCode.SUCCESS, c.remark
    got = await messages(peer, "TxB")
    assert [m.msg_id for m in got] == ["UNIQ-B"] and got[0].body == b"half"
    assert got[0].sys_flag & 0xC == 0x8  # COMMIT type, as RocketMQ's sendFinalMessage
    assert "TRAN_MSG" not in got[0].properties and "REAL_TOPIC" not in got[0].properties
    again = await end(peer, r, 8)  # a second end: ignored, not put twice
    assert again.code == ResponseCode.SUCCESS and "ignored" in (again.remark or "")
    rb = await end(peer, r, 12)  # nor rolled back after the commit
    assert rb.code == ResponseCode.SUCCESS and "ignored" in (rb.remark or "")
    assert [m.msg_id for m in await messages(peer, "TxB")] == ["UNIQ-B"]
    ops = stored(broker, OP)
    assert [(m.tags, m.body, m.properties["KAIROS_TX_END"]) for m in ops] == [("d", b"0", "commit")]
    assert broker.transactions.pending == {}
    await peer.close()


async def test_rollback_drops_the_message(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxC", "UNIQ-C")
    assert (await end(peer, r, 12)).code == ResponseCode.SUCCESS
    assert await stays_false(lambda: broker.store.max_offset("TxC", 0) > 0, 0.3)
    assert (await end(peer, r, 8)).remark and broker.store.max_offset("TxC", 0) == 0
    ops = stored(broker, OP)
    assert [m.properties["KAIROS_TX_END"] for m in ops] == ["rollback"]
    await peer.close()


async def test_end_checks_group_offsets_and_kind(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxD", "UNIQ-D")
    bad = await end(peer, r, 8, group="OtherGroup")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "producer group" in bad.remark
    ext = end_ext(r, 8)
    ext["tranStateTableOffset"] = 5
    bad = await peer.call(RequestCode.END_TRANSACTION, ext)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "state table offset" in bad.remark
    ext = end_ext(r, 8)
    ext["commitLogOffset"] = 1
    bad = await peer.call(RequestCode.END_TRANSACTION, ext)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "Find prepared" in bad.remark
    bad = await end(peer, r, 4)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "commitOrRollback 4" in bad.remark
    unknown = await end(peer, r, 0)
    assert unknown.code == ResponseCode.SUCCESS
    assert broker.store.max_offset("TxD", 0) == 0 and len(broker.transactions.pending) == 1
    await peer.close()


@pytest.mark.slow  # waits for check-backs, 1-2 s
async def test_delay_level_applies_at_commit_not_to_the_half(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxE", "UNIQ-E", DELAY="1")  # FAST_LEVELS: level 1 is short
    await asyncio.sleep(1.2)  # longer than level 1: the half is still not delivered
    assert await messages(peer, "TxE") == []
    assert (await end(peer, r, 8)).code == ResponseCode.SUCCESS
    assert broker.store.max_offset("TxE", 0) == 0  # scheduled, not yet delivered
    await wait_until(lambda: broker.store.max_offset("TxE", 0) == 1, 10)
    got = await messages(peer, "TxE")
    assert [m.msg_id for m in got] == ["UNIQ-E"]
    assert broker.transactions.pending == {}
    await peer.close()


async def test_check_back_then_commit_from_check(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    peer = await RawPeer.connect(broker.address)
    await register_producer(peer)
    r = await half(peer, "TxF", "UNIQ-F", body=b"checked")
    check = await asyncio.wait_for(peer.requests.get(), 5)
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
    h = CheckTransactionStateRequestHeader.from_ext_fields(check.ext_fields)
    assert h.msg_id == h.transaction_id == "UNIQ-F"
    assert h.tran_state_table_offset == int(r.ext_fields["queueOffset"])
    assert h.offset_msg_id == r.ext_fields["msgId"]
    m = decode_record(check.body)
    assert (m.topic, m.queue_id, m.body) == ("TxF", 0, b"checked")
    assert m.properties["PGROUP"] == "PG"
    ext = {
        "producerGroup": "PG",
        "tranStateTableOffset": h.tran_state_table_offset,
        "commitLogOffset": h.commit_log_offset,
        "commitOrRollback": 8,
        "msgId": h.msg_id,
        "transactionId": h.transaction_id,
        "fromTransactionCheck": "true",
    }
    assert (await peer.call(RequestCode.END_TRANSACTION, ext)).code == ResponseCode.SUCCESS
    assert [x.msg_id for x in await messages(peer, "TxF")] == ["UNIQ-F"]
    assert broker.transactions.counters["checked"] >= 1
    await peer.close()


@pytest.mark.slow  # waits for check-backs, 1-2 s
async def test_check_max_then_discard(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    peer = await RawPeer.connect(broker.address)
    await register_producer(peer)
    await half(peer, "TxG", "UNIQ-G")
    checks = [await asyncio.wait_for(peer.requests.get(), 5) for _ in range(3)]
    assert all(c.code == RequestCode.CHECK_TRANSACTION_STATE for c in checks)
    await wait_until(lambda: broker.transactions.counters["discarded"] == 1, 5)
    assert broker.transactions.pending == {}
    assert await stays_false(lambda: not peer.requests.empty(), 0.8)  # no 4th check
    assert broker.store.max_offset("TxG", 0) == 0
    ops = stored(broker, OP)
    assert [m.tags for m in ops] == ["c", "c", "c", "d"]
    assert ops[-1].properties["KAIROS_TX_END"] == "discard"
    await peer.close()


@pytest.mark.slow  # waits for check-backs, 1-2 s
async def test_no_producer_then_checked_when_one_appears(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    sender = await RawPeer.connect(broker.address)
    await half(sender, "TxH", "UNIQ-H")
    await asyncio.sleep(1.5)  # several intervals with no producer: not counted
    entry = next(iter(broker.transactions.pending.values()))
    assert entry.checks == 0 and broker.transactions.counters["no_producer"] >= 2
    producer = await RawPeer.connect(broker.address)
    await register_producer(producer, cid="late-producer")
    check = await asyncio.wait_for(producer.requests.get(), 5)
    assert decode_record(check.body).properties["UNIQ_KEY"] == "UNIQ-H"
    await sender.close()
    await producer.close()


@pytest.mark.slow  # waits for check-backs, 1-2 s
async def test_custom_immunity_time_delays_the_first_check(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    peer = await RawPeer.connect(broker.address)
    await register_producer(peer)
    await half(peer, "TxI", "UNIQ-I", CHECK_IMMUNITY_TIME_IN_SECONDS="2")
    assert await stays_false(lambda: not peer.requests.empty(), 1.5)
    check = await asyncio.wait_for(peer.requests.get(), 5)
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE
    assert broker.transactions.pending
    await peer.close()


async def test_admin_status_and_restart_keep_state(broker_factory: Any, tmp_path: Any) -> None:
    broker = await broker_factory(data_dir=tmp_path / "b")
    peer = await RawPeer.connect(broker.address)
    done = await half(peer, "TxJ", "UNIQ-J1")
    await half(peer, "TxJ", "UNIQ-J2")
    await end(peer, done, 8)
    r = await peer.call(RequestCode.KAIROS_GET_TRANSACTION_STATUS, {"producerGroup": "PG"})
    body = orjson.loads(r.body)
    assert body["pending"] == 1 and body["groups"]["PG"]["messages"][0]["msgId"] == "UNIQ-J2"
    assert body["counters"]["committed"] == 1
    await peer.close()
    await broker.stop("test")
    again = await broker_factory(data_dir=tmp_path / "b")
    assert [e.msg_id for e in again.transactions.pending.values()] == ["UNIQ-J2"]
    peer = await RawPeer.connect(again.address)
    assert (await end(peer, done, 8)).remark  # still ignored after the restart
    assert [m.msg_id for m in await messages(peer, "TxJ")] == ["UNIQ-J1"]
    await peer.close()


async def test_batch_with_tran_msg_is_refused(broker: Any) -> None:
    from kairosmq.protocol.message import BatchItem, encode_batch
    from kairosmq.protocol.properties import encode_properties

    peer = await RawPeer.connect(broker.address)
    body = encode_batch(
        [BatchItem(body=b"x", flag=0, properties=encode_properties({"TRAN_MSG": "true"}))]
    )
    r = await send(peer, "TxK", body, m="true")
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "TRAN_MSG" in r.remark
    await peer.close()


async def test_kairosmq_admin_transactions(broker: Any) -> None:
    import io

    from kairosmq.client import admin as admin_cli

    peer = await RawPeer.connect(broker.address)
    await half(peer, "TxL", "UNIQ-L1")
    done = await half(peer, "TxL", "UNIQ-L2")
    await end(peer, done, 12)
    await half(peer, "TxL", "UNIQ-L3", PGROUP="OtherPG")

    async def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.to_thread(
            admin_cli.main,
            ["--namesrv", broker.namesrv_address, "--timeout", "3", *argv],
            out=out,
            err=err,
        )
        return code, out.getvalue(), err.getvalue()

    code, out, err = await run("transactions")
    assert code == 0, err
    assert "UNIQ-L1" in out and "UNIQ-L3" in out and "UNIQ-L2" not in out
    assert "pending 2" in out and "rolled_back 1" in out
    code, out, err = await run("--json", "transactions", "--group", "OtherPG")
    assert code == 0, err
    body = orjson.loads(out)
    assert list(body["groups"]) == ["OtherPG"] and body["pending"] == 1
    assert body["groups"]["OtherPG"]["messages"][0]["topic"] == "TxL"
    code, _out, err = await run("transactions", "--group", "bad/group")
    assert code != 0 and "producerGroup" in err
    await peer.close()


async def test_a_rolled_back_write_undoes_halves_and_ends(broker: Any) -> None:
    """The store's rollback listener (a failed pwrite): half messages at or after the
    kept offset are forgotten, ends recorded there are undone."""
    peer = await RawPeer.connect(broker.address)
    first = await half(peer, "TxM", "UNIQ-M1")
    assert (await end(peer, first, 8)).code == ResponseCode.SUCCESS
    tx = broker.transactions
    assert tx.pending == {}
    _ip, _port, phy1 = decode_offset_msg_id(first.ext_fields["msgId"])
    kept = broker.store.commitlog.max_offset  # the commit and its op record are below
    second = await half(peer, "TxM", "UNIQ-M2")
    _ip, _port, phy2 = decode_offset_msg_id(second.ext_fields["msgId"])
    assert phy2 >= kept and set(tx.pending) == {phy2}
    tx.rollback(kept)
    assert tx.pending == {}
    tx.rollback(phy1 + 1)  # back to just after the first half: its commit is undone
    assert set(tx.pending) == {phy1}
    await peer.close()


@pytest.mark.slow  # waits for check-backs, 1-2 s
async def test_timer_properties_apply_from_the_commit(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxN", "UNIQ-N", TIMER_DELAY_MS="600")
    await asyncio.sleep(0.8)  # past the delay counted from the send: still a half message
    assert broker.store.max_offset("TxN", 0) == 0
    loop = asyncio.get_running_loop()
    committed_at = loop.time()
    assert (await end(peer, r, 8)).code == ResponseCode.SUCCESS
    await wait_until(lambda: broker.store.max_offset("TxN", 0) == 1, 10)
    assert loop.time() - committed_at >= 0.55  # due 600 ms after the commit
    assert [m.msg_id for m in await messages(peer, "TxN")] == ["UNIQ-N"]
    await peer.close()


async def test_malformed_end_transaction_headers_are_refused(broker: Any) -> None:
    peer = await RawPeer.connect(broker.address)
    r = await half(peer, "TxO", "UNIQ-O")
    good = end_ext(r, 8)
    for change, fragment in (
        (("commitOrRollback", None), "commitOrRollback"),
        (("commitLogOffset", "-1"), "negative"),
        (("tranStateTableOffset", "x"), "tranStateTableOffset"),
        (("producerGroup", "bad/group"), "producerGroup"),
    ):
        ext = {k: str(v) for k, v in good.items()}
        key, value = change
        if value is None:
            del ext[key]
        else:
            ext[key] = value
        bad = await peer.call(RequestCode.END_TRANSACTION, ext)
        assert bad.code != ResponseCode.SUCCESS and fragment in (bad.remark or ""), bad.remark
    assert len(broker.transactions.pending) == 1  # nothing ended, nothing stored
    assert broker.store.max_offset("TxO", 0) == 0
    await peer.close()
