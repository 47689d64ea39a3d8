"""The open-file budget (server/fdbudget.py): the parts add up to at most the limit,
connections and open queue files are lowered to fit (and say so), a limit too low for
any broker refuses the start, and the soft limit is raised to the hard one."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kairosmq.server.config import BrokerConfig
from kairosmq.server.fdbudget import FLOOR, FdBudget, FdBudgetError, plan, segments_on_disk


def _plan(limit: int, **cfg: Any) -> FdBudget:
    return plan(BrokerConfig(**cfg), limit=limit, raised_from=limit, open_now=12, segments=3)


def test_the_defaults_fit_a_generous_limit() -> None:
    b = _plan(1 << 16)
    # max_connections None (the default, as RocketMQ): every descriptor the rest leaves
    assert b.fits and b.queue_files == 1024 and b.total == 1 << 16
    assert b.connections == (1 << 16) - (b.total - b.connections) > 60_000
    assert b.needed == b.total - b.connections + FLOOR
    assert b.segments == 3 + 4 and b.services == 18 + 1 + 3  # 18 delay levels, timers, index
    assert b.remark(BrokerConfig()) == ""
    c = _plan(1 << 16, max_connections=4096)  # a configured value is kept when it fits
    assert c.fits and c.connections == 4096 and c.needed == c.total <= 1 << 16


@pytest.mark.parametrize(
    ("limit", "connections"), [(256, 4096), (1024, 4096), (4500, 4096), (256, None), (1000, None)]
)
def test_a_small_limit_lowers_connections_and_queue_files_to_fit(
    limit: int, connections: int | None
) -> None:
    cfg = BrokerConfig(max_connections=connections)
    b = _plan(limit, max_connections=connections)
    assert not b.fits and b.total == limit and b.needed > limit
    assert FLOOR <= b.queue_files <= 1024 and FLOOR <= b.connections <= 4096
    left = limit - (b.total - b.connections - b.queue_files)
    assert b.queue_files >= min(1024, left // 4)  # at least a quarter of what is left
    if connections is None:  # the connections get the rest (not queue files beyond that)
        assert b.queue_files == min(1024, max(FLOOR, left // 4))
    remark = b.remark(cfg)
    assert f"open-file limit {limit}" in remark and f"to {b.needed} or more" in remark
    assert f"at most {b.connections} connections and {b.queue_files} open queue" in remark


def test_values_that_fit_are_kept() -> None:
    b = _plan(256, max_connections=50, max_open_queue_files=40)
    assert b.fits and (b.connections, b.queue_files) == (50, 40)


def test_a_limit_too_low_for_any_broker_refuses_the_start() -> None:
    with pytest.raises(FdBudgetError, match="open-file limit 60 leaves .* raise the hard"):
        _plan(60)


def test_segments_on_disk_counts_commit_log_segments(tmp_path: Path) -> None:
    log = tmp_path / "store" / "commitlog"
    log.mkdir(parents=True)
    for i in range(3):
        (log / f"{i * 1024:020d}").write_bytes(b"")
    (log / "notes.txt").write_bytes(b"")
    assert segments_on_disk(tmp_path) == 3
    assert segments_on_disk(tmp_path / "absent") == 0


@pytest.mark.slow  # a child process
def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    """In a child whose soft limit is below its hard one (the usual 1024 / 524288)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 512:
        pytest.skip(f"the hard open-file limit here is {hard}")
    code = (
        "import resource\n"
        "from kairosmq.server.fdbudget import raise_open_file_limit\n"
        "print(*raise_open_file_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, preexec_fn=limit, timeout=60
    ).stdout.split()
    assert [int(x) for x in out] == [256, 512, 512, 512]


def test_segments_past_the_budget_take_from_the_open_queue_files() -> None:
    b = _plan(1 << 16)
    assert b.queue_files_with(b.segments) == b.queue_files
    assert b.queue_files_with(b.segments + 10) == b.queue_files - 10
    assert b.queue_files_with(b.segments + 10_000) == FLOOR


async def test_the_broker_lowers_open_queue_files_as_segments_grow(broker_factory: Any) -> None:
    """A real in-process broker: segments written past its start budget lower the open
    queue files by one each (housekeeping's rebudget), and retention gives them back."""
    from kairosmq.protocol.codes import ResponseCode

    from tests.helpers import send
    from tests.wire import RawPeer

    broker = await broker_factory(commitlog_segment_size=128 * 1024, max_message_size=60 * 1024)
    b = broker.fd_budget
    assert b is not None and broker.store.maps.capacity == b.queue_files
    peer = await RawPeer.connect(broker.address)
    try:
        while len(broker.store.commitlog.segments) < b.segments + 3:
            r = await send(peer, "Seg", b"s" * 50_000)
            assert r.code == ResponseCode.SUCCESS
    finally:
        await peer.close()
    segments = len(broker.store.commitlog.segments)
    broker.rebudget_fds()
    assert broker.store.maps.capacity == b.queue_files - (segments - b.segments) < b.queue_files
    broker.store.delete_expired(0)  # retention: every segment but the newest
    broker.rebudget_fds()
    assert broker.store.maps.capacity == b.queue_files
