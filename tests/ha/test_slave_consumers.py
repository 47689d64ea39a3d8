"""Consumers keep consuming from the slave when the master dies (real processes: a kairosmq
name server, master and slave, and the consumer in its own process): RocketMQ 4.9.8's own
Java ``DefaultMQPushConsumer`` and the bundled ``PushConsumer``.

The consumer consumes a first batch from the master, is stopped (SIGSTOP), a second batch
is sent and replicated, the master is killed -9 (the name server drops it: the route lists
brokerId 1 only), and the consumer is continued (SIGCONT): it pulls the second batch from
the slave (RocketMQ's ``findBrokerAddressInSubscribe(name, 0, false)``: brokerId 0 is
absent, so the slave) and commits its offsets there.

The Java case is skipped, with the reason, without ``javac`` or the RocketMQ 4.9.8 jars.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from pathlib import Path

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.ha.pair import log_bytes, wait_for
from tests.helpers import ROCKETMQ_JARS, compile_java, send, spawn_java
from tests.integration.procs import BrokerProcess, free_port
from tests.namesrv.procs import NamesrvProcess
from tests.wire import RawPeer

pytestmark = pytest.mark.slow
N = 12
TOPIC = "SlaveRead"

JAVA = r"""
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class SlaveReader {
    public static void main(String[] a) throws Exception {
        int expect = Integer.parseInt(a[3]);
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(a[0]);
        c.setInstanceName("slave-reader");
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(1000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(a[1], "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody()));
                System.out.println("consumed " + new String(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        System.out.println("started");
        long end = System.currentTimeMillis() + 120000;
        while (got.size() < expect && System.currentTimeMillis() < end) {
            Thread.sleep(250);
            c.getDefaultMQPushConsumerImpl().persistConsumerOffset();
        }
        Thread.sleep(500);
        c.getDefaultMQPushConsumerImpl().persistConsumerOffset();
        c.shutdown();
        System.out.println("done " + got.size());
        System.exit(0);
    }
}
"""

PYTHON = r"""
import asyncio, sys
from kairosmq.client import ConsumeFromWhere, ConsumeStatus, PushConsumer

async def main(namesrv: str, topic: str, group: str, expect: int) -> None:
    got: set[str] = set()
    enough = asyncio.Event()

    async def listener(msgs, ctx):  # on the loop: one print at a time
        for m in msgs:
            got.add(m.body.decode())
            print("consumed", m.body.decode(), flush=True)
        if len(got) >= expect:
            enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(
        group,
        namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        persist_consumer_offset_interval=0.25,
        pull_time_delay_millis_when_exception=500,
    )
    c.subscribe(topic, "*")
    c.register_listener(listener)
    await c.start()
    print("started", flush=True)
    try:
        await asyncio.wait_for(enough.wait(), 120)
    finally:
        await c.shutdown()
    print("done", len(got), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def _lines(proc: asyncio.subprocess.Process, out: list[str]) -> None:
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        out.append(line.decode().strip())


async def _route(nsp: RawPeer) -> dict[str, str]:
    r = await nsp.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    if r.code != ResponseCode.SUCCESS:
        return {}
    route = orjson.loads(r.body)
    return {str(k): v for k, v in route["brokerDatas"][0]["brokerAddrs"].items()}


async def _spawn(kind: str, tmp_path: Path, namesrv: str, group: str) -> asyncio.subprocess.Process:
    if kind == "java":
        cp = await compile_java(tmp_path, "SlaveReader", JAVA)
        return await spawn_java(cp, "SlaveReader", namesrv, TOPIC, group, str(2 * N), home=tmp_path)
    script = tmp_path / "slave_reader.py"
    script.write_text(PYTHON)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        namesrv,
        TOPIC,
        group,
        str(2 * N),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            "java",
            marks=pytest.mark.skipif(
                shutil.which("javac") is None or not ROCKETMQ_JARS,
                reason="needs javac and the RocketMQ 4.9.8 jars (shared/apache-rocketmq)",
            ),
        ),
        "python",
    ],
)
async def test_consumer_keeps_consuming_from_the_slave_after_kill9_of_the_master(
    tmp_path, kind: str
) -> None:
    ns = NamesrvProcess(tmp_path / "ns")
    await ns.start()
    common = ("--namesrv", ns.address, "--register-period", "1", "--broker-name", "bk")
    m = BrokerProcess(tmp_path / "m", *common, "--ha-listen-port", str(free_port()))
    s = BrokerProcess(
        tmp_path / "s", *common, "--broker-role", "SLAVE", "--slave-sync-interval", "0.5"
    )
    await m.start()
    await s.start()
    mp = await RawPeer.connect(m.address)
    sp = await RawPeer.connect(s.address)
    nsp = await RawPeer.connect(ns.address)
    group = f"SlaveReadCG-{kind}"
    proc = None
    reader = None
    lines: list[str] = []
    try:
        for i in range(N):
            r = await send(mp, TOPIC, f"a{i}".encode(), queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark

        async def both() -> bool:
            return await _route(nsp) == {"0": m.address, "1": s.address}

        await wait_for(both, timeout=30, what="the route lists the master (0) and slave (1)")
        proc = await _spawn(kind, tmp_path, ns.address, group)
        reader = asyncio.ensure_future(_lines(proc, lines))

        async def first() -> bool:
            return sum(x.startswith("consumed a") for x in lines) >= N

        try:
            await wait_for(first, timeout=90, what="the first batch consumed from the master")
        except AssertionError:
            if proc.returncode is None:
                proc.kill()
            err = (await proc.stderr.read()).decode()[-3000:] if proc.stderr else ""
            raise AssertionError((lines, err)) from None
        os.kill(proc.pid, signal.SIGSTOP)
        for i in range(N):
            r = await send(mp, TOPIC, f"b{i}".encode(), queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, what="the second batch replicated")
        m.kill()

        async def slave_only() -> bool:
            return await _route(nsp) == {"1": s.address}

        await wait_for(slave_only, timeout=30, what="the name server dropped the master")
        os.kill(proc.pid, signal.SIGCONT)
        await asyncio.wait_for(proc.wait(), 120)
        await reader
        err = (await proc.stderr.read()).decode()[-3000:] if proc.stderr else ""
        consumed = {x.split()[1] for x in lines if x.startswith("consumed ")}
        assert f"done {2 * N}" in lines, (lines, err)
        assert consumed == {f"a{i}" for i in range(N)} | {f"b{i}" for i in range(N)}
        # the offsets were committed on the slave (the master is gone)
        for q in range(4):
            r = await sp.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": TOPIC, "queueId": str(q)},
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert int(r.ext_fields["offset"]) == 2 * N // 4, (q, r.ext_fields)
    finally:
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            await proc.wait()
        if reader is not None:
            reader.cancel()
        for p in (mp, sp, nsp):
            await p.close()
        s.terminate()
        if m.proc is not None and m.proc.poll() is None:
            m.terminate()
        ns.proc.terminate()
        ns.proc.wait(20)


async def _slave_pulled(sp: RawPeer) -> int:
    r = await sp.call(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(orjson.loads(r.body)["table"]["msgGetTotalTodayNow"])


@pytest.mark.parametrize("slave_read", [True, False])
async def test_slave_read_enable_sends_a_lagging_consumer_to_the_slave(
    tmp_path, slave_read: bool
) -> None:
    # RocketMQ's slaveReadEnable with accessMessageInMemoryMaxRatio 0: every pull that
    # finds messages is "far behind", so the master suggests brokerId 1 and the bundled
    # consumer follows (PullAPIWrapper); off, every answer suggests 0 and the slave serves
    # no pull while the master is there
    from kairosmq.client import ConsumeFromWhere, ConsumeStatus, PushConsumer

    ns = NamesrvProcess(tmp_path / "ns")
    await ns.start()
    common = ("--namesrv", ns.address, "--register-period", "1", "--broker-name", "bk")
    flags = ("--slave-read-enable", "--access-message-in-memory-max-ratio", "0")
    read = flags if slave_read else ()
    m = BrokerProcess(tmp_path / "m", *common, *read, "--ha-listen-port", str(free_port()))
    s = BrokerProcess(
        tmp_path / "s", *common, *read, "--broker-role", "SLAVE", "--slave-sync-interval", "0.5"
    )
    await m.start()
    await s.start()
    mp = await RawPeer.connect(m.address)
    sp = await RawPeer.connect(s.address)
    nsp = await RawPeer.connect(ns.address)
    got: set[str] = set()
    c = None
    try:
        for i in range(4 * N):
            r = await send(mp, TOPIC, f"c{i}".encode(), queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark

        async def ready() -> bool:
            same = log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")
            return same and await _route(nsp) == {"0": m.address, "1": s.address}

        await wait_for(ready, timeout=30, what="replicated and routed to brokerId 0 and 1")

        async def listener(msgs, _ctx):  # type: ignore[no-untyped-def]
            got.update(x.body.decode() for x in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer(
            "SlaveReadEnableCG",
            ns.address,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            pull_batch_size=2,
        )
        c.subscribe(TOPIC, "*")
        c.register_listener(listener)
        await c.start()

        async def all_consumed() -> bool:
            return got == {f"c{i}" for i in range(4 * N)}

        await wait_for(all_consumed, timeout=60, what="every message consumed")
        pulled = await _slave_pulled(sp)
        if slave_read:
            assert pulled > 0, "the consumer followed suggestWhichBrokerId 1 to the slave"
        else:
            assert pulled == 0, "no suggestion: the consumer reads from the master"
    finally:
        if c is not None:
            await c.shutdown()
        for p in (mp, sp, nsp):
            await p.close()
        s.terminate()
        m.terminate()
        ns.proc.terminate()
        ns.proc.wait(20)
