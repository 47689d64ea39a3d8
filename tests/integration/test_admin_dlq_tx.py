"""Dead letters and transaction halves for operators (issue 33) against real brokers.

KAIROS_BROWSE_DLQ (911) pages a group's dead letters (bodies for an export, which
``kairosmq admin dlq export`` writes as JSON lines); KAIROS_RESEND_DLQ with ``delayMs``
resends them as timers, delivered once and not before; KAIROS_END_HALF_MESSAGE (912)
lets an admin commit or roll back a pending half message, once, also across kill -9.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.client.admin import main as admin_main
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import MessageExt, decode_records

from tests.helpers import pull, pull_all, send, stays_false, wait_until
from tests.integration.procs import BrokerProcess
from tests.transaction.txpeer import half, messages
from tests.wire import RawPeer


def now_ms() -> int:
    return int(time.time() * 1000)


async def dead_letters(peer: RawPeer, topic: str, group: str, n: int) -> list[MessageExt]:
    """``n`` messages sent to ``topic`` and sent back by ``group`` straight to its DLQ."""
    out = []
    for i in range(n):
        r = await send(
            peer, topic, f"dead-{i}".encode(), {"UNIQ_KEY": f"D{i:04d}", "KEYS": f"k{i}"}
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    got = await pull_all(peer, topic)
    for m in got:
        r = await peer.call(
            R.CONSUMER_SEND_MSG_BACK,
            {
                "offset": m.commit_log_offset,
                "group": group,
                "delayLevel": -1,  # RocketMQ: straight to the DLQ
                "originMsgId": m.msg_id,
                "originTopic": m.topic,
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        out.append(m)
    return out


async def body(peer: RawPeer, code: int, **fields: Any) -> Any:
    r = await peer.call(code, {k: str(v) for k, v in fields.items() if v is not None})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return orjson.loads(r.body)


async def test_dlq_browse_resend_with_delay_and_export(broker, tmp_path: Path) -> None:
    peer = await RawPeer.connect(broker.address)
    await dead_letters(peer, "DL", "DG", 5)
    rows, cursor, pages = [], None, 0
    while True:
        page = await body(peer, R.KAIROS_BROWSE_DLQ, consumerGroup="DG", limit=2, cursor=cursor)
        rows += page["rows"]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3 and len(rows) == 5
    assert sorted(r["msgId"] for r in rows) == [f"D{i:04d}" for i in range(5)]
    assert {r["originTopic"] for r in rows} == {"DL"} and not any(r["resent"] for r in rows)
    assert "body" not in rows[0]
    # resend two as timers due 600 ms later
    t0 = now_ms()
    out = await body(peer, R.KAIROS_RESEND_DLQ, consumerGroup="DG", maxNum=2, delayMs=600)
    assert len(out["resent"]) == 2 and all(r["dueMs"] >= t0 + 600 for r in out["resent"])
    early = [m for m in await pull_all(peer, "DL") if m.store_timestamp >= t0]
    assert early == [], "a delayed resend was delivered at once"
    await wait_until(lambda: broker.stats.timers_fired >= 2, timeout=5)
    back = [m for m in await pull_all(peer, "DL") if m.store_timestamp >= t0]
    assert sorted(m.msg_id for m in back) == sorted(r["msgId"] for r in out["resent"])
    due = {r["msgId"]: r["dueMs"] for r in out["resent"]}
    assert all(m.store_timestamp >= due[m.msg_id] for m in back)
    assert await stays_false(lambda: broker.stats.timers_fired > 2, 0.3)
    page = await body(peer, R.KAIROS_BROWSE_DLQ, consumerGroup="DG", limit=10)
    assert [r["resent"] for r in page["rows"]] == [True, True, False, False, False]
    # export: every dead letter with its body, as JSON lines
    out_file = tmp_path / "dg.jsonl"

    def admin(*argv: str) -> tuple[int, str]:
        o, e = io.StringIO(), io.StringIO()
        code = admin_main(["--broker", broker.address, *argv], out=o, err=e)
        return code, o.getvalue() + e.getvalue()

    code, text = await asyncio.to_thread(
        admin, "dlq", "export", "DG", "--limit", "2", "--out", str(out_file)
    )
    assert code == 0 and "exported 5" in text, text
    lines = [orjson.loads(x) for x in out_file.read_bytes().splitlines()]
    assert sorted(base64.b64decode(x["body"]) for x in lines) == [
        f"dead-{i}".encode() for i in range(5)
    ]
    assert all(x["properties"]["UNIQ_KEY"] == x["msgId"] for x in lines)
    code, text = await asyncio.to_thread(admin, "dlq", "list", "DG", "--all")
    assert code == 0 and "D0004" in text, text
    code, text = await asyncio.to_thread(admin, "dlq", "resend", "DG", "--delay", "1h")
    assert code == 0, text
    assert (await body(peer, R.KAIROS_PENDING_HISTOGRAM, unit="day"))["timers"] == 3
    # bad fields
    for fields, words in [
        ({"consumerGroup": "DG", "cursor": "a:b"}, "cursor"),
        ({"consumerGroup": "DG", "limit": 0}, "limit"),
    ]:
        r = await peer.call(R.KAIROS_BROWSE_DLQ, {k: str(v) for k, v in fields.items()})
        assert r.code == ResponseCode.SYSTEM_ERROR and words in r.remark, r.remark
    r = await peer.call(R.KAIROS_BROWSE_DLQ, {"consumerGroup": "Nobody"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await peer.call(R.KAIROS_RESEND_DLQ, {"consumerGroup": "DG", "delayMs": "-5"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "delayMs" in r.remark
    await peer.close()


async def test_dlq_resend_one_row(broker) -> None:
    """A workbench row: the dead letter at one queue offset, optionally delayed; refused
    once the group's resend progress passed it; bad positions are named."""
    peer = await RawPeer.connect(broker.address)
    await dead_letters(peer, "DL1", "DG1", 3)
    rows = (await body(peer, R.KAIROS_BROWSE_DLQ, consumerGroup="DG1", limit=10))["rows"]
    assert len(rows) == 3
    by_queue: dict[int, list[Any]] = {}
    for r in rows:
        by_queue.setdefault(r["queueId"], []).append(r)
    qid, queue_rows = max(by_queue.items(), key=lambda kv: len(kv[1]))
    last = queue_rows[-1]
    t0 = now_ms()
    out = await body(
        peer,
        R.KAIROS_RESEND_DLQ,
        consumerGroup="DG1",
        queueId=last["queueId"],
        queueOffset=last["queueOffset"],
        delayMs=300,
    )
    assert [r["msgId"] for r in out["resent"]] == [last["msgId"]]
    assert out["resent"][0]["dueMs"] >= t0 + 300
    await wait_until(lambda: broker.stats.timers_fired >= 1, timeout=5)
    back = [m for m in await pull_all(peer, "DL1") if m.store_timestamp >= t0]
    assert [m.msg_id for m in back] == [last["msgId"]]
    assert back[0].store_timestamp >= out["resent"][0]["dueMs"]
    # the first row of the queue is the next one: resending it moves the progress
    first = queue_rows[0]
    out = await body(
        peer,
        R.KAIROS_RESEND_DLQ,
        consumerGroup="DG1",
        queueId=qid,
        queueOffset=first["queueOffset"],
    )
    assert [r["msgId"] for r in out["resent"]] == [first["msgId"]]
    page = await body(peer, R.KAIROS_BROWSE_DLQ, consumerGroup="DG1", limit=10)
    assert [r["resent"] for r in page["rows"] if r["msgId"] == first["msgId"]] == [True]
    r = await peer.call(
        R.KAIROS_RESEND_DLQ,
        {"consumerGroup": "DG1", "queueId": str(qid), "queueOffset": str(first["queueOffset"])},
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "resent already" in (r.remark or "")
    # kairosmq admin dlq resend --at: a row of another queue (or the same one's next)
    other = next(r for r in rows if r["msgId"] not in (first["msgId"], last["msgId"]))
    o, e = io.StringIO(), io.StringIO()
    argv = ["--broker", broker.address, "dlq", "resend", "DG1", "--at"]
    at = f"{other['queueId']}:{other['queueOffset']}"
    code = await asyncio.to_thread(admin_main, [*argv, at], out=o, err=e)
    assert code == 0 and other["msgId"] in o.getvalue(), o.getvalue() + e.getvalue()
    code = await asyncio.to_thread(admin_main, [*argv, "x:1"], out=o, err=e)
    assert code != 0 and "--at 'x:1'" in e.getvalue(), e.getvalue()
    for fields, words in [
        ({"queueId": "99", "queueOffset": "0"}, "queueId 99"),
        ({"queueId": str(qid), "queueOffset": "9999"}, "queueOffset 9999"),
        ({"queueId": str(qid)}, "both queueId and queueOffset"),
    ]:
        r = await peer.call(R.KAIROS_RESEND_DLQ, {"consumerGroup": "DG1", **fields})
        assert r.code == ResponseCode.SYSTEM_ERROR and words in (r.remark or ""), r.remark
    await peer.close()


def _offset(r: Any) -> int:
    return decode_offset_msg_id(r.ext_fields["msgId"])[2]


async def test_admin_commits_and_rolls_back_half_messages(broker) -> None:
    peer = await RawPeer.connect(broker.address)
    keep = await half(peer, "TxAdm", "UNIQ-KEEP")
    drop = await half(peer, "TxAdm", "UNIQ-DROP")
    status = await body(peer, R.KAIROS_GET_TRANSACTION_STATUS)
    listed = {m["commitLogOffset"] for m in status["groups"]["PG"]["messages"]}
    assert listed == {_offset(keep), _offset(drop)}
    out = await body(
        peer, R.KAIROS_END_HALF_MESSAGE, commitLogOffset=_offset(keep), action="commit"
    )
    assert out["msgId"] == "UNIQ-KEEP" and out["producerGroup"] == "PG"
    r = await peer.call(
        R.KAIROS_END_HALF_MESSAGE, {"commitLogOffset": str(_offset(keep)), "action": "commit"}
    )
    assert r.code == ResponseCode.ILLEGAL_OPERATION and "no pending half" in r.remark
    r = await peer.call(
        R.KAIROS_END_HALF_MESSAGE, {"commitLogOffset": str(_offset(drop)), "action": "abort"}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "commit or rollback" in r.remark

    def admin(*argv: str) -> tuple[int, str]:
        o, e = io.StringIO(), io.StringIO()
        code = admin_main(["--broker", broker.address, *argv], out=o, err=e)
        return code, o.getvalue() + e.getvalue()

    code, text = await asyncio.to_thread(admin, "transactions", "rollback", str(_offset(drop)))
    assert code == 0 and text.startswith("rollback: UNIQ-DROP"), text
    assert [m.msg_id for m in await messages(peer, "TxAdm")] == ["UNIQ-KEEP"]
    assert (await body(peer, R.KAIROS_GET_TRANSACTION_STATUS))["pending"] == 0
    await peer.close()


@pytest.mark.slow
async def test_admin_end_of_half_messages_across_kill9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", "--checkpoint-interval", "60")
    await proc.start()
    try:
        peer = await RawPeer.connect(proc.address)
        halves = [await half(peer, "TxK", f"UNIQ-K{i}") for i in range(6)]
        for i, r in enumerate(halves[:4]):
            await body(
                peer,
                R.KAIROS_END_HALF_MESSAGE,
                commitLogOffset=_offset(r),
                action="commit" if i % 2 == 0 else "rollback",
            )
        await peer.close()
        proc.kill()  # the ends only in the commit log: no checkpoint since
        await proc.start()
        peer = await RawPeer.connect(proc.address)
        status = await body(peer, R.KAIROS_GET_TRANSACTION_STATUS)
        assert {m["msgId"] for m in status["groups"]["PG"]["messages"]} == {
            "UNIQ-K4",
            "UNIQ-K5",
        }
        await body(
            peer, R.KAIROS_END_HALF_MESSAGE, commitLogOffset=_offset(halves[4]), action="commit"
        )
        got = []
        for _ in range(3):
            r = await pull(peer, "TxK", queue_id=0, suspend_ms=0, max_n=64)
            got = decode_records(r.body) if r.code == ResponseCode.SUCCESS else []
            if len(got) >= 3:
                break
            await asyncio.sleep(0.1)
        assert sorted(m.msg_id for m in got) == ["UNIQ-K0", "UNIQ-K2", "UNIQ-K4"]
        await peer.close()
    finally:
        proc.terminate()
