"""Event-loop stall of one big SEND_BATCH_MESSAGE or HEART_BEAT (the loop's other work
waits behind it).

A broker runs in this process (defaults, message logs off); one ``Connection`` is fed a
single batch frame of each shape below while a probe task sleeps 1 ms in a loop and
records how late each wake-up is. Printed per shape: the batch's bytes and messages, the
time until its answer was queued, and the probe's worst and p99 lateness (the longest
the loop was blocked: a timer firing then is that late). Shapes, all under RocketMQ's 4 MiB:

* ``split``: Apache RocketMQ 4.9.8's ``batch/SplitBatchProducer`` first batch, 13,275
  messages (topic BatchTest, tag Tag, keys OrderID<i>, body "Hello world <i>").
* ``java-min``: the smallest messages a stock Java client batches (1-byte body, WAIT and
  UNIQ_KEY properties): 55,000 of them.
* ``bare``: 1-byte bodies and no properties (another client could send them): 180,000.
* ``heartbeat``: a HEART_BEAT of 5,000 producer and 5,000 consumer groups (first time:
  5,000 retry topics created), as tests/hostile/test_findings.py sends it.

    python bench/bench_batch_stall.py [--shapes split,java-min,bare,heartbeat]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import request
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig
from kairosmq.server.remoting.transport import Connection


class Sink:
    """Stands in for the socket: takes the answers."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def split_batch(n: int) -> list[BatchItem]:
    return [
        BatchItem(
            f"Hello world {i}".encode(),
            0,
            encode_properties(
                {
                    "KEYS": f"OrderID{i}",
                    "TAGS": "Tag",
                    "WAIT": "true",
                    "UNIQ_KEY": f"7F000001{i:024X}",
                }
            ),
        )
        for i in range(n)
    ]


def java_min(n: int) -> list[BatchItem]:
    return [
        BatchItem(b"x", 0, encode_properties({"WAIT": "true", "UNIQ_KEY": f"7F000001{i:024X}"}))
        for i in range(n)
    ]


def bare(n: int) -> list[BatchItem]:
    return [BatchItem(b"x", 0, "") for _ in range(n)]


SHAPES = {"split": (split_batch, 13_275), "java-min": (java_min, 55_000), "bare": (bare, 180_000)}


def heartbeat_frame(groups: int) -> tuple[bytes, int]:
    body = orjson.dumps(
        {
            "clientID": "127.0.0.1@bench",
            "producerDataSet": [{"groupName": f"P{i}"} for i in range(groups)],
            "consumerDataSet": [
                {
                    "groupName": f"Flood{i}",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": f"FloodTopic{i}",
                            "subString": "*",
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": 1,
                            "expressionType": "TAG",
                            "classFilterMode": False,
                        }
                    ],
                }
                for i in range(groups)
            ],
        }
    )
    return encode_command(request(RequestCode.HEART_BEAT, {}, body=body)), len(body)


async def measure(conn: Connection, sink: Sink, name: str) -> str:
    if name == "heartbeat":
        n = 5000
        frame, size = heartbeat_frame(n)
        what = "groups  "
    else:
        make, n = SHAPES[name]
        body = encode_batch(make(n))
        size = len(body)
        assert size <= 4 * 1024 * 1024, size
        ext = {
            "a": "BatchPG",
            "b": "BatchTest",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": "",
            "j": "0",
            "k": "false",
            "m": "true",
        }
        frame = encode_command(request(RequestCode.SEND_BATCH_MESSAGE, ext, body=body))
        what = "messages"
    lags: list[float] = []
    before = sink.bytes
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    conn.data_received(frame)
    while sink.bytes == before:
        await asyncio.sleep(0)
    took = time.perf_counter() - t0
    done.set()
    await task
    lags.sort()
    return (
        f"{name:9s} {n:7d} {what} {size / 2**20:4.2f} MiB: answered after "
        f"{took * 1e3:6.0f} ms; loop blocked at most {lags[-1] * 1e3:5.1f} ms "
        f"(p99 {lags[int(len(lags) * 0.99)] * 1e3:4.1f} ms, {len(lags)} probe wake-ups)"
    )


async def main(shapes: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="kq-batch-") as d:
        cfg = BrokerConfig(
            data_dir=Path(d),
            port=0,
            namesrv_port=0,
            vip_channel=False,
            commitlog_segment_size=256 << 20,
            log_messages=False,
        )
        broker = Broker(cfg)
        await broker.start()
        conn = Connection(broker.server, broker.broker_handlers, "bench")
        sink = Sink()
        conn.connection_made(sink)  # type: ignore[arg-type]
        gc.freeze()
        gc.set_threshold(20_000, 50, 100)  # as `kairosmq broker`
        try:
            for name in shapes:
                print(await measure(conn, sink, name), flush=True)
        finally:
            await broker.stop("bench")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="split,java-min,bare,heartbeat")
    uvloop.run(main(ap.parse_args().shapes.split(",")))
