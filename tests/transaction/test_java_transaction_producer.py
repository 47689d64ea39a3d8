"""Apache RocketMQ 4.9.8's own Java TransactionMQProducer, unmodified, against kairosmq:
a committed, a rolled-back and an UNKNOW local transaction; the broker's check-back
reaches the Java TransactionListener.checkLocalTransaction, which commits. Skipped with
the reason when ``javac`` or the 4.9.8 jars are missing."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.server.broker import Broker

from tests.helpers import ROCKETMQ_JARS, compile_java, java_done, spawn_java, wait_until
from tests.transaction.txpeer import FAST, messages
from tests.wire import RawPeer

JARS = ROCKETMQ_JARS
pytestmark = [
    pytest.mark.skipif(
        shutil.which("javac") is None or not JARS,
        reason="needs javac and the RocketMQ 4.9.8 jars (client inside)",
    ),
    pytest.mark.slow,  # javac and a stock Java producer
]

STOCK_TX_JAVA = r"""
import java.util.concurrent.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class StockTx {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1];
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer p = new TransactionMQProducer("JavaTxPG");
        p.setNamesrvAddr(ns);
        p.setHeartbeatBrokerInterval(1000);  // register soon, so the check finds us
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String k = msg.getKeys();
                if (k.equals("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (k.equals("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("check " + msg.getKeys() + " " + msg.getTopic() + " "
                    + msg.getTransactionId());
                checked.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        for (String k : new String[] {"commit", "rollback", "unknown"}) {
            Message m = new Message(topic, "TagT", k, ("body-" + k).getBytes("UTF-8"));
            TransactionSendResult r = p.sendMessageInTransaction(m, null);
            System.out.println("sent " + k + " " + r.getSendStatus() + " "
                + r.getLocalTransactionState() + " " + r.getMsgId() + " "
                + r.getTransactionId());
        }
        boolean ok = checked.await(60, TimeUnit.SECONDS);
        Thread.sleep(500);  // the one-way END_TRANSACTION leaves
        System.out.println(ok ? "done" : "no-check");
        p.shutdown();
        System.exit(0);
    }
}
"""


async def test_stock_java_transaction_producer(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    broker = await broker_factory(**FAST)
    cp = await compile_java(tmp_path, "StockTx", STOCK_TX_JAVA)
    proc = await spawn_java(cp, "StockTx", broker.namesrv_address, "JavaTx", home=tmp_path)
    lines, diag = await java_done(proc, 150)
    sent = {x.split()[1]: x.split()[2:] for x in lines if x.startswith("sent ")}
    assert {k: v[:2] for k, v in sent.items()} == {
        "commit": ["SEND_OK", "COMMIT_MESSAGE"],
        "rollback": ["SEND_OK", "ROLLBACK_MESSAGE"],
        "unknown": ["SEND_OK", "UNKNOW"],
    }, diag
    # the check carried the real topic and the transaction id (the UNIQ_KEY = msgId)
    [check] = [x.split()[1:] for x in lines if x.startswith("check ")]
    assert check == ["unknown", "JavaTx", sent["unknown"][2]], diag
    await wait_until(lambda: not broker.transactions.pending, 10)
    peer = await RawPeer.connect(broker.address)
    got = {}
    for q in range(4):
        for m in await messages(peer, "JavaTx", q):
            got[m.keys] = (m.msg_id, m.body)
    await peer.close()
    assert got == {
        "commit": (sent["commit"][2], b"body-commit"),
        "unknown": (sent["unknown"][2], b"body-unknown"),
    }, diag
    assert broker.transactions.counters["committed"] == 2
    assert broker.transactions.counters["rolled_back"] == 1
