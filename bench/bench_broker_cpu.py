"""Broker CPU µs per request on a warm path: sends and pulls through a real broker, no network.

The broker runs in this process with its defaults (message logs on, into a file sink; on
uvloop; the garbage collector off while timing, see below); one
``Connection`` is fed whole frames with ``data_received`` and its answers go to a transport
that only counts the bytes. Each figure is the best of several timed loops of process CPU
time, so it is the broker's own work per request, hot (warm caches, no socket syscalls, no
wake-ups): the floor under the end-to-end figures of ``profile_delayed.py``, and steady
enough on a loaded box to compare two trees (``PYTHONPATH``, as docs/performance.md says).

* ``delayed send``: SEND_MESSAGE_V2 with a JSON header and ``DELAY=1`` (1 KiB body): frame
  decode, the send handler, the put into the schedule topic, ``message.scheduled``, the
  answer and its outbox write (one loop turn per send);
* ``re-put``: the scheduler's drain of due messages (``ScheduleService._drain``: read,
  byte-patching re-put, ``message.delivered``), per message;
* ``pull``: PULL_MESSAGE of 1 message (JSON header) from the real topic: frame decode,
  the pull handler, the read, ``message.pulled``, the answer and its outbox write.

    .venv/bin/python bench/bench_broker_cpu.py [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig
from kairosmq.server.logs import close_sinks, configure_logging
from kairosmq.server.store import SCHEDULE_TOPIC
from kairosmq.server.transport import Connection

TOPIC, GROUP = "BenchTopic", "bench_group"


class CountingTransport:
    """Stands in for the socket: takes the answers, counts their bytes."""

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


def send_frame(i: int) -> bytes:
    props = encode_properties({"DELAY": "1", "UNIQ_KEY": f"7F0000010000{i:020X}",
                               "WAIT": "true"})
    ext = {"a": "bench_pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false",
           "m": "false"}
    return encode_command(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=i,
                                          ext_fields=ext, body=b"\xab" * 1024))


def pull_frame(i: int, queue_id: int, offset: int) -> bytes:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id),
           "queueOffset": str(offset), "maxMsgNums": "1", "sysFlag": "6",
           "commitOffset": "0", "suspendTimeoutMillis": "15000", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i,
                                          ext_fields=ext))


async def figures(data_dir: Path, n: int, repeat: int) -> dict[str, float]:
    configure_logging(json=True, log_dir=data_dir / "logs", stdout=False)
    broker = Broker(BrokerConfig(data_dir=data_dir / "store", port=0, namesrv_port=0,
                                 vip_channel=False))
    await broker.start()
    gc.freeze()  # keep the start-up objects out of the scans, as ``kairosmq broker`` does
    gc.disable()  # timed loops without collections (gc.collect() between them): the
    # broker's own setting (server/cli.py) collects every 20,000 allocations, which would
    # land in whichever loop happens to cross the line
    sched = broker.schedule
    await sched.stop()  # the drains are timed below, by hand
    try:
        conn = Connection(broker.server, broker.broker_handlers, "bench")
        conn.connection_made(CountingTransport())  # type: ignore[arg-type]
        best = {"delayed send": float("inf"), "re-put": float("inf"), "pull": float("inf")}
        sent = 0
        for _ in range(repeat):
            frames = [send_frame(sent + i) for i in range(n)]
            gc.collect()
            t0 = time.process_time()
            for f in frames:
                conn.data_received(f)
                await asyncio.sleep(0)  # the outbox tick: commit-log write, then the answer
            best["delayed send"] = min(best["delayed send"], (time.process_time() - t0) / n)
            sent += n
        await asyncio.sleep(1.1)  # level 1 is 1 s: everything sent above is due now
        cq = broker.store.find_queue(SCHEDULE_TOPIC, 0)
        assert cq is not None
        gc.collect()
        t0 = time.process_time()
        while sched.progress[1] < cq.max_offset:
            before = sched.progress[1]
            assert sched._drain(1, cq)
            assert sched.progress[1] > before
        await asyncio.sleep(0)
        best["re-put"] = (time.process_time() - t0) / sent
        per_queue = sent // 4
        for _ in range(repeat):
            count = min(n, per_queue)
            frames = [pull_frame(i, i % 4, (i // 4) % per_queue) for i in range(count)]
            gc.collect()
            t0 = time.process_time()
            for f in frames:
                conn.data_received(f)
                await asyncio.sleep(0)
            best["pull"] = min(best["pull"], (time.process_time() - t0) / count)
        return {k: v * 1e6 for k, v in best.items()}
    finally:
        gc.enable()
        await broker.stop("bench done")
        close_sinks()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="requests per timed loop")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        got = uvloop.run(figures(Path(d), a.n, a.repeat))  # the broker's loop (cli.py)
    print("broker CPU µs per request, warm, no network (best of "
          f"{a.repeat} loops of {a.n}; re-put: one pass over all)")
    for k, v in got.items():
        print(f"  {k:13s} {v:7.1f}")
    print(f"  {'per delayed message (send + re-put + pull of 1)':13s} "
          f"{sum(got.values()):7.1f}")


if __name__ == "__main__":
    main()
