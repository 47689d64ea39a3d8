"""``kairosmq broker --metrics-port`` without prometheus-client: a clear error, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the CLI in a child process

CODE = """
import sys
sys.modules["prometheus_client"] = None  # as if the 'metrics' extra were not installed
from kairosmq.server.cli import main
raise SystemExit(main(["broker", "--metrics-port", "9", "--data-dir", sys.argv[1]]))
"""


def test_missing_prometheus_client_is_a_clear_error(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert "pip install 'kairosmq[metrics]'" in proc.stderr
    assert not (tmp_path / "store").exists()  # refused before starting anything
