"""The stock npm client ali-ons 3.12.0, unmodified, against an in-process broker.

What a user with an existing ali-ons application does: point ``nameSrv`` at kairosmq.
The JS side (``alions/driver.js``) produces delayed and plain messages, push-consumes
them, fails some deliveries so they go through CONSUMER_SEND_MSG_BACK -> %RETRY% ->
redelivery after the level delay, and lets one exhaust ``maxReconsumeTimes`` so it is
dead-lettered. It prints one JSON line per observation; this test checks those lines
and the broker's own state (store, offsets, client registry, request codes served).

ali-ons and its dependencies are installed from the committed lockfile
``alions/package-lock.json`` with ``npm ci`` through a cache (``alions_install.py``). The
test is skipped, with the reason in pytest's skip summary, only when ``node``/``npm`` are
missing or the npm registry cannot be reached with a cold cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import defaultdict
from typing import Any

import pytest
from kairosmq.protocol.codes import PULL_SUBSCRIPTION, RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records
from kairosmq.protocol.properties import (
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
)

from tests.helpers import assert_reput_not_early
from tests.wire import RawPeer

from .alions_install import ALIONS_DIR, ensure_alions, node

pytestmark = pytest.mark.node

DELAY_TOPIC = "KairosAlionsDelay"
RETRY_TOPIC_NAME = "KairosAlionsRetry"
PRODUCER_GROUP = "PID_KAIROS_ALIONS"
OK_GROUP = "CID_KAIROS_ALIONS_OK"
FAIL_GROUP = "CID_KAIROS_ALIONS_FAIL"
DELAY_LEVELS = [1, 2, 3, 4, 5]
PLAIN_COUNT = 3
START_DELIVER_DELAYS = [300, 1200]  # ms: ali-ons setStartDeliverTime (ONS timers)
MAX_RECONSUME = 3
SUCCEED_AT = 2
# ali-ons' one expected error: a new consumer group has no committed offset on a queue that
# is still empty, so the broker answers QUERY_CONSUMER_OFFSET with QUERY_NOT_FOUND (22), as a
# RocketMQ 4.9 broker does; ali-ons reports it and falls back to GET_MAX_OFFSET (or offset 0
# for %RETRY% queues). The message is ali-ons' prefix + the broker's remark, naming the same
# topic, group and queue.
RETRY_ROUTE_ERROR = re.compile(
    r"updateAllTopicRouterInfo occurred error, no route for topic %RETRY%(CID_KAIROS_ALIONS_"
    r"OK|CID_KAIROS_ALIONS_FAIL): it does not exist yet"
)
EXPECTED_ERROR = re.compile(
    r"MQPushConsumer occurred an error RemoteBrokerOffsetStore\.readOffset failed, "
    r"topic: (?P<topic>\S+), group: (?P<group>\S+), queueId: (?P<qid>\d+), type: READ_FROM_STORE "
    r"no offset for group (?P=group) on (?P=topic):(?P=qid)"
)


async def _create_topic(peer: RawPeer, topic: str) -> None:
    # What `mqadmin updateTopic` sends. ali-ons cannot auto-create a topic: on
    # TOPIC_NOT_EXIST its producer throws instead of falling back to TBW102.
    r = await peer.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "false",
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


def _record_requests(broker: Any) -> list[tuple[str, int]]:
    """Wrap the server's dispatch to note (listener, request code) of every request."""
    seen: list[tuple[str, int]] = []
    inner = broker.server.dispatch

    def dispatch(conn: Any, cmd: Any) -> None:
        if not cmd.is_response:
            seen.append((conn.listener, cmd.code))
        inner(conn, cmd)

    broker.server.dispatch = dispatch
    return seen


async def test_alions_delay_push_retry_and_dlq(broker_factory: Any) -> None:
    await ensure_alions()
    broker = await broker_factory()
    levels_ms = broker.config.delay_levels_ms
    seen_requests = _record_requests(broker)
    peer = await RawPeer.connect(broker.address)
    for topic in (DELAY_TOPIC, RETRY_TOPIC_NAME):
        await _create_topic(peer, topic)

    cfg = {
        "nameSrv": broker.namesrv_address,
        "delayTopic": DELAY_TOPIC,
        "retryTopic": RETRY_TOPIC_NAME,
        "producerGroup": PRODUCER_GROUP,
        "okGroup": OK_GROUP,
        "failGroup": FAIL_GROUP,
        "delayLevels": DELAY_LEVELS,
        "plainCount": PLAIN_COUNT,
        "maxReconsumeTimes": MAX_RECONSUME,
        "succeedAt": SUCCEED_AT,
        "timeoutMs": 25_000,
        "startDeliverDelays": START_DELIVER_DELAYS,
    }
    proc = await asyncio.create_subprocess_exec(
        node(),
        str(ALIONS_DIR / "driver.js"),
        json.dumps(cfg),
        cwd=ALIONS_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 45)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    diag = (
        f"driver exit {proc.returncode}\nstdout:\n{out.decode()[-6000:]}\n"
        f"stderr:\n{err.decode()[-3000:]}"
    )
    assert proc.returncode == 0, diag
    assert events[-1]["event"] == "done", diag

    # Errors: QUERY_NOT_FOUND (22) for a queue the consumer's group never committed (see
    # EXPECTED_ERROR; every new group meets it at least once), and TOPIC_NOT_EXIST (17) for
    # the route of %RETRY%<group>, which ali-ons looks up before its first heartbeat created
    # it (a RocketMQ name server answers the same; the route is found at the next poll,
    # before any retry: the driver polls every second). ali-ons reports an error to every
    # client of its MQClient, the producer included.
    errors = [e for e in events if e["event"] == "error"]
    no_retry_route = [
        e
        for e in errors
        if e["code"] == ResponseCode.TOPIC_NOT_EXIST and RETRY_ROUTE_ERROR.search(e["message"])
    ]
    unexpected = [
        e
        for e in errors
        if e not in no_retry_route
        and not (
            e["who"] in ("okConsumer", "failConsumer")
            and e["code"] == ResponseCode.QUERY_NOT_FOUND
            and EXPECTED_ERROR.fullmatch(e["message"])
        )
    ]
    assert unexpected == [], f"unexpected ali-ons errors: {unexpected}\n{diag}"
    first_retry = min(
        e["at"]
        for e in events
        if e["event"] in ("consumed", "attempt.failed") and e.get("reconsumeTimes", 0) >= 1
    )
    assert all(e["at"] < first_retry for e in no_retry_route), diag
    groups = {m["group"] for e in errors if (m := EXPECTED_ERROR.fullmatch(e["message"]))}
    assert groups == {OK_GROUP, FAIL_GROUP}, diag

    sent = {e["body"]: e for e in events if e["event"] == "sent"}
    assert all(e["sendStatus"] == "SEND_OK" for e in sent.values()), diag
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["event"] in ("consumed", "attempt.failed"):
            by_group[e["group"]].append(e)

    # --- every message sent to the delay topic was consumed, delayed ones not early
    ok = {e["body"]: e for e in by_group[OK_GROUP]}
    expected_ok = {
        "warm-delay",
        *(f"delayed-level-{n}" for n in DELAY_LEVELS),
        *(f"plain-{i}" for i in range(PLAIN_COUNT)),
        *(f"timer-{d}" for d in START_DELIVER_DELAYS),
    }
    assert set(ok) == expected_ok, diag
    for n in DELAY_LEVELS:
        body = f"delayed-level-{n}"
        got, snt, delay = ok[body], sent[body], levels_ms[n - 1]
        assert got["keys"] == f"key-{body}" and got["tags"] == "TagDelay"
        assert got["topic"] == DELAY_TOPIC and got["reconsumeTimes"] == 0
        assert got["at"] - snt["sentAt"] >= delay, (body, got, snt)
        assert got["storeTimestamp"] - got["bornTimestamp"] >= delay, (body, got)
        assert_reput_not_early(broker, got["commitLogOffset"], DELAY_TOPIC, body, n, delay)
    for i in range(PLAIN_COUNT):
        assert ok[f"plain-{i}"]["keys"] == f"key-plain-{i}"
    # --- ali-ons' setStartDeliverTime (ONS __STARTDELIVERTIME): a timer, never early
    for d in START_DELIVER_DELAYS:
        got, snt = ok[f"timer-{d}"], sent[f"timer-{d}"]
        assert got["tags"] == "TagTimer" and got["reconsumeTimes"] == 0
        assert got["storeTimestamp"] >= snt["startDeliverTime"], (got, snt)
        assert got["at"] >= snt["startDeliverTime"], (got, snt)

    # --- the failing consumer: reconsumeTimes 0, 1, 2, ... with the same keys and origin id
    fail = by_group[FAIL_GROUP]
    assert [e["body"] for e in fail if e["body"].startswith("warm")] == ["warm-retry"]
    for body, last in (("retry-me", SUCCEED_AT), ("dlq-me", MAX_RECONSUME)):
        tries = [e for e in fail if e["body"] == body]
        assert [e["reconsumeTimes"] for e in tries] == list(range(last + 1)), (body, diag)
        first = tries[0]
        assert first["msgId"] == sent[body]["msgId"]
        for prev, cur in zip(tries, tries[1:], strict=False):
            assert cur["keys"] == f"key-{body}" and cur["tags"] == "TagRetry"
            # ali-ons restores the original topic from RETRY_TOPIC; the msgId it reports is
            # the record's offset id (ali-ons sets no UNIQ_KEY), so the stable id across
            # redeliveries is ORIGIN_MESSAGE_ID.
            assert cur["topic"] == RETRY_TOPIC_NAME and cur["retryTopic"] == RETRY_TOPIC_NAME
            assert cur["originMessageId"] == first["msgId"]
            # Redelivered after the level delay: level 3 + previous reconsumeTimes.
            gap = levels_ms[3 + prev["reconsumeTimes"] - 1]
            assert cur["at"] - prev["at"] >= gap, (body, prev, cur)
            assert cur["storeTimestamp"] - prev["at"] >= gap - 5, (body, prev, cur)
        kinds = [e["event"] for e in tries]
        if body == "retry-me":
            assert kinds == ["attempt.failed"] * SUCCEED_AT + ["consumed"]
        else:
            assert kinds == ["attempt.failed"] * (MAX_RECONSUME + 1)

    # --- the message past maxReconsumeTimes is in %DLQ%<group> (read back over the wire)
    dlq = f"%DLQ%{FAIL_GROUP}"
    assert broker.topics.get(dlq) is not None
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CID_KAIROS_DLQ_READER",
            "topic": dlq,
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": PULL_SUBSCRIPTION,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    dead = decode_records(r.body)
    assert [m.body.decode() for m in dead] == ["dlq-me"]
    assert dead[0].keys == "key-dlq-me"
    assert dead[0].reconsume_times == MAX_RECONSUME + 1
    assert dead[0].properties[RETRY_TOPIC] == RETRY_TOPIC_NAME
    assert dead[0].properties[ORIGIN_MESSAGE_ID] == sent["dlq-me"]["msgId"]
    await peer.close()

    # --- offsets were committed: the OK group consumed its queues to the end
    for qid in range(4):
        end = broker.store.max_offset(DELAY_TOPIC, qid)
        assert broker.offsets.query(OK_GROUP, DELAY_TOPIC, qid) == end, qid

    # --- the clients unregistered on close
    assert broker.clients.consumer_ids(OK_GROUP) == []
    assert broker.clients.consumer_ids(FAIL_GROUP) == []

    # --- which requests ali-ons made, and on which port
    codes = {(listener, code) for listener, code in seen_requests}
    assert ("namesrv", RequestCode.GET_ROUTEINFO_BY_TOPIC) in codes
    for code in (
        RequestCode.HEART_BEAT,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.PULL_MESSAGE,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.UNREGISTER_CLIENT,
    ):
        assert ("broker", code) in codes, (RequestCode(code).name, sorted(codes))
