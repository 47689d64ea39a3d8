"""What Apache RocketMQ 4.9.8 accepts, kairosmq accepts (issue 29: the limits table).

The REAL Apache broker (``start_broker.sh``, registered with an in-process kairosmq name
server) and a kairosmq broker process get the same requests, each at or past one of the
limits kairosmq added for hardening (docs/reliability.md section 2): request shapes a stock
client sends. For every request Apache accepts, kairosmq must accept it too (the reverse is
allowed: kairosmq is more lenient in places). The table of both answers is printed. Then
kill -9 and restart of the kairosmq broker: nothing acked lost.

Skipped with the reason when the Apache build (``shared/apache-rocketmq``) or java is absent.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.namesrv import NameServer

from tests.helpers import (
    APACHE_BROKER_MISSING,
    APACHE_JAVA_OPT_EXT,
    START_BROKER,
    free_broker_port,
    send_ext,
    wait_until,
)
from tests.hostile.harness import Acked, now_ms, verify_after_kill9
from tests.wire import RawPeer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        APACHE_BROKER_MISSING is not None, reason=f"Apache broker: {APACHE_BROKER_MISSING}"
    ),
]

R = RequestCode
TOPIC = "ParityTopic"
PULL_ANSWERS = {
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
}


@dataclass
class Probe:
    name: str
    code: int
    ext: dict[str, Any]
    body: bytes = b""
    ok: frozenset[int] = frozenset({ResponseCode.SUCCESS})
    key: str | None = None  # UNIQ_KEY of a single send (joins the ledger when acked)


def _consumer(group: str, topics: list[str]) -> dict[str, Any]:
    return {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "unitMode": False,
        "subscriptionDataSet": [
            {
                "topic": t,
                "subString": "*",
                "tagsSet": [],
                "codeSet": [],
                "subVersion": 1,
                "expressionType": "TAG",
                "classFilterMode": False,
            }
            for t in topics
        ],
    }


def _heartbeat(client: str, consumers: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(
        {
            "clientID": client,
            "producerDataSet": [{"groupName": "ParityPG"}],
            "consumerDataSet": consumers,
        }
    )


def probes() -> list[Probe]:
    control = {f"k{i:03d}": "\x03" * 100 for i in range(300)}  # fastjson: \u0003, 6 bytes
    split = [
        BatchItem(
            f"Hello world {i}".encode(),
            0,
            encode_properties(
                {"KEYS": f"OrderID{i}", "TAGS": "Tag", "WAIT": "true", "UNIQ_KEY": f"PAR{i:06d}"}
            ),
        )
        for i in range(13_275)
    ]
    tags = " || ".join(f"tag{i}" for i in range(8000))  # ~80 KB of header
    return [
        Probe(
            "send: 300 properties of control characters (~190 KB JSON header)",
            R.SEND_MESSAGE_V2,
            send_ext(TOPIC, {**control, "UNIQ_KEY": "PARITY-HDR"}),
            b"big-header",
            key="PARITY-HDR",
        ),
        Probe(
            "send: properties of 32,000 bytes",
            R.SEND_MESSAGE_V2,
            send_ext(TOPIC, {"UNIQ_KEY": "PARITY-32K", "pad": "p" * 31_970}),
            b"props-32k",
            key="PARITY-32K",
        ),
        Probe(
            "send: properties of 33,000 bytes (over RocketMQ's 32,767)",
            R.SEND_MESSAGE_V2,
            send_ext(TOPIC, {"UNIQ_KEY": "PARITY-33K", "pad": "p" * 33_000}),
            b"x",
        ),
        Probe(
            "send: body of 4 MiB - 2 KiB",
            R.SEND_MESSAGE_V2,
            send_ext(TOPIC, {"UNIQ_KEY": "PARITY-BODY"}, 1),
            b"b" * (4 * 1024 * 1024 - 2048),
            key="PARITY-BODY",
        ),
        Probe(
            "send: DELAY=-1 (setDelayTimeLevel(-1))",
            R.SEND_MESSAGE_V2,
            send_ext(TOPIC, {"UNIQ_KEY": "PARITY-NEG", "DELAY": "-1"}, 2),
            b"neg-delay",
            key="PARITY-NEG",
        ),
        Probe(
            "send: topic of 127 characters",
            R.SEND_MESSAGE_V2,
            send_ext("T" * 127, {"UNIQ_KEY": "PARITY-127"}),
            b"long-topic",
        ),
        Probe(
            "send: topic of 128 characters",
            R.SEND_MESSAGE_V2,
            send_ext("T" * 128, {"UNIQ_KEY": "PARITY-128"}),
            b"x",
        ),
        Probe(
            "batch: SplitBatchProducer's first batch, 13,275 messages",
            R.SEND_BATCH_MESSAGE,
            send_ext("BatchTest", {"WAIT": "true"}, batch="true"),
            encode_batch(split),
        ),
        Probe(
            "batch: an item with DELAY=0",
            R.SEND_BATCH_MESSAGE,
            send_ext(TOPIC, {"WAIT": "true"}, 3, batch="true"),
            encode_batch(
                [
                    BatchItem(b"d0", 0, encode_properties({"DELAY": "0", "UNIQ_KEY": "PD0"})),
                    BatchItem(b"d1", 0, encode_properties({"UNIQ_KEY": "PD1"})),
                ]
            ),
        ),
        Probe(
            "heartbeat: 300 consumer groups",
            R.HEART_BEAT,
            {},
            _heartbeat(
                "127.0.0.1@parity1", [_consumer(f"ParityCG{i}", [TOPIC]) for i in range(300)]
            ),
        ),
        Probe(
            "heartbeat: one group subscribing 1,100 topics",
            R.HEART_BEAT,
            {},
            _heartbeat(
                "127.0.0.1@parity2", [_consumer("ParityWide", [f"W{i}" for i in range(1100)])]
            ),
        ),
        Probe(
            "lock batch: 17,000 queues",
            R.LOCK_BATCH_MQ,
            {},
            orjson.dumps(
                {
                    "consumerGroup": "ParityCG0",
                    "clientId": "127.0.0.1@parity1",
                    "onlyThisBroker": False,
                    "mqSet": [
                        {"topic": f"L{i // 100}", "brokerName": "b", "queueId": i % 100}
                        for i in range(17_000)
                    ],
                }
            ),
        ),
        Probe(
            "create topic: 2,048 queues (mqadmin updateTopic -r 2048 -w 2048)",
            R.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "ParityWideTopic",
                "defaultTopic": "TBW102",
                "readQueueNums": 2048,
                "writeQueueNums": 2048,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": "false",
            },
        ),
        Probe(
            "pull: a tag expression of 8,000 tags (~80 KB header)",
            R.PULL_MESSAGE,
            {
                "consumerGroup": "ParityCG0",
                "topic": TOPIC,
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": tags,
                "subVersion": 0,
                "expressionType": "TAG",
            },
            ok=frozenset(PULL_ANSWERS),
        ),
    ]


CLOSED = -1  # the broker closed the connection instead of answering


async def _ask(peers: dict[str, RawPeer], side: str, address: str, p: Probe) -> int:
    """The answer's code to ``p`` (CLOSED if the connection was closed: then reconnect)."""
    try:
        return (await peers[side].call(p.code, p.ext, p.body, timeout=120)).code
    except ConnectionError:
        peers[side] = await RawPeer.connect(address)
        return CLOSED


async def test_what_apache_accepts_kairosmq_accepts(hostile, tmp_path: Path) -> None:
    ns = NameServer(port=0, data_dir=tmp_path / "namesrv")
    await ns.start()
    port = free_broker_port()
    env = {
        **os.environ,
        "STORE_DIR": str(tmp_path / "apache"),
        "BROKER_PORT": str(port),
        "NAMESRV": ns.address,
        "BROKER_NAME": "apache-a",
        "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
    }
    apache_proc = await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    hb = await hostile()
    try:
        await wait_until(lambda: "apache-a" in ns.routes.broker_addr_table, 120.0)
        addresses = {"apache": f"127.0.0.1:{port}", "kairosmq": hb.address}
        peers = {
            "apache": await RawPeer.connect(addresses["apache"]),
            "kairosmq": await RawPeer.connect(addresses["kairosmq"]),
        }
        await hb.setup_bystander(peers["kairosmq"])
        # the topic the pulls read exists on both
        for peer in peers.values():
            r = await peer.call(R.SEND_MESSAGE_V2, send_ext(TOPIC, {"UNIQ_KEY": "SEED"}), b"s")
            assert r.code == ResponseCode.SUCCESS, r.remark
        hb.ledger.acked["SEED"] = Acked("SEED", TOPIC, 0, b"s", 0, now_ms())
        rows: list[tuple[str, int, int, bool]] = []
        for p in probes():
            a = await _ask(peers, "apache", addresses["apache"], p)
            k = await _ask(peers, "kairosmq", addresses["kairosmq"], p)
            a_ok, k_ok = a in p.ok, k in p.ok
            rows.append((p.name, a, k, a_ok and not k_ok))
            if k_ok and p.key is not None:
                qid = int(p.ext.get("e", 0))
                hb.ledger.acked[p.key] = Acked(p.key, TOPIC, qid, p.body, 0, now_ms())
            elif not k_ok and p.key is not None:
                hb.ledger.refused_bodies.add(p.body)
        width = max(len(r[0]) for r in rows)
        print(
            "\n(code -1: the connection was closed)\n"
            + "\n".join(
                f"{n:{width}s}  Apache {a:3d}  kairosmq {k:3d}"
                + ("  <- REFUSED BY KAIROSMQ ONLY" if bad else "")
                for n, a, k, bad in rows
            )
        )
        refused = [r for r in rows if r[3]]
        assert not refused, f"kairosmq refuses what Apache 4.9.8 accepts: {refused}"
        assert any(a == ResponseCode.SUCCESS for _n, a, _k, _b in rows[:2]), (
            "Apache refused the plain sends: the comparison proves nothing"
        )
        for peer in peers.values():
            await peer.close()
        await verify_after_kill9(hb)
    finally:
        try:
            os.killpg(apache_proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(apache_proc.wait(), 30)
        except TimeoutError:
            os.killpg(apache_proc.pid, signal.SIGKILL)
            await apache_proc.wait()
        await ns.stop()
        shutil.rmtree(tmp_path / "apache", ignore_errors=True)
