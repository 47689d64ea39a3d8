"""The stock npm client ali-ons 3.12.0, unmodified, against ``kairosmq cluster --brokers 2``:
it is given only the cluster's name server (``nameSrv``).

Its producer spreads plain, delayed and to-be-retried messages over both brokers' queues;
its push consumer rebalances over both, consumes everything, and a failed delivery is sent
back to the broker that stored it and redelivered from there. ali-ons is installed as in
tests/stock/test_alions.py (skipped only without node/npm or a reachable registry).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from kairosmq.protocol.codes import ResponseCode

from tests.cluster.procs import ClusterProcess, create_topic, wait_route
from tests.stock.alions_install import NODE_MODULES, ensure_alions, node

pytestmark = [pytest.mark.node, pytest.mark.slow]

TOPIC = "ClusterAlions"
DRIVER = Path(__file__).parent / "alions_cluster.js"
LEVELS = [1, 2, 3]
LEVEL_MS = {1: 1000, 2: 2000, 3: 3000}
# A new group has no committed offset on an empty queue: the broker answers
# QUERY_CONSUMER_OFFSET with QUERY_NOT_FOUND (22), as RocketMQ 4.9 does (tests/stock).
EXPECTED_ERROR = re.compile(r"RemoteBrokerOffsetStore\.readOffset failed.*no offset for group")
# ali-ons asks the name server for %RETRY%<group>'s route before its first heartbeat, which is
# what creates that topic on each broker (and re-registers it): TOPIC_NOT_EXIST (17), as
# against Apache RocketMQ 4.9 name servers; it is routed from the next poll on.
NO_RETRY_ROUTE = re.compile(
    r"No topic route info in name server for the topic: %RETRY%CID_CLUSTER$"
)


async def test_alions_produces_and_consumes_through_the_cluster_name_server(tmp_path: Path) -> None:
    await ensure_alions()
    c = ClusterProcess(tmp_path / "data", 2, "--delay-levels", "1s 2s 3s")
    try:
        await c.start()
        await create_topic(c.broker_addresses, TOPIC)
        await wait_route(c.namesrv, TOPIC, {"broker-a", "broker-b"})
        cfg = {
            "nameSrv": c.namesrv,
            "topic": TOPIC,
            "producerGroup": "PID_CLUSTER",
            "consumerGroup": "CID_CLUSTER",
            "plainCount": 16,
            "delayLevels": LEVELS,
            "retryCount": 4,
            "timeoutMs": 60_000,
            "queues": 8,
        }
        proc = await asyncio.create_subprocess_exec(
            node(),
            str(DRIVER),
            json.dumps(cfg),
            cwd=DRIVER.parent,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "NODE_NO_WARNINGS": "1", "NODE_PATH": str(NODE_MODULES)},
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 120)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        events = [json.loads(ln) for ln in out.decode().splitlines() if ln.startswith("{")]
        diag = (
            f"driver exit {proc.returncode}\nstdout:\n{out.decode()[-6000:]}\n"
            f"stderr:\n{err.decode()[-3000:]}"
        )
        assert proc.returncode == 0 and events[-1]["event"] == "done", diag
        errors = [
            e
            for e in events
            if e["event"] == "error"
            and not (
                e["code"] == ResponseCode.QUERY_NOT_FOUND
                and EXPECTED_ERROR.search(e["message"])
                or e["code"] == ResponseCode.TOPIC_NOT_EXIST
                and NO_RETRY_ROUTE.search(e["message"])
            )
        ]
        ready = next(e["at"] for e in events if e["event"] == "warm")
        assert all(
            e["at"] < ready
            for e in events
            if e["event"] == "error" and e["code"] == ResponseCode.TOPIC_NOT_EXIST
        ), diag
        assert errors == [], f"unexpected ali-ons errors: {errors}\n{diag}"

        port_of = {"broker-a": c.base_port, "broker-b": c.base_port + 10}
        sent = {e["body"]: e for e in events if e["event"] == "sent"}
        assert all(e["sendStatus"] == "SEND_OK" for e in sent.values()), diag
        assert {e["brokerName"] for e in sent.values()} == set(port_of), diag
        consumed: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            if e["event"] in ("consumed", "attempt.failed"):
                consumed.setdefault(e["body"], []).append(e)
        assert set(consumed) == set(sent), diag
        for body, s in sent.items():
            port = int(consumed[body][-1]["storeHost"].rsplit(":", 1)[1])
            if body.startswith("retry-"):
                first, again = consumed[body][0], consumed[body][-1]
                assert (first["event"], first["reconsumeTimes"]) == ("attempt.failed", 0)
                assert (again["event"], again["reconsumeTimes"]) == ("consumed", 1)
                # sent back to, and redelivered by, the broker that stored it
                assert port == port_of[s["brokerName"]], (body, s, consumed[body])
                continue
            got = consumed[body][0]
            assert got["event"] == "consumed" and port == port_of[s["brokerName"]], body
            if s["level"]:
                assert got["at"] - s["sentAt"] >= LEVEL_MS[s["level"]], (body, got, s)
    finally:
        c.stop()
