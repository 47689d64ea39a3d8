"""Instructions per request on the broker's warm paths, counted by valgrind: a CPU figure
that does not move with the machine's load (the timed figures here move by ±30 %).

Runs ``bench_broker_cpu.py`` under ``valgrind --tool=cachegrind`` twice, with ``--n N1``
and ``--n N2`` requests per phase (one loop each), and prints the difference of the
instruction counts divided by ``N2 - N1``: the instructions of one round of every phase
(a delayed send, its re-put, a pull of 1, a timer send and its fire, a held pull with the
plain send that wakes it, and a plain send), start-up and warm-up cancelled out. With
``--tree DIR`` it does the same for another checkout (``DIR/kairosmq/`` holding
``protocol``, ``server``, ``client``, ``spark``, as docs/performance.md says) and prints
the ratio. Needs ``valgrind`` (Debian: ``apt-get install valgrind``); ~40x slower than
native, so a run takes a few minutes.

``--delayed`` counts the delayed message's path alone (``bench_broker_cpu.py
--delayed-only``: its delayed send, its re-put and a pull of 1 per message), so the
figure is instructions per delayed message. ``--cores`` runs each count twice, with the
native core and with the pure one (``KAIROSMQ_NO_EXTENSIONS=1``), and prints the ratio.

    python bench/bench_instructions.py [--n1 300 --n2 900] [--tree /tmp/ab/before-pp]
    python bench/bench_instructions.py --delayed --cores
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def instructions(n: int, pythonpath: str | None, delayed: bool = False, pure: bool = False) -> int:
    """Instructions (``I refs``) of one ``bench_broker_cpu.py --n n --repeat 1`` run."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env["KAIROSMQ_NO_EXTENSIONS"] = "1" if pure else ""
    return cachegrind_refs(
        [
            str(HERE / "bench_broker_cpu.py"),
            "--n",
            str(n),
            "--repeat",
            "1",
            *(["--delayed-only"] if delayed else []),
        ],
        env,
    )


def cachegrind_refs(script_argv: list[str], env: dict[str, str]) -> int:
    """Instructions (``I refs``) of one ``python <script_argv>`` run under cachegrind."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={d}/cg.out",
                sys.executable,
                *script_argv,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def per_round(
    n1: int, n2: int, pythonpath: str | None, delayed: bool = False, pure: bool = False
) -> float:
    return (
        instructions(n2, pythonpath, delayed, pure) - instructions(n1, pythonpath, delayed, pure)
    ) / (n2 - n1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=300)
    ap.add_argument("--n2", type=int, default=900)
    ap.add_argument("--tree", help="PYTHONPATH of another checkout to compare with")
    ap.add_argument("--delayed", action="store_true", help="per delayed message only")
    ap.add_argument("--cores", action="store_true", help="native and pure core, and the ratio")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    # what "this checkout" runs (protocol/native.py): each twin's pure module imported
    from kairosmq.protocol import codec, headers, message, native, properties  # noqa: F401

    print(f"core: {native.describe()}")
    what = "delayed message (send, re-put, pull)" if a.delayed else "round of every phase"
    this = per_round(a.n1, a.n2, None, a.delayed)
    print(f"this checkout: {this / 1e3:,.0f} k instructions per {what}")
    if a.cores:
        pure = per_round(a.n1, a.n2, None, a.delayed, pure=True)
        print(
            f"this checkout, pure core (KAIROSMQ_NO_EXTENSIONS=1): {pure / 1e3:,.0f} k "
            f"instructions per {what} (native / pure = {this / pure:.3f})"
        )
    if a.tree:
        other = per_round(a.n1, a.n2, a.tree, a.delayed)
        print(
            f"{a.tree}: {other / 1e3:,.0f} k instructions per round "
            f"(this / other = {this / other:.3f})"
        )


if __name__ == "__main__":
    main()
