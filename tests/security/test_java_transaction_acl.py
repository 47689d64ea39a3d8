"""Apache RocketMQ 4.9.8's own Java TransactionMQProducer, unmodified, with
``AclClientRPCHook`` and a NON-admin account holding PUB on its topic only, against a
broker started with ``--acl`` (issue 29, row 2): END_TRANSACTION now needs PUB on the half
message's real topic, and a stock transactional producer still commits, rolls back and
answers the broker's check-back (its one-way END_TRANSACTION from the check, signed by
the same hook) without a single ACL refusal. Skipped without ``javac`` or the jars."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.server.broker import Broker

from tests.helpers import ROCKETMQ_JARS, compile_java, java_done, spawn_java, wait_until
from tests.security.acl_setup import ADMIN, AUDIT_ACL_FILE, SignedPeer
from tests.transaction.txpeer import FAST, messages

pytestmark = [
    pytest.mark.skipif(
        shutil.which("javac") is None or not ROCKETMQ_JARS,
        reason="needs javac and the RocketMQ 4.9.8 jars (client inside)",
    ),
    pytest.mark.slow,  # javac and a stock Java producer
]

ACL = (
    AUDIT_ACL_FILE
    + """
  - accessKey: java_tx_ak
    secretKey: java_tx_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [JavaTxAcl=PUB]
"""
)
STOCK_TX_ACL_JAVA = r"""
import java.util.concurrent.*;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class StockTxAcl {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1];
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer p = new TransactionMQProducer("JavaTxAclPG",
            new AclClientRPCHook(new SessionCredentials(a[2], a[3])));
        p.setNamesrvAddr(ns);
        p.setHeartbeatBrokerInterval(1000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String k = msg.getKeys();
                if (k.equals("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (k.equals("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("check " + msg.getKeys());
                checked.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        for (String k : new String[] {"commit", "rollback", "unknown"}) {
            Message m = new Message(topic, "TagT", k, ("body-" + k).getBytes("UTF-8"));
            TransactionSendResult r = p.sendMessageInTransaction(m, null);
            System.out.println("sent " + k + " " + r.getSendStatus() + " "
                + r.getLocalTransactionState());
        }
        boolean ok = checked.await(60, TimeUnit.SECONDS);
        Thread.sleep(500);  // the one-way END_TRANSACTION leaves
        System.out.println(ok ? "done" : "no-check");
        p.shutdown();
        System.exit(0);
    }
}
"""


async def test_stock_java_transaction_producer_with_a_pub_only_account(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    broker = await broker_factory(acl_file=path, **FAST)
    cp = await compile_java(tmp_path, "StockTxAcl", STOCK_TX_ACL_JAVA)
    proc = await spawn_java(
        cp,
        "StockTxAcl",
        broker.namesrv_address,
        "JavaTxAcl",
        "java_tx_ak",
        "java_tx_sk",
        home=tmp_path,
    )
    lines, diag = await java_done(proc, 150)
    sent = {x.split()[1]: x.split()[2:] for x in lines if x.startswith("sent ")}
    assert sent == {
        "commit": ["SEND_OK", "COMMIT_MESSAGE"],
        "rollback": ["SEND_OK", "ROLLBACK_MESSAGE"],
        "unknown": ["SEND_OK", "UNKNOW"],
    }, diag
    assert [x for x in lines if x.startswith("check ")] == ["check unknown"], diag
    await wait_until(lambda: not broker.transactions.pending, 10)
    assert broker.transactions.counters["committed"] == 2
    assert broker.transactions.counters["rolled_back"] == 1
    assert broker.acl is not None and broker.acl.denied == {}, broker.acl.denied
    reader = await SignedPeer.open(broker.address, ADMIN)
    got: list[str] = []
    try:
        for q in range(4):
            got += [m.keys for m in await messages(reader, "JavaTxAcl", q)]
    finally:
        await reader.close()
    assert sorted(got) == ["commit", "unknown"], diag
