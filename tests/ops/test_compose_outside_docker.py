"""Runs scripts/compose_outside_docker.py: every compose service's command, outside
Docker, wired together the way compose would (broker, healthcheck, producer and consumer,
metrics, SIGTERM, then the Spark report over the broker's logs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_compose_services_work_together_outside_docker(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "compose_outside_docker.py"),
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "producer sent and consumer received 100 messages" in out
    assert "metrics endpoint answers" in out
    assert "broker stopped gracefully on SIGTERM" in out
    assert "spark-report wrote" in out or "SKIP spark-report" in out
