"""``kairosmq namesrv`` as a real process for tests: a fixed free port (a restart keeps it),
kill -9, restart on the same data dir, its JSON log events.

Owns: ``NamesrvProcess`` (spawns ``python -m kairosmq.server namesrv`` with the options
given, waits until the port accepts a connection, keeps stderr in ``<data-dir>.stderr``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.integration.procs import free_port


class NamesrvProcess:
    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.err_path = data_dir.parent / f"{data_dir.name}.stderr"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        """Start the process without waiting for it to listen."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kairosmq.server",
                    "namesrv",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                    "--log-level",
                    "info",
                    *self.extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    async def start(self, timeout: float = 30.0) -> None:
        self.launch()
        assert self.proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"namesrv exited with {self.proc.returncode}: "
                    f"{self.err_path.read_text(errors='replace')[-3000:]}"
                )
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise RuntimeError("namesrv did not start listening")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines so far (of event ``name`` only, when given)."""
        path = self.data_dir / "logs" / "broker.jsonl"
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line the writer has not finished
            if name is None or ev.get("event") == name:
                out.append(ev)
        return out
