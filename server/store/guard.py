"""WriteGuard: when the store may append, and which answers a failed write turned false.

Owns: the free-space watermark (a cached ``statvfs`` of the data directory, refreshed at
most every ``check_interval`` seconds, never per message), the hold after a failed
commit-log write or file allocation (puts refused for ``check_interval``, then tried
again), the operator's ``writable`` switch, a slave's ``role_refusal``, and the ack
bookkeeping the outbox uses (``appends``, ``ack_token``, ``ack_problem``).

Invariants:
* ``refusal()`` is the one answer to "may a put append now": None, or the remark for
  SERVICE_NOT_AVAILABLE ("service not available now: the broker's disk is full (93% used
  > 90%)", RocketMQ's wording). Reads never ask it: pulls go on while writes are held.
* Used ratio = (blocks - blocks available to the broker) / blocks, like RocketMQ's
  (total - free) / total but counting the root reserve as used (the broker may not get it).
* A token names the last append of a request (its end offset and the number of rollbacks
  before it); ``ack_problem`` is None exactly when no rollback since then cut below that
  end and the bytes are written: otherwise the answer must be an error, never SUCCESS.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any  # Any: structlog's logger (dynamic methods)


class WriteGuard:
    # slotted: the native put reads and writes its fields in place (_message_store.pyx)
    __slots__ = (
        "data_dir",
        "max_used_ratio",
        "check_interval",
        "log",
        "writable",
        "role_refusal",
        "used_ratio",
        "disk_full",
        "write_failure",
        "failures",
        "_retry_at",
        "_check_at",
        "appends",
        "_end",
        "_epoch",
        "_rollbacks",
    )

    def __init__(
        self, data_dir: Path, *, max_used_ratio: float, check_interval: float, log: Any
    ) -> None:
        self.data_dir = data_dir
        self.max_used_ratio = max_used_ratio
        self.check_interval = check_interval
        self.log = log
        self.writable = True  # the operator's switch
        # a slave's refusal of every put (ha/role.py SLAVE_REFUSAL), None on a master
        self.role_refusal: str | None = None
        self.used_ratio = 0.0
        self.disk_full: str | None = None  # the refusal remark while above the watermark
        self.write_failure: str | None = None  # the last failed write/allocation, if any
        self.failures = 0
        self._retry_at = 0.0
        self._check_at = 0.0
        self.appends = 0  # appends so far (the outbox compares it around a handler)
        self._end = 0  # end offset of the last append
        self._epoch = 0  # rollbacks before the last append
        self._rollbacks: list[tuple[int, str]] = []  # (offset rolled back to, reason)

    # ------------------------------------------------------------------ admission

    def refusal(self) -> str | None:
        """Why a put must be refused now, or None (cheap: one monotonic read)."""
        if self.role_refusal is not None:
            return self.role_refusal
        if not self.writable:
            return "store is not writable"
        now = time.monotonic()
        if now >= self._check_at:
            self.check_disk(now)
        if self.disk_full is not None:
            return self.disk_full
        if self.write_failure is not None and now < self._retry_at:
            return self.write_failure
        return None

    def check_disk(self, now: float | None = None) -> str | None:
        """Refresh the watermark; the refusal remark while the disk is too full, else None."""
        now = time.monotonic() if now is None else now
        self._check_at = now + self.check_interval
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return self.disk_full  # keep the last verdict
        if st.f_blocks <= 0:
            return self.disk_full
        ratio = (st.f_blocks - st.f_bavail) / st.f_blocks
        self.used_ratio = ratio
        was = self.disk_full
        fields = {
            "used_ratio": round(ratio, 4),
            "max_used_ratio": self.max_used_ratio,
            "path": str(self.data_dir),
        }
        if ratio > self.max_used_ratio:
            self.disk_full = (
                f"service not available now: the broker's disk is full "
                f"({ratio:.0%} used > {self.max_used_ratio:.0%})"
            )
            if was is None:
                self.log.error("store.disk_full", **fields)
        else:
            self.disk_full = None
            if was is not None:
                self.log.info("store.disk_ok", **fields)
        return self.disk_full

    def hold(self, remark: str) -> None:
        """A write or allocation failed: refuse puts for ``check_interval``."""
        self.failures += 1
        self.write_failure = remark
        self._retry_at = time.monotonic() + self.check_interval

    def written(self) -> None:
        """A write succeeded: a held store is healthy again."""
        if self.write_failure is not None:
            self.log.info("store.write_recovered", failures=self.failures)
            self.write_failure = None

    # ------------------------------------------------------------------ acks

    def appended(self, end: int) -> None:
        self.appends += 1
        self._end = end
        self._epoch = len(self._rollbacks)

    def rolled_back(self, kept: int, reason: str) -> None:
        self._rollbacks.append((kept, reason))

    def ack_token(self) -> tuple[int, int]:
        return self._end, self._epoch

    def ack_problem(self, token: tuple[int, int], written: int) -> str | None:
        end, epoch = token
        for point, reason in self._rollbacks[epoch:]:
            if point < end:
                return reason
        if end > written:
            return "the message is not written yet (the commit-log write is pending)"
        return None
