"""Delayed delivery side by side: kairosmq vs Redis, RabbitMQ and Apache RocketMQ (issue 12).

Usage (from the repository root, as root so missing servers can be installed from Debian):

    .venv/bin/python bench/bench_peers.py                       # 20,000 msgs at 1000, 5000, max
    .venv/bin/python bench/bench_peers.py --quick               # smoke: 2,000 msgs at 1000, max
    .venv/bin/python bench/bench_peers.py --systems kairosmq,redis --rates 2000 --json out.json
    .venv/bin/python bench/bench_peers.py --kairos-arg=--no-message-logs

The workload, for every system: N messages of 1 KiB, each delayed 1 s, persistent and
acknowledged, producer and consumer in their own processes; lateness = receive - (send + 1 s)
on this machine's clock. Every (rate, system) run gets a freshly started server (127.0.0.1,
empty data dir, stopped by pid afterwards); then kairosmq once more at each Redis variant's
max rate. Prints one row per run, then the ratios kairosmq / peer from the same run and
issue 12's targets as met or not; ``--json`` writes everything. Method and columns:
``bench/peers/README.md``.

Owns: the orchestration (bench venv, install, run order, RSS/CPU sampling, report).
Invariants: the client drivers run in their own venv (``--bench-venv``), never in the
project's; every run is bounded (producer ``--max-send-s``, consumer last send + delay + 15 s).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from peers.servers import (  # noqa: E402
    KairosServer,
    RabbitServer,
    RedisServer,
    RocketMQServer,
    Server,
    log,
)
from peers.stats import HostSteal, ProcTree, summarize  # noqa: E402

BENCH_DEPS = ["redis>=5", "hiredis", "aio-pika>=9", "uvloop"]
ALL_SYSTEMS = ["kairosmq", "redis", "redis-pipelined", "rabbitmq", "rocketmq"]
REDIS = ("redis", "redis-pipelined")


def ensure_venv(path: Path) -> str:
    py = path / "bin" / "python"
    if not py.exists():
        log(f"creating the bench venv {path}")
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    probe = subprocess.run([str(py), "-c", "import redis, aio_pika, uvloop"], capture_output=True)
    if probe.returncode != 0:
        log(f"installing {' '.join(BENCH_DEPS)} into {path}")
        subprocess.run([str(py), "-m", "pip", "install", "-q", *BENCH_DEPS], check=True)
    return str(py)


def make_server(system: str, a: argparse.Namespace) -> Server:
    wd = Path(a.workdir)
    if system == "kairosmq":
        return KairosServer(wd, a.keep, a.kairos_python, REPO, a.kairos_arg or [])
    if system in REDIS:
        return RedisServer(wd, a.keep)
    if system == "rabbitmq":
        return RabbitServer(wd, a.keep)
    if system == "rocketmq":
        return RocketMQServer(wd, a.keep, Path(a.rocketmq_dir))
    raise SystemExit(f"unknown system {system!r} (known: {', '.join(ALL_SYSTEMS)})")


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result line in {text[-500:]!r}")


def run_one(system: str, rate: float, a: argparse.Namespace, py: str) -> dict[str, Any]:
    server = make_server(system, a)
    load = os.getloadavg()[0]
    agents: list[subprocess.Popen[str]] = []
    try:
        opts = server.start()
        tree = ProcTree(server.pids)
        common = [py, "-m", "peers.agent"]
        args = ["--system", system, "--n", str(a.n), "--delay-ms", str(a.delay_ms)]
        for k, v in opts.items():
            args += ["--opt", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(HERE))
        records = server.dir / "records.bin"
        with (
            open(server.dir / "consumer.err", "wb") as cerr,
            open(server.dir / "producer.err", "wb") as perr,
        ):
            cons = subprocess.Popen(
                common + ["consumer", *args, "--records", str(records)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=cerr,
                text=True,
                env=env,
                cwd=HERE,
            )
            agents.append(cons)
            assert cons.stdin is not None and cons.stdout is not None
            if "READY" not in cons.stdout.readline():
                raise RuntimeError(
                    "consumer did not start: " + (server.dir / "consumer.err").read_text()[-2000:]
                )
            tree.begin()
            steal = HostSteal(every=0.25).start()
            prod = subprocess.Popen(
                common
                + [
                    "producer",
                    *args,
                    "--rate",
                    str(rate),
                    "--body",
                    str(a.body),
                    "--window",
                    str(a.window),
                    "--max-send-s",
                    str(a.max_send_s),
                ],
                stdout=subprocess.PIPE,
                stderr=perr,
                text=True,
                env=env,
                cwd=HERE,
            )
            agents.append(prod)
            while prod.poll() is None:
                tree.sample()
                time.sleep(0.25)
            assert prod.stdout is not None
            try:
                pres = _last_json(prod.stdout.read())
            except RuntimeError as e:
                raise RuntimeError(
                    f"producer failed: {e}: " + (server.dir / "producer.err").read_text()[-2000:]
                ) from e
            cons.stdin.write(f"END {pres['acked']} {pres['last_send'] or time.time()}\n")
            cons.stdin.flush()
            while cons.poll() is None:
                tree.sample()
                time.sleep(0.25)
            tree.sample()
            cpu = tree.cpu_used()
            steal.stop()
            cres = _last_json(cons.stdout.read())
        row = summarize(system, rate, pres, cres, records.read_bytes(), a.delay_ms, cpu, tree)
        row["loadavg_1m_at_start"] = round(load, 2)
        row["host_steal_ms"] = round(steal.total_ms())
        return row
    finally:
        for proc in agents:  # only left running when something above failed
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.stop()


def fmt(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


HEAD = (
    "| system | rate | send/s | deliv/s | p50 | p90 | p99 | p99.9 | max | early | early>1ms "
    "| lost | dup | send err | RSS MB | CPU µs/msg | wakes/msg | steal ms |"
)


def table_row(r: dict[str, Any]) -> str:
    lat = r["lateness_ms"]
    return (
        f"| {r['system']} | {r['rate']} | {r['send_rate']:,.0f} | {r['delivery_rate']:,.0f} | "
        f"{fmt(lat['p50'])} | {fmt(lat['p90'])} | {fmt(lat['p99'])} | {fmt(lat['p99.9'])} | "
        f"{fmt(lat['max'])} | {r['early']} | {r['early_over_1ms']} | {r['lost']} | "
        f"{r['duplicates']} | {r['send_errors']} | "
        f"{r['broker_rss_mb']:.0f} | {fmt(r['broker_cpu_us_per_msg'], 0)} | "
        f"{fmt(r.get('broker_wakes_per_msg'), 2)} | {r.get('host_steal_ms', '-')} |"
    )


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kairosmq / peer for every rate where both ran (same run of this script)."""
    out = []
    by = {(r["system"], str(r["rate"])): r for r in rows}
    for (system, rate), k in by.items():
        if system != "kairosmq":
            continue
        for peer in ALL_SYSTEMS[1:]:
            p = by.get((peer, rate))
            if p is None:
                continue

            def div(x: float | None, y: float | None) -> float | None:
                return round(x / y, 2) if x is not None and y else None

            out.append(
                {
                    "rate": rate,
                    "peer": peer,
                    "send_rate": div(k["send_rate"], p["send_rate"]),
                    "delivery_rate": div(k["delivery_rate"], p["delivery_rate"]),
                    "p99": div(k["lateness_ms"]["p99"], p["lateness_ms"]["p99"]),
                    "cpu_per_msg": div(k["broker_cpu_us_per_msg"], p["broker_cpu_us_per_msg"]),
                }
            )
    return out


def targets(rows: list[dict[str, Any]], rat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 12's targets, read off this run (only those this run measured)."""
    out: list[dict[str, Any]] = []

    def add(what: str, value: float | None, op: str, goal: float) -> None:
        if value is not None:
            ok = value >= goal if op == ">=" else value <= goal
            out.append({"target": what, "value": value, "goal": f"{op} {goal:g}", "met": ok})

    for x in rat:
        if x["rate"] == "max" and x["peer"] in (*REDIS, "rabbitmq"):
            add(
                f"max send/s kairosmq / {x['peer']}",
                x["send_rate"],
                ">=",
                2.0 if x["peer"] in REDIS else 3.0,
            )
    kr = [r for r in rows if r["system"] == "kairosmq"]
    for r in kr:
        if r.get("note"):
            add(
                f"kairosmq p99 ms {r['note']} rate ({r['rate']}/s)",
                r["lateness_ms"]["p99"],
                "<=",
                5.0,
            )
        if r["rate"] in (500, 2000) and not r.get("note"):
            add(
                f"kairosmq CPU µs/msg at {r['rate']}/s",
                r["broker_cpu_us_per_msg"],
                "<=",
                300.0 if r["rate"] == 500 else 150.0,
            )
    if kr:
        add(
            "kairosmq messages > 1 ms early (this round)",
            sum(r["early_over_1ms"] for r in kr),
            "<=",
            0,
        )
        add("kairosmq messages early at all (this round)", sum(r["early"] for r in kr), "<=", 0)
        add(
            "kairosmq lost + duplicates (this round)",
            sum(r["lost"] + r["duplicates"] for r in kr),
            "<=",
            0,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--systems",
        default=None,
        help="comma list of kairosmq,redis,redis-pipelined,rabbitmq,rocketmq "
        "(default: all; rocketmq only when --rocketmq-dir exists)",
    )
    ap.add_argument(
        "--rates",
        default="1000,5000,max",
        help="comma list of msgs/s; max (or 0) = unthrottled, --window in flight",
    )
    ap.add_argument("--n", type=int, default=20000, help="messages per run (20000)")
    ap.add_argument("--body", type=int, default=1024, help="body bytes (1024)")
    ap.add_argument(
        "--delay-ms",
        type=int,
        default=1000,
        choices=[1000],
        help="delay (1 s = level 1 on the RocketMQ-protocol brokers)",
    )
    ap.add_argument("--window", type=int, default=256, help="max unacknowledged sends (256)")
    ap.add_argument("--max-send-s", type=float, default=120.0, help="producer stops after this")
    ap.add_argument("--quick", action="store_true", help="smoke run: --n 2000 --rates 1000,max")
    ap.add_argument("--json", help="write rows, ratios and metadata to this file")
    ap.add_argument("--bench-venv", default=str(Path.home() / ".cache" / "kairosmq-bench-venv"))
    ap.add_argument(
        "--kairos-python",
        default=str(REPO / ".venv" / "bin" / "python")
        if (REPO / ".venv" / "bin" / "python").exists()
        else sys.executable,
    )
    ap.add_argument(
        "--kairos-arg",
        action="append",
        help="extra kairosmq broker option, e.g. --kairos-arg=--no-message-logs",
    )
    ap.add_argument(
        "--rocketmq-dir",
        default=os.environ.get("KAIROS_ROCKETMQ_HOME")
        or str(REPO.parent / "shared" / "apache-rocketmq"),
    )
    ap.add_argument(
        "--workdir",
        default=os.environ.get("TMPDIR", "/tmp"),
        help="parent of the fresh per-run data dirs",
    )
    ap.add_argument("--keep", action="store_true", help="keep data dirs and server logs")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds; ratios and targets are reported per round (the spread)",
    )
    ap.add_argument(
        "--no-at-redis-max",
        action="store_true",
        help="skip the extra kairosmq run at the rate Redis reached at max",
    )
    a = ap.parse_args()
    if a.quick:
        a.n, a.rates = 2000, "1000,max"
    if a.systems:
        systems = a.systems.split(",")
    else:
        systems = [
            s
            for s in ALL_SYSTEMS
            if s != "rocketmq" or (Path(a.rocketmq_dir) / "start_broker.sh").exists()
        ]
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {', '.join(unknown)} (known: {', '.join(ALL_SYSTEMS)})")
    rates = [0.0 if r in ("max", "0") else float(r) for r in a.rates.split(",")]
    py = ensure_venv(Path(a.bench_venv))
    for s in systems:
        {"redis": RedisServer, "redis-pipelined": RedisServer, "rabbitmq": RabbitServer}.get(
            s, Server
        ).install()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    rows: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    print(HEAD)
    print("|" + "---|" * 17, flush=True)
    for rep in range(1, a.repeat + 1):
        got = run_round(rep, systems, rates, a, py)
        rows += got
        good = [r for r in got if "error" not in r]
        rat = ratios([r for r in good if not r.get("note")])
        rounds.append({"repeat": rep, "ratios": rat, "targets": targets(good, rat)})
    for rd in rounds:
        report_round(rd, a.repeat)
    if a.json:
        meta = {
            "started": started,
            "n": a.n,
            "body": a.body,
            "delay_ms": a.delay_ms,
            "window": a.window,
            "rates": a.rates,
            "systems": systems,
            "repeat": a.repeat,
            "kairos_args": a.kairos_arg or [],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_end": os.getloadavg(),
        }
        Path(a.json).write_text(
            json.dumps({"meta": meta, "runs": rows, "rounds": rounds}, indent=1)
        )
        log(f"wrote {a.json}")
    if any("error" in r for r in rows):
        sys.exit(1)


def run_round(
    rep: int, systems: list[str], rates: list[float], a: argparse.Namespace, py: str
) -> list[dict[str, Any]]:
    """Every (rate, system) once, systems interleaved per rate, then kairosmq at Redis's max."""
    rows: list[dict[str, Any]] = []

    def one(system: str, rate: float, note: str = "") -> None:
        log(f"round {rep}: {system} at {'max' if not rate else int(rate)}/s, n={a.n} {note}")
        try:
            row = run_one(system, rate, a, py)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            log(f"{system} at {rate or 'max'}: FAILED: {e}")
            rows.append(
                {
                    "system": system,
                    "rate": int(rate) if rate else "max",
                    "repeat": rep,
                    "error": str(e),
                }
            )
            return
        row["repeat"] = rep
        if note:
            row["note"] = note
        rows.append(row)
        print(table_row(row) + (f" ← {note}" if note else ""), flush=True)

    for rate in rates:
        for system in systems:
            one(system, rate)
    # kairosmq again at the rate each Redis variant reached at max (issue 12's target 2)
    for r in [r for r in rows if r["system"] in REDIS and r["rate"] == "max"]:
        if (
            "error" not in r
            and r["send_rate"] > 0
            and "kairosmq" in systems
            and not a.no_at_redis_max
        ):
            one("kairosmq", float(round(r["send_rate"])), f"at {r['system']} max")
    return rows


def report_round(rd: dict[str, Any], repeats: int) -> None:
    tag = f" (round {rd['repeat']} of {repeats})" if repeats > 1 else ""
    if rd["ratios"]:
        print(
            f"\nkairosmq / peer, same run{tag} (send/s and deliv/s: higher is better for "
            "kairosmq; p99 and CPU/msg: lower is better)"
        )
        print("| rate | peer | send/s × | deliv/s × | p99 × | CPU/msg × |")
        print("|---|---|---|---|---|---|")
        for x in rd["ratios"]:
            print(
                f"| {x['rate']} | {x['peer']} | {fmt(x['send_rate'], 2)} | "
                f"{fmt(x['delivery_rate'], 2)} | {fmt(x['p99'], 2)} | "
                f"{fmt(x['cpu_per_msg'], 2)} |"
            )
    if rd["targets"]:
        print(f"\nissue 12 targets{tag}:")
        for t in rd["targets"]:
            v = t["value"]
            shown = f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"
            print(
                f"  {t['target']}: {shown} (target {t['goal']}) {'met' if t['met'] else 'NOT met'}"
            )


if __name__ == "__main__":
    main()
