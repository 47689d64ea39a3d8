"""SQL92 filtering end to end with clients at a real in-process broker: the bundled
PushConsumer with ``MessageSelector.sql``/``.tag``, ali-ons 3.12.0 and the stock Java
client 4.9.8 (``MessageSelector.bySql``). Raw-frame CHECK_CLIENT_CONFIG and filtered
pulls are in test_sql92_filter.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kairosmq.client import (
    ConsumeFromWhere,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
)
from kairosmq.client.errors import BrokerSystemError, SubscriptionError
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.server.broker import Broker

from tests.helpers import (
    ROCKETMQ_JARS,
    Collector,
    compile_java,
    java_done,
    spawn_java,
    stays_false,
    wait_until,
)
from tests.stock.alions_install import ensure_alions
from tests.wire import RawPeer


@pytest_asyncio.fixture
async def kbroker(broker_factory: Any) -> Broker:
    return await broker_factory(log_messages=False)


# ---------------------------------------------------------------- bundled client


def consumer(broker: Broker, group: str, topic: str, sel: Any, got: Collector) -> PushConsumer:
    c = PushConsumer(
        group,
        broker.namesrv_address,
        rebalance_interval=0.5,
        pull_time_delay_millis_when_exception=50,
        persist_consumer_offset_interval=0.2,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    c.subscribe(topic, sel)
    c.register_listener(got)
    return c


async def test_push_consumer_with_sql_selector_end_to_end(kbroker: Broker) -> None:
    got = Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        for i in range(40):
            props = {"a": str(i), "region": "eu" if i % 4 == 0 else "us"}
            await p.send(Message("SqlT", b"%d" % i, tags="TagA", properties=props))
        c = consumer(kbroker, "CG-sql", "SqlT", MessageSelector.sql("a > 5 AND region = 'eu'"), got)
        await c.start()
        try:
            await got.wait_for(8, timeout=10)
            assert await stays_false(lambda: len(got.msgs) > 8, 0.5)
            # offsets move past the filtered-out messages on every queue
            cfg = kbroker.topics.get("SqlT")
            assert cfg is not None
            queues = range(cfg.read_queue_nums)

            def committed() -> bool:
                return all(
                    kbroker.offsets.query("CG-sql", "SqlT", q)
                    == kbroker.store.max_offset("SqlT", q)
                    for q in queues
                )

            await wait_until(committed, 10)
            info = kbroker.clients.group_info("CG-sql")  # the heartbeat carried SQL92
            assert info is not None
            sub = info.subscriptions["SqlT"]
            assert (sub.expression_type, sub.sub_string) == ("SQL92", "a > 5 AND region = 'eu'")
        finally:
            await c.shutdown()
    assert sorted(int(m.body) for m in got.msgs) == [8, 12, 16, 20, 24, 28, 32, 36]
    assert all(m.properties["region"] == "eu" for m in got.msgs)


async def test_push_consumer_tag_selector_and_bad_sql(kbroker: Broker) -> None:
    got = Collector()
    async with Producer("PG", kbroker.namesrv_address) as p:
        for i in range(9):
            await p.send(Message("SelT", b"%d" % i, tags=["A", "B", "C"][i % 3]))
        c = consumer(kbroker, "CG-tag", "SelT", MessageSelector.tag("A || C"), got)
        await c.start()
        try:
            await got.wait_for(6)
        finally:
            await c.shutdown()
        assert sorted(m.tags for m in got.msgs) == ["A"] * 3 + ["C"] * 3
        bad = consumer(kbroker, "CG-bad", "SelT", MessageSelector.sql("a >> 5"), Collector())
        with pytest.raises(SubscriptionError, match="column 4"):
            await bad.start()


async def test_push_consumer_sql_against_a_broker_with_filtering_off(broker_factory: Any) -> None:
    b = await broker_factory(enable_property_filter=False, log_messages=False)
    async with Producer("PG", b.namesrv_address) as p:
        await p.send(Message("OffT", b"x", properties={"a": "9"}))
    c = consumer(b, "CG-off", "OffT", MessageSelector.sql("a > 5"), Collector())
    with pytest.raises(BrokerSystemError, match="SQL92"):
        await c.start()


# ---------------------------------------------------------------- ali-ons 3.12.0

ALIONS_SQL_JS = r"""
'use strict';
const { Producer, Consumer, Message } = require('ali-ons');
const cfg = JSON.parse(process.argv[2]);
const httpclient = { async request() { throw new Error('nameSrv is set'); } };
const common = { httpclient, nameSrv: cfg.nameSrv, rebalanceInterval: 1000,
  persistConsumerOffsetInterval: 1000 };
const out = o => process.stdout.write(JSON.stringify(o) + '\n');
async function main() {
  const got = [];
  const consumer = new Consumer(Object.assign({ consumerGroup: 'CID_SQL' }, common));
  consumer.on('error', err => out({ event: 'error', message: err.message }));
  consumer.subscribe(cfg.topic, { expressionType: 'SQL92', subString: cfg.sql }, async msg => {
    got.push(msg.body.toString());
    out({ event: 'consumed', body: msg.body.toString() });
  });
  await consumer.ready();
  out({ event: 'consumer.ready' });
  const producer = new Producer(Object.assign({ producerGroup: 'PID_SQL' }, common));
  await producer.ready();
  for (let i = 0; i < 12; i++) {
    const msg = new Message(cfg.topic, 'TagA', 'm' + i);
    msg.properties.a = String(i);
    msg.properties.region = i % 2 ? 'us' : 'eu';
    await producer.send(msg);
  }
  out({ event: 'sent' });
  const end = Date.now() + cfg.timeoutMs;
  while (got.length < cfg.expect && Date.now() < end) await new Promise(r => setTimeout(r, 50));
  await new Promise(r => setTimeout(r, 1000));  // anything extra would arrive now
  await consumer.close();
  await producer.close();
  out({ event: 'done' });
  process.exit(0);  // ali-ons leaves timers behind
}
main().catch(err => { out({ event: 'fatal', message: err.message }); process.exit(1); });
"""


@pytest.mark.node
async def test_alions_sql92_subscription(kbroker: Broker, tmp_path: Path) -> None:
    """ali-ons 3.12.0 subscribes with ``{expressionType: 'SQL92', subString}``: it sends
    the type in heartbeats and pull headers (no CHECK_CLIENT_CONFIG)."""
    peer = await RawPeer.connect(kbroker.address)  # ali-ons cannot auto-create a topic
    r = await peer.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": "AlionsSql",
            "defaultTopic": "TBW102",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "false",
        },
    )
    await peer.close()
    assert r.code == ResponseCode.SUCCESS
    modules = await ensure_alions()  # npm ci from the committed lockfile (skips without node)
    script = tmp_path / "sql.js"
    script.write_text(ALIONS_SQL_JS)
    cfg = {
        "nameSrv": kbroker.namesrv_address,
        "topic": "AlionsSql",
        "sql": "a >= 4 AND region = 'eu'",
        "expect": 4,
        "timeoutMs": 20000,
    }
    proc = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        str(script),
        json.dumps(cfg),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_PATH": str(modules), "NODE_NO_WARNINGS": "1"},
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        stdout, stderr = await proc.communicate()
    lines = [json.loads(x) for x in stdout.decode().splitlines() if x.startswith("{")]
    assert proc.returncode == 0 and lines and lines[-1]["event"] == "done", (lines, stderr)
    consumed = sorted(x["body"] for x in lines if x["event"] == "consumed")
    assert consumed == ["m10", "m4", "m6", "m8"]
    # the only errors: "no offset" for a new group (ali-ons reports and then starts at 0)
    assert all("no offset" in x["message"] for x in lines if x["event"] == "error"), lines


# ---------------------------------------------------------------- stock Java client 4.9.8

JAVA_JARS = ROCKETMQ_JARS
STOCK_SQL_JAVA = r"""
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class StockSql {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], sql = a[2], badSql = a[3];
        int n = Integer.parseInt(a[4]), expect = Integer.parseInt(a[5]);
        DefaultMQProducer p = new DefaultMQProducer("PG_SQL");
        p.setNamesrvAddr(ns);
        p.start();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "TagA", ("m" + i).getBytes("UTF-8"));
            m.putUserProperty("a", String.valueOf(i));
            m.putUserProperty("region", i % 2 == 0 ? "eu" : "us");
            p.send(m);
        }
        System.out.println("sent " + n);
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("CG_SQL");
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, MessageSelector.bySql(sql));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody()));
                System.out.println("consumed " + new String(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        System.out.println("started");
        long end = System.currentTimeMillis() + 30000;
        while (got.size() < expect && System.currentTimeMillis() < end) Thread.sleep(50);
        Thread.sleep(1500);
        c.shutdown();
        DefaultMQPushConsumer bad = new DefaultMQPushConsumer("CG_SQL_BAD");
        bad.setNamesrvAddr(ns);
        bad.subscribe(topic, MessageSelector.bySql(badSql));
        bad.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            bad.start();
            System.out.println("bad-started");
        } catch (Exception e) {
            System.out.println("bad-refused " + e.getMessage().replace('\n', ' '));
        }
        bad.shutdown();
        p.shutdown();
        System.out.println("done");
        System.exit(0);
    }
}
"""


@pytest.mark.slow  # javac and a stock Java consumer
@pytest.mark.skipif(
    shutil.which("javac") is None or not JAVA_JARS,
    reason="needs javac and the RocketMQ 4.9.8 jars (client inside)",
)
async def test_stock_java_client_message_selector_by_sql(kbroker: Broker, tmp_path: Path) -> None:
    """RocketMQ 4.9.8's own DefaultMQPushConsumer with ``MessageSelector.bySql``:
    CHECK_CLIENT_CONFIG at start, the SQL92 subscription in heartbeats, pulls without the
    subscription flag (the broker uses the heartbeat's); a bad expression fails start()
    with the broker's code 23 and the position."""
    cp = await compile_java(tmp_path, "StockSql", STOCK_SQL_JAVA)
    proc = await spawn_java(
        cp,
        "StockSql",
        kbroker.namesrv_address,
        "JSqlT",
        "a > 10 AND region = 'eu'",
        "a >> 1",
        "30",
        "9",
        home=tmp_path,
    )
    lines, _diag = await java_done(proc, 120)
    got = sorted(int(x.split()[1][1:]) for x in lines if x.startswith("consumed "))
    assert got == list(range(12, 30, 2))
    refused = [x for x in lines if x.startswith("bad-refused")]
    assert refused and "CODE: 23" in refused[0] and "column 4" in refused[0], lines
