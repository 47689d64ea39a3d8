"""Replication's cost and reach: no slave vs ASYNC_MASTER + slave vs SYNC_MASTER + slave,
the lag under load, and the time from a master's kill -9 to its promoted slave taking sends.

Usage (from the repository root; the machine is shared, so run it niced)::

    nice -n 10 .venv/bin/python bench/bench_replication.py                # 3 rounds of 5 s
    nice -n 10 .venv/bin/python bench/bench_replication.py --rounds 2 --seconds 4

Each round starts fresh broker processes (``python -m kairosmq.server broker``, real
ports, a temp data dir) for each mode, in turn (rounds alternate the modes, so a noisy
neighbour hits all of them):

* ``none``: a lone ASYNC_MASTER (its HA port open, no slave);
* ``async``: an ASYNC_MASTER and a SLAVE (``--ha-master-address``);
* ``sync``: a SYNC_MASTER and a SLAVE (a send is acked once the slave holds it).

The load is the delayed bench load: ``--inflight`` sends in flight over ``--conns``
connections from this process, 1 KiB bodies, each with delay level ``--delay-level``
(default 4 = 30 s: nothing fires in the window), ``--warmup`` s then ``--seconds`` s
counted. Per mode it prints acked sends/s (median round), the ratio to ``none``, broker
CPU per acked send (utime + stime from ``/proc/<pid>/stat`` of the master, and of master +
slave: the broker process tree), and, for the pairs, the replication lag the master
reports (``KAIROS_GET_BROKER_STATUS`` ``ha.lagBytes`` / ``ha.lagMs``, sampled every
0.1 s in the window: median and max).

Then the failover: an ASYNC_MASTER + SLAVE under the same load, the master killed -9, and
``kairosmq admin --broker <slave> promote`` run at once (the real CLI); it prints the time
from the kill to the command's return and to the first send the promoted slave acks
(sends are retried every 10 ms from the kill). Figures are printed, not asserted.

Owns: this orchestration only (brokers and the promote command are the real ones).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

TOPIC = "BenchRepl"
TICK = os.sysconf("SC_CLK_TCK")
MODES = ("none", "async", "sync")


def _free_pair() -> int:
    """A port p with p + 1 free (broker and HA port)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Broker:
    def __init__(self, data: Path, port: int, *extra: str) -> None:
        self.port = port
        self.address = f"127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(port),
            "--namesrv-port",
            str(_free_port()),
            "--data-dir",
            str(data),
            "--no-vip-channel",
            "--no-log-file",
            "--log-level",
            "warning",
            "--no-message-logs",
            "--segment-size-mb",
            "256",
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )

    async def wait_listening(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker on {self.port} exited {self.proc.returncode}")
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise RuntimeError(f"broker on {self.port} did not listen")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _ext(delay_level: int) -> dict[str, str]:
    from kairosmq.protocol.properties import encode_properties

    props = {"DELAY": str(delay_level)} if delay_level > 0 else {}
    return {
        "a": "bench_repl",
        "b": TOPIC,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": encode_properties(props),
    }


async def _status(client: Any) -> dict[str, Any]:
    from kairosmq.protocol.codes import RequestCode

    r = await client.invoke(RequestCode.KAIROS_GET_BROKER_STATUS, {}, b"", timeout=5)
    return dict(orjson.loads(r.body))


async def _load(
    address: str, args: argparse.Namespace, t_start: float, t_end: float
) -> tuple[int, int]:
    """Sends until ``t_end``; (acked, failed) of those sent and answered in the window."""
    from kairosmq.client.errors import ClientError
    from kairosmq.client.remoting import RemotingClient
    from kairosmq.protocol.codes import RequestCode, ResponseCode

    body = os.urandom(args.body // 2).hex().encode()[: args.body]
    clients = [RemotingClient(address) for _ in range(args.conns)]
    acked = failed = 0

    async def loop(i: int) -> None:
        nonlocal acked, failed
        c = clients[i % len(clients)]
        q = i % 4
        while (now := time.monotonic()) < t_end:
            ext = _ext(args.delay_level)
            ext["e"] = str(q)
            try:
                r = await c.invoke(RequestCode.SEND_MESSAGE_V2, ext, body, timeout=10)
                good = r.code == ResponseCode.SUCCESS
            except ClientError:
                good = False
            if now >= t_start and time.monotonic() <= t_end:
                if good:
                    acked += 1
                else:
                    failed += 1

    try:
        await asyncio.gather(*(loop(i) for i in range(args.inflight)))
    finally:
        for c in clients:
            c.close()
    return acked, failed


async def _wait_slave(master: Broker) -> None:
    from kairosmq.client.remoting import RemotingClient

    c = RemotingClient(master.address)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = await _status(c)
            if any(s.get("ackOffset", -1) >= 0 for s in st["ha"]["slaves"]):
                return
            await asyncio.sleep(0.1)
    finally:
        c.close()
    raise RuntimeError("the slave never attached")


async def _pair(tmp: Path, mode: str) -> tuple[Broker, Broker | None]:
    port = _free_pair()
    role = "SYNC_MASTER" if mode == "sync" else "ASYNC_MASTER"
    m = Broker(tmp / "m", port, "--broker-role", role)
    await m.wait_listening()
    s = None
    if mode != "none":
        s = Broker(
            tmp / "s",
            _free_port(),
            "--broker-role",
            "SLAVE",
            "--ha-master-address",
            f"127.0.0.1:{port + 1}",
        )
        await s.wait_listening()
        await _wait_slave(m)
    return m, s


async def one_round(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from kairosmq.client.remoting import RemotingClient

    with tempfile.TemporaryDirectory(prefix="bench-repl-") as d:
        m, s = await _pair(Path(d), mode)
        try:
            t_start = time.monotonic() + args.warmup
            t_end = t_start + args.seconds
            lags: list[tuple[int, int]] = []
            cpu: dict[str, float] = {}

            async def sample() -> None:
                c = RemotingClient(m.address)
                try:
                    await asyncio.sleep(max(0.0, t_start - time.monotonic()))
                    cpu["m0"] = cpu_s(m.proc.pid)
                    cpu["s0"] = cpu_s(s.proc.pid) if s else 0.0
                    while time.monotonic() < t_end:
                        if s is not None:
                            ha = (await _status(c))["ha"]
                            if ha.get("lagBytes") is not None:
                                lags.append((ha["lagBytes"], ha.get("lagMs") or 0))
                        await asyncio.sleep(0.1)
                    cpu["m1"] = cpu_s(m.proc.pid)
                    cpu["s1"] = cpu_s(s.proc.pid) if s else 0.0
                finally:
                    c.close()

            (acked, failed), _ = await asyncio.gather(
                _load(m.address, args, t_start, t_end), sample()
            )
        finally:
            for b in (s, m):
                if b is not None:
                    b.stop()
    m_cpu = cpu["m1"] - cpu["m0"]
    s_cpu = cpu["s1"] - cpu["s0"]
    return {
        "mode": mode,
        "rate": acked / args.seconds,
        "failed": failed,
        "cpu_master_us": 1e6 * m_cpu / max(1, acked),
        "cpu_tree_us": 1e6 * (m_cpu + s_cpu) / max(1, acked),
        "lag_bytes": [b for b, _ in lags],
        "lag_ms": [ms for _, ms in lags],
    }


async def failover(args: argparse.Namespace) -> dict[str, float]:
    from kairosmq.client.errors import ClientError
    from kairosmq.client.remoting import RemotingClient
    from kairosmq.protocol.codes import RequestCode, ResponseCode

    with tempfile.TemporaryDirectory(prefix="bench-repl-fo-") as d:
        m, s = await _pair(Path(d), "async")
        assert s is not None
        try:
            t_end = time.monotonic() + args.warmup + 2.0
            await _load(m.address, args, time.monotonic(), t_end)  # some log to hold
            t_kill = time.monotonic()
            m.proc.kill()
            promote = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "kairosmq.server",
                "admin",
                "--broker",
                s.address,
                "promote",
                "--json",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            c = RemotingClient(s.address, backoff_base=0.01, backoff_max=0.05)
            body = b"x" * args.body
            first_ack = None
            promoted_at = None
            try:
                while first_ack is None and time.monotonic() - t_kill < 60:
                    if promoted_at is None and promote.returncode is not None:
                        promoted_at = time.monotonic()
                    try:
                        r = await c.invoke(RequestCode.SEND_MESSAGE_V2, _ext(0), body, timeout=2)
                        if r.code == ResponseCode.SUCCESS:
                            first_ack = time.monotonic()
                            break
                    except ClientError:
                        pass
                    await asyncio.sleep(0.01)
                rc = await promote.wait()
                if promoted_at is None:
                    promoted_at = time.monotonic()
            finally:
                c.close()
            if rc != 0 or first_ack is None:
                raise RuntimeError(f"promotion failed (admin exit {rc})")
        finally:
            s.stop()
    return {"promote_cmd_s": promoted_at - t_kill, "first_ack_s": first_ack - t_kill}


def _fmt(xs: list[int]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.0f} / {max(xs)}"


async def main_async(args: argparse.Namespace) -> None:
    load0 = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = MODES if r % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            runs[mode].append(await one_round(mode, args))
    print(
        f"# bench_replication {time.strftime('%Y-%m-%d')} {platform.node()} "
        f"cpus={os.cpu_count()} rounds={args.rounds} seconds={args.seconds} "
        f"inflight={args.inflight} body={args.body} delay_level={args.delay_level}"
    )
    print(
        f"{'mode':<7} {'sends/s':>9} {'ratio':>6} {'cpu us/send (master)':>21} "
        f"{'(master+slave)':>15} {'failed':>7} {'lag bytes med/max':>18} {'lag ms med/max':>15}"
    )
    base = statistics.median(x["rate"] for x in runs["none"])
    for mode in MODES:
        rs = sorted(runs[mode], key=lambda x: x["rate"])
        med = rs[len(rs) // 2]
        lag_b = [b for x in runs[mode] for b in x["lag_bytes"]]
        lag_ms = [ms for x in runs[mode] for ms in x["lag_ms"]]
        print(
            f"{mode:<7} {med['rate']:>9.0f} {med['rate'] / base:>6.2f} "
            f"{med['cpu_master_us']:>21.0f} {med['cpu_tree_us']:>15.0f} "
            f"{sum(x['failed'] for x in runs[mode]):>7} {_fmt(lag_b):>18} {_fmt(lag_ms):>15}"
        )
    if not args.no_failover:
        fo = await failover(args)
        print(
            f"failover (ASYNC_MASTER kill -9, `kairosmq admin promote`): promote command "
            f"returned after {fo['promote_cmd_s']:.2f} s, first send acked by the promoted "
            f"slave after {fo['first_ack_s']:.2f} s"
        )
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--delay-level", type=int, default=4)
    p.add_argument("--no-failover", action="store_true")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
