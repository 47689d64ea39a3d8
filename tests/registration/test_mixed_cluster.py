"""A mixed cluster: a REAL Apache RocketMQ 4.9.8 broker and a kairosmq broker behind one
name server, used by unchanged clients.

The module runs twice (``mixed`` is parametrized at module scope): behind kairosmq's name
server (``kairosmq namesrv``, a real process) and behind Apache's real name server. Both
brokers are real processes in the cluster ``DefaultCluster``: ``apache-a``
(``start_broker.sh``) and ``kairos-b`` (``python -m kairosmq.server broker --namesrv ...``),
started once for the module and registered with both name servers (a ``namesrvAddr`` list);
each case uses its own topics and groups, so each starts from names no broker has seen.
Checked:

* Apache's ``mqadmin updateTopic -c DefaultCluster`` creates a topic on both brokers;
  ``clusterList`` and ``topicRoute`` list both; a topic with different queue counts and
  perms on the two brokers is merged into one route with each broker's own QueueData.
* RocketMQ 4.9.8's own Java ``DefaultMQProducer`` / ``DefaultMQPushConsumer`` (defaults
  only) spread messages over both brokers' queues and consume every one.
* The bundled kairosmq ``Producer`` / ``PushConsumer`` do the same.
* ``kill -9`` of the kairosmq broker while the Java producer sends: every send still
  succeeds (RocketMQ's default retry on another broker; ``sendLatencyFaultEnable`` off), and
  after the kairosmq broker restarts on its data, every acknowledged message is consumed.

Skipped when the Apache build (``shared/apache-rocketmq``), ``java`` or ``javac`` is absent.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kairosmq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.bodies import TopicRouteData
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.headers import CreateTopicRequestHeader

from tests.helpers import (
    APACHE_JAVA_OPT_EXT,
    ROCKETMQ_HOME,
    ROCKETMQ_JARS,
    SHORT_JVM,
    free_broker_port,
    jvm_flags,
    wait_until,
)
from tests.integration.procs import BrokerProcess, free_port
from tests.registration.conftest import (
    APACHE_MISSING,
    ApacheNamesrv,
    cluster_info,
    mqadmin,
    route_is,
    topic_route,
)

START_BROKER = ROCKETMQ_HOME / "start_broker.sh"
_missing = (
    APACHE_MISSING
    or (None if START_BROKER.exists() else f"{START_BROKER} not found")
    or ("javac is not on PATH" if shutil.which("javac") is None else None)
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=f"mixed cluster: {_missing}"),
]

CLUSTER, APACHE, KAIROS = "DefaultCluster", "apache-a", "kairos-b"

MIXED_CLIENT = Path(__file__).with_name("MixedClient.java")  # stock 4.9.8 clients, defaults


@dataclass
class Mixed:
    kind: str  # "kairosmq" | "apache": whose name server
    namesrv: str
    apache_addr: str
    kairos: BrokerProcess
    root: Path
    classpath: str

    def name(self, base: str) -> str:
        """``base`` for this case only (the brokers serve both cases)."""
        return f"{base}-{self.kind}"

    def java(self, *args: str) -> list[str]:
        home = self.root / "java-home"
        home.mkdir(exist_ok=True)
        return [
            "java",
            *SHORT_JVM,
            *jvm_flags(),
            "-Drocketmq.client.logUseSlf4j=false",
            f"-Duser.home={home}",
            "-cp",
            self.classpath,
            "MixedClient",
            *args,
        ]


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, f"{what} did not listen on {port}"
        time.sleep(0.2)


async def _registered(ns: str, want: dict[str, str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = await cluster_info(ns)
        if all(info.get(f"{CLUSTER}/{n}") == {0: a} for n, a in want.items()):
            return
        assert time.monotonic() < deadline, f"not registered at {ns}: {info}, want {want}"
        await asyncio.sleep(0.2)


async def create_topic(
    addr: str, topic: str, queues: int, perm: int = PERM_READ | PERM_WRITE
) -> None:
    """UPDATE_AND_CREATE_TOPIC (17) on one broker, what ``mqadmin updateTopic -b`` sends."""
    pool = RemotingPool()
    try:
        h = CreateTopicRequestHeader(
            topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm
        )
        resp = await pool.invoke(addr, R.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields(), timeout=10)
    finally:
        pool.close()
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _compile(dest: Path) -> str:
    cp = ":".join(str(j) for j in ROCKETMQ_JARS)
    shutil.copy(MIXED_CLIENT, dest / "MixedClient.java")
    p = subprocess.run(
        ["javac", "-nowarn", "-cp", cp, "-d", str(dest), str(dest / "MixedClient.java")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return f"{cp}:{dest}"


def _stop(proc: subprocess.Popen[bytes] | None, group: bool = False) -> None:
    if proc is None or proc.poll() is not None:
        return
    (os.killpg(proc.pid, signal.SIGTERM) if group else proc.terminate())
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        (os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill())
        proc.wait(10)


@dataclass
class Procs:
    """Both name servers and both brokers, started once for the module."""

    namesrvs: dict[str, str]  # "kairosmq" | "apache" -> address
    apache_addr: str
    kairos: BrokerProcess
    root: Path
    classpath: str


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Procs]:
    """kairosmq's name server and Apache's, and an Apache broker and a kairosmq broker
    registered with both (RocketMQ's ``namesrvAddr`` list): one start serves both cases."""
    root = tmp_path_factory.mktemp("mixed")
    ns_proc: subprocess.Popen[bytes] | None = None
    apache_ns = ApacheNamesrv(root / "apache-namesrv")
    broker: subprocess.Popen[bytes] | None = None
    kairos: BrokerProcess | None = None
    try:
        with ThreadPoolExecutor(2) as pool:  # javac and the two name servers start together
            compiled = pool.submit(_compile, root)
            ns_port = free_port()
            ns_proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kairosmq.server",
                    "namesrv",
                    "--port",
                    str(ns_port),
                    "--data-dir",
                    str(root / "namesrv"),
                    "--no-log-file",
                    "--log-level",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            apache_ns.start()
            _wait_port(ns_port, ns_proc, "kairosmq namesrv", 30)
            classpath = compiled.result()
        namesrvs = {"kairosmq": f"127.0.0.1:{ns_port}", "apache": apache_ns.address}
        both = ";".join(namesrvs.values())
        port = free_broker_port()
        env = {
            **os.environ,
            "STORE_DIR": str(root / "apache-broker"),
            "BROKER_PORT": str(port),
            "NAMESRV": both,
            "BROKER_NAME": APACHE,
            "CLUSTER": CLUSTER,
            "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
        }
        (root / "apache-broker").mkdir()
        broker = subprocess.Popen(
            [str(START_BROKER)],
            env=env,
            start_new_session=True,
            stdout=(root / "apache-broker" / "start.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        kairos = BrokerProcess(
            root / "kairos",
            "--namesrv",
            both,
            "--broker-name",
            KAIROS,
            "--cluster",
            CLUSTER,
            "--broker-ip",
            "127.0.0.1",
            "--register-period",
            "5",
        )
        asyncio.run(kairos.start(60))
        apache_addr = f"127.0.0.1:{port}"
        yield Procs(namesrvs, apache_addr, kairos, root, classpath)
    finally:  # SIGKILL for the Java processes: nothing here checks their shutdown (Apache's
        # broker sleeps 3 s in its store's shutdown, then idles in Netty's quiet periods)
        if broker is not None and broker.poll() is None:
            os.killpg(broker.pid, signal.SIGKILL)
        apache_ns.stop()
        if kairos is not None and kairos.proc is not None and kairos.proc.poll() is None:
            kairos.terminate()
        _stop(ns_proc)
        if broker is not None:
            broker.wait(10)


@pytest.fixture(scope="module", params=["kairosmq", "apache"])
def mixed(request: pytest.FixtureRequest, procs: Procs) -> Mixed:
    """The cluster seen through ``request.param``'s name server. Topics and groups carry the
    name server's kind (``Mixed.name``): each case starts from names no broker has seen."""
    ns = procs.namesrvs[request.param]
    asyncio.run(_registered(ns, {APACHE: procs.apache_addr, KAIROS: procs.kairos.address}, 150))
    root = procs.root / request.param
    root.mkdir()
    return Mixed(request.param, ns, procs.apache_addr, procs.kairos, root, procs.classpath)


def _route(text: str) -> TopicRouteData:
    return TopicRouteData.from_json(text[text.index("{") :])  # after mqadmin's log lines


async def _java(mixed: Mixed, *args: str, timeout: float) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        *mixed.java(*args), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    lines = out.decode().splitlines()
    assert proc.returncode == 0 and "done" in lines, (lines[-20:], err.decode()[-3000:])
    return lines


def _sent(lines: list[str]) -> dict[str, str]:
    """body -> brokerName of every ``sent ... SEND_OK`` line."""
    out = {}
    for line in lines:
        if line.startswith("sent "):
            _, body, broker, _q, status, _ms = line.split()
            assert status == "SEND_OK", line
            out[body] = broker
    return out


def _got(lines: list[str]) -> dict[str, str]:
    return {p[1]: p[2] for line in lines if line.startswith("got ") and (p := line.split())}


async def test_cluster_list_and_merged_routes(mixed: Mixed) -> None:
    ns = mixed.namesrv
    topic, uneven = mixed.name("MixedTopic"), mixed.name("MixedUneven")
    # Apache's admin tool creates a topic on every master of the cluster: both brokers
    await asyncio.to_thread(
        mqadmin,
        mixed.root / "adm-create",
        "updateTopic",
        "-n",
        ns,
        "-c",
        CLUSTER,
        "-t",
        topic,
        "-r",
        "4",
        "-w",
        "4",
    )
    await route_is(ns, topic, {APACHE: 4, KAIROS: 4}, timeout=15)
    # per broker: different queue counts and perms (read-only on the kairosmq broker)
    await create_topic(mixed.apache_addr, uneven, 6)
    await create_topic(mixed.kairos.address, uneven, 2, perm=PERM_READ)
    await route_is(ns, uneven, {APACHE: 6, KAIROS: 2}, timeout=15)
    route = await topic_route(ns, uneven)
    assert route is not None
    assert {
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas
    } == {(APACHE, 6, 6, 6), (KAIROS, 2, 2, PERM_READ)}
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
        APACHE: {0: mixed.apache_addr},
        KAIROS: {0: mixed.kairos.address},
    }
    assert {b.cluster for b in route.broker_datas} == {CLUSTER}

    cluster_out, route_out, uneven_out = await asyncio.gather(
        asyncio.to_thread(mqadmin, mixed.root / "adm1", "clusterList", "-n", ns),
        asyncio.to_thread(mqadmin, mixed.root / "adm2", "topicRoute", "-n", ns, "-t", topic),
        asyncio.to_thread(mqadmin, mixed.root / "adm3", "topicRoute", "-n", ns, "-t", uneven),
    )
    rows = {r[1]: r for line in cluster_out.splitlines() if (r := line.split())[:1] == [CLUSTER]}
    assert set(rows) == {APACHE, KAIROS}, cluster_out
    assert rows[APACHE][2:5] == ["0", mixed.apache_addr, "V4_9_8"], cluster_out
    assert rows[KAIROS][2:4] == ["0", mixed.kairos.address], cluster_out
    got = _route(route_out)
    assert {(q.broker_name, q.write_queue_nums) for q in got.queue_datas} == {
        (APACHE, 4),
        (KAIROS, 4),
    }, route_out
    got = _route(uneven_out)
    assert {(q.broker_name, q.write_queue_nums, q.perm) for q in got.queue_datas} == {
        (APACHE, 6, 6),
        (KAIROS, 2, PERM_READ),
    }, uneven_out


async def test_stock_java_clients_across_both_brokers(mixed: Mixed) -> None:
    topic, n = mixed.name("MixedJava"), 24
    await create_topic(mixed.apache_addr, topic, 4)
    await create_topic(mixed.kairos.address, topic, 2)
    await route_is(mixed.namesrv, topic, {APACHE: 4, KAIROS: 2}, timeout=15)
    consume = asyncio.ensure_future(
        _java(
            mixed,
            "consume",
            mixed.namesrv,
            topic,
            mixed.name("MixedJavaCG"),
            str(n),
            "60",
            timeout=85,
        )
    )
    lines = await _java(mixed, "produce", mixed.namesrv, topic, "java", str(n), "0", timeout=60)
    sent = _sent(lines)
    assert len(sent) == n, lines
    assert set(sent.values()) == {APACHE, KAIROS}  # round robin over all 6 queues
    got = _got(await consume)
    assert got == sent  # every message, consumed from the broker that stored it


async def test_bundled_clients_across_both_brokers(mixed: Mixed) -> None:
    topic, n = mixed.name("MixedBundled"), 20
    await create_topic(mixed.apache_addr, topic, 3)
    await create_topic(mixed.kairos.address, topic, 2)
    await route_is(mixed.namesrv, topic, {APACHE: 3, KAIROS: 2}, timeout=15)
    producer = Producer(mixed.name("MixedBundledPG"), namesrv=mixed.namesrv)
    consumer = PushConsumer(
        mixed.name("MixedBundledCG"),
        namesrv=mixed.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        rebalance_interval=1.0,
    )
    got: dict[str, str] = {}

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        got.update((m.body.decode(), ctx.message_queue.broker_name) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    await producer.start()
    await consumer.start()
    try:
        sent = {}
        for i in range(n):
            r = await producer.send(Message(topic, f"bundled-{i}".encode()))
            sent[f"bundled-{i}"] = r.message_queue.broker_name
        assert set(sent.values()) == {APACHE, KAIROS}
        await wait_until(lambda: len(got) >= n, 60, what=f"{n} messages consumed")
        assert got == sent  # every message, from the broker that stored it
    finally:
        await consumer.shutdown()
        await producer.shutdown()


async def test_kill9_kairos_broker_java_producer_keeps_sending(mixed: Mixed) -> None:
    """Last in the module: it kills and restarts the kairosmq broker."""
    topic, n = mixed.name("MixedKill"), 40
    await create_topic(mixed.apache_addr, topic, 4)
    await create_topic(mixed.kairos.address, topic, 4)
    await route_is(mixed.namesrv, topic, {APACHE: 4, KAIROS: 4}, timeout=15)
    proc = await asyncio.create_subprocess_exec(
        *mixed.java("produce", mixed.namesrv, topic, "kill", str(n), "60"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    killed_at = -1
    try:
        async with asyncio.timeout(80):
            while line := (await proc.stdout.readline()).decode():
                lines.append(line.strip())
                sent = _sent(lines)
                if killed_at < 0 and len(sent) >= 8 and KAIROS in sent.values():
                    mixed.kairos.kill()  # SIGKILL, waited for
                    killed_at = len(lines)
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    err = (await proc.stderr.read()).decode()[-3000:] if proc.stderr else ""
    assert proc.returncode == 0 and "done" in lines, (lines[-20:], err)
    assert killed_at > 0, lines
    assert not [x for x in lines if x.startswith("failed")], lines
    sent = _sent(lines)
    assert len(sent) == n, lines
    after = [x.split() for x in lines[killed_at + 2 :] if x.startswith("sent ")]
    assert after and {p[2] for p in after} == {APACHE}, lines  # retried on the other broker
    # a send that first tried the dead broker still finished well within the send timeout
    assert max(int(p[5]) for p in after) < 3000, after
    acked_by_kairos = {b for b, name in sent.items() if name == KAIROS}
    assert acked_by_kairos

    await mixed.kairos.start(60)  # same data dir and port
    await _registered(mixed.namesrv, {KAIROS: mixed.kairos.address}, 30)
    await route_is(mixed.namesrv, topic, {APACHE: 4, KAIROS: 4}, timeout=15)
    got = _got(
        await _java(
            mixed,
            "consume",
            mixed.namesrv,
            topic,
            mixed.name("MixedKillCG"),
            str(n),
            "60",
            timeout=85,
        )
    )
    assert got == sent  # nothing acknowledged is lost, each from the broker that stored it
