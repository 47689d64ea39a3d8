"""The timer bench's client agents: a producer of timer messages and a long-polling consumer.

Owns: ``producer(ports, ...)`` (sends ``n`` timers with ``TIMER_DELIVER_MS`` spaced so they
fall due at ``rate`` per second from ``t0``) and ``consumer(ports, ...)`` (long-polls every
queue of the topic on every broker and records ``receive - due`` per message), each run as
a process of its own by ``bench_timers.py --agent``.

Invariants:
* With several brokers (``ports``, RocketMQ's model: a topic with ``QUEUES`` queues on each
  broker), message ``i`` goes to broker ``i % len(ports)`` and queue
  ``(i // len(ports)) % QUEUES`` there, so each broker takes an equal share in due order;
  the consumer keeps one pull in flight per queue and broker, as stock consumers do.
* The consumer only counts and keeps the answers while polling (receive time, payload) and
  parses them at the end, with the garbage collector off: it shares the cores with the
  brokers, so it does as little as it can while messages fall due.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from .remoting import (
    PULL_MESSAGE,
    PULL_SUSPEND_AND_SUBSCRIPTION,
    SEND_MESSAGE_V2,
    SUCCESS,
    RemotingClient,
    decode_bodies,
)

TOPIC = "BenchTimer"
QUEUES = 4


async def _connect(ports: list[int]) -> list[RemotingClient]:
    clients = []
    for port in ports:
        c = RemotingClient()
        await c.open("127.0.0.1", port)
        clients.append(c)
    return clients


async def producer(
    ports: list[int], n: int, rate: int, body_size: int, window: int, t0: int
) -> dict[str, Any]:
    """Send ``n`` timers due at ``rate``/s from ``t0`` (epoch ms), ``window`` in flight."""
    clients = await _connect(ports)
    sem = asyncio.Semaphore(window)
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        due = t0 + (i * 1000) // rate
        body = f"{due}:{i}:".encode().ljust(body_size, b"x")
        props = f"TIMER_DELIVER_MS\x01{due}\x02UNIQ_KEY\x01B{i:012d}"
        ext = {
            "a": "BenchPG",
            "b": TOPIC,
            "c": "TBW102",
            "d": QUEUES,
            "e": (i // len(clients)) % QUEUES,
            "f": 0,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": props,
        }
        try:
            hdr, _ = await clients[i % len(clients)].call(SEND_MESSAGE_V2, ext, body)
            if hdr["code"] != SUCCESS:
                errors += 1
        finally:
            sem.release()

    started = time.monotonic()
    tasks = []
    for i in range(n):
        await sem.acquire()
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    for c in clients:
        await c.close()
    late_start = (time.time() * 1000) > t0
    return {
        "sent": n,
        "errors": errors,
        "send_s": elapsed,
        "first_due": t0,
        "stored_before_first_due": not late_start,
    }


async def consumer(ports: list[int], n: int, timeout: float) -> dict[str, Any]:
    """Long-poll every queue of every broker; (due, receive) per message until ``n`` or
    ``timeout`` s."""
    gc.disable()  # no collection pauses in the measuring process (it frees what it makes)
    clients = await _connect(ports)
    answers: list[tuple[float, bytes]] = []
    got = 0
    deadline = time.monotonic() + timeout

    async def poll(c: RemotingClient, q: int) -> None:
        nonlocal got
        offset = 0
        while got < n and time.monotonic() < deadline:
            ext = {
                "consumerGroup": "BenchCG",
                "topic": TOPIC,
                "queueId": q,
                "queueOffset": offset,
                "maxMsgNums": 64,
                "sysFlag": PULL_SUSPEND_AND_SUBSCRIPTION,
                "commitOffset": 0,
                "suspendTimeoutMillis": 2000,
                "subscription": "*",
                "subVersion": 0,
            }
            try:
                r, payload = await c.call(PULL_MESSAGE, ext, timeout=5.0)
            except TimeoutError:
                continue
            now = time.time() * 1000
            ext_out = r.get("extFields") or {}
            if "nextBeginOffset" in ext_out:
                if r["code"] == SUCCESS:
                    answers.append((now, payload))
                    got += int(ext_out["nextBeginOffset"]) - offset
                offset = int(ext_out["nextBeginOffset"])

    await asyncio.gather(*(poll(c, q) for c in clients for q in range(QUEUES)))
    for c in clients:
        await c.close()
    cpu_s = time.process_time()
    seen: set[int] = set()
    dups = 0
    lateness: list[float] = []
    dues: list[int] = []
    for now, payload in answers:
        for body in decode_bodies(payload):
            due_s, seq_s, _ = body.split(b":", 2)
            seq = int(seq_s)
            if seq in seen:
                dups += 1
                continue
            seen.add(seq)
            lateness.append(now - int(due_s))
            dues.append(int(due_s))
    return {
        "received": len(seen),
        "dups": dups,
        "lateness": lateness,
        "dues": dues,
        "cpu_s": cpu_s,
        "answers": len(answers),
    }
