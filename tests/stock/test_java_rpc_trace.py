"""Apache RocketMQ 4.9.8's own clients against kairosmq: request-reply and message trace.

* ``java_rpc/`` holds RocketMQ 4.9.8's ``org.apache.rocketmq.example.rpc`` examples
  (``RequestProducer``, ``AsyncRequestProducer``, ``ResponseConsumer``) verbatim, Apache
  2.0; the only change, made here at compile time, is the name-server address (upstream
  hard-codes ``127.0.0.1:9876``; ``AsyncRequestProducer`` reads
  ``-Drocketmq.namesrv.addr``). They run as three JVMs against an in-process broker (the
  ``RequestProducer`` runs through ``ExitAfter``, which exits once its main returns); the
  bundled ``Producer.request`` also asks the Java responder.
* ``TraceClient`` (below) is a producer and a push consumer with ``enableMsgTrace=true``;
  then RocketMQ's ``mqadmin queryMsgTraceById`` must show the message's Pub and Sub rows
  (read from ``RMQ_SYS_TRACE_TOPIC`` by its KEYS index).

Skipped, with the reason shown, without ``javac``/``java`` or the 4.9.8 jars.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from kairosmq.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    create_reply,
    get_reply_to_client,
)
from kairosmq.server.broker import Broker

from tests.helpers import (
    ROCKETMQ_HOME,
    ROCKETMQ_JARS,
    SHORT_JVM,
    jvm_flags,
    mqadmin_argv,
    wait_until,
)

JARS = ROCKETMQ_JARS
MQADMIN = Path(os.environ.get("KAIROS_MQADMIN") or ROCKETMQ_HOME / "mqadmin.sh")
RPC_SOURCES = Path(__file__).parent / "java_rpc"
_missing = (
    "javac is not on PATH"
    if shutil.which("javac") is None
    else "java is not on PATH"
    if shutil.which("java") is None
    else f"no RocketMQ 4.9.8 jars under {ROCKETMQ_HOME}/lib"
    if not JARS
    else None
)
pytestmark = [
    pytest.mark.skipif(_missing is not None, reason=f"stock Java clients: {_missing}"),
    pytest.mark.slow,  # javac, stock Java clients and mqadmin
]

TRACE_CLIENT = r"""
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

public class TraceClient {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1];
        DefaultMQProducer p = new DefaultMQProducer("TracePG", true);  // enableMsgTrace
        p.setNamesrvAddr(ns);
        p.start();
        CountDownLatch consumed = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("TraceCG", true);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            consumed.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        SendResult r = p.send(new Message(topic, "TagT", "order-1", "traced".getBytes("UTF-8")));
        System.out.println("msgId " + r.getMsgId() + " " + r.getSendStatus());
        System.out.println(consumed.await(30, TimeUnit.SECONDS) ? "consumed" : "not-consumed");
        Thread.sleep(1500);  // the consume trace (SubAfter) is dispatched after the listener
        c.shutdown();  // shutdown flushes the trace dispatchers
        p.shutdown();
        System.out.println("done");
        System.exit(0);
    }
}
"""


EXIT_AFTER = r"""
/** Runs another class's main (unchanged), then exits: a main that returns after its
 *  producer's shutdown() otherwise idles 2 s in Netty's shutdown quiet period. */
public class ExitAfter {
    public static void main(String[] a) throws Exception {
        Class.forName(a[0]).getMethod("main", String[].class)
            .invoke(null, (Object) java.util.Arrays.copyOfRange(a, 1, a.length));
        System.out.flush();
        System.exit(0);
    }
}
"""


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples (name server from -Drocketmq.namesrv.addr) and TraceClient, compiled."""
    out = tmp_path_factory.mktemp("java_rpc")
    src = out / "src"
    src.mkdir()
    for f in RPC_SOURCES.glob("*.java"):
        text = f.read_text().replace(
            '"127.0.0.1:9876"', 'System.getProperty("rocketmq.namesrv.addr")'
        )
        (src / f.name).write_text(text)
    (src / "TraceClient.java").write_text(TRACE_CLIENT)
    (src / "ExitAfter.java").write_text(EXIT_AFTER)
    cp = ":".join(str(j) for j in JARS)
    p = subprocess.run(
        ["javac", "-nowarn", "-cp", cp, "-d", str(out), *map(str, sorted(src.glob("*.java")))],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return out


class Jvm:
    """One Java main class as a subprocess; its stdout lines collected as they come."""

    def __init__(self, classes: Path, home: Path, ns: str, main: str, *args: str) -> None:
        self.argv = [
            "java",
            *SHORT_JVM,
            *jvm_flags(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Drocketmq.client.logUseSlf4j=false",
            f"-Drocketmq.namesrv.addr={ns}",
            f"-Duser.home={home}",
            "-cp",
            ":".join([*map(str, JARS), str(classes)]),
            main,
            *args,
        ]
        self.home = home
        self.lines: list[str] = []
        self.err = b""
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Jvm:
        self.home.mkdir(parents=True, exist_ok=True)
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(self.home), "ROCKETMQ_HOME": str(self.home)},
        )
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode(errors="replace").rstrip())

    def has(self, prefix: str) -> str | None:
        return next((x for x in self.lines if x.startswith(prefix)), None)

    async def wait_line(self, prefix: str, timeout: float) -> str:
        try:
            await wait_until(lambda: self.has(prefix), timeout)
        except (AssertionError, TimeoutError):
            raise AssertionError(
                f"no line {prefix!r} within {timeout}s: {self.lines}\n{await self.stderr()}"
            ) from None
        line = self.has(prefix)
        assert line is not None
        return line

    async def stderr(self) -> str:
        if self.proc is not None and self.proc.returncode is None:
            return "(still running)"
        assert self.proc is not None and self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode(errors="replace")[-3000:]

    async def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        if self._reader is not None:
            await self._reader
        return code

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await self._reader


@pytest_asyncio.fixture
async def jvms() -> AsyncIterator[list[Jvm]]:
    started: list[Jvm] = []
    yield started
    for j in started:
        await j.kill()


async def test_stock_rpc_examples(
    broker: Broker, classes: Path, tmp_path: Path, jvms: list[Jvm]
) -> None:
    """ResponseConsumer answers RequestProducer (sync), AsyncRequestProducer (callback) and
    the bundled Producer.request: each gets 'reply message contents.' from the reply topic;
    then RequestProducer gets its reply from a bundled PushConsumer using create_reply."""
    ns = broker.namesrv_address
    broker.topics.create("RequestTopic", 4)  # the examples' topic (ResponseConsumer: LAST_OFFSET)
    pkg = "org.apache.rocketmq.example.rpc."
    responder = await Jvm(classes, tmp_path / "resp", ns, pkg + "ResponseConsumer").start()
    jvms.append(responder)
    await responder.wait_line("Consumer Started.", 90)
    # its long polls are held on all 4 queues: offsets are computed, a request will be seen
    await wait_until(lambda: broker.pull_holds.held >= 4, 60)

    sync = await Jvm(classes, tmp_path / "req", ns, "ExitAfter", pkg + "RequestProducer").start()
    jvms.append(sync)
    assert await sync.wait(120) == 0, (sync.lines, await sync.stderr())
    line = sync.has("request to <RequestTopic> cost:")
    assert line is not None, (sync.lines, await sync.stderr())
    assert "topic='DefaultCluster_REPLY_TOPIC'" in line and "CORRELATION_ID=" in line, line
    body = ", ".join(str(b) for b in b"reply message contents.")
    assert f"body=[{body}]" in line, line

    asyn = await Jvm(classes, tmp_path / "areq", ns, pkg + "AsyncRequestProducer").start()
    jvms.append(asyn)

    # RocketMQ 4.9.8 (and 5.x) call the callback's onSuccess twice: with null when the
    # request's send is acknowledged (DefaultMQProducerImpl.request's SendCallback runs
    # executeRequestCallback), then with the reply when the broker pushes it
    # (two callback threads: the two lines may come in either order)
    def calls() -> list[str]:
        return [x for x in asyn.lines if x.startswith("request to <RequestTopic> cost:")]

    await wait_until(lambda: len(calls()) >= 2, 120)
    replies = [x for x in calls() if "DefaultCluster_REPLY_TOPIC" in x]
    nulls = [x for x in calls() if x.endswith("replyMessage: null")]
    assert len(replies) == 1 and len(nulls) == 1, asyn.lines
    assert f"body=[{body}]" in replies[0], replies
    # upstream leaves its producer running (shutdown is commented out); kill it once the
    # responder's send was answered, else the kill can beat the push's SUCCESS answer
    await wait_until(lambda: sum(x.startswith("reply to ") for x in responder.lines) == 2, 10)
    await asyn.kill()

    async with Producer("PyRequesterPG", ns) as p:
        reply = await p.request(Message("RequestTopic", b"from python"), timeout=10)
    assert reply.body == b"reply message contents."
    assert reply.properties["MSG_TYPE"] == "reply"
    # (its "reply to" line follows its send's answer, which follows the push)
    await wait_until(lambda: sum(x.startswith("reply to ") for x in responder.lines) == 3, 10)

    # the other pairing: the stock RequestProducer asks a bundled PushConsumer responder
    await responder.kill()
    async with Producer("PyResponderPG", ns) as replier:

        async def answer(msgs: list[MessageExt], _ctx: object) -> ConsumeStatus:
            for m in msgs:
                if get_reply_to_client(m):
                    await replier.send(create_reply(m, b"bundled: " + m.body))
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer("PyResponderCG", ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("RequestTopic", "*")
        c.register_listener(answer)
        await c.start()
        try:
            again = await Jvm(
                classes, tmp_path / "req2", ns, "ExitAfter", pkg + "RequestProducer"
            ).start()
            jvms.append(again)
            assert await again.wait(120) == 0, (again.lines, await again.stderr())
            line = again.has("request to <RequestTopic> cost:")
            bundled = ", ".join(str(b) for b in b"bundled: Hello world")
            assert line is not None and f"body=[{bundled}]" in line, again.lines
        finally:
            await c.shutdown()


async def test_stock_trace_client_and_mqadmin_query_msg_trace_by_id(
    broker: Broker, classes: Path, tmp_path: Path, jvms: list[Jvm]
) -> None:
    """enableMsgTrace producer + consumer: their traces land in RMQ_SYS_TRACE_TOPIC and
    ``mqadmin queryMsgTraceById`` shows the Pub row (TracePG) and the Sub row (TraceCG)."""
    if not MQADMIN.is_file():  # noqa: ASYNC240 - a stat
        pytest.skip(f"mqadmin not found at {MQADMIN}")
    ns = broker.namesrv_address
    broker.topics.create("TracedTopic", 4)
    client = await Jvm(classes, tmp_path / "trace", ns, "TraceClient", ns, "TracedTopic").start()
    jvms.append(client)
    assert await client.wait(150) == 0, (client.lines, await client.stderr())
    assert "consumed" in client.lines and "done" in client.lines, client.lines
    sent = client.has("msgId ")
    assert sent is not None and sent.endswith("SEND_OK"), client.lines
    msg_id = sent.split()[1]
    trace_cq = broker.topics.get("RMQ_SYS_TRACE_TOPIC")
    assert trace_cq is not None
    out = ""
    for _ in range(3):  # the consume trace may still be on its way
        env = {**os.environ, "STORE_DIR": str(tmp_path / "mqadmin")}
        (tmp_path / "mqadmin").mkdir(exist_ok=True)
        argv = await asyncio.to_thread(
            mqadmin_argv,
            "queryMsgTraceById",
            "-n",
            ns,
            "-i",
            msg_id,
            user_home=tmp_path / "mqadmin",
        )
        p = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
        )
        raw, _ = await asyncio.wait_for(p.communicate(), 120)
        out = raw.decode(errors="replace")
        rows = _trace_rows(out)
        if {"Pub", "Sub"} <= {r[0] for r in rows}:
            break
        await asyncio.sleep(1.0)
    rows = _trace_rows(out)
    pub = [r for r in rows if r[0] == "Pub"]
    sub = [r for r in rows if r[0] == "Sub"]
    assert pub and pub[0][1] == "TracePG" and pub[0][-1] == "success", out
    assert sub and sub[0][1] == "TraceCG" and sub[0][-1] == "success", out


def _trace_rows(out: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("Pub", "Sub"):
            rows.append(parts)
    return rows
