"""Server lifecycles: install from Debian, start on 127.0.0.1 with a fresh data dir, stop by pid.

Owns: ``ensure_apt`` and one ``Server`` subclass per system (kairosmq from this checkout,
redis-server, rabbitmq-server, Apache RocketMQ 4.9.8 from ``../shared/apache-rocketmq``).

Invariants:
* Every server listens on 127.0.0.1 only, on free ports, with a data dir of its own that is
  created empty for the run (and removed after it unless ``keep``).
* A server is stopped by the pids this module started (SIGTERM, then SIGKILL after a timeout),
  never by name; RabbitMQ's node spawns its own ``epmd`` (daemonised, on a private port): the
  epmd processes that were not running before the start are stopped by pid too.
* Installing never auto-starts a Debian service: ``/usr/sbin/policy-rc.d`` (exit 101) is put in
  place for the install when absent and removed again afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICY = Path("/usr/sbin/policy-rc.d")


def log(msg: str) -> None:
    print(f"[bench_peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_apt(package: str, binary: str) -> None:
    """Install a Debian package unless ``binary`` exists (root only; no service auto-start)."""
    if shutil.which(binary) or Path(binary).exists():
        return
    if os.geteuid() != 0:
        raise SystemExit(f"{binary} missing: apt-get install {package} (as root), or skip it")
    made = not POLICY.exists()
    if made:
        POLICY.write_text("#!/bin/sh\nexit 101\n")
        POLICY.chmod(0o755)
    try:
        log(f"installing {package} from Debian")
        subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
            check=True,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )
    finally:
        if made:
            POLICY.unlink(missing_ok=True)


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port p such that p + d is free on 127.0.0.1 for every d in ``span``."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if all(_free(p + d) for d in span if d) and p + min(span) > 1024:
            return p
    raise RuntimeError("no free port")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before port {port} was up")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} not up after {timeout:.0f} s")


def _pids_named(name: str) -> set[int]:
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if Path(f"/proc/{d}/comm").read_text().strip() == name:
                    out.add(int(d))
            except OSError:
                pass
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_pid(pid: int, timeout: float) -> None:
    """SIGTERM a process that is not our child, SIGKILL it after ``timeout``."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.time() + timeout
    while time.time() < end:
        if not _alive(pid):
            return
        time.sleep(0.1)
    log(f"pid {pid} still alive after {timeout:.0f} s: SIGKILL")
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_proc(p: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM a child we started, wait for it, SIGKILL it after ``timeout``."""
    if p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        log(f"pid {p.pid} still alive after {timeout:.0f} s: SIGKILL")
        p.kill()
        p.wait()


class Server:
    """One system's server: ``start`` returns driver options; ``pids`` are what is accounted."""

    name = "server"
    stop_timeout = 20.0

    def __init__(self, workdir: Path, keep: bool = False) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"peerbench-{self.name}-", dir=workdir))
        self.keep = keep
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    @classmethod
    def install(cls) -> None:
        pass

    def start(self) -> dict[str, str]:
        raise NotImplementedError

    def _spawn(
        self,
        cmd: list[str],
        logname: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        out = open(self.dir / logname, "wb")  # noqa: SIM115 - lives as long as the server
        p = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd or self.dir,
            start_new_session=True,
        )
        out.close()
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_proc(p, self.stop_timeout)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


class KairosServer(Server):
    name = "kairosmq"
    stop_timeout = 15.0

    def __init__(
        self, workdir: Path, keep: bool, python: str, repo: Path, extra: list[str]
    ) -> None:
        super().__init__(workdir, keep)
        self.python, self.repo, self.extra = python, repo, extra
        self.namesrv_port = 0

    def start(self) -> dict[str, str]:
        port = free_port()
        self.namesrv_port = free_port()  # the broker's embedded name server (clients' route)
        cmd = [
            self.python,
            "-m",
            "kairosmq.server",
            "broker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--namesrv-port",
            str(self.namesrv_port),
            "--data-dir",
            str(self.dir / "data"),
            "--no-vip-channel",
            *self.extra,
        ]
        p = self._spawn(cmd, "broker.out", cwd=self.repo)
        wait_port(port, 60, p)
        self.pids = [p.pid]
        return {"port": str(port)}


class RedisServer(Server):
    name = "redis"

    @classmethod
    def install(cls) -> None:
        ensure_apt("redis-server", "redis-server")

    def start(self) -> dict[str, str]:
        port = free_port()
        p = self._spawn(
            [
                shutil.which("redis-server") or "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--protected-mode",
                "yes",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--dir",
                str(self.dir),
                "--daemonize",
                "no",
            ],
            "redis.out",
        )
        wait_port(port, 30, p)
        self.pids = [p.pid]
        return {"port": str(port)}


RABBIT = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitServer(Server):
    name = "rabbitmq"
    stop_timeout = 60.0

    @classmethod
    def install(cls) -> None:
        ensure_apt("rabbitmq-server", RABBIT)

    def start(self) -> dict[str, str]:
        port, dist, epmd = free_port(), free_port(), free_port()
        (self.dir / "log").mkdir()
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.epmd_before = _pids_named("epmd")
        env = dict(
            os.environ,
            RABBITMQ_NODENAME=f"peerbench{port}@localhost",
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_DIST_PORT=str(dist),
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_EPMD_PORT=str(epmd),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=("-kernel inet_dist_use_interface {127,0,0,1}"),
        )
        p = self._spawn([RABBIT], "rabbitmq.out", env=env)
        wait_port(port, 120, p)
        time.sleep(1.0)
        self.pids = [p.pid]
        return {"url": f"amqp://guest:guest@127.0.0.1:{port}/"}

    def stop(self) -> None:
        from .stats import ProcTree

        tree = ProcTree(self.pids).pids()
        super().stop()
        for pid in tree:  # beam.smp and its helpers, if the script did not take them down
            stop_pid(pid, 10)
        for pid in _pids_named("epmd") - self.epmd_before:
            log(f"stopping epmd pid {pid} (started by our rabbitmq node)")
            stop_pid(pid, 5)


class RocketMQServer(Server):
    """Apache RocketMQ 4.9.8 (JVM): name server + broker; the broker alone is accounted."""

    name = "rocketmq"
    stop_timeout = 30.0

    def __init__(self, workdir: Path, keep: bool, home: Path) -> None:
        super().__init__(workdir, keep)
        self.home = home

    def start(self) -> dict[str, str]:
        ns_port, port = free_port(), free_port((-2, 0, 1))
        ns = self._spawn(
            [str(self.home / "start_namesrv.sh")],
            "namesrv.out",
            env=dict(os.environ, STORE_DIR=str(self.dir / "ns"), NAMESRV_PORT=str(ns_port)),
        )
        wait_port(ns_port, 90, ns)
        br = self._spawn(
            [str(self.home / "start_broker.sh")],
            "broker.out",
            env=dict(
                os.environ,
                STORE_DIR=str(self.dir / "broker"),
                BROKER_PORT=str(port),
                NAMESRV=f"127.0.0.1:{ns_port}",
            ),
        )
        wait_port(port, 120, br)
        time.sleep(3.0)  # registers with the name server, creates TBW102
        self.pids = [br.pid]
        return {"port": str(port)}
