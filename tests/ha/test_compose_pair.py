"""docker-compose.yml's "pair" profile, checked without Docker (no ``docker compose`` here):
a SYNC_MASTER and its SLAVE behind the cluster profile's name server, their commands valid
``kairosmq broker`` command lines that make a valid ``BrokerConfig``; and the exact
commands run outside Docker (as scripts/compose_outside_docker.py maps them: volumes ->
temp dirs, service names -> 127.0.0.1, container ports -> free ports) replicate: a send to
the master is acked once the slave holds it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from kairosmq.protocol.codes import ResponseCode
from kairosmq.server.cli import build_config
from kairosmq.server.ha.role import BrokerRole

from tests.cluster.test_compose_cluster import _listening, _spawn, _tail
from tests.ha.pair import status, wait_for
from tests.helpers import send
from tests.ops.test_docker_static import COMPOSE, PLANS, _broker_args, cod
from tests.wire import RawPeer

PAIR = ("namesrv", "master", "slave")


def test_pair_profile_services_are_valid_broker_commands() -> None:
    assert "pair" in PLANS["namesrv"].profiles and "cluster" in PLANS["namesrv"].profiles
    ports = set()
    for name, role, bid in (("master", BrokerRole.SYNC_MASTER, 0), ("slave", BrokerRole.SLAVE, 1)):
        plan = PLANS[name]
        assert plan.profiles == ["pair"] and plan.stage.name == "broker"
        assert plan.argv[:2] == ["kairosmq", "broker"]
        b = _broker_args(plan.argv[1:])
        cfg = build_config(b)  # what the broker checks at start (roles, ids, addresses)
        assert (cfg.broker_role, cfg.broker_id) == (role, bid)
        assert (b.namesrv, b.broker_name, b.advertised_host) == ("namesrv:9876", "broker-p", name)
        assert cfg.ha_master_address is None  # the slave learns it from the name server
        assert plan.ports == [(b.port, b.port)]
        ports.add(b.port)
        assert {dst for _, dst, _ in plan.volumes} == {str(b.data_dir), str(b.log_dir)}
        assert {src for src, _, _ in plan.volumes} <= set(COMPOSE["volumes"])
        hc = plan.healthcheck
        assert hc is not None and hc[-1] == "health" and f"127.0.0.1:{b.port}" in hc
        deps = COMPOSE["services"][name]["depends_on"]
        assert deps["namesrv"]["condition"] == "service_healthy"
    # its own ports (the cluster profile's brokers use 10911 and 10921, their HA ports + 1)
    assert ports == {10931, 10941}
    assert COMPOSE["services"]["slave"]["depends_on"]["master"]["condition"] == "service_started"
    vols = [src for n in ("master", "slave") for src, _, _ in PLANS[n].volumes]
    assert len(vols) == len(set(vols)) == 4


@pytest.mark.slow
async def test_pair_profile_commands_replicate_outside_docker(tmp_path: Path) -> None:
    plans = {n: PLANS[n] for n in PAIR}
    hm = cod.HostMap(plans, tmp_path)
    cmds = {n: hm.argv(p, p.argv) for n, p in plans.items()}
    for n in ("master", "slave"):
        cmds[n] += ["--no-vip-channel", "--segment-size-mb", "16"]  # test-only: ports, disk
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = tmp_path / "out"
    logs.mkdir()
    addrs = {
        n: f"127.0.0.1:{hm.ports[p]}"
        for n, p in (("namesrv", 9876), ("master", 10931), ("slave", 10941))
    }
    try:
        for n in PAIR:
            procs[n] = _spawn(cmds[n], logs / f"{n}.out", tmp_path)
            await _listening(addrs[n], procs[n], logs / f"{n}.out")
        mp = await RawPeer.connect(addrs["master"])
        try:

            async def attached() -> bool:
                return bool((await status(mp))["ha"]["slaves"])

            await wait_for(attached, timeout=60, what="the slave found its master")
            r = await send(mp, "ComposePair", b"replicated", queue_id=0)
            assert r.code == ResponseCode.SUCCESS, r.remark  # SYNC_MASTER: the slave has it
        finally:
            await mp.close()
        for n in ("slave", "master", "namesrv"):  # what `docker compose stop` sends
            procs[n].send_signal(signal.SIGTERM)
            assert procs[n].wait(60) == 0, _tail(logs / f"{n}.out")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        await asyncio.sleep(0)
