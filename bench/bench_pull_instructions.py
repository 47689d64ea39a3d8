"""Instructions per pull, counted by valgrind: a pull of 1 and a held pull with the send
that wakes it, on the broker's warm path (``bench_broker_cpu.py``'s frames and counting
transport, the broker in this process on its defaults).

Runs this file under ``valgrind --tool=cachegrind`` with ``--n N1`` and ``--n N2`` requests
(after the same set-up: 2,000 plain sends to read) and prints the difference of the
instruction counts divided by ``N2 - N1``, for each of the two workloads; ``--cores`` also
with the pure core (``KAIROSMQ_NO_EXTENSIONS=1``), ``--tree DIR`` also for another checkout
(``PYTHONPATH``, as ``bench_instructions.py``). Needs ``valgrind``; a few minutes.

    python bench/bench_pull_instructions.py [--cores] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORKLOADS = {"pull": "pull of 1", "held": "held pull + the send that wakes it"}


async def run(data: Path, n: int, which: str) -> None:
    """The measured workload: ``n`` pulls of 1, or ``n`` held pulls each woken by a send."""
    import bench_broker_cpu as b
    from kairosmq.server.broker import Broker
    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.observe.logs import close_sinks, configure_logging
    from kairosmq.server.remoting.transport import Connection

    configure_logging(json=True, log_dir=data / "logs", stdout=False)
    broker = Broker(
        BrokerConfig(data_dir=data / "store", port=0, namesrv_port=0, vip_channel=False)
    )
    await broker.start()
    conn = Connection(broker.server, broker.broker_handlers, "bench")
    conn.connection_made(b.CountingTransport())  # type: ignore[arg-type]
    held = "BenchHeld"
    for q in range(4):  # the held topic's queues exist: offsets start at 1
        conn.data_received(b.send_frame(q, held, delay=False))
        await asyncio.sleep(0)
    for i in range(2000):
        conn.data_received(b.send_frame(i, delay=False))
        await asyncio.sleep(0)
    if which == "pull":
        for f in [b.pull_frame(i, i % 4, (i // 4) % 500) for i in range(n)]:
            conn.data_received(f)
            await asyncio.sleep(0)
    else:
        pulls = [b.pull_frame(i, i % 4, 1 + i // 4, held) for i in range(n)]
        sends = [b.send_frame(i, held, delay=False) for i in range(n)]
        for p, f in zip(pulls, sends, strict=True):
            conn.data_received(p)  # held: nothing new in its queue
            await asyncio.sleep(0)
            conn.data_received(f)  # wakes it
            for _ in range(3):
                await asyncio.sleep(0)
    await broker.stop("bench done")
    close_sinks()


def instructions(which: str, n: int, pythonpath: str | None, pure: bool) -> int:
    env = dict(os.environ, KAIROSMQ_NO_EXTENSIONS="1" if pure else "")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    from bench_instructions import cachegrind_refs

    return cachegrind_refs([__file__, "--agent", which, "--n", str(n)], env)


def per_request(which: str, n1: int, n2: int, pythonpath: str | None, pure: bool) -> float:
    return (
        instructions(which, n2, pythonpath, pure) - instructions(which, n1, pythonpath, pure)
    ) / (n2 - n1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=200)
    ap.add_argument("--n2", type=int, default=1200)
    ap.add_argument("--cores", action="store_true", help="the pure core too")
    ap.add_argument("--tree", help="PYTHONPATH of another checkout to compare with")
    ap.add_argument("--agent", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.agent:
        import uvloop

        with tempfile.TemporaryDirectory() as d:
            uvloop.run(run(Path(d), a.n, a.agent))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    from kairosmq.protocol import native
    from kairosmq.server import broker  # noqa: F401 - imports every module with a twin

    print(f"core: {native.describe()}")
    for which, what in WORKLOADS.items():
        this = per_request(which, a.n1, a.n2, None, False)
        line = f"{what}: {this / 1e3:,.0f}k instructions"
        if a.cores:
            pure = per_request(which, a.n1, a.n2, None, True)
            line += f"; pure core {pure / 1e3:,.0f}k (native / pure = {this / pure:.3f})"
        if a.tree:
            other = per_request(which, a.n1, a.n2, a.tree, False)
            line += f"; {a.tree} {other / 1e3:,.0f}k (this / other = {this / other:.3f})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
