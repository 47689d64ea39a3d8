"""The stock C++ client (rocketmq-client-cpp 2.1.0's librocketmq.so, as bundled by PyPI's
``rocketmq-python-cvs`` 2.1.0.3), unmodified, against an in-process broker.

What a user with an existing C++ (or Python-wrapper) application does: point
``setNamesrvAddr`` at kairosmq. ``cpp_driver.py`` runs the client in a subprocess (a native
crash fails this test instead of killing pytest): delayed send with a delay level, push
consume, RECONSUME_LATER -> CONSUMER_SEND_MSG_BACK -> redelivery through
``%RETRY%<group>`` after the level delay, and the dead letter in ``%DLQ%<group>`` once
``maxReconsumeTimes`` is used up. The C++ client cannot set ``maxReconsumeTimes`` (its
``DefaultMQPushConsumer`` sends 16 in every send-back, version 333 >= 121, so the client's
value wins over the broker's): the broker runs with level delays of 50 ms from level 4 on so
17 deliveries take about 2 s.

Skipped (the reason shows in pytest's ``-rs`` summary) only off Linux x86_64, the one
platform the package bundles ``librocketmq.so`` for, or when ``rocketmq-python-cvs`` is not
installed in the test's Python. The client workarounds the driver needs (message trace on,
one instance name per consumer, a callback that returns the consume status) are the
client's, not the broker's: see ``cpp_driver.py`` and docs/stock-clients.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import PULL_SUBSCRIPTION, RequestCode, ResponseCode
from kairosmq.protocol.message import decode_record, decode_records
from kairosmq.protocol.properties import RETRY_TOPIC

from tests.helpers import assert_reput_not_early, wait_until
from tests.wire import RawPeer

pytestmark = pytest.mark.slow  # the stock C++ client in child processes

DRIVER = Path(__file__).parent / "cpp_driver.py"
PACKAGE = "rocketmq-python-cvs==2.1.0.3"

DELAY_TOPIC = "KairosCppDelay"
RETRY_TOPIC_NAME = "KairosCppRetry"
PRODUCER_GROUP = "PID_KAIROS_CPP"
OK_GROUP = "CID_KAIROS_CPP_OK"
FAIL_GROUP = "CID_KAIROS_CPP_FAIL"
# Levels 1-3 are measurable delays; 4-18 are short so a send-back chain to the DLQ is quick.
LEVELS = "200ms 400ms 600ms " + " ".join(["50ms"] * 15)
DELAY_LEVELS = [1, 2, 3]
PLAIN_COUNT = 3
CPP_MAX_RECONSUME = 16  # DefaultMQPushConsumer's default; the wrapper cannot change it
SUCCEED_AT = 2


def _skip_reason() -> str | None:
    machine, system = platform.machine(), platform.system()
    if (system, machine) != ("Linux", "x86_64"):
        return (
            f"stock C++ client not run: {PACKAGE} bundles librocketmq.so for Linux x86_64 "
            f"only, this is {system} {machine}"
        )
    probe = subprocess.run(
        [sys.executable, "-c", "from rocketmq.client import Producer, PushConsumer"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        return (
            f"stock C++ client not run: `from rocketmq.client import Producer, "
            f"PushConsumer` fails in {sys.executable} ({last}); install {PACKAGE} "
            f"into that Python"
        )
    return None


@pytest.fixture(scope="module")
def cpp_client() -> None:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)


async def _create_topic(peer: RawPeer, topic: str) -> None:
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


def _record_requests(broker: Any) -> list[tuple[str, int, int]]:
    """Wrap the server's dispatch to note (listener, request code, language) of requests."""
    seen: list[tuple[str, int, int]] = []
    inner = broker.server.dispatch

    def dispatch(conn: Any, cmd: Any) -> None:
        if not cmd.is_response:
            seen.append((conn.listener, cmd.code, int(cmd.language)))
        inner(conn, cmd)

    broker.server.dispatch = dispatch
    return seen


async def _dlq(peer: RawPeer, group: str) -> list[Any]:
    r = await peer.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CID_KAIROS_DLQ_READER",
            "topic": f"%DLQ%{group}",
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
    if r.code != ResponseCode.SUCCESS:
        return []
    return decode_records(r.body)


class _Driver:
    """The driver subprocess: its stdout lines as they come, stderr kept for diagnostics."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.noise: list[str] = []

    async def read_until(self, event: str, timeout: float) -> None:
        """Read stdout until ``event`` (or ``fatal``); fail with the driver's output if it
        ends first or ``timeout`` passes (then it is killed)."""
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    raw = await self.proc.stdout.readline()
                    if not raw:
                        await self.proc.wait()
                        raise AssertionError(f"driver ended before {event!r}\n{await self.diag()}")
                    line = raw.decode(errors="replace").rstrip("\n")
                    self.lines.append(line)
                    # The driver's events are whole lines; anything else on stdout (the
                    # native library's own output) is kept for the diagnostics only.
                    at = line.find('{"at": ')
                    if at < 0:
                        self.noise.append(line)
                        continue
                    if at > 0:
                        self.noise.append(line[:at])
                    self.events.append(json.loads(line[at:]))
                    if self.events[-1]["event"] in (event, "fatal"):
                        return
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(
                f"no {event!r} from the driver within {timeout}s\n{await self.diag()}"
            ) from None

    async def diag(self) -> str:
        deliveries = [
            (e["group"], e["body"], e["reconsumeTimes"])
            for e in self.events
            if e["event"] in ("consumed", "attempt.failed")
        ]
        try:
            err = self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError as exc:
            err = f"({exc})"
        return (
            f"driver exit {self.proc.returncode} (client logs in "
            f"{self.stderr_path.parent / 'cpp-home' / 'logs'})\n"
            f"deliveries (group, body, reconsumeTimes): "
            f"{deliveries}\nother stdout: {self.noise[-20:]}\nlast stdout:\n"
            + "\n".join(self.lines)[-3000:]
            + f"\nstderr:\n{err}"
        )


async def test_cpp_client_delay_push_retry_and_dlq(
    cpp_client: None, broker_factory: Any, tmp_path: Path
) -> None:
    broker = await broker_factory(delay_levels=LEVELS)
    levels_ms = broker.config.delay_levels_ms
    seen_requests = _record_requests(broker)
    peer = await RawPeer.connect(broker.address)
    for topic in (DELAY_TOPIC, RETRY_TOPIC_NAME):
        await _create_topic(peer, topic)

    home = tmp_path / "cpp-home"  # librocketmq writes ~/logs/rocketmq-cpp: keep it here
    home.mkdir()
    cfg = {
        "nameSrv": broker.namesrv_address,
        "delayTopic": DELAY_TOPIC,
        "retryTopic": RETRY_TOPIC_NAME,
        "producerGroup": PRODUCER_GROUP,
        "okGroup": OK_GROUP,
        "failGroup": FAIL_GROUP,
        "delayLevels": DELAY_LEVELS,
        "plainCount": PLAIN_COUNT,
        "maxReconsumeTimes": CPP_MAX_RECONSUME,
        "succeedAt": SUCCEED_AT,
        "timeoutMs": 30_000,
        "logDir": str(home / "logs"),
    }
    stderr_path = tmp_path / "driver.stderr"  # a file: a full pipe would block the driver
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(DRIVER),
            json.dumps(cfg),
            cwd=tmp_path,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "HOME": str(home)},
        )
    driver = _Driver(proc, stderr_path)
    try:
        await driver.read_until("waiting", 60)
        assert driver.events[-1]["event"] == "waiting", await driver.diag()
        # The last send-back (reconsumeTimes 16 -> the DLQ) follows the last attempt: let
        # the client run until the dead letter is stored (checked below), at most 10 s.
        for _ in range(200):
            if await _dlq(peer, FAIL_GROUP):
                break
            await asyncio.sleep(0.05)
        assert proc.stdin is not None
        proc.stdin.write(b"close\n")
        await proc.stdin.drain()
        await driver.read_until("done", 30)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    diag = await driver.diag()
    events = driver.events
    assert proc.returncode == 0 and events[-1]["event"] == "done", diag

    sent = {e["body"]: e for e in events if e["event"] == "sent"}
    assert all(e["sendStatus"] == "OK" for e in sent.values()), diag
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["event"] in ("consumed", "attempt.failed"):
            by_group[e["group"]].append(e)

    # --- push consume: every message sent to the delay topic after the warm-up, once;
    # delayed ones not early (client clock and broker store times)
    ok = by_group[OK_GROUP]
    after_warm = [e["body"] for e in ok if not e["body"].startswith("warm-")]
    expected = [
        *(f"delayed-level-{n}" for n in DELAY_LEVELS),
        *(f"plain-{i}" for i in range(PLAIN_COUNT)),
    ]
    assert sorted(after_warm) == sorted(expected), diag
    by_body = {e["body"]: e for e in ok}
    for i in range(PLAIN_COUNT):
        got = by_body[f"plain-{i}"]
        assert got["keys"] == f"key-plain-{i}" and got["tags"] == "TagPlain"
        assert got["msgId"] == sent[f"plain-{i}"]["msgId"]  # C++ sets UNIQ_KEY
    for n in DELAY_LEVELS:
        body = f"delayed-level-{n}"
        got, snt, delay = by_body[body], sent[body], levels_ms[n - 1]
        assert got["topic"] == DELAY_TOPIC and got["tags"] == "TagDelay"
        assert got["keys"] == f"key-{body}" and got["reconsumeTimes"] == 0
        assert got["msgId"] == snt["msgId"]
        assert got["at"] - snt["sentAt"] >= delay, (body, got, snt)
        assert got["storeTimestamp"] - got["bornTimestamp"] >= delay, (body, got)
        assert_reput_not_early(broker, got["commitLogOffset"], DELAY_TOPIC, body, n, delay)

    # --- send-back: reconsumeTimes 0, 1, 2, ... through %RETRY%<group>, after the level delay
    fail = by_group[FAIL_GROUP]
    for body, last in (("retry-me", SUCCEED_AT), ("dlq-me", CPP_MAX_RECONSUME)):
        tries = [e for e in fail if e["body"] == body]
        assert [e["reconsumeTimes"] for e in tries] == list(range(last + 1)), f"{body}: {diag}"
        assert tries[0]["msgId"] == sent[body]["msgId"]
        for prev, cur in zip(tries, tries[1:], strict=False):
            # The C++ client restores the topic from RETRY_TOPIC and keeps UNIQ_KEY as msgId.
            assert cur["topic"] == RETRY_TOPIC_NAME and cur["retryTopic"] == RETRY_TOPIC_NAME
            assert cur["keys"] == f"key-{body}" and cur["tags"] == "TagRetry"
            assert cur["msgId"] == sent[body]["msgId"]
            rec = decode_record(broker.store.read_at(cur["commitLogOffset"]))
            assert rec.topic == f"%RETRY%{FAIL_GROUP}" and rec.body.decode() == body
            gap = levels_ms[3 + prev["reconsumeTimes"] - 1]  # the client sends delayLevel 0
            assert cur["at"] - prev["at"] >= gap, (body, prev, cur)
            assert cur["storeTimestamp"] - prev["at"] >= gap - 5, (body, prev, cur)
        kinds = [e["event"] for e in tries]
        if body == "retry-me":
            assert kinds == ["attempt.failed"] * SUCCEED_AT + ["consumed"]
        else:
            assert kinds == ["attempt.failed"] * (CPP_MAX_RECONSUME + 1)

    # --- the dead letter: dlq-me alone, after its 17th delivery
    dead = await _dlq(peer, FAIL_GROUP)
    assert [m.body.decode() for m in dead] == ["dlq-me"], diag
    assert dead[0].keys == "key-dlq-me"
    assert dead[0].reconsume_times == CPP_MAX_RECONSUME + 1
    assert dead[0].properties[RETRY_TOPIC] == RETRY_TOPIC_NAME
    await peer.close()

    # --- the C++ clients unregistered on shutdown; requests came from the C++ client
    await wait_until(
        lambda: (
            broker.clients.consumer_ids(OK_GROUP) == []
            and broker.clients.consumer_ids(FAIL_GROUP) == []
        ),
        5,
        what="C++ consumers unregistered",
    )
    codes = {(listener, code) for listener, code, lang in seen_requests if lang == 1}  # CPP
    assert ("namesrv", RequestCode.GET_ROUTEINFO_BY_TOPIC) in codes, sorted(codes)
    for code in (
        RequestCode.HEART_BEAT,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.PULL_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.UNREGISTER_CLIENT,
    ):
        assert ("broker", code) in codes, (RequestCode(code).name, sorted(codes))
