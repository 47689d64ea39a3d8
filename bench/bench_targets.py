"""The native core's targets 1-4 from one run, each as a ratio or a time with its threshold.

    .venv/bin/python bench/bench_targets.py --quick          # smoke: small N, ~5 min
    .venv/bin/python bench/bench_targets.py                  # the targets' workloads
    .venv/bin/python bench/bench_targets.py --only 3 --burst 100000

1. broker CPU per delayed message, kairosmq / Redis, at 2,000/s (≤ 1.5 ×) and 500/s
   (≤ 2 ×): ``bench_peers.py``'s workload and drivers (1 KiB, delay 1 s = level 1,
   producer and consumer processes, a fresh server per run), Redis's sorted set + Lua pop
   driven by redis-py; the servers' CPU from ``/proc`` over the run;
2. max sustained delayed send rate, kairosmq / Redis (redis-py), same workload unthrottled
   (256 sends in flight), kairosmq on its defaults (message logs on), JSON headers
   (≥ 1.5 ×);
3. a burst: ``--burst`` timer messages (500,000) stored with one due instant (through the
   broker's put path, in this process, on fresh files), then a broker process on those
   files and one bundled ``PushConsumer`` (its own process, started before the due
   instant): the last one fired within 5 s of the due instant (from the fired records'
   store timestamps) and the last one consumed within 10 s; plus the fire lateness
   (store - due) percentiles;
4. instructions per delayed message (its send, re-put and a pull of 1), native core /
   pure core (``bench_instructions.py --delayed --cores``, callgrind-free cachegrind
   counts, ≤ 0.25); skipped with a line saying so without valgrind.

Every figure comes from this run; each target prints PASS or MISS with the measured value.
``--quick`` shrinks every N (the verdicts then say less). Needs root the first time (Debian's
``redis-server``, the bench venv of ``bench_peers.py``).

Owns: the orchestration of the four targets and the burst's consumer agent
(``--burst-consumer``). Invariant: only ratios within this run are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_instructions  # noqa: E402
import bench_peers  # noqa: E402
from peers.servers import KairosServer, RedisServer, log, stop_proc  # noqa: E402
from peers.stats import percentile  # noqa: E402

BURST_TOPIC = "BenchBurst"
BURST_QUEUES = 8


def verdict(ok: bool | None) -> str:
    return "PASS" if ok else "MISS"


# ------------------------------------------------------------------ targets 1 and 2


def peers_args(a: argparse.Namespace, n: int) -> argparse.Namespace:
    """What ``bench_peers.run_one`` reads."""
    return argparse.Namespace(
        workdir=a.workdir,
        keep=False,
        kairos_python=a.kairos_python,
        kairos_arg=[],
        rocketmq_dir="",
        n=n,
        delay_ms=1000,
        body=1024,
        window=256,
        max_send_s=120.0,
    )


def cpu_and_rate(a: argparse.Namespace) -> list[dict[str, Any]]:
    """kairosmq and Redis interleaved at 2,000/s, 500/s and max; one row per run."""
    py = bench_peers.ensure_venv(Path(a.bench_venv))
    RedisServer.install()
    rows = []
    print("  " + bench_peers.HEAD, flush=True)
    for rate, n in ((2000.0, a.n_paced), (500.0, a.n_paced), (0.0, a.n_max)):
        for system in ("kairosmq", "redis"):
            log(f"{system} at {int(rate) or 'max'}/s, n={n}")
            row = bench_peers.run_one(system, rate, peers_args(a, n), py)
            rows.append(row)
            print("  " + bench_peers.table_row(row), flush=True)
    return rows


def report_1_2(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    by = {(r["system"], r["rate"]): r for r in rows}
    out = []
    for rate, goal in ((2000, 1.5), (500, 2.0)):
        k, r = by[("kairosmq", rate)], by[("redis", rate)]
        kc, rc = k["broker_cpu_us_per_msg"], r["broker_cpu_us_per_msg"]
        ratio = kc / rc
        ok = ratio <= goal
        name = f"1. broker CPU per delayed message at {rate:,}/s"
        print(
            f"{name}: kairosmq {kc:,.0f} µs / Redis {rc:,.0f} µs = {ratio:.2f} × "
            f"(threshold ≤ {goal} ×) {verdict(ok)}"
        )
        out.append((name, ok))
    k, r = by[("kairosmq", "max")], by[("redis", "max")]
    ratio = k["send_rate"] / r["send_rate"]
    ok = ratio >= 1.5
    name = "2. max sustained delayed send rate"
    print(
        f"{name}: kairosmq {k['send_rate']:,.0f}/s / Redis (redis-py) {r['send_rate']:,.0f}/s"
        f" = {ratio:.2f} × (threshold ≥ 1.5 ×) {verdict(ok)}"
    )
    out.append((name, ok))
    return out


# ------------------------------------------------------------------ target 3


def burst_load(data: Path, n: int, cal: int, margin_s: float) -> tuple[int, float]:
    """Store ``n`` timers due at one instant through the broker's put path (in this
    process, a broker on ``data``); returns (the due instant, seconds spent storing).
    ``cal`` timers due a day later go first: their put rate sets the instant, so that
    the stores, the broker's start and the consumer's all end ``margin_s`` before it."""
    from kairosmq.server.broker import Broker
    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.observe.logs import close_sinks, configure_logging
    from kairosmq.server.put.kind import MessageKind
    from kairosmq.server.store import MessageInner

    body = b"b" * 1024
    configure_logging(json=True, log_dir=data.parent / "load-logs", stdout=False)

    async def load() -> tuple[int, float]:
        b = Broker(
            BrokerConfig(
                data_dir=data, port=0, namesrv_port=0, vip_channel=False, log_messages=False
            )
        )
        await b.start()
        b.topics.ensure(BURST_TOPIC, BURST_QUEUES)
        t0 = time.monotonic()
        due = int(time.time() * 1000) + 86_400_000  # the calibration timers: tomorrow
        try:
            for i in range(cal + n):
                if i == cal:
                    per = (time.monotonic() - t0) / max(cal, 1)
                    due = int(time.time() * 1000 + (per * n * 1.5 + margin_s) * 1000)
                msg = MessageInner(
                    topic=BURST_TOPIC,
                    queue_id=i % BURST_QUEUES,
                    body=body,
                    properties={"UNIQ_KEY": f"B{i:016d}"},
                    born_timestamp=int(time.time() * 1000),
                )
                r = b.put_path.put(msg, MessageKind.TIMER, due_ms=due)
                if r.status.value != "PUT_OK":
                    raise RuntimeError(f"put {i}: {r.status}")
                if i % 20_000 == 0:
                    b.store.write_out()
                    await asyncio.sleep(0)
            b.store.write_out()
        finally:
            await b.stop("burst load done")
            close_sinks()
        return due, time.monotonic() - t0

    return asyncio.run(load())


def burst(a: argparse.Namespace, n: int) -> dict[str, Any]:
    server = KairosServer(Path(a.workdir), False, a.kairos_python, REPO, [])
    data = server.dir / "data"
    consumer: subprocess.Popen[str] | None = None
    try:
        cal = min(2000, max(1, n // 10))
        log(f"burst: storing {n:,} timers (after {cal:,} due tomorrow, to time the puts)")
        due, load_s = burst_load(data, n, cal, a.burst_margin)
        n_due = n
        server.start()
        consumer = subprocess.Popen(
            [
                a.kairos_python,
                str(Path(__file__).resolve()),
                "--burst-consumer",
                f"127.0.0.1:{server.namesrv_port}",
                "--n",
                str(n_due),
                "--due",
                str(due),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert consumer.stdout is not None
        if "READY" not in consumer.stdout.readline():
            raise RuntimeError(f"burst consumer did not start: {consumer.stderr.read()[-2000:]}")
        ready_ms = int(time.time() * 1000)
        out, err = consumer.communicate(timeout=max(0, due / 1000 - time.time()) + 120)
        res = json.loads(out.strip().splitlines()[-1])
        res.update(due=due, load_s=load_s, ready_before_due_ms=due - ready_ms, n=n_due)
        return res
    finally:
        if consumer is not None and consumer.poll() is None:
            stop_proc(consumer, 5)  # type: ignore[arg-type]
        server.stop()


def report_3(res: dict[str, Any]) -> list[tuple[str, bool]]:
    n = res["n"]
    print(
        f"3. burst of {n:,} timers due at one instant (stored in {res['load_s']:.0f} s; "
        f"broker and consumer ready {res['ready_before_due_ms'] / 1000:.1f} s before it)"
    )
    if res["ready_before_due_ms"] < 0:
        print(
            "   the broker and the consumer were ready only after the due instant: these "
            "figures include their start (raise --burst-margin)"
        )
    out = []
    fired = res["last_store_ms"] - res["due"] if res["count"] else None
    consumed = res["last_receive_ms"] - res["due"] if res["count"] else None
    complete = res["count"] >= n
    if res["count"] < n:
        print(f"   only {res['count']:,} of {n:,} consumed before the consumer gave up")
    for name, value, goal in (
        ("fired within (last store time - due)", fired, 5.0),
        ("consumed within (last receive - due)", consumed, 10.0),
    ):
        ok = complete and value is not None and value / 1000 <= goal
        shown = "-" if value is None else f"{value / 1000:.2f} s"
        print(f"   3. {name}: {shown} (threshold ≤ {goal:g} s) {verdict(ok)}")
        out.append((f"3. {name}", ok))
    lat = res.get("fire_lateness_ms") or {}
    if lat:
        print(
            "   fire lateness store - due, ms: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in lat.items())
            + f"; early: {res['early']}, duplicates: {res['duplicates']}"
        )
    return out


async def burst_consumer(namesrv: str, n: int, due: int) -> dict[str, Any]:
    """One bundled ``PushConsumer`` on the burst topic; prints READY once started, then
    waits for ``n`` messages (or 120 s after ``due``)."""
    from kairosmq.client import ConsumeFromWhere, ConsumeStatus, PushConsumer

    done = asyncio.Event()
    stores: list[int] = []
    seen: set[str] = set()
    dups = 0
    last_receive = 0

    def listener(msgs: list[Any], _ctx: Any) -> ConsumeStatus:
        nonlocal dups, last_receive
        for m in msgs:
            if m.msg_id in seen:
                dups += 1
                continue
            seen.add(m.msg_id)
            stores.append(m.store_timestamp)
        last_receive = int(time.time() * 1000)
        if len(stores) >= n:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "bench_burst_cg", namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(BURST_TOPIC)
    consumer.register_listener(listener)
    await consumer.start()
    print("READY", flush=True)
    try:
        await asyncio.wait_for(done.wait(), max(0.0, due / 1000 - time.time()) + 120)
    except TimeoutError:
        pass
    await consumer.shutdown()
    late = sorted(s - due for s in stores)
    return {
        "count": len(stores),
        "duplicates": dups,
        "early": sum(1 for x in late if x < 0),
        "last_store_ms": max(stores, default=0),
        "last_receive_ms": last_receive,
        "fire_lateness_ms": {f"p{p:g}": percentile(late, p) for p in (50, 90, 99, 100) if late},
    }


# ------------------------------------------------------------------ target 4


def instructions(a: argparse.Namespace) -> list[tuple[str, bool]]:
    name = "4. instructions per delayed message, native / pure"
    if shutil.which("valgrind") is None:
        print(f"{name}: skipped (valgrind is not installed: apt-get install valgrind)")
        return []
    n1, n2 = (100, 300) if a.quick else (300, 900)
    native = bench_instructions.per_round(n1, n2, None, delayed=True)
    pure = bench_instructions.per_round(n1, n2, None, delayed=True, pure=True)
    ratio = native / pure
    ok = ratio <= 0.25
    print(
        f"{name}: native {native / 1e3:,.0f}k / pure {pure / 1e3:,.0f}k = {ratio:.3f} "
        f"(threshold ≤ 0.25) {verdict(ok)}"
    )
    return [(name, ok)]


# ------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N everywhere (a smoke run)")
    ap.add_argument("--only", default="1,2,3,4", help="comma list of targets to run")
    ap.add_argument("--n-paced", type=int, default=10_000, help="messages per paced run")
    ap.add_argument("--n-max", type=int, default=20_000, help="messages per unthrottled run")
    ap.add_argument("--burst", type=int, default=500_000, help="timers in the burst")
    ap.add_argument(
        "--burst-margin",
        type=float,
        default=30.0,
        help="seconds planned between the end of the burst's stores and its due instant "
        "(the broker's start on them and the consumer's come out of it)",
    )
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--bench-venv", default=str(Path.home() / ".cache" / "kairosmq-bench-venv"))
    ap.add_argument("--kairos-python", default=sys.executable)
    ap.add_argument("--burst-consumer", metavar="NAMESRV", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--due", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.burst_consumer:  # the burst's consumer agent (its own process)
        import uvloop

        print(json.dumps(uvloop.run(burst_consumer(a.burst_consumer, a.n, a.due))))
        return
    if a.quick:
        a.n_paced, a.n_max, a.burst = 2_000, 5_000, min(a.burst, 20_000)
    only = {int(x) for x in a.only.split(",")}
    from kairosmq.protocol import codec, headers, message, native, properties  # noqa: F401
    from kairosmq.server.store import consumequeue  # noqa: F401

    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        f"bench_targets {started}, tree {commit or '?'}, core: {native.describe()}, "
        f"load {os.getloadavg()[0]:.2f}, "
        f"{os.cpu_count()} CPUs{' (quick)' if a.quick else ''}",
        flush=True,
    )
    verdicts: list[tuple[str, bool]] = []
    rows = cpu_and_rate(a) if only & {1, 2} else []
    res3 = burst(a, a.burst) if 3 in only else None
    print(f"\nnative core targets, this run (ended {time.strftime('%H:%M:%S')} UTC):")
    if rows:
        verdicts += report_1_2(rows)
    if res3 is not None:
        verdicts += report_3(res3)
    if 4 in only:
        verdicts += instructions(a)
    met = sum(ok for _, ok in verdicts)
    print(f"{met} of {len(verdicts)} met; load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
