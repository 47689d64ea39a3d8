"""``kairosmq report`` as a user runs it: a subprocess of the real CLI, real files, no mocks.

Without PySpark or without Java the command prints what is missing and the exact install
command, and exits 2 with no traceback. A real small run keeps Spark's WARN lines off stderr
and prints one progress line per step with its elapsed time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark import scenario
from tests.spark.conftest import NO_JAVA, java_available, write_jsonl

pytestmark = pytest.mark.slow  # the CLI in child processes, Spark JVMs

ROOT = Path(__file__).resolve().parents[2]
# The CLI with `import pyspark` failing, as in an install without the [spark] extra.
NO_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; "
    "from kairosmq.server.cli import main; sys.exit(main(sys.argv[1:]))"
)
CLI = "from kairosmq.server.cli import main; import sys; sys.exit(main(sys.argv[1:]))"


def _run(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_report_without_pyspark_prints_the_install_command_and_exits_2(tmp_path):
    logs = write_jsonl(tmp_path / "logs" / "broker.jsonl", scenario.records()[:5]).parent
    proc = _run(NO_PYSPARK, "report", str(logs), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "pip install 'kairosmq[spark]'" in proc.stderr
    assert "Java 17" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_report_help_works_without_pyspark():
    proc = _run(NO_PYSPARK, "report", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--verbose" in proc.stdout and "kairosmq[spark]" in proc.stdout


def test_report_without_java_says_so_and_exits_2(tmp_path):
    logs = write_jsonl(tmp_path / "logs" / "broker.jsonl", scenario.records()[:5]).parent
    proc = _run(CLI, "report", str(logs), env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Java 17+" in proc.stderr and "JAVA_HOME" in proc.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_a_real_run_shows_progress_then_maps_the_class_archive_quietly(tmp_path):
    """A real report prints a progress line per step and no Spark WARN. The first report
    dumps Spark's classes to the JVM's class archive under the cache directory (kept under
    its final name only once that JVM exited cleanly); the next report (``-q``) maps it and
    leaves it as it is; neither run prints a CDS line or a WARN. (One test: two report runs,
    not three.)"""
    if not java_available():
        pytest.skip(NO_JAVA)
    logs = write_jsonl(tmp_path / "logs" / "broker.jsonl", scenario.records()).parent
    cache = tmp_path / "cache"
    env = {"KAIROSMQ_SPARK_CDS": "on", "XDG_CACHE_HOME": str(cache)}
    stamps = []
    for i in range(2):
        quiet = ["-q"] if i else []
        proc = _run(
            CLI,
            "report",
            str(logs),
            "-o",
            str(tmp_path / f"out{i}"),
            "--master",
            "local[1]",
            "--shuffle-partitions",
            "2",
            *quiet,
            env=env,
            timeout=280,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        if not quiet:
            assert "Setting default log level" not in proc.stderr
            steps = re.findall(r"^\[(\d+)/(\d+)\] (\S+) +(\d+\.\d) s$", proc.stderr, re.M)
            assert steps and steps[-1][2] == "report" and steps[-1][0] == steps[-1][1], proc.stderr
        noise = [
            ln
            for ln in (proc.stdout + proc.stderr).splitlines()
            if re.search(r"\bWARN\b|cds|[Ss]hared archive", ln)
        ]
        assert noise == [], noise
        files = sorted((cache / "kairosmq").iterdir())
        assert len(files) == 1 and files[0].suffix == ".jsa", files  # no partial file left
        assert files[0].stat().st_size > 10_000_000
        stamps.append((files[0].name, files[0].stat().st_mtime_ns))
        assert (tmp_path / f"out{i}" / "report.html").exists()
    assert stamps[0] == stamps[1]


@pytest.mark.spark
def test_the_driver_jvm_uses_the_parallel_collector(spark):
    """The JVM ``build_session`` starts (the report's, and the tests' shared session) runs
    the throughput collector (``job.JVM_GC``), not G1, and the short-job JIT thresholds
    (``job.JVM_JIT``), not the JVM's defaults (5000, 40000)."""
    jvm = spark.sparkContext._jvm
    factory = jvm.java.lang.management.ManagementFactory
    names = sorted(b.getName() for b in factory.getGarbageCollectorMXBeans())
    hotspot = factory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    thresholds = [
        hotspot.getVMOption(name).getValue()
        for name in ("Tier4InvocationThreshold", "Tier4BackEdgeThreshold")
    ]
    assert "PS MarkSweep" in names and "G1" not in " ".join(names), names
    assert thresholds == ["50000", "400000"], thresholds
