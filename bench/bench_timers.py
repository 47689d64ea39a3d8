"""Timer messages (issue 13): lateness at a due rate, and memory/restart with many pending.

Two parts, each printing a table:

* ``lateness``: a broker process on fresh files; a producer (its own process) sends
  ``rate x seconds`` timers with ``TIMER_DELIVER_MS`` spaced so they fall due at ``rate``
  per second, starting once all are stored; a consumer (its own process) long-polls the
  topic and records ``receive - due`` per message. Prints achieved due rate, lateness
  p50/p90/p99/p99.9/max, early (received before due), lost, duplicates, broker CPU per
  fired message, the consumer's own CPU per message (it shares the 2 cores with the
  broker) and RSS. Both agents run on uvloop, like the peers bench's drivers. Each round
  also prints the host's steal time (``/proc/stat``) over the due span and in its worst
  windows: on a VM, the hypervisor's bursts stall every process here at once; and the
  broker's own fire lateness (store time - due, from its Prometheus histogram), which
  the consumer's figures extend by the delivery (pull answer, socket, consumer loop); and
  a host control over the same span (``peers/hostcontrol.py``): a bare uvloop process of
  its own that wakes every 1 ms and records how late each wake-up came, i.e. what the
  host does to any process here at that moment.
* ``burst``: ``--burst N`` timers due at the same instant, stored through the broker's
  own put path in this process (its defaults, message logs on), fired by its timer
  service with nothing consuming: prints how late the first, the median, the 99th
  percentile and the last were fired (store time - due) and the fire rate.
* ``pending``: ``--pending N`` timers due 1-40 days ahead are stored through the broker's
  own put path (in-process, no network: the point is the files, not the send rate), the
  broker stopped, then started as a process on those files: prints the time to serving,
  RSS after start and after a minute's worth of idle serving, and the disk used.

    python bench/bench_timers.py                       # 1,000 and 5,000 due/s, 4 s each
    python bench/bench_timers.py --rates 5000 --seconds 10
    python bench/bench_timers.py --rates 5000 --seconds 10 --cross-bucket --restart
                                     # spans a minute-bucket boundary; the broker is
                                     # killed (-9) and restarted between send and fire
    python bench/bench_timers.py --pending 10000000 --skip-lateness
    python bench/bench_timers.py --burst 500000 --skip-lateness
                                     # 500,000 timers due at one instant: store - due
    python bench/bench_timers.py --rates 5000 --seconds 10 --repeat 5   # p99 spread
    python bench/bench_timers.py --rates 5000 --seconds 10 --brokers 1,2 --repeat 2
                                     # 1 and 2 broker processes behind a name server,
                                     # alternated (the agents: peers/timeragents.py)

Figures are for this machine and this run only; compare with the other benches' same-run
ratios (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import hostcontrol  # noqa: E402 - after the path insert
from bench.peers.remoting import (  # noqa: E402 - after the path insert
    SEND_MESSAGE_V2,
    SUCCESS,
    RemotingClient,
)
from bench.peers.servers import free_port, stop_proc, wait_port  # noqa: E402
from bench.peers.stats import (  # noqa: E402 - after the path insert
    HostSteal,
    cpu_seconds,
    fire_lateness,
    percentile,
    status_kib,
    worst_windows,
)
from bench.peers.timeragents import QUEUES, TOPIC, consumer, producer  # noqa: E402


def start_broker(data_dir: Path, port: int, *extra: str) -> tuple[subprocess.Popen[bytes], float]:
    """Start a broker process; return it and the seconds until it answered a send."""
    cmd = [
        sys.executable,
        "-m",
        "kairosmq.server",
        "broker",
        "--port",
        str(port),
        "--namesrv-port",
        str(free_port()),
        "--data-dir",
        str(data_dir),
        "--no-vip-channel",
        "--no-log-file",
        "--log-level",
        "warning",
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            time.sleep(0.01)
            continue
        asyncio.run(_probe_send(port))
        return proc, time.monotonic() - t0


async def _probe_send(port: int) -> None:
    """One plain send, answered SUCCESS (the broker serves, not just listens)."""
    c = RemotingClient()
    await c.open("127.0.0.1", port)
    ext = {
        "a": "BenchPG",
        "b": "BenchProbe",
        "c": "TBW102",
        "d": 1,
        "e": 0,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": "",
    }
    hdr, _ = await c.call(SEND_MESSAGE_V2, ext, b"probe", timeout=30.0)
    await c.close()
    if hdr["code"] != SUCCESS:
        raise RuntimeError(f"probe send refused: {hdr}")


# ---------------------------------------------------------------- lateness agents


def first_due(n: int, rate: int, margin_s: float, cross_bucket: bool) -> int:
    """The first due instant (epoch ms): after the sends (estimated at 1,000/s) plus
    ``margin_s``; with ``cross_bucket``, moved later so that a minute-bucket boundary
    falls in the middle of the due span."""
    t0 = int(time.time() * 1000 + (n / 1000 + 2.0 + margin_s) * 1000)
    if not cross_bucket:
        return t0
    half = n * 1000 // rate // 2
    boundary = -(-(t0 + half) // 60_000) * 60_000
    return boundary - half


def run_agent(kind: str, args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--agent", kind, *args], capture_output=True, check=True
    )
    return json.loads(out.stdout)


def start_namesrv(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A ``kairosmq namesrv`` process for several brokers (RocketMQ's model)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kairosmq.server",
            "namesrv",
            "--port",
            str(port),
            "--data-dir",
            str(workdir / "namesrv"),
            "--no-log-file",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port, 60, proc)
    return proc, port


def lateness_round(
    rate: int,
    seconds: float,
    body: int,
    workdir: Path,
    *,
    restart: bool = False,
    cross_bucket: bool = False,
    broker_args: tuple[str, ...] = (),
    brokers: int = 1,
    py_spy: Path | None = None,
) -> dict[str, Any]:
    """One rate. ``restart``: the brokers are killed (-9) once every timer is stored and
    started again on their files before the first one is due (timers then come from the
    bucket files and the log); the consumer starts after. ``brokers`` > 1: that many broker
    processes registered with one name server, the topic's queues on each (RocketMQ's
    model; the agents address the brokers directly). ``py_spy``: sample the first broker
    with py-spy from the first due instant to the last (collapsed stacks in that dir)."""
    n = int(rate * seconds)
    ports, mports = [free_port() for _ in range(brokers)], [free_port() for _ in range(brokers)]
    datas = [workdir / f"lateness-{rate}-{k}" for k in range(brokers)]
    namesrv = None
    extra = [(*broker_args, "--metrics-port", str(m)) for m in mports]
    if brokers > 1:
        namesrv, ns_port = start_namesrv(workdir)
        extra = [
            (*e, "--namesrv", f"127.0.0.1:{ns_port}", "--broker-name", f"broker-{chr(97 + k)}")
            for k, e in enumerate(extra)
        ]

    def start_all() -> list[subprocess.Popen[bytes]]:
        return [start_broker(d, p, *e)[0] for d, p, e in zip(datas, ports, extra, strict=True)]

    procs = start_all()
    at = ",".join(map(str, ports))
    t0 = first_due(n, rate, 8.0 if restart else 0.0, cross_bucket)
    wait = (t0 - time.time() * 1000) / 1000 + seconds + n / 2500 + 30
    cons = None
    ready_ms = 0.0  # when the restarted brokers served (0: no restart)
    try:
        if not restart:
            cons = subprocess.Popen(
                [sys.executable, __file__, "--agent", "consumer", at, str(n), str(wait)],
                stdout=subprocess.PIPE,
            )
            time.sleep(0.5)
        prod = run_agent("producer", [at, str(n), str(rate), str(body), "256", str(t0)])
        if restart:
            for b in procs:
                b.kill()
                b.wait()
            procs = start_all()
            ready_ms = time.time() * 1000
            cons = subprocess.Popen(
                [sys.executable, __file__, "--agent", "consumer", at, str(n), str(wait)],
                stdout=subprocess.PIPE,
            )
        cpu0 = sum(cpu_seconds(b.pid) for b in procs)
        steal = HostSteal().start()
        host = hostcontrol.start(t0, seconds, workdir / f"control-{rate}.json")
        spy = start_py_spy(py_spy, procs[0].pid, rate, t0, seconds) if py_spy else None
        out, _ = cons.communicate(timeout=wait + 30)
        if spy is not None:
            spy.wait(timeout=seconds + 60)
        cpu = sum(cpu_seconds(b.pid) for b in procs) - cpu0
        steal.stop()
        hres = hostcontrol.result(host, workdir / f"control-{rate}.json")
        fires = [fire_lateness(m) for m in mports]  # each broker fires an equal share
        fire = {k: sum(f.get(k, 0.0) for f in fires) / brokers for k in fires[0]}
        cres = json.loads(out)
        rss = max(status_kib(b.pid).get("VmHWM", 0) for b in procs) / 1024
    finally:
        for b in procs:
            stop_proc(b, 30)
        if namesrv is not None:
            stop_proc(namesrv, 30)
        for d in datas:
            shutil.rmtree(d, ignore_errors=True)
    lat = sorted(cres["lateness"])
    worst = worst_windows(cres["dues"], cres["lateness"], steal=steal)
    last_due = max(cres["dues"], default=t0)
    return {
        "rate": rate,
        "n": n,
        "send/s": n / prod["send_s"],
        "stored before due": prod["stored_before_first_due"] and ready_ms < t0,
        "send errors": prod["errors"],
        "p50": percentile(lat, 50),
        "p90": percentile(lat, 90),
        "p99": percentile(lat, 99),
        "p99.9": percentile(lat, 99.9),
        "max": lat[-1] if lat else None,
        "early": sum(1 for v in lat if v < 0),
        "lost": n - cres["received"],
        "dup": cres["dups"],
        "cpu_us_per_fired": cpu / max(1, cres["received"]) * 1e6,
        "consumer_us": cres["cpu_s"] / max(1, cres["received"]) * 1e6,
        "rss_mb": rss,
        "worst": worst,
        "per_answer": cres["received"] / max(1, cres["answers"]),
        "steal_ms": steal.ms(t0, last_due + (lat[-1] if lat else 0)),
        "fire": fire,
        "host": hres,
    }


def start_py_spy(
    out_dir: Path, pid: int, rate: int, t0: int, seconds: float
) -> subprocess.Popen[bytes]:
    """py-spy on ``pid`` over the due span only (starts at ``t0``, epoch ms)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    time.sleep(max(0.0, t0 / 1000 - time.time()))
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--duration",
            str(max(1, int(seconds))),
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out_dir / f"timers-{rate}.collapsed"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------- burst


def burst_round(n: int, workdir: Path, body: int) -> dict[str, Any]:
    """``n`` timers due at one instant: how late the broker fired them (store time - due).

    One broker in this process on its defaults (message logs on, into a file; on uvloop):
    the timers are stored through its own put path (no network: the point is the fire),
    all due at one whole second a few seconds after the last is stored; then its timer
    service fires them while nothing consumes. The figures come from the fired copies'
    store timestamps, read back from the real topic's consume queues and records.
    """
    from kairosmq.protocol import native
    from kairosmq.protocol.message import decode_record
    from kairosmq.server.broker import Broker
    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.observe.logs import close_sinks, configure_logging
    from kairosmq.server.put.kind import MessageKind
    from kairosmq.server.store import MessageInner

    data = workdir / "burst"

    async def run() -> dict[str, Any]:
        configure_logging(json=True, log_dir=data / "logs", stdout=False)
        b = Broker(BrokerConfig(data_dir=data / "store", port=0, namesrv_port=0, vip_channel=False))
        await b.start()
        try:
            b.topics.ensure(TOPIC, QUEUES)
            t0 = time.monotonic()
            now = int(time.time() * 1000)
            payload = b"b" * body

            def put(key: str, i: int, at: int) -> None:
                msg = MessageInner(
                    topic=TOPIC,
                    queue_id=i % QUEUES,
                    body=payload,
                    properties={"UNIQ_KEY": f"{key}{i:016d}"},
                    born_timestamp=now,
                )
                r = b.put_path.put(msg, MessageKind.TIMER, due_ms=at)
                if r.status.value != "PUT_OK":
                    raise RuntimeError(f"put {i}: {r.status}")

            # the store rate, to place the due instant: a few timers due later
            probe = min(n, 5_000)
            t_probe = time.monotonic()
            for i in range(probe):
                put("P", i, now + 3_600_000)
            rate = probe / max(time.monotonic() - t_probe, 1e-3)
            b.store.write_out()
            # due at a whole second after the burst is stored (the rate falls as it goes)
            due = int(time.time() * 1000) + int(n / rate * 1000 * 2) + 5_000
            due = due - due % 1000 + 1000
            for i in range(n):
                put("B", i, due)
                if i % 20_000 == 0:
                    b.store.write_out()
                    await asyncio.sleep(0)
            b.store.write_out()
            stored_s = time.monotonic() - t0
            left = due - int(time.time() * 1000)
            if left <= 0:
                raise RuntimeError(f"storing took past the due instant ({-left} ms)")
            fired0 = b.stats.timers_fired
            await asyncio.sleep(left / 1000)
            deadline = time.monotonic() + 120
            while b.stats.timers_fired - fired0 < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            fired = b.stats.timers_fired - fired0
            late: list[int] = []
            for q in range(QUEUES):
                cq = b.store.find_queue(TOPIC, q)
                if cq is None:
                    continue
                units = []
                pos = 0
                while pos < cq.max_offset:
                    got = cq.units(pos, 10_000)
                    if not got:
                        break
                    units.extend(got)
                    pos += len(got)
                b.store.write_out()
                for rec in b.store.commitlog.read_many([(u[0], u[1]) for u in units]):
                    m = decode_record(rec)
                    if m.properties.get("TIMER_OUT_MS") == str(due):
                        late.append(m.store_timestamp - due)
            late.sort()
            return {
                "core": native.core(),
                "timers": n,
                "stored in s": stored_s,
                "fired": fired,
                "read back": len(late),
                "first fired ms after due": late[0] if late else None,
                "p50 ms": percentile(late, 50) if late else None,
                "p99 ms": percentile(late, 99) if late else None,
                "last fired ms after due": late[-1] if late else None,
                "fired per s": len(late) / max(late[-1] / 1000, 1e-3) if late else None,
            }
        finally:
            await b.stop("burst done")
            close_sinks()

    try:
        return uvloop.run(run())
    finally:
        shutil.rmtree(data, ignore_errors=True)


# ---------------------------------------------------------------- pending


def bulk_load(data: Path, pending: int) -> float:
    """Store ``pending`` timers (due 1..40 days ahead) through the broker's put path."""
    from kairosmq.server.broker import Broker
    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.put.kind import MessageKind
    from kairosmq.server.store import MessageInner

    async def load() -> float:
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
        rnd = random.Random(13)
        now = int(time.time() * 1000)
        t0 = time.monotonic()
        b.topics.ensure(TOPIC, QUEUES)
        for i in range(pending):
            due = now + 86_400_000 + rnd.randrange(39 * 86_400_000)
            msg = MessageInner(
                topic=TOPIC,
                queue_id=i % QUEUES,
                body=b"p" * 64,
                properties={"UNIQ_KEY": f"P{i:016d}"},
                born_timestamp=now,
            )
            r = b.put_path.put(msg, MessageKind.TIMER, due_ms=due)
            if r.status.value != "PUT_OK":
                raise RuntimeError(f"put {i}: {r.status}")
            if i % 50_000 == 0:
                b.store.write_out()
                await asyncio.sleep(0)
                if i and i % 1_000_000 == 0:
                    print(f"  stored {i:,} timers ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        elapsed = time.monotonic() - t0
        await b.stop("bulk load done")
        return elapsed

    return asyncio.run(load())


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def pending_round(pending: int, workdir: Path) -> dict[str, Any]:
    data = workdir / "pending"
    load_s = bulk_load(data, pending)
    port = free_port()
    broker, start_s = start_broker(data, port)
    try:
        rss_start = status_kib(broker.pid).get("VmRSS", 0) / 1024
        time.sleep(10)
        st = status_kib(broker.pid)
    finally:
        stop_proc(broker, 30)
    return {
        "pending": pending,
        "bulk load s": load_s,
        "restart to serving s": start_s,
        "rss at start MB": rss_start,
        "rss after 10 s MB": st.get("VmRSS", 0) / 1024,
        "peak rss MB": st.get("VmHWM", 0) / 1024,
        "timer files MB": disk_mb(data / "store" / "timer"),
        "commit log MB": disk_mb(data / "store" / "commitlog"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,5000")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--pending", type=int, default=0, help="timers for the pending part")
    ap.add_argument(
        "--burst", type=int, default=0, help="timers due at one instant (the burst part)"
    )
    ap.add_argument("--skip-lateness", action="store_true")
    ap.add_argument(
        "--restart",
        action="store_true",
        help="kill -9 and restart the broker between the sends and the first due",
    )
    ap.add_argument(
        "--kairos-arg",
        action="append",
        default=[],
        help="a broker option (repeat), e.g. --kairos-arg=--no-message-logs",
    )
    ap.add_argument(
        "--cross-bucket",
        action="store_true",
        help="place the due span across a minute-bucket boundary",
    )
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="rounds per rate (p99 spread)")
    ap.add_argument(
        "--brokers",
        default="1",
        help="broker processes per round behind one name server; a list "
        "(1,2) alternates the counts round by round",
    )
    ap.add_argument(
        "--py-spy",
        dest="py_spy",
        type=Path,
        default=None,
        help="sample the broker with py-spy over the due span into this dir",
    )
    ap.add_argument("--agent", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.agent:
        kind, at, *rest = a.agent  # at: the brokers' ports, comma-separated
        ports = [int(p) for p in at.split(",")]
        if kind == "producer":
            n, rate, body, window, t0 = map(int, rest)
            res = uvloop.run(producer(ports, n, rate, body, window, t0))
        else:
            res = uvloop.run(consumer(ports, int(rest[0]), float(rest[1])))
        print(json.dumps(res))
        return
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="kmq-timers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if not a.skip_lateness:
        print(
            "| due/s | brokers | n | send/s | p50 ms | p90 | p99 | p99.9 | max | early | lost "
            "| dup | CPU µs/fired | consumer µs/msg | RSS MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        p99s, steals, hosts = {}, {}, {}  # (rate, brokers) -> per round: p99, steal, control
        counts = [int(b) for b in a.brokers.split(",")]
        for rate, nb in [
            (int(r), nb) for r in a.rates.split(",") for _ in range(a.repeat) for nb in counts
        ]:
            r = lateness_round(
                rate,
                a.seconds,
                a.body,
                workdir,
                restart=a.restart,
                cross_bucket=a.cross_bucket,
                brokers=nb,
                broker_args=tuple(a.kairos_arg),
                py_spy=a.py_spy,
            )
            key = (rate, nb)
            p99s.setdefault(key, []).append(r["p99"])
            steals.setdefault(key, []).append(r["steal_ms"])
            hosts.setdefault(key, []).append(r["host"]["p99"])
            f = {k: (f"{v:.1f}" if isinstance(v, float) else v) for k, v in r.items()}
            print(
                f"| {f['rate']} | {nb} | {f['n']} | {f['send/s']} | {f['p50']} | {f['p90']} | "
                f"{f['p99']} | {f['p99.9']} | {f['max']} | {f['early']} | {f['lost']} | "
                f"{f['dup']} | {f['cpu_us_per_fired']} | {f['consumer_us']} | {f['rss_mb']} |"
                + ("" if r["stored before due"] else "  (sends overran the first due)")
            )
            print(f"    worst {250} ms windows of due time (max/p99 ms): {r['worst']}")
            print(
                f"    host steal over the due span: {r['steal_ms']:.0f} vCPU-ms; messages per "
                f"pull answer {r['per_answer']:.2f}; broker fire lateness (store - due): "
                + ", ".join(f"<= {b:g} ms {v:.2f} %" for b, v in r["fire"].items())
            )
            print(f"    {r['host']['line']}")
            if a.py_spy:
                from bench.profile_delayed import top_functions

                print("    py-spy top functions over the due span (own %, total %):")
                for fn, own, tot in top_functions(a.py_spy / f"timers-{rate}.collapsed"):
                    print(f"      {own:5.1f} {tot:5.1f}  {fn}")
        for (rate, nb), got in p99s.items():
            if len(got) > 1:
                print(
                    f"p99 at {rate} due/s, {nb} broker(s), over {len(got)} runs: "
                    + ", ".join(f"{v:.1f}" for v in got)
                    + f" ms (<= 5 ms in {sum(v <= 5 for v in got)} of {len(got)}); host "
                    "steal over each due span: "
                    + ", ".join(f"{v:.0f}" for v in steals[rate, nb])
                    + " vCPU-ms; host "
                    "control p99: " + ", ".join(f"{v:.1f}" for v in hosts[rate, nb]) + " ms"
                )
    if a.burst:
        r = burst_round(a.burst, workdir, a.body)
        for k, v in r.items():
            print(f"burst {k}: {v:,.1f}" if isinstance(v, float) else f"burst {k}: {v}")
    if a.pending:
        r = pending_round(a.pending, workdir)
        for k, v in r.items():
            print(f"{k}: {v:,.2f}" if isinstance(v, float) else f"{k}: {v:,}")
    if a.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
