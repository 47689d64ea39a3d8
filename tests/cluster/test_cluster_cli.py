"""``kairosmq cluster`` as a user runs it: real name server and broker processes.

The plan (names, ports, data dirs, argv) is checked without processes; the rest runs the
command: it prints one line per process, the name server routes a topic to both brokers,
SIGTERM stops the brokers (which leave the name server's routes) before the name server, a
child that cannot start fails the command (exit 1, the others stopped), a killed broker is
restarted on its port, a broker that keeps dying makes the cluster give up, a second
"machine" (``--namesrv``, ``--first-broker``) joins and leaves the first one's name server,
and killing the supervisor itself stops its children.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest
from kairosmq.server.cli import main as cli_main
from kairosmq.server.cluster.local import add_cluster_parser, broker_name, plan_cluster

from tests.cluster.procs import ClusterProcess, create_topic, route, wait_route

TOPIC = "ClusterCli"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by a dead parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _events(log_dir: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for f in sorted(log_dir.glob("*.jsonl"))
        for line in f.read_text().splitlines()
        if line.startswith("{")
    ]


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_cluster_parser(ap.add_subparsers(dest="command"))
    return ap.parse_args(["cluster", *argv])


def test_plan_names_ports_dirs_and_argv(tmp_path: Path) -> None:
    assert [broker_name(i) for i in (0, 1, 25, 26, 27)] == [
        "broker-a",
        "broker-b",
        "broker-z",
        "broker-aa",
        "broker-ab",
    ]
    args = _parse(
        [
            "--brokers",
            "3",
            "--data-dir",
            str(tmp_path),
            "--flush-mode",
            "SYNC_FLUSH",
            "--broker-args",
            "--max-reconsume-times 3",
        ]
    )
    specs = plan_cluster(args)
    assert [(s.name, s.kind, s.address, s.data_dir) for s in specs] == [
        ("namesrv", "namesrv", "127.0.0.1:9876", tmp_path / "namesrv"),
        ("broker-a", "broker", "127.0.0.1:10911", tmp_path / "broker-a"),
        ("broker-b", "broker", "127.0.0.1:10921", tmp_path / "broker-b"),
        ("broker-c", "broker", "127.0.0.1:10931", tmp_path / "broker-c"),
    ]
    b = specs[2].argv
    assert b[b.index("broker") + 1 : b.index("broker") + 5] == [
        "--host",
        "127.0.0.1",
        "--port",
        "10921",
    ]
    for opt, value in (
        ("--namesrv", "127.0.0.1:9876"),
        ("--broker-name", "broker-b"),
        ("--cluster", "DefaultCluster"),
        ("--broker-ip", "127.0.0.1"),
        ("--flush-mode", "SYNC_FLUSH"),
        ("--max-reconsume-times", "3"),
        ("--data-dir", str(tmp_path / "broker-b")),
    ):
        assert b[b.index(opt) + 1] == value, opt
    # bound to every interface: probe on loopback, register --broker-ip
    wide = plan_cluster(_parse(["--host", "0.0.0.0", "--broker-ip", "10.1.2.3"]))
    assert wide[1].address == "127.0.0.1:10911"
    assert wide[1].argv[wide[1].argv.index("--broker-ip") + 1] == "10.1.2.3"
    assert wide[1].argv[wide[1].argv.index("--namesrv") + 1] == "127.0.0.1:9876"
    # one machine of several: no name server of its own, names continuing at broker-c
    more = plan_cluster(
        _parse(["--namesrv", "ns1:9876;ns2:9876", "--first-broker", "c", "--base-port", "20911"])
    )
    assert [(s.name, s.port) for s in more] == [("broker-c", 20911), ("broker-d", 20921)]
    assert more[0].argv[more[0].argv.index("--namesrv") + 1] == "ns1:9876;ns2:9876"


def test_bad_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["cluster", "--brokers", "0"]) == 2
    assert "--brokers must be >= 1" in capsys.readouterr().err
    assert cli_main(["cluster", "--first-broker", "c1"]) == 2
    assert "--first-broker: a broker suffix is letters a-z" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert cli_main(["cluster", "--data-dir", str(tmp_path / "file" / "d")]) == 2
    assert "--data-dir" in capsys.readouterr().err


@pytest.mark.slow
async def test_a_second_machine_joins_with_namesrv_and_leaves_cleanly(tmp_path: Path) -> None:
    """`kairosmq cluster --namesrv <the first one's> --first-broker c`: what a second machine
    runs (here on the same one): its broker joins the first cluster's routes, and leaves them
    when it stops, while the first cluster's brokers stay."""
    one = ClusterProcess(tmp_path / "one", 2)
    try:
        await one.start()
        two = ClusterProcess(tmp_path / "two", 1, "--namesrv", one.namesrv, "--first-broker", "c")
        try:
            await two.start()
            assert set(two.status()) == {"broker-c"}  # no name server of its own
            await create_topic(one.broker_addresses + two.broker_addresses, TOPIC)
            r = await wait_route(one.namesrv, TOPIC, {"broker-a", "broker-b", "broker-c"})
            assert {b.broker_name: b.master_addr for b in r.broker_datas}["broker-c"] == (
                two.broker_address(0)
            )
        finally:
            assert two.stop(sig=signal.SIGINT) == 0  # Ctrl-C
        rr = await route(one.namesrv, TOPIC)
        assert rr is not None and {q.broker_name for q in rr.queue_datas} == {
            "broker-a",
            "broker-b",
        }
    finally:
        one.stop()


@pytest.mark.slow
async def test_cluster_starts_routes_both_brokers_and_stops_brokers_first(tmp_path: Path) -> None:
    c = ClusterProcess(tmp_path / "data", 2, "--log-level", "info")
    try:
        await c.start()
        out, _ = c.output()
        lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
        assert c.namesrv in lines["namesrv"]
        for i, name in enumerate(("broker-a", "broker-b")):
            assert c.broker_address(i) in lines[name], out
            assert f"pid {c.pid(name)}" in lines[name]
            assert str(tmp_path / "data" / name) in lines[name]
            assert (tmp_path / "data" / name / "store").is_dir()
        await create_topic(c.broker_addresses, TOPIC)
        r = await wait_route(c.namesrv, TOPIC, {"broker-a", "broker-b"})
        assert {b.broker_name: (b.master_addr, b.cluster) for b in r.broker_datas} == {
            "broker-a": (c.broker_address(0), "DefaultCluster"),
            "broker-b": (c.broker_address(1), "DefaultCluster"),
        }
        pids = {n: c.pid(n) for n in ("namesrv", "broker-a", "broker-b")}
        assert c.proc is not None
        c.proc.terminate()
        assert c.proc.wait(60) == 0, c.output()
        # the brokers UNREGISTERed while the name server still ran
        ns = _events(tmp_path / "data" / "namesrv" / "logs")
        gone = {
            e["broker_name"]: e["ts"] for e in ns if e["event"] == "namesrv.broker_unregistered"
        }
        stopped = [e for e in ns if e["event"] == "namesrv.stopped"]
        assert set(gone) == {"broker-a", "broker-b"} and len(stopped) == 1, ns
        assert max(gone.values()) <= stopped[0]["ts"] and stopped[0]["brokers"] == 0
        sup = [e for e in _events(tmp_path / "data" / "logs") if e["event"].startswith("cluster.")]
        assert [(e["event"], e.get("name")) for e in sup][-2:] == [
            ("cluster.stopping", None),
            ("cluster.stopped", None),
        ]
        assert {e["name"]: e["pid"] for e in sup if e["event"] == "cluster.child_started"} == pids
        st = c.status()
        assert {n: (s["state"], s["last_exit"]) for n, s in st.items()} == {
            n: ("stopped", 0) for n in pids
        }
        assert not any(_alive(p) for p in pids.values())
    finally:
        c.stop()


@pytest.mark.slow
async def test_a_broker_that_cannot_start_fails_the_cluster(tmp_path: Path) -> None:
    c = ClusterProcess(tmp_path / "data", 2)
    blocker = socket.socket()  # bound, not listening: the broker's bind fails, probes too
    blocker.bind(("127.0.0.1", c.base_port + 10))
    try:
        c.spawn()
        assert c.proc is not None
        rc = c.proc.wait(120)
        out, err = c.output()
        assert rc == 1, (out, err)
        assert re.search(r"kairosmq cluster: broker-b exited with code \d+ before listening", err)
        st = c.status()
        assert st["broker-b"]["state"] == "failed"
        for name in ("namesrv", "broker-a"):  # started, then stopped again
            assert st[name]["pid"] is not None and not _alive(int(st[name]["pid"]))
    finally:
        blocker.close()
        c.stop()


@pytest.mark.slow
async def test_a_killed_broker_is_restarted_and_one_that_keeps_dying_stops_the_cluster(
    tmp_path: Path,
) -> None:
    c = ClusterProcess(
        tmp_path / "data",
        2,
        "--restart-backoff",
        "0.2",
        "--healthy-after",
        "120",
        "--max-failures",
        "2",
    )
    try:
        await c.start()
        first = c.kill9("broker-a")
        await c.wait_restarted("broker-a", first)
        st = c.status()["broker-a"]
        assert st["starts"] == 2 and st["address"] == c.broker_address(0)
        out, _ = c.output()
        assert re.search(rf"broker-a +exited with code -9 \(pid {first}\); restarting", out)
        assert re.search(r"broker-a .*(restart 1)", out)
        await create_topic([c.broker_address(0)], TOPIC)  # it serves again
        # a second death within --healthy-after: 2 failures in a row = --max-failures
        c.kill9("broker-a")
        assert c.proc is not None
        assert c.proc.wait(120) == 1
        _, err = c.output()
        assert "broker-a failed 2 times in a row" in err and "giving up" in err
        assert not any(_alive(int(s["pid"])) for s in c.status().values())
    finally:
        c.stop()


@pytest.mark.slow
async def test_children_stop_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    c = ClusterProcess(tmp_path / "data", 1)
    try:
        await c.start()
        pids = [int(s["pid"]) for s in c.status().values()]
        assert c.proc is not None
        c.proc.kill()  # kill -9 of `kairosmq cluster`: PR_SET_PDEATHSIG sends SIGTERM
        c.proc.wait()
        await c.wait(lambda: not any(_alive(p) for p in pids), 60, "children gone", exited_ok=True)
    finally:
        c.stop()
