"""Apache RocketMQ 4.9.8's ``batch/SplitBatchProducer`` example is accepted (issue 29).

The example (rocketmq-example 4.9.8) makes 100,000 messages ``new Message("BatchTest",
"Tag", "OrderID" + i, ("Hello world " + i).getBytes())`` and splits them with its
``ListSplitter`` (1,000,000 bytes by its own size estimate); the first batch has 13,275
messages (1.46 MiB encoded). Apache accepts it; kairosmq refused it with ``CODE 13 the
batch has 13275 messages, the limit is 4096 (max_batch_items)``. A limit must never refuse
what Apache accepts from a stock client: batches are bounded by bytes (4 MiB), and a big
one is stored over several loop turns, so other connections are answered meanwhile.

Against a real broker process: that batch sent on the wire as the Java client encodes it,
every message pulled back with its key, tag and body, a small send on another connection
answered before the batch's own answer, then kill -9 and restart with nothing acked lost.
And the stock Java client itself (the example's code, 30,000 messages: batches of 13,275,
12,987 and 3,738), skipped with the reason when ``javac`` or the 4.9.8 jars are missing.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.properties import encode_properties

from tests.helpers import ROCKETMQ_JARS, compile_java, java_done, send_ext, spawn_java
from tests.hostile.harness import Acked, describe, drain, now_ms, verify_after_kill9

pytestmark = pytest.mark.slow

TOPIC, FIRST_BATCH = "BatchTest", 13_275


def split_sizes(total: int, limit: int = 1000 * 1000) -> list[int]:
    """The example's ListSplitter: topic + body + property keys and values + 20 per
    message (the properties of ``new Message(topic, "Tag", keys, body)``: TAGS, KEYS, WAIT)."""
    sizes, current, n = [], 0, 0
    for i in range(total):
        size = (
            len(TOPIC)
            + len(f"Hello world {i}")
            + len("TAGS")
            + len("Tag")
            + len("KEYS")
            + len(f"OrderID{i}")
            + len("WAIT")
            + len("true")
            + 20
        )
        if current + size > limit:
            sizes.append(n)
            current, n = 0, 0
        current += size
        n += 1
    return sizes + [n]


def test_the_example_splitter_makes_a_13275_message_batch() -> None:
    assert split_sizes(30_000) == [FIRST_BATCH, 12_987, 3_738]


async def test_split_batch_producer_batch_accepted_and_served(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    other = await hb.connect()
    await hb.setup_bystander(peer)
    sent = now_ms()
    items, keys = [], []
    for i in range(FIRST_BATCH):  # what DefaultMQProducer.batch() encodes (UNIQ_KEY added)
        key = f"SPLIT{i:06d}"
        keys.append(key)
        items.append(
            BatchItem(
                f"Hello world {i}".encode(),
                0,
                encode_properties(
                    {"KEYS": f"OrderID{i}", "TAGS": "Tag", "WAIT": "true", "UNIQ_KEY": key}
                ),
            )
        )
    body = encode_batch(items)
    assert len(body) < 4 * 1024 * 1024
    ext = send_ext(TOPIC, {"WAIT": "true"}, queue_id=1, a="BatchProducerGroupName", batch="true")
    batch = asyncio.ensure_future(peer.call(RequestCode.SEND_BATCH_MESSAGE, ext, body, timeout=120))
    await asyncio.sleep(0.05)  # the batch is being stored now
    t0 = time.monotonic()
    small = await other.call(
        RequestCode.SEND_MESSAGE_V2, send_ext("SmallMeanwhile", {"UNIQ_KEY": "SMALL1"}), b"small"
    )
    small_took = time.monotonic() - t0
    assert small.code == ResponseCode.SUCCESS, describe(small)
    assert not batch.done(), "the batch was answered before a send made after it"
    r = await batch
    assert r.code == ResponseCode.SUCCESS, describe(r)
    print(
        f"a send on another connection answered in {small_took * 1e3:.0f} ms while the "
        f"{FIRST_BATCH}-message batch was stored"
    )
    hb.ledger.acked["SMALL1"] = Acked("SMALL1", "SmallMeanwhile", 0, b"small", 0, sent)
    ids = r.ext_fields["msgId"].split(",")
    assert len(ids) == FIRST_BATCH and len(set(ids)) == FIRST_BATCH
    offsets = [decode_offset_msg_id(x)[2] for x in ids]
    assert offsets == sorted(offsets)
    for i, key in enumerate(keys):
        hb.ledger.acked[key] = Acked(key, TOPIC, 1, f"Hello world {i}".encode(), 0, sent)
    served = [m for m in await drain(peer, TOPIC) if m.properties.get("UNIQ_KEY") in keys]
    assert len(served) == FIRST_BATCH
    assert [m.queue_offset for m in served] == list(range(FIRST_BATCH))  # nothing else there
    for i, m in enumerate(served):
        assert m.body == f"Hello world {i}".encode() and m.queue_id == 1
        assert m.properties["KEYS"] == f"OrderID{i}" and m.properties["TAGS"] == "Tag"
    await verify_after_kill9(hb)


SPLIT_JAVA = r"""
import java.util.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.Message;

/** rocketmq-example 4.9.8 batch/SplitBatchProducer, with the message count and the name
 *  server as arguments and one line printed per batch. */
public class SplitBatch {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("BatchProducerGroupName");
        producer.setNamesrvAddr(args[0]);
        producer.start();
        String topic = "BatchTest";
        int total = Integer.parseInt(args[1]);
        List<Message> messages = new ArrayList<>(total);
        for (int i = 0; i < total; i++) {
            messages.add(new Message(topic, "Tag", "OrderID" + i, ("Hello world " + i).getBytes()));
        }
        ListSplitter splitter = new ListSplitter(messages);
        while (splitter.hasNext()) {
            List<Message> listItem = splitter.next();
            SendResult r = producer.send(listItem);
            System.out.println("sent " + listItem.size() + " " + r.getSendStatus() + " "
                + r.getMessageQueue().getQueueId() + " " + r.getQueueOffset());
        }
        producer.shutdown();
        System.out.println("done");
    }
}

class ListSplitter implements Iterator<List<Message>> {
    private int sizeLimit = 1000 * 1000;
    private final List<Message> messages;
    private int currIndex;

    public ListSplitter(List<Message> messages) {
        this.messages = messages;
    }

    @Override
    public boolean hasNext() {
        return currIndex < messages.size();
    }

    @Override
    public List<Message> next() {
        int nextIndex = currIndex;
        int totalSize = 0;
        for (; nextIndex < messages.size(); nextIndex++) {
            Message message = messages.get(nextIndex);
            int tmpSize = message.getTopic().length() + message.getBody().length;
            Map<String, String> properties = message.getProperties();
            for (Map.Entry<String, String> entry : properties.entrySet()) {
                tmpSize += entry.getKey().length() + entry.getValue().length();
            }
            tmpSize = tmpSize + 20; //for log overhead
            if (tmpSize > sizeLimit) {
                if (nextIndex - currIndex == 0) {
                    nextIndex++;
                }
                break;
            }
            if (tmpSize + totalSize > sizeLimit) {
                break;
            } else {
                totalSize += tmpSize;
            }
        }
        List<Message> subList = messages.subList(currIndex, nextIndex);
        currIndex = nextIndex;
        return subList;
    }

    @Override
    public void remove() {
        throw new UnsupportedOperationException("Not allowed to remove");
    }
}
"""


@pytest.mark.skipif(
    shutil.which("javac") is None or not ROCKETMQ_JARS,
    reason="needs javac and the RocketMQ 4.9.8 jars (client inside)",
)
async def test_stock_java_split_batch_producer(hostile, tmp_path: Path) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    total = 30_000
    cp = await compile_java(tmp_path, "SplitBatch", SPLIT_JAVA)
    sent = now_ms()
    proc = await spawn_java(
        cp, "SplitBatch", f"127.0.0.1:{hb.proc.namesrv_port}", str(total), home=tmp_path
    )
    lines, diag = await java_done(proc, 240)
    batches = [line.split() for line in lines if line.startswith("sent ")]
    assert [int(b[1]) for b in batches] == split_sizes(total), diag
    assert all(b[2] == "SEND_OK" for b in batches), diag
    served = await drain(peer, TOPIC)
    bodies = sorted(m.body for m in served)
    assert bodies == sorted(f"Hello world {i}".encode() for i in range(total))
    for m in served:
        i = int(m.body.split()[-1])
        assert m.properties["KEYS"] == f"OrderID{i}" and m.properties["TAGS"] == "Tag"
        key = m.properties["UNIQ_KEY"]
        hb.ledger.acked[key] = Acked(key, TOPIC, m.queue_id, m.body, 0, sent)
    await verify_after_kill9(hb)
