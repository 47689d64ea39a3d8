"""The HA wire formats (RocketMQ 4.9.8 HAService/HAConnection, byte for byte), sans-IO.

Slave -> master: 8-byte big-endian longs, each the slave's max commit-log offset (the
first one is where to start; then an ack after each append and a heartbeat every
``haSendHeartbeatInterval``). Master -> slave: a 12-byte header (8-byte offset, 4-byte
size) followed by ``size`` commit-log bytes read at ``offset`` (at most
``haTransferBatchSize``, 32 KiB; never across a segment end); ``size`` 0 is the idle
heartbeat.

kairosmq's addition, invisible to Apache peers (docs/replication.md, "Handshake"):
* A kairosmq slave opens with ``HELLO`` (-1). An Apache master treats -1 as "no request
  yet" (its ``slaveRequestOffset`` stays -1) and waits for the next report.
* A kairosmq master answers ``HELLO`` with a segment header: offset ``HELLO``, size = its
  commit-log segment size (RocketMQ's mappedFileSizeCommitLog). The slave compares it
  with its own and closes the connection on a mismatch (``ha.segment_size_mismatch``).
* The slave's next report is its start. After a HELLO, 0 means "from the oldest byte
  you retain" (the whole log: pending scheduled messages are older than the last
  segment); without one (an Apache slave) 0 means "from the start of your last
  segment", as RocketMQ does.

Invariants: the readers never hold more than one frame; a header whose size is
negative or above ``MAX_TRANSFER`` is a ``HAProtocolError`` naming the value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

OFFSET = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12
HELLO = -1  # a kairosmq slave's first report; the master's segment header's offset
TRANSFER_BATCH = 32 * 1024  # RocketMQ haTransferBatchSize
# what a slave accepts in one transfer: RocketMQ's HAClient reads into 4 MiB
MAX_TRANSFER = 4 * 1024 * 1024 - HEADER_SIZE
INT32_MAX = (1 << 31) - 1


class HAProtocolError(ValueError):
    """Bytes on the HA port that are not the protocol (the connection is closed)."""


def report(offset: int) -> bytes:
    """A slave's report: its max offset (or ``HELLO``)."""
    return OFFSET.pack(offset)


def header(offset: int, size: int) -> bytes:
    """A transfer header (``size`` 0: the heartbeat)."""
    return HEADER.pack(offset, size)


def segment_header(segment_size: int) -> bytes:
    """The kairosmq master's answer to ``HELLO``: its commit-log segment size."""
    return HEADER.pack(HELLO, segment_size)


class ReportReader:
    """The master's side: the longs a slave sends, in order."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[int]:
        self._buf += data
        n = len(self._buf) // 8
        for i in range(n):
            yield OFFSET.unpack_from(self._buf, i * 8)[0]
        del self._buf[: n * 8]


class TransferReader:
    """The slave's side: (offset, size, body) frames; body is b"" for a heartbeat, and
    for a segment header (offset ``HELLO``: ``size`` is the master's segment size)."""

    def __init__(self, max_transfer: int = MAX_TRANSFER) -> None:
        self._buf = bytearray()
        self.max_transfer = max_transfer

    def feed(self, data: bytes) -> Iterator[tuple[int, int, bytes]]:
        self._buf += data
        pos = 0
        try:
            while len(self._buf) - pos >= HEADER_SIZE:
                offset, size = HEADER.unpack_from(self._buf, pos)
                if offset == HELLO:
                    if size <= 0:
                        raise HAProtocolError(f"segment header has size {size}")
                    pos += HEADER_SIZE
                    yield offset, size, b""
                    continue
                if offset < 0:
                    raise HAProtocolError(f"transfer header has offset {offset}")
                if size < 0 or size > self.max_transfer:
                    raise HAProtocolError(
                        f"transfer header at offset {offset} has size {size} "
                        f"(0..{self.max_transfer})"
                    )
                end = pos + HEADER_SIZE + size
                if len(self._buf) < end:
                    break
                yield offset, size, bytes(self._buf[pos + HEADER_SIZE : end])
                pos = end
        finally:
            del self._buf[:pos]
