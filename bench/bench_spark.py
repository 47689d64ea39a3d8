"""Time the delivery-quality Spark job on synthetic logs (1M and 10M events by default).

Generates the input with ``bench/gen_events.py`` once per size (kept under ``--work``), then
runs ``spark/job.py`` through ``spark-submit --master local[2]`` and prints, per size, the
wall time of the whole command (JVM start included) and the job's own time from its summary.

    python bench/bench_spark.py --sizes 1000000 10000000 --work /tmp/kmq-bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--work", default="/tmp/kmq-bench")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="2g")
    a = p.parse_args(argv)
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    rows = []
    for n in a.sizes:
        logs = Path(a.work) / f"logs-{n}"
        if not logs.exists():
            subprocess.run([sys.executable, str(ROOT / "bench" / "gen_events.py"),
                            "--events", str(n), "--out", str(logs)], check=True)
        out = Path(a.work) / f"out-{n}"
        t = time.perf_counter()
        subprocess.run([str(submit), "--master", a.master, "--driver-memory", a.driver_memory,
                        str(ROOT / "spark" / "job.py"), str(logs), "-o", str(out)],
                       check=True, env=env)
        wall = time.perf_counter() - t
        job = json.loads((out / "summary.json").read_text())["meta"]["elapsed_s"]
        rows.append((n, wall, job))
    print(f"\n{'events':>12}  {'wall s':>8}  {'job s':>8}  {'events/s':>10}   ({a.master})")
    for n, wall, job in rows:
        print(f"{n:>12,}  {wall:8.1f}  {job:8.1f}  {n / job:10,.0f}")


if __name__ == "__main__":
    main()
