"""docker-compose.yml's "cluster" profile, checked without Docker: a name server and two
brokers built from the broker image, and their exact commands run outside Docker (as
scripts/compose_outside_docker.py maps them: volumes -> temp dirs, service names ->
127.0.0.1, container ports -> free ports) form a working cluster."""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from kairosmq.server.namesrv.cli import add_namesrv_parser

from tests.cluster.procs import create_topic, wait_route
from tests.ops.test_docker_static import COMPOSE, PLANS, STAGES, _broker_args, cod

CLUSTER = ("namesrv", "broker-a", "broker-b")


def _namesrv_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_namesrv_parser(ap.add_subparsers(dest="command", required=True))
    return ap.parse_args(argv)


def _opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_cluster_profile_services() -> None:
    for name in CLUSTER:  # the name server serves the "pair" profile too (tests/ha)
        assert PLANS[name].profiles == (["cluster", "pair"] if name == "namesrv" else ["cluster"])
        assert PLANS[name].stage.name == "broker"  # the same image
    assert PLANS["broker"].profiles == []  # the default single process is unchanged
    ns = PLANS["namesrv"]
    assert ns.argv[:2] == ["kairosmq", "namesrv"]
    args = _namesrv_args(ns.argv[1:])
    assert args.host == "0.0.0.0" and ns.ports == [(args.port, args.port)] == [(9876, 9876)]
    assert {dst for _, dst, _ in ns.volumes} == {str(args.data_dir)}
    assert ns.healthcheck is not None and str(args.port) in " ".join(ns.healthcheck)
    seen_ports, seen_volumes = set(), {src for src, _, _ in PLANS["broker"].volumes}
    for name in ("broker-a", "broker-b"):
        plan = PLANS[name]
        b = _broker_args(plan.argv[1:])
        assert (b.namesrv, b.broker_name, b.cluster) == ("namesrv:9876", name, "DefaultCluster")
        assert b.advertised_host == name  # --broker-ip: the service name inside the network
        assert plan.ports == [(b.port, b.port)] and b.port not in seen_ports
        seen_ports.add(b.port)
        vols = {src for src, _, _ in plan.volumes}
        assert not vols & seen_volumes and vols <= set(COMPOSE["volumes"])
        seen_volumes |= vols
        assert {dst for _, dst, _ in plan.volumes} == {str(b.data_dir), str(b.log_dir)}
        hc = plan.healthcheck
        assert hc is not None and hc[:2] == ["kairosmq", "admin"] and hc[-1] == "health"
        assert _opt(hc, "--broker") == f"127.0.0.1:{b.port}"
        assert _opt(hc, "--namesrv") == "namesrv:9876"
        assert COMPOSE["services"][name]["depends_on"]["namesrv"]["condition"] == (
            "service_healthy"
        )
    assert seen_ports == {10911, 10921}
    assert {9876, 10911} <= set(STAGES["broker"].expose)


@pytest.mark.slow
async def test_cluster_profile_commands_form_a_cluster_outside_docker(tmp_path: Path) -> None:
    plans = {n: PLANS[n] for n in CLUSTER}
    hm = cod.HostMap(plans, tmp_path)
    cmds = {n: hm.argv(p, p.argv) for n, p in plans.items()}
    for n in ("broker-a", "broker-b"):
        cmds[n] += ["--no-vip-channel", "--segment-size-mb", "16"]  # test-only: ports, disk
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = tmp_path / "out"
    logs.mkdir()
    try:
        for n in CLUSTER:
            procs[n] = _spawn(cmds[n], logs / f"{n}.out", tmp_path)
        addrs = {
            n: f"127.0.0.1:{hm.ports[p]}"
            for n, p in (("namesrv", 9876), ("broker-a", 10911), ("broker-b", 10921))
        }
        for n, addr in addrs.items():
            await _listening(addr, procs[n], logs / f"{n}.out")
        await create_topic([addrs["broker-a"], addrs["broker-b"]], "ComposeCluster")
        r = await wait_route(addrs["namesrv"], "ComposeCluster", {"broker-a", "broker-b"})
        assert {b.broker_name: b.master_addr for b in r.broker_datas} == {
            "broker-a": addrs["broker-a"],
            "broker-b": addrs["broker-b"],
        }
        for n in ("broker-a", "broker-b"):  # the compose healthcheck, mapped
            hc = hm.argv(plans[n], plans[n].healthcheck or [])
            done = _run(hc)
            assert done.returncode == 0, (hc, done.stdout, done.stderr)
        for n in ("broker-a", "broker-b", "namesrv"):  # what `docker compose stop` sends
            procs[n].send_signal(signal.SIGTERM)
            assert procs[n].wait(60) == 0, _tail(logs / f"{n}.out")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


async def _listening(addr: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    host, port = addr.rsplit(":", 1)
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(f"{addr} exited {proc.returncode}: {_tail(log)}")
        try:
            _r, w = await asyncio.open_connection(host, int(port))
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{addr} never listened: {_tail(log)}")


def _spawn(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd
        )


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, capture_output=True, timeout=60)
