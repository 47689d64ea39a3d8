"""Name servers for the registration tests: Apache RocketMQ 4.9.8's real one (a JVM per
module, skipped when the shared build or ``java`` is missing) and helpers that read what a
name server holds over the wire (GET_BROKER_CLUSTER_INFO, GET_ROUTEINFO_BY_TOPIC)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.registration import ClusterInfo

from tests.helpers import APACHE_JAVA_OPT_EXT, ROCKETMQ_HOME, mqadmin_argv
from tests.integration.procs import free_port

START_NAMESRV = ROCKETMQ_HOME / "start_namesrv.sh"
MQADMIN = ROCKETMQ_HOME / "mqadmin.sh"
APACHE_MISSING = (
    "Apache RocketMQ not found at " + str(ROCKETMQ_HOME)
    if not START_NAMESRV.exists()
    else "java is not on PATH"
    if shutil.which("java") is None
    else None
)
needs_apache = pytest.mark.skipif(
    APACHE_MISSING is not None, reason=f"Apache RocketMQ name server: {APACHE_MISSING}"
)


class ApacheNamesrv:
    """``start_namesrv.sh`` in the background on ``port`` (its JVM is the process)."""

    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "STORE_DIR": str(self.store_dir),
            "NAMESRV_PORT": str(self.port),
            "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
        }
        log = (self.store_dir / "start.log").open("ab")
        self.proc = subprocess.Popen(
            [str(START_NAMESRV)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, (self.store_dir / "start.log").read_text()
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert time.monotonic() < deadline, "Apache name server did not start"
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGKILL: no test checks what the name server does on its way out (its SIGTERM
        shutdown idles ~3 s in Netty's quiet periods)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="module")
def apache_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheNamesrv]:
    """One Apache RocketMQ 4.9.8 name server for the module."""
    if APACHE_MISSING is not None:
        pytest.skip(APACHE_MISSING)
    ns = ApacheNamesrv(tmp_path_factory.mktemp("apache-namesrv"))
    ns.start()
    yield ns
    ns.stop()


def mqadmin(store_dir: Path, *args: str) -> str:
    """Run Apache's mqadmin once (twice if its RPC timed out on a busy box)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "STORE_DIR": str(store_dir)}
    for _ in range(2):
        p = subprocess.run(
            mqadmin_argv(*args, user_home=store_dir),
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
            cwd=store_dir,
        )
        if "RemotingTimeoutException" not in p.stdout + p.stderr:
            break
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


async def cluster_info(namesrv: str) -> dict[str, dict[int, str]]:
    """GET_BROKER_CLUSTER_INFO: {"cluster/brokerName": {brokerId: addr}}. Apache's name
    server serializes its cluster and broker tables without its lock, so a registration in
    flight can name a broker in the first and not yet in the second: such a name is left
    out, as not registered yet (callers poll)."""
    pool = RemotingPool()
    try:
        resp = await pool.invoke(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=5)
    finally:
        pool.close()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    info = ClusterInfo.from_json(resp.body)
    out = {}
    for cluster, names in info.cluster_addr_table.items():
        for name in names:
            if name in info.broker_addr_table:
                out[f"{cluster}/{name}"] = dict(info.broker_addr_table[name].broker_addrs)
    return out


async def topic_route(namesrv: str, topic: str) -> TopicRouteData | None:
    """GET_ROUTEINFO_BY_TOPIC: the route, None when the name server has none."""
    pool = RemotingPool()
    try:
        resp = await pool.invoke(
            namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=5
        )
    finally:
        pool.close()
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return TopicRouteData.from_json(resp.body)


def route_queues(route: TopicRouteData | None) -> dict[str, int]:
    """brokerName -> write queues of a route (empty when there is no route)."""
    if route is None:
        return {}
    return {q.broker_name: q.write_queue_nums for q in route.queue_datas}


async def route_is(namesrv: str, topic: str, want: dict[str, int], timeout: float = 10.0) -> None:
    """Wait until the name server's route of ``topic`` has exactly ``want`` (brokerName ->
    write queues; {} = no route)."""
    deadline = time.monotonic() + timeout
    while (got := route_queues(await topic_route(namesrv, topic))) != want:
        assert time.monotonic() < deadline, f"route of {topic}: {got}, want {want}"
        await asyncio.sleep(0.05)
