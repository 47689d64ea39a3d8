"""TransactionProducer: RocketMQ's TransactionMQProducer for the bundled client.

Owns: ``LocalTransactionState`` (COMMIT_MESSAGE / ROLLBACK_MESSAGE / UNKNOW, RocketMQ's
names; ``COMMIT``/``ROLLBACK``/``UNKNOWN`` are aliases), ``TransactionSendResult`` and
``TransactionProducer``: ``send_message_in_transaction(msg, arg)`` sends a half message
(``TRAN_MSG=true``, ``PGROUP``, sysFlag PREPARED), runs ``execute_local_transaction(msg,
arg)`` and ends the transaction with a one-way END_TRANSACTION; the broker's
CHECK_TRANSACTION_STATE runs ``check_local_transaction(msg)`` and answers the same way
(``fromTransactionCheck=true``). Callbacks may be plain functions or coroutines.

Invariants (as DefaultMQProducerImpl.sendMessageInTransaction):
* The local transaction runs only after the broker stored the half message; a send
  that fails raises and nothing else happens; a send stored with a non-OK status
  (flush timeout) is rolled back without running the callback.
* A callback that raises or returns anything but a state ends as UNKNOW (the broker
  checks back later); its exception text goes in the request's remark.
* Unlike the Java client, a DELAY level is kept: the broker applies it at commit.
* Check-backs run as tasks of this producer; END_TRANSACTION goes to the broker that
  sent the check (the store host of its ``offsetMsgId``).
"""

from __future__ import annotations

import inspect
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kairosmq.protocol.codes import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_TRANSACTION_PREPARED,
    RequestCode,
)
from kairosmq.protocol.errors import HeaderError, MessageDecodeError
from kairosmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.protocol.properties import PGROUP, TRAN_MSG, UNIQ_KEY

from ..errors import ClientError
from ..message import Message, SendResult, SendStatus
from .producer import Producer

log = logging.getLogger("kairosmq.client.transaction")

END_TIMEOUT = 3.0  # seconds (endTransactionOneway's 3000 ms)


class LocalTransactionState(Enum):
    """What a local transaction came to (RocketMQ's names and wire values)."""

    COMMIT_MESSAGE = 0x8
    ROLLBACK_MESSAGE = 0xC
    UNKNOW = 0x0
    COMMIT = 0x8  # aliases
    ROLLBACK = 0xC
    UNKNOWN = 0x0


ExecuteFn = Callable[[Message, Any], Any]
CheckFn = Callable[[MessageExt], Any]


@dataclass(slots=True)
class TransactionSendResult:
    """The half message's send result and the local transaction's state."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState

    @property
    def transaction_id(self) -> str:
        return self.send_result.msg_id


class TransactionProducer(Producer):
    """``TransactionProducer(group, namesrv, execute_local_transaction=fn,
    check_local_transaction=fn, **producer_options)``."""

    def __init__(
        self,
        group: str | None = None,
        namesrv: str | list[str] | None = None,
        *,
        execute_local_transaction: ExecuteFn | None = None,
        check_local_transaction: CheckFn | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(group, namesrv, **kw)
        self.execute_local_transaction = execute_local_transaction
        self.check_local_transaction = check_local_transaction
        # the producer's hook for broker -> producer requests (client/producer/producer.py)
        self._broker_requests[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, end it."""
        if self.execute_local_transaction is None:
            raise ClientError("TransactionProducer needs execute_local_transaction")
        msg.properties[TRAN_MSG] = "true"
        msg.properties[PGROUP] = self.group
        req = self._request(msg, retries=self.options.retry_times_when_send_failed)
        req.sys_flag |= SYSFLAG_TRANSACTION_PREPARED
        result = await self._send(req)
        remark = None
        if result.status is SendStatus.SEND_OK:
            state, remark = await _run(self.execute_local_transaction, msg, arg)
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await self._end(
            result.offset_msg_id,
            result.queue_offset,
            result.msg_id,
            state,
            remark,
            from_check=False,
        )
        return TransactionSendResult(result, state)

    async def _end(
        self,
        offset_msg_id: str,
        queue_offset: int,
        msg_id: str,
        state: LocalTransactionState,
        remark: str | None,
        *,
        from_check: bool,
    ) -> None:
        ip, port, phy = decode_offset_msg_id(offset_msg_id)
        addr = f"{'.'.join(str(b) for b in ip)}:{port}"
        ext = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=queue_offset,
            commit_log_offset=phy,
            commit_or_rollback=state.value,
            msg_id=msg_id,
            from_transaction_check=from_check,
            transaction_id=msg_id,
        ).to_ext_fields()
        try:
            await self._pool.get(addr).invoke_oneway(
                RequestCode.END_TRANSACTION, ext, timeout=END_TIMEOUT
            )
        except Exception as err:  # noqa: BLE001 - the broker checks back later
            log.warning("END_TRANSACTION to %s failed (%s); the broker will check back", addr, err)

    def _on_check(self, cmd: Any) -> None:
        """CHECK_TRANSACTION_STATE (one-way): answer from ``check_local_transaction``."""
        try:
            h = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            m = decode_record(cmd.body)
        except (HeaderError, MessageDecodeError) as err:
            log.warning("bad CHECK_TRANSACTION_STATE: %s", err)
            return None
        if self.check_local_transaction is None or not h.offset_msg_id:
            log.warning("CHECK_TRANSACTION_STATE for %s: no check_local_transaction", h.msg_id)
            return None
        if m.sys_flag & SYSFLAG_COMPRESSED:
            try:
                m.body = zlib.decompress(m.body)
            except zlib.error:
                pass
        self._spawn(self._answer_check(h, m))
        return None

    async def _answer_check(self, h: CheckTransactionStateRequestHeader, m: MessageExt) -> None:
        assert self.check_local_transaction is not None and h.offset_msg_id
        state, remark = await _run(self.check_local_transaction, m)
        msg_id = m.properties.get(UNIQ_KEY) or h.offset_msg_id
        await self._end(
            h.offset_msg_id, h.tran_state_table_offset, msg_id, state, remark, from_check=True
        )


async def _run(fn: Callable[..., Any], *args: Any) -> tuple[LocalTransactionState, str | None]:
    """Call a transaction callback (sync or async): its state, or UNKNOW and why."""
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
    except Exception as err:  # noqa: BLE001 - a callback bug means "unknown"
        log.warning("transaction callback %r raised: %r", fn, err)
        return LocalTransactionState.UNKNOW, f"executeLocalTransactionBranch exception: {err!r}"
    if isinstance(value, LocalTransactionState):
        return value, None
    log.warning("transaction callback %r returned %r, not a LocalTransactionState", fn, value)
    return LocalTransactionState.UNKNOW, None
