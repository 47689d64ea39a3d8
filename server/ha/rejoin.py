"""Rejoin: a slave whose log runs past its master's newest epoch start cuts it there.

Owns: the check a SLAVE makes at start, before its store opens: its master's epochs
(KAIROS_GET_BROKER_STATUS ``ha.epochs`` on the master's broker port) against its own
(``store/epoch.json``). From the start offset of the first master epoch newer than the
slave's last, the bytes the slave holds were written in an older epoch (an old master
that lost its mastership, or a slave of it): they are not the master's. The commit log is
cut there (``CommitLog.cut_to``), the files derived from it (consume queues, the key index,
timer buckets, the checkpoint) are removed so the start rebuilds them from the log (the
log is the truth), and the slave adopts the master's epochs.

Invariants:
* Nothing is cut unless the master answered with its epochs and the slave holds bytes
  past the cut point; an unreachable master is logged (``ha.rejoin_unchecked``) and the
  start goes on (its HA client retries; the master refuses a slave whose log ends past
  its own).
* A slave whose last epoch is newer than its master's refuses to adopt anything
  (``ha.rejoin_unchecked``): two masters claim the newer epoch, an operator decides.
* The status read is signed like SlaveSynchronize's (``sync.master_client``): a master
  with ``--acl`` answers a slave holding an account of its ACL file.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods)

import orjson
from kairosmq.client.errors import ClientError
from kairosmq.protocol.codes import RequestCode, ResponseCode

from ..store.commitlog import CommitLog
from ..store.files import write_json_atomic
from .epoch import EpochFile
from .sync import master_client

if TYPE_CHECKING:
    from ..config import BrokerConfig

DERIVED = ("consumequeue", "index", "timer")  # under the store dir, rebuilt by replay
REQUEST_TIMEOUT = 5.0


async def master_epochs(config: BrokerConfig, address: str) -> list[dict[str, int]]:
    """The master's epoch list (``ValueError`` / ``ClientError`` / ``OSError`` if it
    cannot be had)."""
    client = master_client(config, address)
    try:
        resp = await client.invoke(
            RequestCode.KAIROS_GET_BROKER_STATUS, {}, b"", timeout=REQUEST_TIMEOUT
        )
    finally:
        client.close()
    if resp.code != ResponseCode.SUCCESS:
        raise ValueError(f"status refused: code {resp.code}: {resp.remark}")
    ha = orjson.loads(resp.body).get("ha") or {}
    epochs = ha.get("epochs")
    if not isinstance(epochs, list):
        raise ValueError("the master reports no epochs (not a kairosmq master?)")
    return [
        {"epoch": int(e["epoch"]), "startOffset": int(e["startOffset"])}
        for e in epochs
        if isinstance(e, dict)
    ]


def cut_point(own: EpochFile, theirs: list[dict[str, int]]) -> int | None | str:
    """Where the slave's log stops being the master's: an offset, None (nothing newer
    on the master), or why the slave must not follow this master (a string)."""
    mine = own.current["epoch"] if own.current else 0
    newest = theirs[-1]["epoch"] if theirs else 0
    if mine > newest:
        return f"this slave's epoch {mine} is newer than its master's ({newest})"
    newer = [e["startOffset"] for e in theirs if e["epoch"] > mine]
    return min(newer) if newer else None


def _holds_bytes_from(log: CommitLog, offset: int) -> bool:
    """Whether the segment holding ``offset`` has a byte there (a record or a BLANK)."""
    for seg in log.segments:
        if seg.base <= offset < seg.base + log.segment_size:
            return os.pread(seg.fd, 8, offset - seg.base).strip(b"\x00") != b""
    return False


def apply_cut(store_dir: Path, segment_size: int, offset: int) -> int:
    """Cut the commit log at ``offset`` and remove what was derived from it; the bytes
    cut (0: the log held nothing there, nothing removed). Blocking: run in a thread."""
    log = CommitLog(store_dir / "commitlog", segment_size)
    log.load()
    try:
        if not _holds_bytes_from(log, offset):
            return 0
        cut = log.cut_to(offset)
    finally:
        log.close()
    for name in DERIVED:
        shutil.rmtree(store_dir / name, ignore_errors=True)
    (store_dir / "checkpoint.json").unlink(missing_ok=True)
    return cut


async def rejoin(
    *, config: BrokerConfig, store_dir: Path, epochs: EpochFile, master: str | None, log: Any
) -> None:
    """The start-time check (see the module docstring); logs what it did."""
    if master is None:
        log.warning("ha.rejoin_unchecked", master="", reason="no master address known yet")
        return
    try:
        theirs = await master_epochs(config, master)
    except (ClientError, OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ha.rejoin_unchecked", master=master, reason=f"{type(err).__name__}: {err}")
        return
    point = cut_point(epochs, theirs)
    if isinstance(point, str):
        log.error("ha.rejoin_unchecked", master=master, reason=point)
        return
    if point is None:
        return
    cut = await asyncio.to_thread(apply_cut, store_dir, config.commitlog_segment_size, point)
    await asyncio.to_thread(write_json_atomic, epochs.path, theirs)
    epochs.load()
    log.warning(
        "ha.rejoined",
        master=master,
        epoch=theirs[-1]["epoch"],
        start_offset=point,
        cut_bytes=cut,
    )
