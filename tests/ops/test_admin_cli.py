"""``kairosmq admin`` against a live in-process broker: every command, tables and --json."""

from __future__ import annotations

import json

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records
from kairosmq.server.cli import main as kairosmq_main

from tests.helpers import FAST_LEVELS, pull, send
from tests.wire import RawPeer


async def test_topic_create_list_delete(broker, admin) -> None:
    run = admin(broker)
    code, out, _ = await run("topic", "create", "Orders", "--queues", "3")
    assert code == 0 and "Orders" in out
    assert broker.topics.get("Orders").read_queue_nums == 3
    code, out, err = await run("topic", "list", json_out=True)
    assert code == 0, err
    rows = {r["topic"]: r for r in json.loads(out)}
    assert rows["Orders"] == {
        "topic": "Orders",
        "kind": "normal",
        "readQueues": 3,
        "writeQueues": 3,
        "perm": "rw",
        "order": False,
    }
    assert rows["SCHEDULE_TOPIC_XXXX"]["kind"] == "system"
    code, out, err = await run("topic", "list")
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split()[:2] == ["TOPIC", "KIND"]
    assert any(line.split()[:4] == ["Orders", "normal", "3", "3"] for line in lines)
    code, out, _ = await run("topic", "delete", "Orders")
    assert code == 0 and broker.topics.get("Orders") is None
    code, _, err = await run("topic", "delete", "Orders")
    assert code == 1 and "does not exist" in err
    code, _, err = await run("topic", "create", "SCHEDULE_TOPIC_XXXX")
    assert code == 1 and "system topic" in err


async def test_offsets_groups_and_lag(broker, admin) -> None:
    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    for i in range(5):
        assert (await send(peer, "Lagging", f"m{i}".encode(), queue_id=i % 2)).code == 0
    r = await peer.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "GL", "topic": "Lagging", "queueId": 0, "commitOffset": 1},
    )
    assert r.code == ResponseCode.SUCCESS
    code, out, err = await run("offsets", "Lagging", json_out=True)
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["queueId"], r["minOffset"], r["maxOffset"]) for r in rows] == [
        (0, 0, 3),
        (1, 0, 2),
        (2, 0, 0),
        (3, 0, 0),
    ]
    code, out, err = await run("groups", json_out=True)
    assert code == 0, err
    groups = {g["group"]: g for g in json.loads(out)}
    assert groups["GL"]["lag"] == 2 + 2 and groups["GL"]["online"] == 0
    code, out, err = await run("lag", "GL", json_out=True)
    assert code == 0, err
    lag = json.loads(out)
    q = {(r["topic"], r["queueId"]): r for r in lag["queues"]}
    assert q[("Lagging", 0)]["consumerOffset"] == 1 and q[("Lagging", 0)]["lag"] == 2
    assert q[("Lagging", 1)]["consumerOffset"] is None and q[("Lagging", 1)]["lag"] == 2
    assert lag["lag"] == 4
    code, out, err = await run("lag", "GL")
    assert code == 0, err
    assert "total lag of GL: 4" in out and "CONSUMER OFFSET" in out
    code, _, err = await run("lag", "NoSuchGroup")
    assert code == 1 and "NoSuchGroup" in err
    code, out, err = await run("offsets", "Lagging")
    assert code == 0, err
    assert out.splitlines()[1].split() == ["Lagging", "0", "0", "3", "3"]
    code, _, err = await run("offsets", "Missing")
    assert code == 1 and "does not exist" in err
    await peer.close()


async def test_schedule_backlog(broker_factory, admin) -> None:
    # the last level is 10 min so the messages stay pending however slow the box is
    broker = await broker_factory(delay_levels=FAST_LEVELS.rsplit(" ", 1)[0] + " 10m")
    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    for _ in range(3):
        assert (await send(peer, "Later", b"x", {"DELAY": "18"})).code == 0
    code, out, err = await run("schedule", json_out=True)
    assert code == 0, err
    levels = {lv["level"]: lv for lv in json.loads(out)["levels"]}
    assert len(levels) == 18 and levels[18]["pending"] == 3 and levels[18]["delayMs"] == 600_000
    assert levels[18]["nextDueMs"] > json.loads(out)["nowMs"]
    assert levels[1]["pending"] == 0 and levels[1]["nextDueMs"] is None
    code, out, err = await run("schedule")
    assert code == 0, err
    assert "pending total: 3" in out and "10m" in out
    await peer.close()


async def test_msg_by_id_offset_id_and_key(broker, admin) -> None:
    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    r = await send(
        peer, "Looked", b"hello", {"UNIQ_KEY": "AB01", "KEYS": "order-7 cust-3", "TAGS": "TagA"}
    )
    offset_id = r.ext_fields["msgId"]
    for i in range(3):
        await send(peer, "Looked", f"other{i}".encode(), {"UNIQ_KEY": f"CD{i}", "KEYS": "x"})
    code, out, err = await run("msg", "--id", "AB01", json_out=True)
    assert code == 0, err
    (m,) = json.loads(out)
    assert m["msgId"] == "AB01" and m["body"] == "hello" and m["tags"] == "TagA"
    assert m["offsetMsgId"] == offset_id
    code, out, err = await run("msg", "--offset-id", offset_id, json_out=True)
    assert code == 0, err
    assert [x["msgId"] for x in json.loads(out)] == ["AB01"]
    code, out, err = await run("msg", "--key", "cust-3", json_out=True)
    assert code == 0, err
    assert [x["body"] for x in json.loads(out)] == ["hello"]
    code, out, err = await run("msg", "--key", "x", "--max", "2", json_out=True)
    assert code == 0, err
    assert len(json.loads(out)) == 2
    code, out, _ = await run("msg", "--key", "order-7", "--topic", "Elsewhere")
    assert code == 1
    code, out, err = await run("msg", "--key", "order-7")
    assert code == 0, err
    assert "msgId:          AB01" in out and "1 message(s)" in out
    code, _, err = await run("msg", "--id", "nope")
    assert code == 1 and "no message" in err
    code, _, err = await run("msg", "--offset-id", "zz")
    assert code == 1 and "offsetMsgId" in err
    await peer.close()


async def test_dlq_resend(broker, admin) -> None:
    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    for i in range(3):
        await send(peer, "Work", f"w{i}".encode(), {"UNIQ_KEY": f"W{i}"})
    got = decode_records((await pull(peer, "Work")).body)
    for m in got:
        r = await peer.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": m.commit_log_offset,
                "group": "GD",
                "delayLevel": -1,
                "originMsgId": m.msg_id,
                "originTopic": m.topic,
            },
        )
        assert r.code == ResponseCode.SUCCESS
    assert broker.store.max_offset("%DLQ%GD", 0) == 3
    code, out, err = await run("groups", json_out=True)
    assert code == 0, err
    assert {g["group"]: g["dlq"] for g in json.loads(out)}["GD"] == 3
    code, out, err = await run("dlq", "resend", "GD", "--max", "2", json_out=True)
    assert code == 0, err
    res = json.loads(out)
    assert code == 0 and [x["msgId"] for x in res["resent"]] == ["W0", "W1"]
    assert res["remaining"] == 1 and all(x["topic"] == "Work" for x in res["resent"])
    code, out, _ = await run("dlq", "resend", "GD")
    assert code == 0 and "resent 1; still in %DLQ%GD: 0" in out
    again = []
    for x in res["resent"]:
        page = await pull(peer, "Work", queue_id=x["queueId"], offset=x["queueOffset"], max_n=1)
        again += decode_records(page.body)
    code, out, err = await run("msg", "--id", "W2", "--topic", "Work", json_out=True)
    assert code == 0, err
    history = json.loads(out)  # the original and the resent copy, oldest first
    assert [h["body"] for h in history] == ["w2", "w2"]
    assert history[1]["commitLogOffset"] > history[0]["commitLogOffset"]
    assert [m.msg_id for m in again] == ["W0", "W1"]
    assert all(m.reconsume_times == 0 and "RETRY_TOPIC" not in m.properties for m in again)
    assert "RETRY_TOPIC" not in history[1]["properties"]
    code, out, err = await run("dlq", "resend", "GD", json_out=True)
    assert code == 0, err
    assert json.loads(out)["resent"] == []
    code, _, err = await run("dlq", "resend", "Nobody")
    assert code == 1 and "no dead letters" in err
    await peer.close()


async def test_status_health_and_unreachable(broker, admin) -> None:
    run = admin(broker)
    code, out, err = await run("status", json_out=True)
    assert code == 0, err
    st = json.loads(out)
    assert code == 0 and st["running"] and st["address"] == broker.address
    code, out, _ = await run("health", direct=True)
    assert code == 0 and out.startswith("ok: broker")
    code, _, err = await run("--namesrv", "127.0.0.1:1", "health")
    assert code == 2 and "cannot reach" in err


async def test_via_kairosmq_console_entry(broker, capsys) -> None:
    import asyncio

    argv = ["admin", "topic", "list", "--namesrv", broker.namesrv_address, "--json"]
    assert await asyncio.to_thread(kairosmq_main, argv) == 0
    assert "TBW102" in capsys.readouterr().out


async def test_dlq_resend_to_retry_topic(broker, admin) -> None:
    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    await send(peer, "Work2", b"w", {"UNIQ_KEY": "R0"})
    (m,) = decode_records((await pull(peer, "Work2")).body)
    await peer.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "offset": m.commit_log_offset,
            "group": "GR",
            "delayLevel": -1,
            "originMsgId": m.msg_id,
            "originTopic": m.topic,
        },
    )
    code, out, err = await run("dlq", "resend", "GR", "--to-retry", json_out=True)
    assert code == 0, err
    (x,) = json.loads(out)["resent"]
    assert code == 0 and x["topic"] == "%RETRY%GR"
    (r,) = decode_records(
        (await pull(peer, "%RETRY%GR", queue_id=x["queueId"], offset=x["queueOffset"])).body
    )
    assert r.msg_id == "R0" and r.properties["RETRY_TOPIC"] == "Work2"
    await peer.close()


async def test_timers_and_msg_recall(broker, admin) -> None:
    import time as _time

    run = admin(broker)
    peer = await RawPeer.connect(broker.address)
    due = int(_time.time() * 1000) + 7_200_000
    r = await send(peer, "Timed", b"later", {"UNIQ_KEY": "A" * 32, "TIMER_DELIVER_MS": str(due)})
    assert r.code == ResponseCode.SUCCESS, r.remark
    handle = r.ext_fields["recallHandle"]
    code, out, err = await run("timers", json_out=True)
    assert code == 0, err
    st = json.loads(out)
    assert st["scheduled"] == 1 and st["nextDueMs"] == due
    code, out, err = await run("timers")
    assert code == 0 and "next due:" in out and "scheduled: 1" in out, err
    code, out, err = await run("msg", "recall", handle)
    assert code == 0 and "recalled " + "A" * 32 in out, err
    code, out, err = await run("msg", "recall", handle, json_out=True)
    assert code == 0 and json.loads(out)["remark"] == "already recalled", err
    code, _, err = await run("msg", "recall", "bogus")
    assert code == 1 and "recall handle is invalid" in err
    code, _, err = await run("msg")
    assert code == 1 and "--id" in err
    await peer.close()
