"""Dockerfile and docker-compose.yml checked without Docker: they parse, every command
resolves to a real console script, module or file, volumes and ports agree with the
broker's defaults, and the healthcheck command works against a live broker."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from kairosmq.client import admin as admin_cli
from kairosmq.server.cli import _broker_parser
from kairosmq.server.config import BrokerConfig

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "compose_outside_docker", REPO / "scripts" / "compose_outside_docker.py"
)
assert _spec is not None and _spec.loader is not None
cod = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cod
_spec.loader.exec_module(cod)

STAGES = cod.parse_dockerfile((REPO / "Dockerfile").read_text())
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
PLANS = cod.plan_services(COMPOSE, STAGES, env={})
DEFAULTS = BrokerConfig()


def _broker_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    _broker_parser(sub)
    return ap.parse_args(argv)


def test_dockerfile_stages() -> None:
    assert {"build", "build-spark", "spark-report", "broker"} <= set(STAGES)
    assert list(STAGES)[-1] == "broker"  # `docker build .` builds the broker
    for name in ("broker", "spark-report"):
        st = STAGES[name]
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", st.base), st.base
        assert st.user == "kairosmq", f"{name} must not run as root"
    assert any("openjdk-17-jre" in r for r in STAGES["spark-report"].run)
    text = (REPO / "Dockerfile").read_text()
    assert "COPY --from=build /opt/kairosmq" in text  # multi-stage: no build tools at runtime


def test_broker_image_entrypoint_volumes_ports_and_healthcheck() -> None:
    st = STAGES["broker"]
    assert st.entrypoint[:4] == ["kairosmq", "broker", "--host", "0.0.0.0"]
    args = _broker_args(st.entrypoint[1:])
    assert {str(args.data_dir), str(args.log_dir)} <= set(st.volumes) == {"/data", "/logs"}
    assert args.port == DEFAULTS.port and args.namesrv_port == DEFAULTS.namesrv_port
    assert {DEFAULTS.port, DEFAULTS.namesrv_port} <= set(st.expose)
    hc = st.healthcheck
    assert hc is not None and hc[:2] == ["kairosmq", "admin"] and hc[-1] == "health"
    assert f"127.0.0.1:{DEFAULTS.namesrv_port}" in hc and f"127.0.0.1:{DEFAULTS.port}" in hc


def test_compose_services_volumes_ports() -> None:
    assert set(COMPOSE["services"]) == {
        "broker",
        "spark-report",
        "producer",
        "consumer",
        "namesrv",
        "broker-a",
        "broker-b",
        "console",
        "master",
        "slave",
    }  # tests/cluster; console: docs/console.md; master/slave: tests/ha/test_compose_pair.py
    b = PLANS["broker"]
    assert COMPOSE["services"]["broker"]["restart"] in ("always", "unless-stopped")
    assert b.healthcheck == STAGES["broker"].healthcheck
    containers = {c for _, c in b.ports}
    assert {DEFAULTS.port, DEFAULTS.namesrv_port} <= containers <= set(STAGES["broker"].expose)
    assert all(h == c for h, c in b.ports)  # routes advertise the container port
    args = _broker_args(b.argv[1:])
    mounts = {dst: src for src, dst, _ in b.volumes}
    assert set(mounts) == {str(args.data_dir), str(args.log_dir)}
    assert set(mounts.values()) <= set(COMPOSE["volumes"])
    assert args.advertised_host == "broker" and args.metrics_port in containers
    report = PLANS["spark-report"]
    assert "report" in report.profiles and report.argv[:2] == ["kairosmq", "report"]
    logs = {dst: (src, ro) for src, dst, ro in report.volumes}
    assert logs[report.argv[2]] == (mounts[str(args.log_dir)], True)  # the broker's logs
    out = report.argv[report.argv.index("--output") + 1]
    assert out in logs and logs[out][0] in COMPOSE["volumes"]
    console = PLANS["console"]
    assert "console" in console.profiles and console.argv[:2] == ["kairosmq", "console"]
    assert console.argv[console.argv.index("--namesrv") + 1] == f"broker:{DEFAULTS.namesrv_port}"
    users = console.argv[console.argv.index("--users") + 1]
    # the users file lives in a writable volume: the first start creates it (docs/docker.md)
    reports = console.argv[console.argv.index("--spark-report-dir") + 1]
    # ... and the Report view reads, read-only, the volume the spark-report service writes
    mounted = {dst: (src, ro) for src, dst, ro in console.volumes}
    assert {dst: ro for dst, (_src, ro) in mounted.items()} == {
        str(Path(users).parent): False,
        reports: True,
    }
    assert mounted[reports][0] == logs[out][0]
    assert console.published == {8088: "127.0.0.1"}  # loopback only
    for name in ("producer", "consumer"):
        plan = PLANS[name]
        assert plan.environment["NAMESRV_ADDR"] == f"broker:{DEFAULTS.namesrv_port}"
        depends = COMPOSE["services"][name]["depends_on"]["broker"]
        assert depends["condition"] == "service_healthy"


def test_every_command_resolves() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for name, plan in PLANS.items():
        exe, *rest = plan.argv
        if exe in scripts:
            sub = rest[0]
            if sub == "broker":
                _broker_args(rest)
            elif sub == "namesrv":
                from kairosmq.server.namesrv.cli import add_namesrv_parser

                ap = argparse.ArgumentParser()
                add_namesrv_parser(ap.add_subparsers(dest="command", required=True))
                ap.parse_args(rest)
            elif sub == "console":
                from kairosmq.console.cli import build_parser

                build_parser().parse_args(rest[1:])
            elif sub == "report":
                pytest.importorskip("pyspark")
                from kairosmq.spark.job import parse_args

                parse_args(rest[1:])
            else:
                raise AssertionError(f"{name}: unknown subcommand {sub}")
        else:
            assert exe == "python", f"{name}: {exe} is neither a console script nor python"
            script = cod.repo_path(plan.stage, rest[0])
            assert Path(script).is_file(), f"{name}: {rest[0]} is not COPY'd from the repo"
            source = Path(script).read_text()
            for flag in (a for a in rest[1:] if a.startswith("-")):
                assert f'"{flag}"' in source, f"{name}: {script} has no option {flag}"
            assert "NAMESRV_ADDR" in source
    admin_cli.build_parser().parse_args(STAGES["broker"].healthcheck[2:])


@pytest.mark.slow  # the CLI in child processes
async def test_healthcheck_command_against_live_broker(broker) -> None:
    b = PLANS["broker"]
    ports = {DEFAULTS.namesrv_port: broker.namesrv_port, DEFAULTS.port: broker.port}
    argv = [str(Path(sys.executable).parent / "kairosmq")] + [
        re.sub(r":(\d+)$", lambda m: f":{ports.get(int(m.group(1)), m.group(1))}", a)
        for a in b.healthcheck[1:]
    ]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and out.startswith(b"ok: broker")
    await broker.stop()
    proc = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode != 0 and b"cannot reach" in err


def test_metrics_published_on_the_docker_host_loopback_only() -> None:
    """The metrics endpoint has no authentication: every compose file that serves it
    (docker-compose.yml, and with the ACL overlay) publishes it on 127.0.0.1 only, and the
    broker binds it on loopback unless --metrics-host says otherwise."""
    assert _broker_args(["broker"]).metrics_host == "127.0.0.1" == DEFAULTS.metrics_host
    acl = yaml.safe_load((REPO / "docker-compose.acl.yml").read_text())
    merged = {**COMPOSE, "services": {**COMPOSE["services"]}}
    merged["services"]["broker"] = {**COMPOSE["services"]["broker"], **acl["services"]["broker"]}
    for name, compose in (("docker-compose.yml", COMPOSE), ("+ docker-compose.acl.yml", merged)):
        plans = cod.plan_services(compose, STAGES, env={})
        served = 0
        for plan in plans.values():
            if plan.argv[:2] != ["kairosmq", "broker"]:
                continue
            args = _broker_args(plan.argv[1:])
            for _host, container in plan.ports:
                if container == args.metrics_port:
                    served += 1
                    assert plan.published[container] == "127.0.0.1", (
                        f"{name}: {plan.name} publishes metrics on "
                        f"{plan.published[container] or 'every interface'}"
                    )
                else:
                    assert plan.published[container] == "", (name, plan.name, container)
            if args.metrics_port is not None:
                assert args.metrics_host == "0.0.0.0"  # reachable through the port mapping
        assert served == 1, name
    # the variable publishes it elsewhere when asked
    plans = cod.plan_services(COMPOSE, STAGES, env={"KAIROSMQ_METRICS_PUBLISH": "10.0.0.5"})
    assert plans["broker"].published[9877] == "10.0.0.5"
