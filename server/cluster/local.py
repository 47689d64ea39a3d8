"""``kairosmq cluster``: a name server and N broker processes on one machine, supervised.

Owns: the cluster plan (``plan_cluster``: one ``ChildSpec`` per process: the name server on
``--namesrv-port``, brokers ``broker-a``, ``broker-b``, ... on ``--base-port``, ``+10``,
``+20``, ... (RocketMQ's step: port-2 is the VIP channel, port+1 HA), each with its own data
dir ``<data-dir>/broker-a``, ...; all in cluster ``DefaultCluster``; with ``--slaves 1`` each
broker's SLAVE ``broker-a-s1`` on its port + 5, started after it), ``ClusterSupervisor``
(spawns the children, waits until each listens, restarts one that dies, stops them in order)
and the subcommand's options (``add_cluster_parser`` / ``cmd_cluster``, wired in cli.py).

Invariants:
* Start order: the name server listens before any broker starts (brokers register at start).
  With ``--namesrv`` no name server is started: the brokers register with the ones named
  (one machine of several; ``--first-broker`` keeps broker names unique across machines).
  A child that exits, or does not listen within ``--start-timeout``, during the first start
  stops everything already started; the command exits 1 naming the child and its exit code.
* A child that dies afterwards is restarted by ``server/supervise.py``'s ``Supervisor``
  (``service.failed`` / ``service.recovered``, backoff ``--restart-backoff * 2**(n-1)`` capped
  at 30 s, reset after a run of ``--healthy-after`` s) on the same port and data dir; after
  ``--max-failures`` failures in a row the cluster gives up: it stops and exits 1.
* Stop (SIGINT/SIGTERM/SIGHUP): brokers first (SIGTERM, so each UNREGISTERs from the name
  server and closes its store), then the name server; a child that has not exited after
  ``--stop-timeout`` s is killed. Children run in their own process group (a terminal's
  Ctrl-C reaches only the supervisor, which keeps this order) and, on Linux, receive SIGTERM
  if the supervisor itself dies.
* Stdout carries one line per started process (name, address, pid, data dir); the same facts
  are kept in ``<data-dir>/cluster.json`` (rewritten atomically on every change).
* Security: ``--acl FILE`` and the TLS options (the broker's) go to the name server and every
  broker alike. With ``--acl`` and the cluster's own name server the brokers sign their
  registrations with the file's first admin account (``--namesrv-access-key``; the secret
  travels in the child's environment, ``KAIROS_NAMESRV_SECRET_KEY``, never in an argv); with
  TLS they register over TLS and verify the name server against ``--tls-ca``, else against
  the cluster's own ``--tls-cert``. With ``--namesrv`` the brokers take their name-server
  credentials from the environment (``KAIROS_NAMESRV_ACCESS_KEY`` / ``_SECRET_KEY``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any  # Any: JSON values of a status; structlog's logger (dynamic methods)

from ..supervise import ServiceState, Supervisor

CLUSTER_NAME = "DefaultCluster"
PORT_STEP = 10
SLAVE_PORT_OFFSET = 5  # a master's slave (--slaves 1): port + 5, its VIP channel + 3


def broker_name(i: int) -> str:
    """``broker-a`` .. ``broker-z``, then ``broker-aa``, ``broker-ab``, ... (i from 0)."""
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(ord("a") + r) + letters
    return f"broker-{letters}"


def broker_index(suffix: str) -> int:
    """Inverse of ``broker_name``'s suffix: ``a`` -> 0, ``z`` -> 25, ``aa`` -> 26."""
    if not suffix.isalpha() or not suffix.isascii():
        raise ValueError(f"a broker suffix is letters a-z, got {suffix!r}")
    i = 0
    for ch in suffix.lower():
        i = i * 26 + (ord(ch) - ord("a") + 1)
    return i - 1


@dataclass(slots=True)
class ChildSpec:
    name: str
    kind: str  # namesrv | broker
    host: str  # where the supervisor checks it listens
    port: int
    data_dir: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the supervisor's environment

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(slots=True)
class Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    state: str = "pending"  # pending | starting | running | restarting | stopped | failed
    last_exit: int | None = None


class ClusterError(Exception):
    """A child could not start (or kept failing): the cluster stops, exit code 1."""


def _probe_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def admin_account(acl_file: Path) -> tuple[str, str]:
    """(access key, secret key) of the first ``admin: true`` account of ``acl_file``: what
    the cluster's brokers sign their registrations with. ``ValueError`` when there is none
    (or the file is unusable)."""
    from ..security.acl_file import AclConfigError, load_rules

    try:
        rules = load_rules(acl_file)
    except (OSError, AclConfigError) as err:
        raise ValueError(f"--acl {acl_file}: {err}") from None
    for account in rules.accounts.values():
        if account.admin:
            return account.access_key, account.secret_key
    raise ValueError(
        f"--acl {acl_file} has no account with admin: true: the brokers sign "
        "their registrations with one (the name server takes REGISTER_BROKER "
        "from admins only)"
    )


def _security_argv(args: argparse.Namespace) -> list[str]:
    """``--acl`` (with its request policy) and the TLS options as given, for the name
    server and every broker."""
    out: list[str] = []
    if args.acl is not None:
        out += ["--acl", str(Path(args.acl).resolve())]
        out += ["--acl-request-binding", args.acl_request_binding]
        out += ["--acl-request-window", str(args.acl_request_window)]
        if args.acl_admin_require_tls:
            out.append("--acl-admin-require-tls")
    if args.tls_mode != "disabled":
        out += ["--tls-mode", args.tls_mode]
    for opt, value in (
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
        ("--tls-ca", args.tls_ca),
    ):
        if value is not None:
            out += [opt, str(Path(value).resolve())]
    return out


def _namesrv_client(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """A broker's options and environment toward the cluster's own name server: the admin
    account's key (its secret in the environment only) and TLS, pinned to the cluster's CA
    or certificate. Nothing with ``--namesrv``: external name servers are the operator's."""
    if args.namesrv:
        return [], {}
    from ..cli import NAMESRV_SECRET_KEY_ENV

    argv: list[str] = []
    env: dict[str, str] = {}
    if args.acl is not None:
        access_key, secret_key = admin_account(args.acl)
        argv += ["--namesrv-access-key", access_key]
        env[NAMESRV_SECRET_KEY_ENV] = secret_key
    if args.tls_mode != "disabled":
        trust = args.tls_ca if args.tls_ca is not None else args.tls_cert
        argv += [
            "--namesrv-tls",
            *(["--namesrv-tls-ca", str(Path(trust).resolve())] if trust is not None else []),
        ]
    return argv, env


def plan_cluster(args: argparse.Namespace) -> list[ChildSpec]:
    """The name server first (none with ``--namesrv``: the brokers register with those), then
    the brokers, from the parsed ``cluster`` options (``ValueError`` if ``--acl`` has no
    admin account for the brokers)."""
    py = [sys.executable, "-m", "kairosmq.server"]
    data: Path = args.data_dir.resolve()
    probe = _probe_host(args.host)
    namesrv_addr = args.namesrv or f"{probe}:{args.namesrv_port}"
    broker_ip = args.broker_ip or probe
    security = _security_argv(args)
    client_argv, client_env = _namesrv_client(args)
    specs: list[ChildSpec] = []
    if not args.namesrv:
        specs.append(
            ChildSpec(
                "namesrv",
                "namesrv",
                probe,
                args.namesrv_port,
                data / "namesrv",
                py
                + [
                    "namesrv",
                    "--host",
                    args.host,
                    "--port",
                    str(args.namesrv_port),
                    "--data-dir",
                    str(data / "namesrv"),
                    "--log-level",
                    args.log_level,
                    *(["--no-log-file"] if args.no_log_file else []),
                    *security,
                    *shlex.split(args.namesrv_args),
                ],
            )
        )
    common: list[str] = [
        "--delay-levels",
        args.delay_levels,
        "--flush-mode",
        args.flush_mode,
        "--log-level",
        args.log_level,
        *security,
        *client_argv,
    ]
    if args.segment_size_mb is not None:
        common += ["--segment-size-mb", str(args.segment_size_mb)]
    if args.no_message_logs:
        common.append("--no-message-logs")
    if args.no_log_file:
        common.append("--no-log-file")
    if args.no_vip_channel:
        common.append("--no-vip-channel")
    first = broker_index(args.first_broker)
    for i in range(args.brokers):
        name = broker_name(first + i)
        port = args.base_port + PORT_STEP * i
        bdir = data / name
        argv = py + [
            "broker",
            "--host",
            args.host,
            "--port",
            str(port),
            "--data-dir",
            str(bdir),
            "--namesrv",
            namesrv_addr,
            "--broker-name",
            name,
            "--cluster",
            args.cluster,
            "--broker-ip",
            broker_ip,
            *common,
            *shlex.split(args.broker_args),
        ]
        if args.slaves:  # a master and its slave (docs/replication.md)
            argv += ["--broker-role", args.broker_role]
        specs.append(ChildSpec(name, "broker", probe, port, bdir, argv, dict(client_env)))
        if args.slaves:
            specs.append(_slave_spec(args, py, name, port, data, namesrv_addr, broker_ip, common))
            specs[-1].env.update(client_env)
    return specs


def _slave_spec(
    args: argparse.Namespace,
    py: list[str],
    name: str,
    master_port: int,
    data: Path,
    namesrv_addr: str,
    broker_ip: str,
    common: list[str],
) -> ChildSpec:
    """``<name>-s1``: brokerId 1 of ``name`` on the master's port + ``SLAVE_PORT_OFFSET``
    (its VIP channel at + 3: inside the master's step of 10), replicating from the
    master's HA port (port + 1)."""
    port = master_port + SLAVE_PORT_OFFSET
    sdir = data / f"{name}-s1"
    argv = py + [
        "broker",
        "--host",
        args.host,
        "--port",
        str(port),
        "--data-dir",
        str(sdir),
        "--namesrv",
        namesrv_addr,
        "--broker-name",
        name,
        "--cluster",
        args.cluster,
        "--broker-ip",
        broker_ip,
        "--broker-role",
        "SLAVE",
        "--broker-id",
        "1",
        "--ha-master-address",
        f"{broker_ip}:{master_port + 1}",
        *common,
        *shlex.split(args.broker_args),
    ]
    return ChildSpec(f"{name}-s1", "broker", _probe_host(args.host), port, sdir, argv)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ClusterSupervisor:
    def __init__(
        self,
        specs: list[ChildSpec],
        status_file: Path | None,
        log: Any,
        *,
        restart_backoff: float = 0.5,
        healthy_after: float = 10.0,
        max_failures: int = 5,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.children = {s.name: Child(s) for s in specs}
        self.status_file = status_file
        self.log = log
        self.supervisor = Supervisor(
            log, base_delay=restart_backoff, max_delay=30.0, healthy_after=healthy_after
        )
        self.max_failures = max_failures
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.out = out or (lambda line: print(line, flush=True))
        self.stopping = False
        self.done = asyncio.Event()
        self.failure: str | None = None

    # ------------------------------------------------------------------ one child

    def _spawn(self, child: Child) -> None:
        spec = child.spec
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        linux = sys.platform.startswith("linux")
        child.proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env={**os.environ, **spec.env} if spec.env else None,
            process_group=0,
            preexec_fn=_die_with_parent if linux else None,
        )
        child.starts += 1
        child.state = "starting"

    async def _wait_listening(self, child: Child) -> None:
        """Until the child accepts a TCP connection; ClusterError if it exits or times out."""
        proc, spec = child.proc, child.spec
        assert proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if (rc := proc.poll()) is not None:
                child.last_exit, child.state = rc, "failed"
                raise ClusterError(
                    f"{spec.name} exited with code {rc} before listening on {spec.address}"
                )
            try:
                _r, w = await asyncio.wait_for(asyncio.open_connection(spec.host, spec.port), 2.0)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.1)
                continue
            w.close()
            child.state = "running"
            restart = f" (restart {child.starts - 1})" if child.starts > 1 else ""
            self.out(
                f"{spec.name:<9} {spec.kind:<8} {spec.address:<22} pid {proc.pid:<8} "
                f"data {spec.data_dir}{restart}"
            )
            self.log.info(
                "cluster.child_started",
                name=spec.name,
                kind=spec.kind,
                address=spec.address,
                pid=proc.pid,
                starts=child.starts,
            )
            self._write_status()
            return
        self._kill(child)
        child.state = "failed"
        raise ClusterError(
            f"{spec.name} did not listen on {spec.address} within {self.start_timeout:.0f} s"
        )

    async def _start_child(self, child: Child) -> None:
        self._spawn(child)
        await self._wait_listening(child)

    async def _watch(self, child: Child, st: ServiceState) -> None:
        """Supervised run of one child: (re)start it, then wait for it to exit; an exit the
        supervisor did not ask for raises, so ``Supervisor`` logs it and restarts after the
        backoff."""
        if child.proc is None or child.proc.poll() is not None:
            if st.consecutive >= self.max_failures:
                self._give_up(child, st)
                return
            try:
                await self._start_child(child)
            except ClusterError:
                child.state = "restarting"  # the Supervisor tries again after the backoff
                self._write_status()
                raise
        proc = child.proc
        assert proc is not None
        while (rc := proc.poll()) is None:
            await asyncio.sleep(0.1)
        child.last_exit = rc
        if self.stopping:
            child.state = "stopped"
            return
        child.state = "restarting"
        self.out(f"{child.spec.name:<9} exited with code {rc} (pid {proc.pid}); restarting")
        self._write_status()
        raise ClusterError(f"{child.spec.name} (pid {proc.pid}) exited with code {rc}")

    def _give_up(self, child: Child, st: ServiceState) -> None:
        child.state = "failed"
        self.failure = (
            f"{child.spec.name} failed {st.consecutive} times in a row "
            f"(last: {st.last_error}); giving up"
        )
        self.log.error(
            "cluster.gave_up",
            name=child.spec.name,
            failures=st.consecutive,
            error=st.last_error or "",
        )
        self.done.set()

    def _kill(self, child: Child) -> None:
        if child.proc is not None and child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()

    # ------------------------------------------------------------------ the cluster

    async def start(self) -> None:
        """Name server, then every broker at once; ClusterError (after stopping what did
        start) if one cannot start."""
        children = list(self.children.values())
        try:
            for c in children:
                if c.spec.kind == "namesrv":
                    await self._start_child(c)
            results = await asyncio.gather(
                *(self._start_child(c) for c in children if c.spec.kind == "broker"),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                raise errors[0]
        except BaseException:
            await self.stop("start failed")
            raise
        for c in children:
            # a lambda with a default-bound argument: mypy cannot infer its type
            self.supervisor.spawn(c.spec.name, lambda st, c=c: self._watch(c, st))  # type: ignore[misc]

    async def stop(self, reason: str) -> None:
        """Brokers first (each UNREGISTERs on SIGTERM), then the name server."""
        self.stopping = True
        self.log.info("cluster.stopping", reason=reason)
        await self.supervisor.stop()
        brokers = [c for c in self.children.values() if c.spec.kind == "broker"]
        namesrvs = [c for c in self.children.values() if c.spec.kind == "namesrv"]
        for group in (brokers, namesrvs):
            await asyncio.gather(*(self._terminate(c) for c in group))
        self._write_status()
        self.log.info("cluster.stopped", reason=reason)

    async def _terminate(self, child: Child) -> None:
        proc = child.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            deadline = time.monotonic() + self.stop_timeout
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if proc.poll() is None:
                self.out(
                    f"{child.spec.name:<9} did not stop within {self.stop_timeout:.0f} s; killed"
                )
                self._kill(child)
        child.last_exit = proc.returncode
        if child.state != "failed":
            child.state = "stopped"

    def status(self) -> dict[str, Any]:
        return {
            "cluster": [
                {
                    "name": c.spec.name,
                    "kind": c.spec.kind,
                    "address": c.spec.address,
                    "pid": c.proc.pid if c.proc is not None else None,
                    "starts": c.starts,
                    "state": c.state,
                    "last_exit": c.last_exit,
                    "data_dir": str(c.spec.data_dir),
                }
                for c in self.children.values()
            ]
        }

    def _write_status(self) -> None:
        if self.status_file is None:
            return
        tmp = self.status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status(), indent=1) + "\n")
        os.replace(tmp, self.status_file)


async def run_cluster(sup: ClusterSupervisor) -> int:
    loop = asyncio.get_running_loop()
    reason = "signal"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: the terminal closed
        loop.add_signal_handler(sig, sup.done.set)
    try:
        await sup.start()
    except (ClusterError, OSError) as err:  # OSError: a data dir or executable problem
        print(f"kairosmq cluster: {err}", file=sys.stderr, flush=True)
        return 1
    brokers = [c.spec for c in sup.children.values() if c.spec.kind == "broker"]
    where = brokers[0].argv[brokers[0].argv.index("--namesrv") + 1]
    print(
        f"kairosmq cluster: {len(brokers)} broker(s) registering with the name server(s) "
        f"{where}; Ctrl-C stops them",
        file=sys.stderr,
        flush=True,
    )
    await sup.done.wait()
    if sup.failure is not None:
        reason = "gave up"
    await sup.stop(reason)
    if sup.failure is not None:
        print(f"kairosmq cluster: {sup.failure}", file=sys.stderr, flush=True)
        return 1
    return 0


def add_cluster_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..config import DEFAULT_DELAY_LEVELS, FlushMode

    p = sub.add_parser(
        "cluster",
        help="run a name server and N brokers on this machine, supervised (docs/cluster.md)",
    )
    p.add_argument("--brokers", type=int, default=2, help="broker processes (default 2)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./cluster-data"),
        help="<dir>/namesrv, <dir>/broker-a, ... (default ./cluster-data)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address every process binds")
    p.add_argument(
        "--broker-ip",
        default=None,
        help="address brokers register (default: --host, 127.0.0.1 for 0.0.0.0)",
    )
    p.add_argument("--namesrv-port", type=int, default=9876)
    p.add_argument(
        "--base-port",
        type=int,
        default=10911,
        help="first broker's port; broker i listens on base + 10*i",
    )
    p.add_argument("--cluster", default=CLUSTER_NAME, help="brokerClusterName")
    p.add_argument(
        "--slaves",
        type=int,
        default=0,
        choices=(0, 1),
        help="a SLAVE per broker (brokerId 1, <name>-s1 on its master's port + 5; "
        "docs/replication.md)",
    )
    p.add_argument(
        "--broker-role",
        choices=("ASYNC_MASTER", "SYNC_MASTER"),
        default="ASYNC_MASTER",
        help="the masters' role with --slaves (default ASYNC_MASTER)",
    )
    p.add_argument(
        "--namesrv",
        default=None,
        metavar="HOST:PORT[;HOST:PORT]",
        help="start no name server: brokers register with these (kairosmq's or "
        "Apache RocketMQ 4.x's; one machine of several, docs/cluster.md)",
    )
    p.add_argument(
        "--first-broker",
        default="a",
        metavar="LETTERS",
        help="name of the first broker: broker-<LETTERS> (default a); the next "
        "ones follow (c -> broker-c, broker-d, ...): unique names across machines",
    )
    p.add_argument("--delay-levels", default=DEFAULT_DELAY_LEVELS)
    p.add_argument(
        "--flush-mode", choices=[m.value for m in FlushMode], default=FlushMode.ASYNC_FLUSH.value
    )
    p.add_argument("--segment-size-mb", type=float, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--no-message-logs", action="store_true")
    p.add_argument("--no-log-file", action="store_true")
    p.add_argument("--no-vip-channel", action="store_true")
    p.add_argument(
        "--broker-args",
        default="",
        metavar="ARGS",
        help="more `kairosmq broker` options for every broker, one string",
    )
    p.add_argument(
        "--namesrv-args",
        default="",
        metavar="ARGS",
        help="more `kairosmq namesrv` options, one string",
    )
    from ..cli import add_security_options

    add_security_options(p)  # to the name server and every broker (docs/cluster.md)
    g = p.add_argument_group("supervision")
    g.add_argument(
        "--restart-backoff",
        type=float,
        default=0.5,
        help="first restart delay of a dead child, doubled per failure in a row",
    )
    g.add_argument(
        "--healthy-after",
        type=float,
        default=10.0,
        help="seconds a restarted child must run to reset its backoff",
    )
    g.add_argument(
        "--max-failures",
        type=int,
        default=5,
        help="failures in a row after which the cluster stops (exit 1)",
    )
    g.add_argument("--start-timeout", type=float, default=60.0)
    g.add_argument("--stop-timeout", type=float, default=30.0)


def cmd_cluster(args: argparse.Namespace) -> int:
    from ..observe.logs import close_sinks, configure_logging, get_logger

    if args.brokers < 1:
        print("kairosmq cluster: --brokers must be >= 1", file=sys.stderr)
        return 2
    try:
        broker_index(args.first_broker)
    except ValueError as err:
        print(f"kairosmq cluster: --first-broker: {err}", file=sys.stderr)
        return 2
    data: Path = args.data_dir
    try:
        data.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"kairosmq cluster: --data-dir {data}: {err}", file=sys.stderr)
        return 2
    from ..security.install import security_options

    _tls, _policy, problem = security_options(args)  # each process builds its own
    if problem is not None:
        print(f"kairosmq cluster: {problem}", file=sys.stderr)
        return 2
    try:
        specs = plan_cluster(args)
    except ValueError as err:
        print(f"kairosmq cluster: {err}", file=sys.stderr)
        return 2
    configure_logging(
        json=True,
        log_dir=None if args.no_log_file else data / "logs",
        stdout=False,
        level=args.log_level,
    )
    sup = ClusterSupervisor(
        specs,
        data.resolve() / "cluster.json",
        get_logger("cluster"),
        restart_backoff=args.restart_backoff,
        healthy_after=args.healthy_after,
        max_failures=args.max_failures,
        start_timeout=args.start_timeout,
        stop_timeout=args.stop_timeout,
    )
    try:
        return asyncio.run(run_cluster(sup))
    finally:
        close_sinks()
