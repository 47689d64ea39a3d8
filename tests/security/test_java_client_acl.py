"""Apache RocketMQ 4.9.8's own Java DefaultMQProducer and DefaultMQPushConsumer, unmodified,
with ``AclClientRPCHook`` against a broker started with ``--acl``: sends, push consumption,
a RECONSUME_LATER send-back and its %RETRY% redelivery all pass; a producer with a wrong
secret is refused with RocketMQ's remark. Skipped without ``javac`` or the 4.9.8 jars."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.server.broker import Broker

from tests.helpers import ROCKETMQ_JARS, compile_java, java_done, spawn_java
from tests.security.acl_setup import ACL_FILE

JARS = ROCKETMQ_JARS
pytestmark = [
    pytest.mark.skipif(
        shutil.which("javac") is None or not JARS,
        reason="needs javac and the RocketMQ 4.9.8 jars (client inside)",
    ),
    pytest.mark.slow,  # javac and stock Java clients
]

ACL = (
    ACL_FILE
    + """
  - accessKey: java_app_ak
    secretKey: java_app_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [JavaOrders=PUB|SUB]
    groupPerms: [JavaCG=SUB]
"""
)
STOCK_ACL_JAVA = r"""
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class StockAcl {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], ak = a[2], sk = a[3];
        int n = Integer.parseInt(a[4]);
        AclClientRPCHook hook = new AclClientRPCHook(new SessionCredentials(ak, sk));
        DefaultMQProducer p = new DefaultMQProducer("JavaPG", hook);
        p.setNamesrvAddr(ns);
        p.start();
        for (int i = 0; i < n; i++) {
            p.send(new Message(topic, "TagA", ("m" + i).getBytes("UTF-8")));
        }
        System.out.println("sent " + n);
        Map<String, Integer> got = new ConcurrentHashMap<>();
        Set<String> failed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("JavaCG", hook,
            new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody());
                if (body.equals("m0") && failed.add(body)) {
                    System.out.println("failing " + body);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                got.put(body, m.getReconsumeTimes());
                System.out.println("consumed " + body + " " + m.getReconsumeTimes());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long end = System.currentTimeMillis() + 40000;
        while (got.size() < n && System.currentTimeMillis() < end) Thread.sleep(50);
        c.shutdown();
        p.shutdown();
        DefaultMQProducer bad = new DefaultMQProducer("JavaPGBad",
            new AclClientRPCHook(new SessionCredentials(ak, "wrong-secret")));
        bad.setNamesrvAddr(ns);
        bad.setSendMsgTimeout(2000);
        bad.start();
        try {
            bad.send(new Message(topic, "TagA", "evil".getBytes("UTF-8")));
            System.out.println("bad-sent");
        } catch (Exception e) {
            System.out.println("bad-refused " + String.valueOf(e.getMessage()).replace('\n', ' '));
        }
        bad.shutdown();
        System.out.println("done");
        System.exit(0);
    }
}
"""


async def test_stock_java_clients_with_acl_rpc_hook(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    acl = tmp_path / "acl.yml"
    acl.write_text(ACL)
    broker = await broker_factory(acl_file=acl, delay_levels="200ms 200ms 200ms 1s")
    cp = await compile_java(tmp_path, "StockAcl", STOCK_ACL_JAVA)
    proc = await spawn_java(
        cp,
        "StockAcl",
        broker.namesrv_address,
        "JavaOrders",
        "java_app_ak",
        "java_app_sk",
        "4",
        home=tmp_path,
    )
    lines, diag = await java_done(proc, 150)
    consumed = {x.split()[1]: int(x.split()[2]) for x in lines if x.startswith("consumed ")}
    assert consumed == {"m0": 1, "m1": 0, "m2": 0, "m3": 0}, diag  # m0 via %RETRY%JavaCG
    # the wrong secret: the name server refuses its route lookups (the Java producer then
    # reports "No route info"), nothing of it is stored
    [bad] = [x for x in lines if x.startswith("bad-")]
    assert bad.startswith("bad-refused "), diag
    assert sum(broker.store.max_offset("JavaOrders", q) for q in range(4)) == 4
    # every request of the right client verified: the refusals are the bad producer's
    assert set(broker.acl.denied) == {"signature"}, (broker.acl.denied, diag)
