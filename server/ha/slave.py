"""HAClient, the slave's side (RocketMQ 4.9.8's, kairosmq's handshake).

Owns: the connection to the master's HA port (``--ha-master-address``, or the haServerAddr
a name server answered), the handshake (HELLO, the master's segment size checked), the
start report, the acks after each append, the heartbeat every
``ha_send_heartbeat_interval`` and the reconnects; what it receives goes to the store's
``ReplicaAppender`` (store/replica.py).

Invariants:
* A header's offset must be this slave's max offset (RocketMQ's check; an empty log
  takes any segment start): anything else closes the connection
  (``ha.offset_mismatch``) and nothing of it is appended.
* A master that answers HELLO with another segment size is refused at connect
  (``ha.segment_size_mismatch``) and nothing is appended; a master that does not answer
  it (Apache RocketMQ) is checked in the stream by the appender.
* The slave never writes its own records: its reports are the only bytes it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods); JSON status rows

from ..store.replica import ReplicaMismatch
from .role import parse_host_port
from .wire import HELLO, HAProtocolError, TransferReader, report

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..store.replica import ReplicaAppender
    from ..supervise import ServiceState

HELLO_WAIT = 3.0  # seconds for a kairosmq master's segment header; then Apache's protocol
RECONNECT_DELAY = 5.0  # RocketMQ's HAClient waits 5 s after a failed connect
READ_SIZE = 256 * 1024


class HAClient:
    def __init__(
        self,
        appender: ReplicaAppender,
        config: BrokerConfig,
        log: Any,
        master_address: Callable[[], str | None],
    ) -> None:
        self.appender = appender
        self.config = config
        self.log = log
        self.master_address = master_address
        self.connected_to: str | None = None
        self.master_segment_size: int | None = None
        self.last_read = 0.0
        self.reconnect_delay = RECONNECT_DELAY

    def status(self) -> dict[str, Any]:
        return {
            "role": "SLAVE",
            "masterAddress": self.master_address(),
            "connected": self.connected_to is not None,
            "maxOffset": self.appender.max_offset,
            "dispatchedOffset": self.appender.dispatched,
            "masterSegmentSize": self.master_segment_size,
        }

    async def run(self, st: ServiceState) -> None:
        """The supervised service: connect, replicate, reconnect."""
        while True:
            addr = self.master_address()
            if addr is None:
                st.ok()
                await asyncio.sleep(1.0)
                continue
            try:
                await self._replicate(addr, st)
            # ValueError: HAProtocolError, ReplicaMismatch, an address that is not host:port
            except (OSError, TimeoutError, ValueError) as err:
                self.log.warning(
                    "ha.master_disconnected",
                    master=addr,
                    offset=self.appender.max_offset,
                    reason=f"{type(err).__name__}: {err}",
                )
            finally:
                self.connected_to = None
            st.ok()
            await asyncio.sleep(self.reconnect_delay)

    async def _replicate(self, addr: str, st: ServiceState) -> None:
        host, port = parse_host_port(addr, "HA master address")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
        try:
            self.connected_to = addr
            frames = TransferReader()
            writer.write(report(HELLO))
            pending = await self._handshake(reader, frames, addr)
            start = self.appender.max_offset if self.appender.store.commitlog.segments else 0
            writer.write(report(start))
            self.log.info(
                "ha.master_connected",
                master=addr,
                offset=start,
                kairosmq=self.master_segment_size is not None,
            )
            beat = asyncio.create_task(self._heartbeat(writer))
            try:
                await self._stream(reader, writer, frames, pending, st)
            finally:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await beat
        finally:
            writer.close()

    async def _handshake(
        self, reader: asyncio.StreamReader, frames: TransferReader, addr: str
    ) -> list[tuple[int, int, bytes]]:
        """Wait for a kairosmq master's segment header; the frames read after it."""
        self.master_segment_size = None
        deadline = time.monotonic() + HELLO_WAIT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return []  # an Apache master: it waits for our start
            try:
                data = await asyncio.wait_for(reader.read(READ_SIZE), left)
            except TimeoutError:
                return []
            if not data:
                raise ConnectionError("the master closed the connection")
            got = list(frames.feed(data))
            if not got:
                continue
            offset, size, _body = got[0]
            if offset != HELLO:
                return got  # not a kairosmq master
            mine = self.appender.store.commitlog.segment_size
            self.master_segment_size = size
            if size != mine:
                self.log.error(
                    "ha.segment_size_mismatch",
                    master=addr,
                    master_segment_size=size,
                    segment_size=mine,
                    reason="the commit-log segment sizes (mappedFileSizeCommitLog) must "
                    "agree: start this slave with the master's --segment-size-mb",
                )
                self.reconnect_delay = 30.0
                raise ConnectionError(
                    f"the master's segment size is {size}, this slave's is {mine}"
                )
            self.reconnect_delay = RECONNECT_DELAY
            return got[1:]

    async def _heartbeat(self, writer: asyncio.StreamWriter) -> None:
        interval = self.config.ha_send_heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            writer.write(report(self.appender.max_offset))

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frames: TransferReader,
        pending: list[tuple[int, int, bytes]],
        st: ServiceState,
    ) -> None:
        housekeeping = self.config.ha_housekeeping_interval
        appender = self.appender
        batch = pending
        while True:
            appended = False
            for offset, _size, body in batch:
                if offset == HELLO:
                    raise HAProtocolError("a second segment header")
                mine = appender.max_offset
                if appender.store.commitlog.segments and offset != mine:
                    self.log.error(
                        "ha.offset_mismatch",
                        master=self.connected_to or "",
                        master_offset=offset,
                        offset=mine,
                    )
                    raise HAProtocolError(
                        f"master pushed offset {offset}, this slave's log ends at {mine}"
                    )
                if body:
                    try:
                        appender.append(offset, body)
                    except ReplicaMismatch as err:
                        self.log.error(
                            "ha.replica_refused",
                            master=self.connected_to or "",
                            master_offset=offset,
                            offset=appender.max_offset,
                            kind=err.kind,
                            reason=str(err),
                        )
                        raise
                    appended = True
            if appended:
                writer.write(report(appender.max_offset))
                st.ok()
            try:
                data = await asyncio.wait_for(reader.read(READ_SIZE), housekeeping)
            except TimeoutError as err:
                raise TimeoutError(
                    f"nothing from the master for {housekeeping:g} s (haHousekeepingInterval)"
                ) from err
            if not data:
                raise ConnectionError("the master closed the connection")
            batch = list(frames.feed(data))
