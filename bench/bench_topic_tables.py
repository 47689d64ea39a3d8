"""Event-loop stalls of a broker process holding many topics while clients create more.

Usage:  .venv/bin/python bench/bench_topic_tables.py [--topics 100000] [--rounds 20]
                                                   [--scenarios route,heartbeat,send,create,offset]
                                                   [--broker-arg=--max-topics=200000 ...]

A real ``kairosmq broker`` process starts on a data directory whose ``config/topics.json``
already holds ``--topics`` topics (written here in the broker's own format). Then, for
each scenario, one client makes ``--rounds`` requests one after another that each ask the
broker to create something, while a probe client on another connection sends a cheap
request (GET_MAX_OFFSET of an existing queue) every 2 ms. Printed per scenario: the
creating requests' latency (median, max) and the probe's (median, p99, max): the probe's
max is the longest the event loop was unavailable to a concurrent client. The scenarios
(issue 29, row 3):

* ``route``: GET_ROUTEINFO_BY_TOPIC of a new ``%RETRY%`` name on the embedded name server;
* ``heartbeat``: HEART_BEAT with 256 new CLUSTERING consumer groups (256 retry topics and
  256 subscription groups);
* ``send``: a send to a new topic (auto-created through TBW102);
* ``create``: UPDATE_AND_CREATE_TOPIC of a new topic (acknowledged once written);
* ``offset``: UPDATE_CONSUMER_OFFSET for a topic that does not exist.

Figures, not assertions: the machine is shared. The data directory is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import uvloop
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.properties import encode_properties

PROBE_TOPIC = "BenchProbe"
SCENARIOS = ("route", "heartbeat", "send", "create", "offset")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_topics(config_dir: Path, n: int) -> None:
    """``n`` topics in ``topics.json`` (the broker's format; 4 queues each)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "topic_name": f"BenchSeed{i:07d}",
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 6,
            "topic_sys_flag": 0,
            "order": False,
        }
        for i in range(n)
    ]
    rows.append(
        {
            "topic_name": PROBE_TOPIC,
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 6,
            "topic_sys_flag": 0,
            "order": False,
        }
    )
    (config_dir / "topics.json").write_bytes(orjson.dumps(rows))


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


class Creator:
    """The requests of each scenario; ``n`` keeps every name new."""

    def __init__(self, broker: RemotingClient, namesrv: RemotingClient) -> None:
        self.broker = broker
        self.namesrv = namesrv
        self.n = 0

    async def one(self, scenario: str) -> RemotingCommand:
        self.n += 1
        n = self.n
        if scenario == "route":
            return await self.namesrv.invoke(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"%RETRY%BenchRoute{n}"}, timeout=60
            )
        if scenario == "heartbeat":
            consumers = [
                ConsumerData(f"BenchHb{n}x{i}", [SubscriptionData(PROBE_TOPIC)]) for i in range(256)
            ]
            body = HeartbeatData(f"bench-{n}", [], consumers).to_json()
            return await self.broker.invoke(RequestCode.HEART_BEAT, {}, body, timeout=60)
        if scenario == "send":
            ext = {
                "a": "BenchPG",
                "b": f"BenchSend{n}",
                "c": "TBW102",
                "d": "4",
                "e": "0",
                "f": "0",
                "g": str(int(time.time() * 1000)),
                "h": "0",
                "i": encode_properties({}),
            }
            return await self.broker.invoke(RequestCode.SEND_MESSAGE_V2, ext, b"x", timeout=60)
        if scenario == "create":
            ext = {
                "topic": f"BenchCreate{n}",
                "defaultTopic": "TBW102",
                "readQueueNums": "4",
                "writeQueueNums": "4",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            }
            return await self.broker.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, ext, timeout=60)
        if scenario == "offset":
            ext = {
                "consumerGroup": "BenchOffsets",
                "topic": f"BenchGhost{n}",
                "queueId": "0",
                "commitOffset": "1",
            }
            return await self.broker.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, ext, timeout=60)
        raise ValueError(scenario)


async def probe(client: RemotingClient, lat: list[float], stop: asyncio.Event) -> None:
    ext = {"topic": PROBE_TOPIC, "queueId": "0"}
    while not stop.is_set():
        t0 = time.perf_counter()
        r = await client.invoke(RequestCode.GET_MAX_OFFSET, ext, timeout=60)
        lat.append(time.perf_counter() - t0)
        assert r.code == ResponseCode.SUCCESS, r.remark
        await asyncio.sleep(0.002)


async def run_scenario(creator: Creator, prober: RemotingClient, scenario: str, rounds: int) -> str:
    lat: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(probe(prober, lat, stop))
    await asyncio.sleep(0.2)
    idle = len(lat)
    made: list[float] = []
    codes: dict[int, int] = {}
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = await creator.one(scenario)
        made.append(time.perf_counter() - t0)
        codes[r.code] = codes.get(r.code, 0) + 1
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # writes that were left for the background
    stop.set()
    await task
    busy = lat[idle:]
    return (
        f"{scenario:9s} requests {rounds} codes {codes}  request ms median "
        f"{statistics.median(made) * 1e3:8.1f} max {max(made) * 1e3:8.1f}  |  "
        f"probe ({len(busy)}) ms median {statistics.median(busy) * 1e3:6.2f} "
        f"p99 {percentile(busy, 0.99) * 1e3:7.2f} max {max(busy) * 1e3:7.2f}"
    )


async def measure(args: argparse.Namespace, port: int, ns_port: int) -> None:
    broker = RemotingClient(f"127.0.0.1:{port}")
    prober = RemotingClient(f"127.0.0.1:{port}")
    namesrv = RemotingClient(f"127.0.0.1:{ns_port}")
    creator = Creator(broker, namesrv)
    for scenario in args.scenarios.split(","):
        print(await run_scenario(creator, prober, scenario, args.rounds), flush=True)
    for c in (broker, prober, namesrv):
        c.close()


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-topics-"))
    try:
        t0 = time.perf_counter()
        seed_topics(tmp / "config", args.topics)
        port, ns_port = free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(port),
            "--namesrv-port",
            str(ns_port),
            "--data-dir",
            str(tmp),
            "--no-vip-channel",
            "--no-log-file",
            "--log-format",
            "json",
            "--log-level",
            "warning",
            "--segment-size-mb",
            "64",
            *args.broker_arg,
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, proc)
            print(
                f"broker pid {proc.pid} holding {args.topics + 1} seeded topics "
                f"(started in {time.perf_counter() - t0:.1f} s); python "
                f"{sys.version.split()[0]}"
            )
            uvloop.run(measure(args, port, ns_port))
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, 9)
                proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--topics", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument(
        "--broker-arg",
        action="append",
        default=[],
        help="an extra `kairosmq broker` option (repeat; use --broker-arg=--x)",
    )
    args = ap.parse_args()
    run(args)


if __name__ == "__main__":
    main()
