"""RocketMQ 4.9.8's own Java DefaultMQPushConsumer behind the broker -> client requests:
GET_CONSUMER_RUNNING_INFO (307) relayed to it and its fastjson ``ConsumerRunningInfo``
relayed back, and INVOKE_BROKER_TO_RESET_OFFSET (222) making it re-consume from the reset
offsets (its ``MQClientInstance.resetOffset``: it waits 10 s, commits, and its next rebalance
pulls again). It commits its offsets every 250 ms (its own timer: every 5 s, the first after
10 s).

Skipped, with the reason shown, without ``javac`` or the RocketMQ jars.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from kairosmq.protocol.bodies import decode_mq_table
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode

from tests.helpers import ROCKETMQ_JARS, compile_java, send, spawn_java, wait_until
from tests.wire import RawPeer

JARS = ROCKETMQ_JARS
pytestmark = [
    pytest.mark.skipif(
        shutil.which("javac") is None or not JARS, reason="needs javac and the RocketMQ 4.9.8 jars"
    ),
    pytest.mark.slow,  # javac and a stock Java consumer
]
N = 6
JAVA = r"""
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class JavaCallbacks {
    public static void main(String[] a) throws Exception {
        int expect = Integer.parseInt(a[2]);
        AtomicInteger got = new AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("JavaCbCG");
        c.setNamesrvAddr(a[0]);
        c.setInstanceName("java-callbacks");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(a[1], "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.incrementAndGet();
                System.out.println("consumed " + new String(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        System.out.println("started " + c.buildMQClientId());
        long end = System.currentTimeMillis() + 100000;
        while (got.get() < expect && System.currentTimeMillis() < end) {
            Thread.sleep(250);
            // what the client's own timer does every 5 s, after its first 10 s
            c.getDefaultMQPushConsumerImpl().persistConsumerOffset();
        }
        c.shutdown();
        System.out.println("done " + got.get());
        System.exit(0);
    }
}
"""


async def _lines(proc: asyncio.subprocess.Process, out: list[str]) -> None:
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        out.append(line.decode().strip())


async def test_java_consumer_answers_running_info_and_resets(broker, tmp_path: Path) -> None:
    cp = await compile_java(tmp_path, "JavaCallbacks", JAVA)
    peer = await RawPeer.connect(broker.address)
    for i in range(N):
        assert (await send(peer, "JavaCbTopic", f"m{i}".encode(), queue_id=i % 4)).code == 0
    proc = await spawn_java(
        cp, "JavaCallbacks", broker.namesrv_address, "JavaCbTopic", str(2 * N), home=tmp_path
    )
    lines: list[str] = []
    reader = asyncio.ensure_future(_lines(proc, lines))
    try:
        await wait_until(
            lambda: sum(x.startswith("consumed ") for x in lines) >= N,
            60,
            what="the Java consumer consumed the messages",
        )
        (client_id,) = [x.split()[1] for x in lines if x.startswith("started ")]
        await wait_until(
            lambda: all(
                broker.offsets.query("JavaCbCG", "JavaCbTopic", q)
                == broker.store.max_offset("JavaCbTopic", q)
                for q in range(4)
            ),
            30,
            what="offsets committed",
        )
        r = await peer.call(
            R.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "JavaCbCG", "clientId": client_id, "jstackEnable": "false"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        mq_table, info = decode_mq_table(r.body, "mqTable")
        offsets = {
            mq.queue_id: v["commitOffset"]
            for mq, v in mq_table.items()
            if mq.topic == "JavaCbTopic"
        }
        assert offsets == {q: broker.store.max_offset("JavaCbTopic", q) for q in range(4)}
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert {s["topic"] for s in info["subscriptionSet"]} == {"JavaCbTopic", "%RETRY%JavaCbCG"}
        r = await peer.call(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "JavaCbCG"})
        assert b'"language":"JAVA"' in r.body
        r = await peer.call(
            R.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": "JavaCbTopic", "group": "JavaCbCG", "timestamp": "0", "isForce": "true"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        # Java waits 10 s, commits the reset offsets, and its next rebalance (<= 20 s) pulls
        await asyncio.wait_for(proc.wait(), 90)
        await reader
        consumed = [x.split()[1] for x in lines if x.startswith("consumed ")]
        assert f"done {2 * N}" in lines, lines
        assert sorted(consumed[N:]) == sorted(consumed[:N]) == [f"m{i}" for i in range(N)]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
        await peer.close()
