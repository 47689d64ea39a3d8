#!/usr/bin/env python3
"""Run docker-compose.yml's services outside Docker, the way compose would run them.

Owns: reading the Dockerfile (stages, ENTRYPOINT/CMD, COPY, VOLUME, EXPOSE, USER,
HEALTHCHECK) and docker-compose.yml into one ``ServicePlan`` per service (the exact argv,
environment, volumes, ports and healthcheck compose would use), ``HostMap`` (the only
deviations: named volumes become temp dirs, service host names become 127.0.0.1,
container ports become free local ports, image paths become repository paths), and the
run: broker -> healthcheck until healthy -> consumer + producer -> metrics scrape ->
SIGTERM (``docker stop``) -> spark-report over the broker's logs volume.

No Docker daemon is needed; the static test (tests/ops/test_docker_static.py) imports the
parsing half. Exit 0 when every step worked (the Spark step is skipped, with a message,
when pyspark or java is missing); 1 otherwise.

    python scripts/compose_outside_docker.py [--workdir DIR] [--skip-report]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass
class Stage:
    name: str
    base: str
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    copies: list[tuple[str, str]] = field(default_factory=list)  # (repo src, image dest)
    volumes: list[str] = field(default_factory=list)
    expose: list[int] = field(default_factory=list)
    user: str | None = None
    healthcheck: list[str] | None = None
    run: list[str] = field(default_factory=list)


def _exec_form(rest: str) -> list[str]:
    rest = rest.strip()
    if rest.startswith("["):
        return [str(x) for x in json.loads(rest)]
    return ["/bin/sh", "-c", rest]


def parse_dockerfile(text: str) -> dict[str, Stage]:
    """Stages by name (unnamed ones by index), with what a child stage inherits."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    cur: Stage | None = None
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "ARG" and cur is None:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        elif instr == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            parent = stages.get(base)
            cur = Stage(name, parent.base if parent else base)
            if parent:
                for attr in ("entrypoint", "cmd", "volumes", "expose", "copies", "run"):
                    setattr(cur, attr, list(getattr(parent, attr)))
                cur.user, cur.healthcheck = parent.user, parent.healthcheck
            stages[name] = cur
        elif cur is None:
            continue
        elif instr == "ENTRYPOINT":
            cur.entrypoint, cur.cmd = _exec_form(rest), []
        elif instr == "CMD":
            cur.cmd = _exec_form(rest)
        elif instr == "COPY" and "--from=" not in rest:
            *srcs, dest = rest.split()
            cur.copies += [(s.rstrip("/"), dest.rstrip("/")) for s in srcs]
        elif instr == "VOLUME":
            cur.volumes += _exec_form(rest) if rest.strip().startswith("[") else rest.split()
        elif instr == "EXPOSE":
            cur.expose += [int(p.split("/")[0]) for p in rest.split()]
        elif instr == "USER":
            cur.user = rest.strip()
        elif instr == "RUN":
            cur.run.append(rest)
        elif instr == "HEALTHCHECK":
            cmd = rest[rest.index("CMD") + 3 :] if "CMD" in rest else ""
            cur.healthcheck = _exec_form(cmd) if cmd else None
    return stages


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR}`` / ``${VAR:-default}`` substitution."""
    env = os.environ if env is None else env

    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1)) or (m.group(3) or "")

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", sub, value)


@dataclass
class ServicePlan:
    name: str
    stage: Stage
    argv: list[str]
    environment: dict[str, str]
    volumes: list[tuple[str, str, bool]]  # (named volume, container path, read-only)
    ports: list[tuple[int, int]]  # (host, container)
    healthcheck: list[str] | None
    profiles: list[str]
    # container port -> the host address it is published on ("": every interface)
    published: dict[int, str] = field(default_factory=dict)


def plan_services(
    compose: dict[str, Any], stages: dict[str, Stage], env: dict[str, str] | None = None
) -> dict[str, ServicePlan]:
    images = {
        s["image"]: s["build"]["target"]
        for s in compose["services"].values()
        if "build" in s and "image" in s
    }
    plans = {}
    for name, svc in compose["services"].items():
        target = svc["build"]["target"] if "build" in svc else images[svc["image"]]
        stage = stages[target]
        if "entrypoint" in svc:
            argv = list(svc["entrypoint"]) + list(svc.get("command") or [])
        else:
            argv = stage.entrypoint + list(svc["command"] if "command" in svc else stage.cmd)
        vols = []
        for v in svc.get("volumes", []):
            src, dst, *mode = v.split(":")
            vols.append((src, dst, mode == ["ro"]))
        ports, published = [], {}
        for p in svc.get("ports", []):  # [ip:]host:container
            *ip, host, container = interpolate(str(p), env).split(":")
            ports.append((int(host), int(container)))
            published[int(container)] = ip[0] if ip else ""
        test = (svc.get("healthcheck") or {}).get("test")
        health = stage.healthcheck
        if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
            health = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", " ".join(test[1:])]
        plans[name] = ServicePlan(
            name,
            stage,
            [interpolate(str(a), env) for a in argv],
            {k: interpolate(str(v), env) for k, v in (svc.get("environment") or {}).items()},
            vols,
            ports,
            health,
            list(svc.get("profiles") or []),
            published,
        )
    return plans


def repo_path(stage: Stage, p: str) -> str:
    """The repository file an image path was COPY'd from (else ``p`` unchanged)."""
    for src, dst in stage.copies:
        if p == dst or p.startswith(dst + "/"):
            return str(REPO / src) + p[len(dst) :]
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NAME_OPTIONS = frozenset({"--broker-name", "--cluster"})  # values that are names, not hosts


class HostMap:
    """How one compose project maps onto this machine (see module docstring)."""

    def __init__(self, plans: dict[str, ServicePlan], workdir: Path) -> None:
        self.hosts = set(plans)
        self.volumes = {
            src: workdir / "volumes" / src for p in plans.values() for src, _, _ in p.volumes
        }
        for d in self.volumes.values():
            d.mkdir(parents=True, exist_ok=True)
        self.ports = {c: free_port() for p in plans.values() for _, c in p.ports}

    def path(self, plan: ServicePlan, p: str) -> str:
        for src, dst, _ in plan.volumes:
            if p == dst or p.startswith(dst + "/"):
                return str(self.volumes[src]) + p[len(dst) :]
        return repo_path(plan.stage, p)

    def arg(self, plan: ServicePlan, a: str, option_value: bool = True) -> str:
        """Map one argument; bare host names only as option values (not subcommands)."""
        host, _, port = a.rpartition(":")
        local = self.hosts | {"127.0.0.1", "localhost", "0.0.0.0"}
        if host in local and port.isdigit() and int(port) in self.ports:
            return f"127.0.0.1:{self.ports[int(port)]}"
        if option_value and (a in self.hosts or a == "0.0.0.0"):
            return "127.0.0.1"
        if option_value and a.isdigit() and int(a) in self.ports:
            return str(self.ports[int(a)])
        return self.path(plan, a) if a.startswith("/") else a

    def argv(self, plan: ServicePlan, argv: list[str]) -> list[str]:
        """Map a service's argv: the values of ``NAME_OPTIONS`` stay as written (a
        ``--broker-name broker-a`` names a broker, even where a service has that name);
        the listen ports the image leaves to their defaults (a broker's 10911 and its
        embedded name server's 9876, a name server's 9876) are given, mapped."""
        head = {"kairosmq": str(BIN / "kairosmq"), "python": sys.executable}.get(argv[0], argv[0])
        out = [head]
        for prev, a in zip(argv, argv[1:], strict=False):
            out.append(a if prev in NAME_OPTIONS else self.arg(plan, a, prev.startswith("-")))
        given = set(argv)
        if argv[:2] == ["kairosmq", "broker"]:
            if "--port" not in given:
                out += ["--port", str(self.ports[10911])]
            if "--namesrv" not in given:  # the embedded name server (unused with --namesrv)
                out += ["--namesrv-port", str(self.ports[9876])]
        elif argv[:2] == ["kairosmq", "namesrv"] and "--port" not in given:
            out += ["--port", str(self.ports[9876])]
        return out

    def env(self, plan: ServicePlan) -> dict[str, str]:
        mapped = {k: self.arg(plan, v) for k, v in plan.environment.items()}
        return {**os.environ, "PYTHONUNBUFFERED": "1", **mapped}


def step(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def spark_missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not on PATH"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'kairosmq[spark]')"
    return None


def run(workdir: Path, skip_report: bool) -> int:
    stages = parse_dockerfile((REPO / "Dockerfile").read_text())
    plans = plan_services(yaml.safe_load((REPO / "docker-compose.yml").read_text()), stages)
    hm = HostMap(plans, workdir)
    b, logs = plans["broker"], workdir / "out"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(plan: ServicePlan) -> subprocess.Popen[bytes]:
        argv = hm.argv(plan, plan.argv)
        env = "".join(f"{k}={hm.arg(plan, v)} " for k, v in plan.environment.items())
        step(f"{plan.name}: {shlex.join(plan.argv)}\n    outside Docker: {env}{shlex.join(argv)}")
        out = (logs / f"{plan.name}.out").open("wb")
        p = subprocess.Popen(
            argv, env=hm.env(plan), stdout=out, stderr=subprocess.STDOUT, cwd=workdir
        )
        procs.append(p)
        return p

    try:
        broker = spawn(b)
        assert b.healthcheck is not None, "the broker service needs a healthcheck"
        health = hm.argv(b, b.healthcheck)
        step(f"healthcheck: {shlex.join(health)}")
        deadline = time.monotonic() + 30
        while subprocess.run(health, capture_output=True, timeout=15).returncode != 0:
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the broker never became healthy")
            time.sleep(0.3)
        consumer = spawn(plans["consumer"])
        producer = spawn(plans["producer"])
        if producer.wait(60) != 0 or consumer.wait(60) != 0:
            raise RuntimeError("the producer or the consumer failed")
        consumed = (logs / "consumer.out").read_text()
        n = plans["consumer"].argv[plans["consumer"].argv.index("-n") + 1]
        if f"consumed {n} messages" not in consumed:
            raise RuntimeError(f"the consumer did not report {n} messages")
        step(f"producer sent and consumer received {n} messages")
        with urllib.request.urlopen(f"http://127.0.0.1:{hm.ports[9877]}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        if 'kairosmq_messages_stored_total{topic="TopicTest"}' not in metrics:
            raise RuntimeError("metrics do not show the stored messages")
        step("metrics endpoint answers with the stored messages")
        broker.send_signal(signal.SIGTERM)  # what `docker stop` sends
        if broker.wait(30) != 0:
            raise RuntimeError(f"the broker exited with {broker.returncode} on SIGTERM")
        step("broker stopped gracefully on SIGTERM")
        missing = "skipped by --skip-report" if skip_report else spark_missing()
        if missing:
            step(f"SKIP spark-report: {missing}")
            return 0
        report = spawn(plans["spark-report"])
        if report.wait(240) != 0:
            raise RuntimeError("the spark report failed")
        out = hm.path(plans["spark-report"], plans["spark-report"].argv[-1])
        if not (Path(out) / "report.html").is_file():
            raise RuntimeError(f"no report.html in {out}")
        step(f"spark-report wrote {out}/report.html")
        return 0
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
        print(f"FAILED: {err}", file=sys.stderr)
        for f in sorted(logs.glob("*.out")):
            print(f"--- {f.name} (tail)\n{f.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None, help="keep files here (default: temp)")
    ap.add_argument("--skip-report", action="store_true", help="do not run the Spark report")
    args = ap.parse_args(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args.workdir.resolve(), args.skip_report)
    with tempfile.TemporaryDirectory(prefix="kairosmq-compose-") as tmp:
        return run(Path(tmp), args.skip_report)


if __name__ == "__main__":
    raise SystemExit(main())
