"""The broker's open-file budget: the soft ``RLIMIT_NOFILE`` raised to the hard one, and
how many descriptors each part of the broker may hold within it.

Owns: ``raise_open_file_limit``, ``open_fds``, ``fd_connection_limit`` (the connections
a server not given ``max_connections`` takes before a budget is made: the name server),
``FdBudget`` (the parts and their sum) and ``plan`` (the budget for a configuration;
``max_connections`` None, the default, as RocketMQ: every descriptor the other parts
leave), ``FdBudgetError``.

The parts: what the process holds when the broker starts (stdio, the event loop, the log
files), the listeners (a master's HA listener among them), the services' own descriptors
(a timerfd per delay level and one for the timer service, the key index's mapped file and
a lookup, one connection per external name server, a slave's two connections to its
master), a transient reserve (files the checkpoint, the allocator, the
timer buckets, log rotation and JSON tables open for a moment, and the accept of a
connection beyond the limit, which is closed at once), the commit-log segments (one
descriptor each, for as long as the segment exists: the ones on disk plus
``SEGMENT_MARGIN``), the open consume-queue mappings (``max_open_queue_files``, one
descriptor each: store/mapped.py) and the connections (``max_connections``).

Invariants:
* ``plan`` never returns parts that add up to more than the limit: when the configured
  connections and queue files do not fit, the queue files get at least a quarter of
  what is left (at least ``FLOOR``) and the connections the rest, and ``fits`` is False
  (the broker logs ``broker.fd_budget`` at warning level, saying what the limit should
  be). The broker then applies the budget's values, so the process stays within the
  limit whatever clients do.
* Commit-log segments added while the broker runs, past the budget's, take their
  descriptors from the open queue files (``queue_files_with``, applied by the broker's
  housekeeping, down to ``FLOOR``), and give them back when retention deletes segments.
* Below ``FLOOR`` connections plus ``FLOOR`` queue files over the fixed parts the broker
  refuses to start (``FdBudgetError``: one line, exit code 2) rather than fail later.
"""

from __future__ import annotations

import os
import resource
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any  # Any: JSON values of a status

from .config import BrokerConfig
from .store.files import is_segment_name

FLOOR = 16  # connections, and open queue files, below which the broker does not start
TRANSIENT = 16  # descriptors opened for a moment (see the module docstring)
SEGMENT_MARGIN = 4  # commit-log segments a running broker may add before retention
INDEX_FDS = 3  # the key index: its mapped file (and CPython's duplicate), a lookup
FD_RESERVE = 512  # descriptors a server without a budget keeps for everything else


def fd_connection_limit() -> int:
    """Connections the soft RLIMIT_NOFILE allows less ``FD_RESERVE``: a server's default
    before (or without) a broker's budget; RocketMQ's only bound is that limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(64, soft - FD_RESERVE)


class FdBudgetError(RuntimeError):
    """The open-file limit cannot hold even the smallest broker."""


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one; return (soft before, soft now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard
        if hard == resource.RLIM_INFINITY:  # not on Linux (nr_open bounds it there)
            target = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else soft
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def open_fds() -> int | None:
    """Descriptors this process holds now (None where the system does not say)."""
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(d)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return None


def segments_on_disk(data_dir: Path) -> int:
    """Commit-log segments the store will open (``<data-dir>/store/commitlog``)."""
    try:
        return sum(1 for n in os.listdir(data_dir / "store" / "commitlog") if is_segment_name(n))
    except OSError:
        return 0


@dataclass(frozen=True)
class FdBudget:
    limit: int
    raised_from: int
    open_at_start: int
    listeners: int
    services: int
    transient: int
    segments: int
    queue_files: int
    connections: int
    needed: int  # what the configured values need (the limit to ask for when not fits)
    fits: bool

    @property
    def total(self) -> int:
        return (
            self.open_at_start
            + self.listeners
            + self.services
            + self.transient
            + self.segments
            + self.queue_files
            + self.connections
        )

    def queue_files_with(self, segments: int) -> int:
        """Open queue files the budget allows while ``segments`` commit-log segments are
        open: each segment past the budget's takes a queue file's descriptor (at least
        ``FLOOR`` stay)."""
        return max(FLOOR, self.queue_files - max(0, segments - self.segments))

    def fields(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}

    def remark(self, cfg: BrokerConfig) -> str:
        if self.fits:
            return ""
        besides = self.total - self.connections - self.queue_files
        wanted = "" if cfg.max_connections is None else f" {cfg.max_connections}"
        return (
            f"the open-file limit {self.limit} cannot hold --max-connections{wanted} "
            f"and --max-open-queue-files "
            f"{cfg.max_open_queue_files} with the {besides} descriptors "
            f"the broker needs besides: serving with at most {self.connections} "
            f"connections and {self.queue_files} open queue files; raise the hard "
            f"limit (ulimit -Hn, LimitNOFILE=) to {self.needed} or more"
        )


def plan(
    cfg: BrokerConfig, *, limit: int, raised_from: int, open_now: int | None, segments: int
) -> FdBudget:
    """The budget of a broker with ``cfg`` under ``limit`` (``FdBudgetError`` if even
    ``FLOOR`` connections and queue files do not fit)."""
    listeners = (
        1
        + (1 if cfg.vip_channel else 0)
        + (0 if cfg.namesrv_addr else 1)
        + (1 if cfg.metrics_port is not None else 0)
        + (1 if cfg.broker_role != "SLAVE" else 0)  # a master's HA listener (server/ha/)
    )
    namesrvs = len([a for a in (cfg.namesrv_addr or "").split(";") if a.strip()])
    # a slave's connections to its master: the HA stream and SlaveSynchronize's client
    replication = 2 if cfg.broker_role == "SLAVE" else 0
    services = len(cfg.delay_levels_ms) + 1 + INDEX_FDS + namesrvs + replication
    fixed = (
        (open_now if open_now is not None else 8)
        + listeners
        + services
        + TRANSIENT
        + segments
        + SEGMENT_MARGIN
    )
    queue_files = cfg.max_open_queue_files
    if cfg.max_connections is None:  # as RocketMQ: what the limit leaves after the rest
        needed = fixed + queue_files + FLOOR
        connections = max(FLOOR, limit - fixed - queue_files)
    else:
        connections = cfg.max_connections
        needed = fixed + queue_files + connections
    fits = needed <= limit
    if not fits:
        left = limit - fixed
        if left < 2 * FLOOR:
            raise FdBudgetError(
                f"the open-file limit {limit} leaves {max(0, left)} descriptors after the "
                f"{fixed} the broker needs for itself (listeners, timers, index, "
                f"{segments} commit-log segments, ...): at least {fixed + 2 * FLOOR} are "
                f"needed to serve {FLOOR} connections with {FLOOR} open queue files; "
                f"raise the hard limit (ulimit -Hn, LimitNOFILE=) to {needed} or more"
            )
        queue_files = min(queue_files, max(FLOOR, left // 4))
        connections = (
            left - queue_files
            if cfg.max_connections is None
            else min(connections, left - queue_files)
        )
        queue_files = min(cfg.max_open_queue_files, left - connections)
    return FdBudget(
        limit=limit,
        raised_from=raised_from,
        open_at_start=open_now if open_now is not None else 8,
        listeners=listeners,
        services=services,
        transient=TRANSIENT,
        segments=segments + SEGMENT_MARGIN,
        queue_files=queue_files,
        connections=connections,
        needed=needed,
        fits=fits,
    )
