"""Browsing pending timers (issue 33): keyset page fetches at the first, middle and last
pages of a large backlog, and the due histogram.

``--pending N`` timers are stored through the broker's own put path (in-process, no
network: the point is the browse, not the send rate), 90 % for topic ``PendA`` and 10 %
for ``PendB``; the broker is stopped and started as a process on those files; a client
(this process, uvloop) then times KAIROS_BROWSE_PENDING (907) pages of ``--limit`` rows:

* ``first`` (no cursor), ``middle`` (``fromMs`` = the median due time), ``last``
  (``fromMs`` = the due time of the last ``limit`` timers): each fetched ``--repeat``
  times; the first fetch of each (bucket files read cold) is shown apart;
* ``walk``: ``--repeat`` pages in a row from the middle, each after the previous page's
  ``nextCursor`` (how a console pages);
* ``topic``: pages filtered to ``PendB`` (the broker reads each entry's record);
* the histogram per hour (cold, then warm) and per minute.

Layouts (``--layout``): ``spread`` (due 1-40 days ahead: ~57,000 minute buckets, ~17 per
bucket at 1M) or ``dense`` (due within 10 minutes: ~100,000 per minute bucket at 1M).

    python bench/bench_pending.py --pending 1000000
    python bench/bench_pending.py --pending 1000000 --layout dense

Prints p50/p99 ms per page; figures are for this machine and this run only.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_timers import free_port, start_broker, stop_proc  # noqa: E402

QUEUES = 4
DAY = 86_400_000


def bulk_load(data: Path, pending: int, layout: str) -> tuple[float, list[int]]:
    """Store ``pending`` timers through the put path; return the seconds and the dues."""
    from kairosmq.server.broker import Broker
    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.put.kind import MessageKind
    from kairosmq.server.store import MessageInner

    async def load() -> tuple[float, list[int]]:
        cfg = BrokerConfig(
            data_dir=data,
            port=0,
            namesrv_port=0,
            vip_channel=False,
            log_messages=False,
            checkpoint_interval=30.0,
        )
        b = Broker(cfg)
        await b.start()
        rnd = random.Random(33)
        now = int(time.time() * 1000)
        dues: list[int] = []
        t0 = time.monotonic()
        for topic in ("PendA", "PendB"):
            b.topics.ensure(topic, QUEUES)
        for i in range(pending):
            if layout == "dense":
                due = now + 3_600_000 + rnd.randrange(600_000)
            else:
                due = now + DAY + rnd.randrange(39 * DAY)
            msg = MessageInner(
                topic="PendB" if i % 10 == 0 else "PendA",
                queue_id=i % QUEUES,
                body=b"p" * 64,
                properties={"UNIQ_KEY": f"P{i:016d}", "KEYS": f"order-{i}"},
                born_timestamp=now,
            )
            r = b.put_path.put(msg, MessageKind.TIMER, due_ms=due)
            if r.status.value != "PUT_OK":
                raise RuntimeError(f"put {i}: {r.status}")
            dues.append(due)
            if i % 50_000 == 0:
                b.store.write_out()
                await asyncio.sleep(0)
                if i and i % 200_000 == 0:
                    print(f"  stored {i:,} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        elapsed = time.monotonic() - t0
        await b.stop("bulk load done")
        return elapsed, dues

    return asyncio.run(load())


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def measure(addr: str, dues: list[int], limit: int, repeat: int) -> list[dict[str, Any]]:
    from kairosmq.client.remoting import RemotingPool
    from kairosmq.protocol.codes import RequestCode as R

    pool = RemotingPool()
    rows: list[dict[str, Any]] = []

    async def call(code: int, **fields: Any) -> tuple[float, Any]:
        ext = {k: str(v) for k, v in fields.items() if v is not None}
        t0 = time.perf_counter()
        resp = await pool.invoke(addr, code, ext, timeout=120)
        ms = (time.perf_counter() - t0) * 1000
        if resp.code != 0:
            raise RuntimeError(f"{code}: {resp.remark}")
        return ms, orjson.loads(resp.body)

    s = sorted(dues)
    at = {"first": None, "middle": s[len(s) // 2], "last": s[-limit]}
    try:
        for name, from_ms in at.items():
            cold, page = await call(R.KAIROS_BROWSE_PENDING, limit=limit, fromMs=from_ms)
            assert len(page["rows"]) == limit, (name, len(page["rows"]))
            warm = [
                (await call(R.KAIROS_BROWSE_PENDING, limit=limit, fromMs=from_ms))[0]
                for _ in range(repeat)
            ]
            rows.append(_row(name, cold, warm))
        walk: list[float] = []
        cursor = None
        for _ in range(repeat):
            ms, page = await call(
                R.KAIROS_BROWSE_PENDING, limit=limit, fromMs=at["middle"], cursor=cursor
            )
            walk.append(ms)
            cursor = page["nextCursor"]
            assert len(page["rows"]) == limit
        rows.append(_row(f"walk {repeat} pages from the middle", walk[0], walk[1:]))
        topic = [
            (await call(R.KAIROS_BROWSE_PENDING, limit=limit, topic="PendB", fromMs=at["middle"]))[
                0
            ]
            for _ in range(max(3, repeat // 10))
        ]
        rows.append(_row("topic PendB (10 %), middle", topic[0], topic[1:]))
        cold, hist = await call(R.KAIROS_PENDING_HISTOGRAM, unit="hour")
        assert hist["timers"] == len(dues), (hist["timers"], len(dues))
        warm = [(await call(R.KAIROS_PENDING_HISTOGRAM, unit="hour"))[0] for _ in range(5)]
        rows.append(_row("histogram per hour (all)", cold, warm))
        minute = [(await call(R.KAIROS_PENDING_HISTOGRAM, unit="minute"))[0] for _ in range(3)]
        rows.append(_row("histogram per minute (all)", minute[0], minute[1:]))
    finally:
        pool.close()
    return rows


def _row(name: str, first: float, rest: list[float]) -> dict[str, Any]:
    return {
        "fetch": name,
        "first ms": first,
        "n": len(rest),
        "p50 ms": statistics.median(rest) if rest else float("nan"),
        "p99 ms": pct(rest, 0.99) if rest else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--layout", choices=("spread", "dense"), default="spread")
    ap.add_argument("--limit", type=int, default=50, help="rows per page")
    ap.add_argument("--repeat", type=int, default=200, help="fetches per position")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    a = ap.parse_args()
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="kmq-pending-"))
    data = workdir / "data"
    try:
        load_s, dues = bulk_load(data, a.pending, a.layout)
        port = free_port()
        broker, start_s = start_broker(data, port)
        try:
            rows = uvloop.run(measure(f"127.0.0.1:{port}", dues, a.limit, a.repeat))
        finally:
            stop_proc(broker, 30)
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{a.pending:,} pending timers ({a.layout}), stored in {load_s:.0f} s; broker "
        f"serving {start_s:.1f} s after start; pages of {a.limit} rows"
    )
    print("| fetch | first ms | n | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['fetch']} | {r['first ms']:.1f} | {r['n']} | {r['p50 ms']:.2f} "
            f"| {r['p99 ms']:.2f} |"
        )


if __name__ == "__main__":
    main()
