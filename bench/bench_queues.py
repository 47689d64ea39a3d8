"""Many consume queues under a low open-file limit (issue 29): disk, fds, RSS, restart.

A broker process on fresh files, started with ``RLIMIT_NOFILE`` set to ``--nofile`` (soft
and hard, like ``ulimit -n``), gets ``--queues`` new (topic, queue) pairs, each made by
one 1-byte send (topics of ``--queues-per-topic`` queues made by UPDATE_AND_CREATE_TOPIC
first). Then it is killed (-9) and restarted under the same limit. Prints, per phase:
sends acked / refused, open fds of the broker (``/proc/<pid>/fd``) and its fd budget
(the ``broker.fd_budget`` log event), RSS, the disk the consume queues use (allocated
blocks) and per new queue, the time to serving after the restart and the store's
recovery time; then that a new connection and a send are accepted, and how many queues
answered their one message after the restart (every queue is pulled: nothing acked may
be lost).

    python bench/bench_queues.py                                  # 2,000 queues, 256 fds
    python bench/bench_queues.py --queues 100000 --nofile 256     # the 100k figures
    python bench/bench_queues.py --queues 1000 --nofile 20000     # no fd pressure

Figures are for this machine and this run only (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers.remoting import (  # noqa: E402 - after the path insert
    PULL_MESSAGE,
    SEND_MESSAGE_V2,
    SUCCESS,
    RemotingClient,
    decode_bodies,
)
from bench.peers.servers import free_port, stop_proc  # noqa: E402

UPDATE_AND_CREATE_TOPIC = 17


def _limit(nofile: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return apply


class Proc:
    """One broker process on ``data`` under an open-file limit (restartable)."""

    def __init__(self, data: Path, nofile: int, extra: list[str]) -> None:
        self.data, self.nofile, self.extra = data, nofile, extra
        self.port, self.ns_port = free_port(), free_port()
        self.p: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 600.0) -> float:
        """Start; return seconds until the broker port accepts a connection."""
        cmd = [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(self.port),
            "--namesrv-port",
            str(self.ns_port),
            "--data-dir",
            str(self.data),
            "--no-vip-channel",
            "--log-dir",
            str(self.data / "logs"),
            "--log-format",
            "json",
            "--no-message-logs",
            "--segment-size-mb",
            "64",
            "--disk-max-used-ratio",
            "0.995",
            *self.extra,
        ]
        t0 = time.monotonic()
        self.p = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            preexec_fn=_limit(self.nofile),
        )
        import socket

        while time.monotonic() - t0 < timeout:
            if self.p.poll() is not None:
                err = self.p.stderr.read().decode() if self.p.stderr else ""
                raise SystemExit(f"broker exited with {self.p.returncode}: {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(0.05)
        raise SystemExit("broker did not listen")

    def kill(self) -> None:
        assert self.p is not None
        self.p.kill()
        self.p.wait()

    def fds(self) -> int:
        assert self.p is not None
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def rss_mb(self) -> float:
        assert self.p is not None
        for line in Path(f"/proc/{self.p.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def events_after(self, name: str, seen: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The ``name`` events once there are more than ``seen`` (the sink thread writes
        them a moment after the broker logs them)."""
        t0 = time.monotonic()
        while True:
            got = self.events(name)
            if len(got) > seen or time.monotonic() - t0 > timeout:
                return got
            time.sleep(0.1)

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for f in sorted((self.data / "logs").glob("*")):
            if f.suffix == ".gz":
                continue
            for line in f.read_text(errors="replace").splitlines():
                if f'"{name}"' in line:
                    out.append(json.loads(line))
        return out


def disk_bytes(root: Path) -> tuple[int, int]:
    """(allocated bytes, files) under ``root``."""
    total = files = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            try:
                st = os.stat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
            files += 1
    return total, files


async def _window(calls: list[Any], width: int) -> list[Any]:
    sem = asyncio.Semaphore(width)

    async def one(c: Any) -> Any:
        async with sem:
            try:
                return await c
            except (ConnectionError, TimeoutError) as err:
                return err

    return await asyncio.gather(*(one(c) for c in calls))


def _send_ext(topic: str, qid: int) -> dict[str, Any]:
    return {
        "a": "PG",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": qid,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": "",
    }


async def fill(
    port: int, pairs: list[tuple[str, int]], topics: dict[str, int], width: int
) -> tuple[list[tuple[str, int]], dict[int, int], float]:
    c = RemotingClient()
    await c.open("127.0.0.1", port)
    for t, n in topics.items():
        h, _ = await c.call(
            UPDATE_AND_CREATE_TOPIC,
            {"topic": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6},
        )
        assert h["code"] == SUCCESS, h
    t0 = time.monotonic()
    res = await _window([c.call(SEND_MESSAGE_V2, _send_ext(t, q), b"x") for t, q in pairs], width)
    took = time.monotonic() - t0
    await c.close()
    acked: list[tuple[str, int]] = []
    refused: dict[int, int] = {}
    for pair, r in zip(pairs, res, strict=True):
        if isinstance(r, tuple) and r[0]["code"] == SUCCESS:
            acked.append(pair)
        else:
            code = r[0]["code"] if isinstance(r, tuple) else -1
            refused[code] = refused.get(code, 0) + 1
    return acked, refused, took


async def still_serves(port: int) -> bool:
    """A new connection is accepted and a send to a new queue is acked."""
    c = RemotingClient()
    try:
        await c.open("127.0.0.1", port)
        h, _ = await c.call(SEND_MESSAGE_V2, _send_ext("BenchQueuesProbe", 0), b"p", timeout=10)
        return bool(h["code"] == SUCCESS)
    except (OSError, TimeoutError):
        return False
    finally:
        await c.close()


async def verify(port: int, pairs: list[tuple[str, int]], width: int) -> tuple[int, float]:
    """Queues that answer exactly their one 1-byte message from offset 0."""
    c = RemotingClient()
    try:
        await c.open("127.0.0.1", port)
    except OSError:
        return 0, 0.0
    t0 = time.monotonic()
    res = await _window(
        [
            c.call(
                PULL_MESSAGE,
                {
                    "consumerGroup": "BenchQueuesCheck",
                    "topic": t,
                    "queueId": q,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subVersion": 0,
                },
            )
            for t, q in pairs
        ],
        width,
    )
    took = time.monotonic() - t0
    await c.close()
    good = sum(
        1
        for r in res
        if isinstance(r, tuple) and r[0]["code"] == SUCCESS and list(decode_bodies(r[1])) == [b"x"]
    )
    return good, took


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--queues", type=int, default=2000)
    ap.add_argument("--nofile", type=int, default=256, help="RLIMIT_NOFILE (soft = hard)")
    ap.add_argument("--queues-per-topic", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256, help="requests in flight")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("extra", nargs="*", help="more broker options (after --)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-queues-", dir=a.workdir))
    data = work / "data"
    topics: dict[str, int] = {}
    pairs: list[tuple[str, int]] = []
    for i in range((a.queues + a.queues_per_topic - 1) // a.queues_per_topic):
        n = min(a.queues_per_topic, a.queues - i * a.queues_per_topic)
        topics[f"BenchQ{i:04d}"] = n
        pairs += [(f"BenchQ{i:04d}", q) for q in range(n)]
    proc = Proc(data, a.nofile, a.extra)
    rows: list[tuple[str, str]] = []
    try:
        first = proc.start()
        cq = data / "store" / "consumequeue"
        base_fds = proc.fds()
        acked, refused, took = asyncio.run(fill(proc.port, pairs, topics, a.window))
        time.sleep(1.0)  # let a checkpoint pass
        fds, rss = proc.fds(), proc.rss_mb()
        used, files = disk_bytes(cq)
        serving = asyncio.run(still_serves(proc.port))
        budget = proc.events_after("broker.fd_budget", 0, 2.0)
        rows += [
            ("queues made / sends acked", f"{a.queues:,} / {len(acked):,} in {took:.1f} s"),
            ("sends refused (code: count)", json.dumps(refused) if refused else "none"),
            ("broker fds at start / after", f"{base_fds} / {fds} (limit {a.nofile})"),
            (
                "fd budget (broker.fd_budget)",
                json.dumps(
                    {
                        k: v
                        for k, v in budget[-1].items()
                        if k not in ("ts", "v", "event", "level", "component")
                    }
                )
                if budget
                else "not logged",
            ),
            ("RSS after the sends", f"{rss:.0f} MB"),
            (
                "consume-queue disk",
                f"{used / 1e6:.1f} MB in {files:,} files, "
                f"{used / max(1, a.queues) / 1024:.1f} KiB per queue",
            ),
            ("new connection + send after", "yes" if serving else "NO"),
            ("time to first serving", f"{first:.2f} s"),
        ]
        seen = len(proc.events_after("store.recovered", 0))
        proc.kill()
        t_restart = proc.start()
        rec = proc.events_after("store.recovered", seen)
        serving2 = asyncio.run(still_serves(proc.port))
        good, vt = asyncio.run(verify(proc.port, acked, a.window))
        rows += [
            ("restart (kill -9) to serving", f"{t_restart:.2f} s"),
            (
                "store recovery",
                f"{rec[-1]['duration_ms']:.0f} ms, {rec[-1]['records_replayed']:,} records replayed"
                if rec
                else "not logged",
            ),
            ("fds / RSS after restart", f"{proc.fds()} / {proc.rss_mb():.0f} MB"),
            ("new connection + send after restart", "yes" if serving2 else "NO"),
            (
                "queues with their message after restart",
                f"{good:,} of {len(acked):,} acked (pulled in {vt:.1f} s)",
            ),
            ("fds after pulling every queue", f"{proc.fds()} (limit {a.nofile})"),
        ]
    finally:
        if proc.p is not None:
            stop_proc(proc.p, 30)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    width = max(len(k) for k, _ in rows)
    print(
        f"bench_queues: {a.queues:,} queues, RLIMIT_NOFILE {a.nofile}, {time.strftime('%Y-%m-%d')}"
    )
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


if __name__ == "__main__":
    main()
