"""Supervised background services (server/supervise.py) on real brokers and real faults.

Faults are made for real: the checkpoint file is replaced by a directory (root ignores
chmod, a directory cannot be replaced by a file), a log sink writes to ``/dev/full``
(ENOSPC on every write). The Supervisor's own unit tests run real coroutines that raise.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
from kairosmq.client import admin as admin_cli
from kairosmq.protocol.codes import RequestCode
from kairosmq.server.observe.logsink import StreamSink
from kairosmq.server.supervise import ServiceState, Supervisor

from tests.helpers import send
from tests.wire import RawPeer

FAST_RETRY = {"checkpoint_interval": 0.05, "service_retry_base": 0.05, "service_retry_max": 0.2}


async def _until(cond: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def _admin(broker: Any, *argv: str) -> tuple[int, str]:
    """``kairosmq admin <argv>`` against the broker (its own loop, in a thread)."""
    out = io.StringIO()
    args = ["--namesrv", broker.namesrv_address, "--broker", broker.address, *argv]
    code = await asyncio.to_thread(admin_cli.main, args, out=out, err=io.StringIO())
    return code, out.getvalue()


def _block_checkpoint(path: Path) -> None:
    """Make every checkpoint write fail: its final name becomes a non-empty directory."""
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "in-the-way").write_text("x")


def _open_fds_under(directory: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


@pytest.mark.slow  # restart backoff in real time
async def test_failing_checkpoint_is_restarted_with_backoff_and_shown_degraded(
    broker_factory, tmp_path
) -> None:
    with structlog.testing.capture_logs() as logs:
        broker = await broker_factory(**FAST_RETRY)
        cp = broker.store.checkpoint_path
        _block_checkpoint(cp)
        st = broker.supervisor.services["checkpoint"]
        await _until(lambda: st.failures >= 4, what="4 checkpoint failures")
        assert st.state == "degraded" and broker.supervisor.degraded == ["checkpoint"]
        assert "IsADirectoryError" in (st.last_error or "")
        assert broker.stats.service_failures["checkpoint"] == st.failures
        # other services are unaffected and the broker keeps serving
        assert broker.supervisor.services["flush"].state == "running"
        peer = await RawPeer.connect(broker.address)
        assert (await send(peer, "StillServing", b"x")).code == 0

        code, out = await _admin(broker, "status", "--json")
        status = json.loads(out)
        assert code == 0 and status["degraded"] == ["checkpoint"]
        row = next(s for s in status["services"] if s["name"] == "checkpoint")
        assert row["state"] == "degraded" and "IsADirectoryError" in row["lastError"]
        assert {s["name"] for s in status["services"]} >= {
            "flush",
            "checkpoint",
            "housekeeping",
            "connections",
            "schedule-level-1",
        }
        code, out = await _admin(broker, "status")
        assert code == 0 and "degraded: checkpoint (IsADirectoryError" in out

        # the fault goes away: the next round succeeds and the service recovers
        shutil.rmtree(cp)
        await _until(lambda: st.state == "running", what="recovery")
        assert cp.is_file() and broker.supervisor.degraded == []
        await peer.close()
    failed = [e for e in logs if e["event"] == "service.failed" and e["service"] == "checkpoint"]
    assert all(e["log_level"] == "error" for e in failed)
    # exponential backoff from 50 ms, doubling, capped at 200 ms
    assert [e["retry_in_ms"] for e in failed[:4]] == [50.0, 100.0, 200.0, 200.0]
    assert any(e["event"] == "service.recovered" and e["service"] == "checkpoint" for e in logs)


async def test_stop_closes_store_and_saves_offsets_even_when_checkpoint_fails(
    broker_factory, tmp_path
) -> None:
    data = tmp_path / "broker"
    broker = await broker_factory(data_dir=data, **FAST_RETRY)
    peer = await RawPeer.connect(broker.address)
    for i in range(5):
        assert (await send(peer, "Kept", f"m{i}".encode())).code == 0
    ext = {"consumerGroup": "G", "topic": "Kept", "queueId": 0, "commitOffset": 3}
    assert (await peer.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)).code == 0
    await peer.close()
    _block_checkpoint(broker.store.checkpoint_path)
    st = broker.supervisor.services["checkpoint"]
    await _until(lambda: st.failures >= 1, what="a checkpoint failure")
    assert _open_fds_under(data / "store")  # the store holds its files while running
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(broker.stop("test"), 30)
    assert not broker.running
    assert _open_fds_under(data / "store") == []  # store and index closed
    assert any(e["event"] == "broker.stop_failed" and e["step"] == "persist" for e in logs)
    assert logs[-1]["event"] == "broker.stopped"
    # offsets were saved although the checkpoint write failed; the log replays the rest
    shutil.rmtree(broker.store.checkpoint_path)
    again = await broker_factory(data_dir=data)
    assert again.offsets.query("G", "Kept", 0) == 3
    assert again.store.max_offset("Kept", 0) == 5


async def test_stop_does_not_hang_on_a_service_in_backoff(broker_factory) -> None:
    broker = await broker_factory(
        checkpoint_interval=0.05, service_retry_base=60.0, service_retry_max=60.0
    )
    _block_checkpoint(broker.store.checkpoint_path)
    st = broker.supervisor.services["checkpoint"]
    await _until(lambda: st.failures >= 1, what="a checkpoint failure")
    assert st.as_dict()["retryInMs"] > 50_000  # sleeping a minute before the restart
    t0 = time.monotonic()
    await asyncio.wait_for(broker.stop("test"), 30)
    assert time.monotonic() - t0 < 10


async def test_failing_log_sink_is_degraded_in_status_and_keeps_its_lines(
    broker_factory, tmp_path
) -> None:
    broker = await broker_factory()
    with open("/dev/full", "wb", buffering=0) as full:  # noqa: ASYNC230 - instant
        sink = StreamSink(full, interval=0.02)
        try:
            sink.write(b"line-1")
            sink.write(b"line-2")
            await _until(lambda: sink.failures >= 2, what="sink failures")
            assert sink.degraded and "No space left" in (sink.last_error or "")
            await _until(
                lambda: sink.name in broker.supervisor.degraded, what="sink degraded in status"
            )
            assert broker.stats.service_failures[sink.name] >= 1
            # space returns: the sink drains what it kept, in order, and recovers
            good = tmp_path / "sink.out"
            with open(good, "wb") as out:  # noqa: ASYNC230
                sink.stream = out
                sink.write(b"line-3")
                await _until(lambda: not sink.degraded, what="sink recovery")
                await _until(
                    lambda: sink.name not in broker.supervisor.degraded, what="recovered in status"
                )
                sink.close()
            assert good.read_bytes() == b"line-1\nline-2\nline-3\n"
        finally:
            sink.close()


# ---------------------------------------------------------------- Supervisor itself


async def test_supervisor_restarts_a_raising_service_until_it_reports_progress() -> None:
    sup = Supervisor(structlog.get_logger(), base_delay=0.01, max_delay=0.04)
    runs: list[float] = []

    async def flaky(st: ServiceState) -> None:
        runs.append(time.monotonic())
        if len(runs) <= 4:
            raise OSError(f"fault {len(runs)}")
        st.ok()
        await asyncio.sleep(3600)

    sup.spawn("flaky", flaky, reports_progress=True)
    await _until(lambda: len(runs) == 5, what="5 runs")
    st = sup.services["flaky"]
    assert st.state == "running" and st.failures == 4 and st.last_error == "OSError: fault 4"
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    # backoff 10, 20, 40, 40 ms (capped): every gap at least its delay
    for gap, delay in zip(gaps, (0.01, 0.02, 0.04, 0.04), strict=True):
        assert gap >= delay * 0.9
    assert sup.counts == {"flaky": 4}
    await sup.stop()
    assert st.state == "stopped"


async def test_supervisor_declares_recovery_after_healthy_run_without_progress_reports() -> None:
    sup = Supervisor(structlog.get_logger(), base_delay=0.01, healthy_after=0.1)
    runs = 0

    async def once_broken(st: ServiceState) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("poison")
        await asyncio.sleep(3600)  # like a delay level waiting for its next message

    sup.spawn("level", once_broken)
    await _until(lambda: runs == 2, what="restart")
    assert sup.services["level"].state == "degraded"
    await _until(lambda: sup.services["level"].state == "running", what="healthy", timeout=5)
    await sup.stop()


@pytest.mark.parametrize("n", [1, 3])
async def test_supervisor_stop_interrupts_backoff(n: int) -> None:
    sup = Supervisor(structlog.get_logger(), base_delay=100.0)
    calls = 0

    async def dead(st: ServiceState) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("always")

    for i in range(n):
        sup.spawn(f"dead-{i}", dead)
    await _until(lambda: calls == n, what="first failures")
    t0 = time.monotonic()
    await sup.stop(timeout=5)
    assert time.monotonic() - t0 < 1 and not sup.tasks


async def test_a_failed_start_closes_what_it_opened(broker_factory, tmp_path) -> None:
    """The metrics port is taken: start() raises, and the store, index and listeners
    it had opened are closed again (a retry in the same process can start)."""
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    data = tmp_path / "b"
    try:
        with pytest.raises(OSError):
            await broker_factory(data_dir=data, metrics_port=busy.getsockname()[1])
        assert _open_fds_under(data / "store") == []
    finally:
        busy.close()
    again = await broker_factory(data_dir=data)  # the same directory opens cleanly
    assert again.running
