"""ReplicaAppender: a slave's store takes its master's commit-log bytes.

Owns: appending replicated bytes at their own offsets (``CommitLog.append_at``) and
dispatching each record once it is whole, through ``MessageStore.replay_record`` (the
recovery path: consume queues, the key index, scheduler progress, timer buckets,
transaction state), the end of the last dispatched record (``store.replica_end``, what a
checkpoint records) and the in-stream checks of what arrives.

Invariants:
* The slave's log is byte for byte its master's: bytes are appended only at the log's
  end (or, in an empty log, at a segment start), never changed.
* A record is dispatched once, whole and checked (``check_record``: magic, size, CRC) and
  only if its own PHYSICALOFFSET field is where it lands; a BLANK marker must end exactly
  at this log's segment end and no record may cross one, so a master whose segment size
  differs is found at its first segment end (``ReplicaMismatch``).
* On a ``ReplicaMismatch`` nothing past the last dispatched record stays: the log is cut
  there (``cut_to``), so the next report asks for it again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from kairosmq.protocol.schema import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

from .record_check import MIN_RECORD, check_record, stored_physical_offset
from .types import DispatchRequest

if TYPE_CHECKING:
    from .message_store import MessageStore

__all__ = ["ReplicaAppender", "ReplicaMismatch"]

_SIZE_MAGIC = struct.Struct(">iI")


class ReplicaMismatch(ValueError):
    """Replicated bytes that cannot be this log's next bytes (the remark says why)."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind  # "offset", "segment_size" or "record"


class ReplicaAppender:
    def __init__(
        self, store: MessageStore, on_record: Callable[[DispatchRequest], None] | None = None
    ) -> None:
        self.store = store
        self.on_record = on_record  # e.g. wake held pulls of the record's queue
        # after ``store.open()``: recovery dispatched every whole record of the log
        self.dispatched = store.commitlog.max_offset
        store.replica_end = self.dispatched
        self.records = 0

    @property
    def max_offset(self) -> int:
        """What the slave reports: the end of the bytes it holds."""
        return self.store.commitlog.max_offset

    def append(self, offset: int, data: bytes) -> int:
        """Append ``data`` at ``offset``, dispatch the records it completes; the new max
        offset. ``ReplicaMismatch`` (nothing kept past the last whole record) or
        ``OSError`` (the disk)."""
        log = self.store.commitlog
        if log.segments and offset != log.max_offset:
            raise ReplicaMismatch(
                f"the master sent offset {offset}, this slave's log ends at {log.max_offset}",
                "offset",
            )
        if not log.segments:
            self.dispatched = offset - offset % log.segment_size
        try:
            log.append_at(offset, data)
        except ValueError as err:
            raise ReplicaMismatch(
                str(err), "offset" if offset % log.segment_size else "segment_size"
            ) from err
        try:
            self._dispatch_ready()
        except ReplicaMismatch:
            log.cut_to(self.dispatched)
            raise
        return log.max_offset

    def _dispatch_ready(self) -> None:
        store = self.store
        log = store.commitlog
        seg_size = log.segment_size
        end = log.max_offset
        pos = self.dispatched
        try:
            while pos + 8 <= end:
                head = log.read(pos, 8)
                if head is None:
                    break
                size, magic = _SIZE_MAGIC.unpack(head)
                seg_end = pos - pos % seg_size + seg_size
                if magic == BLANK_MAGIC_CODE:
                    if pos + size != seg_end:
                        raise ReplicaMismatch(
                            f"the master's segment ends at {pos + size}, this slave's at "
                            f"{seg_end}: the commit-log segment sizes differ "
                            f"(this slave: {seg_size})",
                            "segment_size",
                        )
                    if end < seg_end:
                        break
                    pos = seg_end
                    continue
                if magic != MESSAGE_MAGIC_CODE or not MIN_RECORD <= size <= store.max_record_size:
                    raise ReplicaMismatch(
                        f"no record starts at {pos} (size {size}, magic {magic:#x})", "record"
                    )
                if pos + size > seg_end:
                    raise ReplicaMismatch(
                        f"the record at {pos} ({size} bytes) crosses this slave's segment end "
                        f"at {seg_end}: the commit-log segment sizes differ (this slave: "
                        f"{seg_size})",
                        "segment_size",
                    )
                if pos + size > end:
                    break
                rec = log.read(pos, size)
                if rec is None or check_record(rec, 0) != size:
                    raise ReplicaMismatch(f"the record at {pos} fails its check", "record")
                if stored_physical_offset(rec) != pos:
                    raise ReplicaMismatch(
                        f"the record at {pos} says it was stored at {stored_physical_offset(rec)}",
                        "offset",
                    )
                req = store.replay_record(pos, rec)
                pos += size
                self.records += 1
                if req is not None and self.on_record is not None:
                    self.on_record(req)
        finally:
            self.dispatched = store.replica_end = pos
