"""Run a real broker process for crash tests (SIGKILL, restart on the same data), under an
open-file limit of the test's choosing if it asks (``nofile``)."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.helpers import FAST_LEVELS, free_port


def nofile_limit(soft: int, hard: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` setting the child's ``RLIMIT_NOFILE`` (``ulimit -n``: soft and hard
    alike unless ``hard`` is given)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft if hard is None else hard))

    return apply


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        nofile: int | tuple[int, int] | None = None,
        stdout: Path | None = None,
        vip_channel: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.stdout = stdout  # append the process's stdout (its JSON log lines) here
        self.vip_channel = vip_channel  # listen on port - 2 too (an Apache slave syncs there)
        self.port = free_port(below=2 if vip_channel else 0, above=1)  # p + 1: HA
        self.namesrv_port = free_port()
        self.extra = extra
        self.env = env  # added to this process's environment (e.g. a secret key)
        # the open-file limit of every start (restarts too): soft = hard, or (soft, hard)
        self.nofile = nofile
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _spawn(self) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(self.port),
            "--namesrv-port",
            str(self.namesrv_port),
            "--data-dir",
            str(self.data_dir),
            "--delay-levels",
            FAST_LEVELS,
            *(() if self.vip_channel else ("--no-vip-channel",)),
            "--no-log-file",
            "--log-format",
            "json",
            "--log-level",
            "warning",
            # segments are allocated for real: keep the disk a test reserves small
            # (options in ``extra`` come later and win)
            "--segment-size-mb",
            "16",
            *self.extra,
        ]
        limit = (
            None
            if self.nofile is None
            else nofile_limit(self.nofile)
            if isinstance(self.nofile, int)
            else nofile_limit(*self.nofile)
        )
        if self.stdout is None:
            return subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, **self.env} if self.env else None,
                preexec_fn=limit,
            )
        with open(self.stdout, "ab") as out:
            return subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.PIPE,
                env={**os.environ, **self.env} if self.env else None,
                preexec_fn=limit,
            )

    def launch(self) -> None:
        """Start the process without waiting for it to listen (to kill it mid-start)."""
        self.proc = self._spawn()

    async def start(self, timeout: float = 20.0) -> None:
        self.launch()
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {err}")
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise RuntimeError("broker did not start listening")

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(20)
