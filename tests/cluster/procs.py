"""``kairosmq cluster`` as a real process for tests: free ports, status, kill, stop.

Owns: ``ClusterProcess`` (spawns ``python -m kairosmq.server cluster`` with fast delay levels
on free ports, waits until every child listens, reads ``<data-dir>/cluster.json`` for pids),
``create_topic`` (what ``mqadmin updateTopic -c`` does: UPDATE_AND_CREATE_TOPIC on every
broker) and ``route`` (GET_ROUTEINFO_BY_TOPIC from the name server).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.integration.procs import free_port
from tests.wire import RawPeer


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(brokers: int) -> int:
    """A port p with p, p+10, ... p+10*(brokers-1) (and each one's +1) free now."""
    for _ in range(200):
        p = free_port()
        if p + 10 * brokers + 1 < 65535 and all(
            _free(p + 10 * i) and _free(p + 10 * i + 1) for i in range(brokers)
        ):
            return p
    raise RuntimeError("no free port range for the cluster")


class ClusterProcess:
    def __init__(self, data_dir: Path, brokers: int = 2, *extra: str) -> None:
        self.data_dir = data_dir
        self.brokers = brokers
        self.namesrv_port = free_port()
        self.base_port = free_base_port(brokers)
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.out_path = data_dir.parent / f"{data_dir.name}.stdout"
        self.err_path = data_dir.parent / f"{data_dir.name}.stderr"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def broker_address(self, i: int) -> str:
        return f"127.0.0.1:{self.base_port + 10 * i}"

    @property
    def broker_addresses(self) -> list[str]:
        return [self.broker_address(i) for i in range(self.brokers)]

    def argv(self) -> list[str]:
        from tests.helpers import FAST_LEVELS

        return [
            sys.executable,
            "-m",
            "kairosmq.server",
            "cluster",
            "--brokers",
            str(self.brokers),
            "--data-dir",
            str(self.data_dir),
            "--namesrv-port",
            str(self.namesrv_port),
            "--base-port",
            str(self.base_port),
            "--delay-levels",
            FAST_LEVELS,
            "--no-vip-channel",
            "--log-level",
            "warning",
            "--segment-size-mb",
            "16",
            *self.extra,
        ]

    def spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv(), stdout=out, stderr=err, stdin=subprocess.DEVNULL
            )

    def output(self) -> tuple[str, str]:
        return (
            self.out_path.read_text(errors="replace"),
            self.err_path.read_text(errors="replace"),
        )

    def status(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads((self.data_dir / "cluster.json").read_text())
        except (OSError, ValueError):
            return {}
        return {c["name"]: c for c in data["cluster"]}

    def all_running(self) -> bool:
        st = self.status()
        children = self.brokers + (0 if "--namesrv" in self.extra else 1)
        return len(st) == children and all(c["state"] == "running" for c in st.values())

    async def start(self, timeout: float = 120.0) -> None:
        self.spawn()
        await self.wait(self.all_running, timeout, "every child running")

    async def wait(self, pred: Any, timeout: float, what: str, *, exited_ok: bool = False) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not pred():
            if self.proc.poll() is not None and not exited_ok:
                out, err = self.output()
                raise RuntimeError(
                    f"cluster exited with {self.proc.returncode} waiting for "
                    f"{what}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-5000:]}"
                )
            if time.monotonic() > deadline:
                out, err = self.output()
                raise AssertionError(
                    f"{what}: not within {timeout} s\nstatus {self.status()}"
                    f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-5000:]}"
                )
            await asyncio.sleep(0.05)

    def pid(self, name: str) -> int:
        return int(self.status()[name]["pid"])

    def kill9(self, name: str) -> int:
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)
        return pid

    async def wait_restarted(self, name: str, old_pid: int, timeout: float = 90.0) -> None:
        def back() -> bool:
            c = self.status().get(name, {})
            return c.get("pid") != old_pid and c.get("state") == "running"

        await self.wait(back, timeout, f"{name} restarted")

    def stop(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                for c in self.status().values():  # the children of a killed supervisor
                    if c.get("pid"):
                        try:
                            os.kill(int(c["pid"]), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                raise
        return self.proc.returncode


async def create_topic(addresses: list[str], topic: str, queues: int = 4) -> None:
    """UPDATE_AND_CREATE_TOPIC on every broker (``mqadmin updateTopic -c DefaultCluster``)."""
    for addr in addresses:
        peer = await RawPeer.connect(addr)
        try:
            r = await peer.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": topic,
                    "defaultTopic": "TBW102",
                    "readQueueNums": queues,
                    "writeQueueNums": queues,
                    "perm": 6,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": "false",
                },
            )
            assert r.code == ResponseCode.SUCCESS, (addr, r.remark)
        finally:
            await peer.close()


async def route(namesrv: str, topic: str) -> TopicRouteData | None:
    peer = await RawPeer.connect(namesrv)
    try:
        r = await peer.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    finally:
        await peer.close()
    if r.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.from_json(r.body)


async def wait_route(
    namesrv: str, topic: str, brokers: set[str], timeout: float = 60.0
) -> TopicRouteData:
    """Until the name server routes ``topic`` to every broker in ``brokers`` (by name)."""
    deadline = time.monotonic() + timeout
    last: TopicRouteData | None = None
    while time.monotonic() < deadline:
        last = await route(namesrv, topic)
        if last is not None and {q.broker_name for q in last.queue_datas} >= brokers:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"route of {topic} does not reach {sorted(brokers)}: {last}")
