"""Producer and consumer processes of the benchmark (``python -m peers.agent producer|consumer``).

Owns: the workload as the clients see it. Run by ``bench_peers.py`` with the bench venv's
python and ``PYTHONPATH=bench``.

producer: sends N bodies of ``--body`` bytes; body = ``<seq:u64, send_time:f64>`` + padding, where
          send_time = ``time.time()`` read just before ``send``. Paced on an absolute schedule
          (message i at t0 + i/rate) with at most ``--window`` sends unacknowledged; rate 0 =
          unthrottled (only the window limits). Prints one JSON line: sent, acked, errors,
          first_send, last_send, last_ack.
consumer: prints ``READY`` once consuming; on stdin ``END <sent> <last_send>`` it waits until
          every sent message arrived or last_send + delay + grace passed, then writes the records
          ``<seq:u64, send_time:f64, recv_time:f64>`` of first deliveries to ``--records`` and
          prints one JSON line: received, duplicates, first_recv, last_recv, errors.
          recv_time = ``time.time()`` when the driver hands the body over.

Invariants: both clocks are this machine's ``time.time()``, so lateness = recv - (send + delay)
needs no clock sync; every loop is bounded (``--max-send-s``, ``--hard-timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import threading
import time
from array import array
from typing import Any

from peers import load_driver

HDR = struct.Struct("<Qd")
REC = struct.Struct("<Qdd")


def _opts(kvs: list[str] | None) -> dict[str, str]:
    return dict(kv.partition("=")[::2] for kv in kvs or [])


async def producer(a: argparse.Namespace, drv: Any) -> dict[str, Any]:
    await drv.start("producer")
    pad = b"\xab" * (a.body - HDR.size)
    window = asyncio.Semaphore(a.window)
    state: dict[str, Any] = {"acked": 0, "errors": 0, "last_error": None, "last_ack": 0.0}
    tasks: set[asyncio.Task[None]] = set()

    async def one(body: bytes) -> None:
        try:
            await drv.send(a.delay_ms, body)
            state["acked"] += 1
            state["last_ack"] = time.time()
        except Exception as e:  # noqa: BLE001 - every failure is counted, the run goes on
            state["errors"] += 1
            state["last_error"] = repr(e)
        finally:
            window.release()

    t0 = time.time() + 0.05
    stop_at = t0 + a.max_send_s
    sent, first, last = 0, 0.0, 0.0
    for i in range(a.n):
        if a.rate > 0:
            delay = t0 + i / a.rate - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await window.acquire()
        t = time.time()
        if t > stop_at:
            window.release()
            break
        first = first or t
        last = t
        task = asyncio.ensure_future(one(HDR.pack(i, t) + pad))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    if tasks:
        await asyncio.wait(list(tasks), timeout=60)
    await drv.stop()
    return {"sent": sent, "first_send": first, "last_send": last, **state}


async def consumer(a: argparse.Namespace, drv: Any) -> dict[str, Any]:
    await drv.start("consumer")
    seen = bytearray(a.n)
    seqs, sends, recvs = array("Q"), array("d"), array("d")
    dups = [0]

    def on_body(body: bytes) -> None:
        t = time.time()
        seq, st = HDR.unpack_from(body)
        if seq >= a.n or seen[seq]:
            dups[0] += 1
            return
        seen[seq] = 1
        seqs.append(seq)
        sends.append(st)
        recvs.append(t)

    await drv.consume(on_body)
    print("READY", flush=True)
    end: list[str] = []
    threading.Thread(target=lambda: end.append(sys.stdin.readline()), daemon=True).start()
    hard = time.time() + a.hard_timeout
    expect, deadline = a.n, None
    while len(seqs) < expect and time.time() < hard:
        if deadline is None and end:
            parts = end[0].split()
            if len(parts) == 3:
                expect = min(a.n, int(parts[1]))
                deadline = float(parts[2]) + a.delay_ms / 1000.0 + a.grace
            else:  # orchestrator went away
                deadline = time.time()
        if deadline is not None and time.time() > deadline:
            break
        await asyncio.sleep(0.02)
    if deadline is None:  # received everything before END: still let duplicates show up
        await asyncio.sleep(0.5)
    await drv.stop()
    records = b"".join(REC.pack(s, st, rt) for s, st, rt in zip(seqs, sends, recvs, strict=True))
    return {
        "_records": records,
        "received": len(seqs),
        "duplicates": dups[0],
        "first_recv": min(recvs) if recvs else 0.0,
        "last_recv": max(recvs) if recvs else 0.0,
        "errors": getattr(drv, "errors", []),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["producer", "consumer"])
    ap.add_argument("--system", required=True)
    ap.add_argument("--opt", action="append", help="driver option k=v")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--delay-ms", type=int, default=1000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--max-send-s", type=float, default=120.0)
    ap.add_argument("--hard-timeout", type=float, default=300.0)
    ap.add_argument("--grace", type=float, default=15.0)
    ap.add_argument("--records")
    a = ap.parse_args()
    run: Any = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        pass
    opts = _opts(a.opt)
    opts["delay_ms"] = str(a.delay_ms)
    drv = load_driver(a.system, opts)
    res = run(producer(a, drv) if a.role == "producer" else consumer(a, drv))
    if "_records" in res:
        with open(a.records, "wb") as f:
            f.write(res.pop("_records"))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
