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
  the pull handler, the read, ``message.pulled``, the answer and its outbox write;
* ``timer fire``: the timer service's fire of due timer messages (``TimerService._fire``:
  batched record reads, byte-patching re-put into the real topic, ``timer.fired``), per
  timer (sent with ``TIMER_DELIVER_MS`` an hour ahead, the firing task stopped, fired by
  hand as if the hour had passed);
* ``held pull``: a caught-up consumer's pull (the usual one): held, woken by a plain send
  to its queue, answered with that message; the figure is (pull + send) minus the same
  sends without pulls, so the hold, the wake, the read and the answer.

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
from kairosmq.protocol import native
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig
from kairosmq.server.observe.logs import close_sinks, configure_logging
from kairosmq.server.remoting.transport import Connection

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


def send_frame(
    i: int, topic: str = TOPIC, delay: bool = True, deliver_ms: int | None = None
) -> bytes:
    timing = (
        ({"DELAY": "1"} if delay else {})
        if deliver_ms is None
        else {"TIMER_DELIVER_MS": str(deliver_ms)}
    )
    props = encode_properties({**timing, "UNIQ_KEY": f"7F0000010000{i:020X}", "WAIT": "true"})
    ext = {
        "a": "bench_pg",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(i % 4),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return encode_command(
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2, opaque=i, ext_fields=ext, body=b"\xab" * 1024
        )
    )


def pull_frame(i: int, queue_id: int, offset: int, topic: str = TOPIC) -> bytes:
    ext = {
        "consumerGroup": GROUP,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "1",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    return encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i, ext_fields=ext))


async def figures(
    data_dir: Path, n: int, repeat: int, delayed_only: bool = False
) -> dict[str, float]:
    configure_logging(json=True, log_dir=data_dir / "logs", stdout=False)
    broker = Broker(
        BrokerConfig(data_dir=data_dir / "store", port=0, namesrv_port=0, vip_channel=False)
    )
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
        best = {
            "delayed send": float("inf"),
            "re-put": float("inf"),
            "pull": float("inf"),
            "timer fire": float("inf"),
            "held pull": float("inf"),
        }
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
            count = min(n, sent)  # offsets wrap below: a pull per message sent
            frames = [pull_frame(i, i % 4, (i // 4) % per_queue) for i in range(count)]
            gc.collect()
            t0 = time.process_time()
            for f in frames:
                conn.data_received(f)
                await asyncio.sleep(0)
            best["pull"] = min(best["pull"], (time.process_time() - t0) / count)
        if delayed_only:  # the delayed message's path alone (bench_instructions --delayed)
            del best["timer fire"], best["held pull"]
        else:
            best["timer fire"] = await timer_fires(broker, conn, n)
            best["held pull"] = await held_pulls(broker, conn, n, repeat)
        return {k: v * 1e6 for k, v in best.items()}
    finally:
        gc.enable()
        await broker.stop("bench done")
        close_sinks()


async def timer_fires(broker: Broker, conn: Connection, n: int) -> float:
    """CPU per fired timer: ``n`` timers due an hour ahead (the firing task stopped), then
    fired by hand in batches as if that hour had passed (``_fire`` takes "now")."""
    timer = broker.timer
    await timer.stop()
    due = (int(time.time() * 1000) // 60_000 + 60) * 60_000  # one minute bucket
    for i in range(n):
        # due in send order, 50 ms spread (as timers scheduled over time: neighbouring
        # records fall due together and are read together)
        conn.data_received(send_frame(10_000_000 + i, "BenchTimer", deliver_ms=due + i * 50 // n))
        await asyncio.sleep(0)
    now = due + 60_000
    if hasattr(timer, "_start_load"):  # nothing is loaded: it loads the next bucket
        await timer._start_load()
    else:  # an older tree that loads its window inline (A/B runs)
        await timer._load_window()
    timer.window.promote(now)
    fired = broker.stats.timers_fired
    gc.collect()
    t0 = time.process_time()
    while timer.window.head_due() is not None:
        assert timer._fire(now)
        await asyncio.sleep(0)  # the commit-log write of the batch
    spent = time.process_time() - t0
    assert broker.stats.timers_fired - fired == n, "not every timer fired"
    return spent / n


async def held_pulls(broker: Broker, conn: Connection, n: int, repeat: int) -> float:
    """Best per-pull CPU of a held pull woken by a send (minus the sends alone)."""
    held_topic, plain_topic = "BenchHeld", "BenchPlain"
    for topic in (held_topic, plain_topic):  # create the topics: offsets start at 1
        for q in range(4):
            conn.data_received(send_frame(q, topic, delay=False))
            await asyncio.sleep(0)
    best = float("inf")
    done = 0
    for _ in range(repeat):
        count = n
        pulls = [pull_frame(i, i % 4, 1 + (done + i) // 4, held_topic) for i in range(count)]
        sends = [send_frame(done + i, held_topic, delay=False) for i in range(count)]
        plain = [send_frame(done + i, plain_topic, delay=False) for i in range(count)]
        before = broker.stats.pulled[held_topic]
        gc.collect()
        t0 = time.process_time()
        for p, f in zip(pulls, sends, strict=True):
            conn.data_received(p)  # held: nothing new in its queue
            await asyncio.sleep(0)
            conn.data_received(f)  # wakes it
            for _ in range(3):
                await asyncio.sleep(0)
        with_pulls = time.process_time() - t0
        assert broker.stats.pulled[held_topic] - before == count, "a held pull was not answered"
        gc.collect()
        t0 = time.process_time()
        for f in plain:
            conn.data_received(f)
            for _ in range(4):
                await asyncio.sleep(0)
        sends_only = time.process_time() - t0
        best = min(best, (with_pulls - sends_only) / count)
        done += count
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="requests per timed loop")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--delayed-only",
        action="store_true",
        help="only the delayed message's phases (delayed send, re-put, pull)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        # the broker's loop (cli.py)
        got = uvloop.run(figures(Path(d), a.n, a.repeat, a.delayed_only))
    print(f"core: {native.describe()}")  # protocol/native.py (KAIROSMQ_NO_EXTENSIONS=1: pure)
    print(
        "broker CPU µs per request, warm, no network (best of "
        f"{a.repeat} loops of {a.n}; re-put: one pass over all)"
    )
    for k, v in got.items():
        print(f"  {k:13s} {v:7.1f}")
    print(
        f"  {'per delayed message (send + re-put + pull of 1)':13s} "
        f"{got['delayed send'] + got['re-put'] + got['pull']:7.1f}"
    )


if __name__ == "__main__":
    main()
