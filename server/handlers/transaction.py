"""END_TRANSACTION (37), KAIROS_GET_TRANSACTION_STATUS (906) and KAIROS_END_HALF_MESSAGE
(912, an admin's commit or rollback).

Owns: ``EndTransactionProcessor`` (RocketMQ's: the producer's commit, rollback or
"unknown" for a half message, one-way from stock clients, also the answer to a
CHECK_TRANSACTION_STATE with ``fromTransactionCheck=true``) and
``TransactionStatusProcessor`` (pending half messages per producer group, counters:
``kairosmq admin transactions``). The work is ``TransactionService.end``.

Invariants: the header is checked (group name, offsets >= 0, ``commitOrRollback`` one
of 0/8/12) before anything is appended; "unknown" (0) changes nothing (the check-back
asks again later); an end for a half message that already ended is ignored and
answered SUCCESS with a remark; a one-way request is never answered, but every refusal
is logged (``request.rejected`` by ``guarded``, or ``transaction.end_failed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods)

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    EndHalfMessageRequestHeader,
    EndTransactionRequestHeader,
    TransactionStatusRequestHeader,
)

from ..remoting import ingress
from ..remoting.ingress import Rejected
from ..transaction.service import COMMIT, ROLLBACK, UNKNOWN, TransactionError

if TYPE_CHECKING:
    from ..remoting.transport import Connection
    from ..transaction.service import TransactionService


class EndTransactionProcessor:
    """END_TRANSACTION: commit or roll back a half message."""

    def __init__(self, *, transactions: TransactionService, log: Any) -> None:
        self.transactions = transactions
        self.log = log

    def handle_end_transaction(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        h = EndTransactionRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.producer_group, "producerGroup")
        for name, value in (
            ("tranStateTableOffset", h.tran_state_table_offset),
            ("commitLogOffset", h.commit_log_offset),
        ):
            if value < 0:
                raise Rejected(ResponseCode.SYSTEM_ERROR, f"{name} {value} is negative")
        kind = h.commit_or_rollback
        if kind not in (COMMIT, ROLLBACK, UNKNOWN):
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)",
            )
        if kind == UNKNOWN:  # RocketMQ answers nothing: the check-back asks again
            return (
                None
                if cmd.is_oneway
                else cmd.response(
                    ResponseCode.SUCCESS, remark="unknown: the broker checks back later"
                )
            )
        try:
            remark = self.transactions.end(
                h.producer_group,
                h.tran_state_table_offset,
                h.commit_log_offset,
                kind,
                bool(h.from_transaction_check),
                conn.peer,
            )
        except TransactionError as err:
            self.log.warning(
                "transaction.end_failed",
                producer_group=h.producer_group,
                msg_id=h.msg_id,
                half_offset=h.commit_log_offset,
                code=int(err.code),
                remark=err.remark,
                peer=conn.peer,
            )
            return None if cmd.is_oneway else cmd.error(err.code, err.remark)
        if remark is not None:
            self.log.info(
                "transaction.end_ignored",
                producer_group=h.producer_group,
                msg_id=h.msg_id,
                half_offset=h.commit_log_offset,
                remark=remark,
            )
        return None if cmd.is_oneway else cmd.response(ResponseCode.SUCCESS, remark=remark)


class TransactionStatusProcessor:
    """KAIROS_GET_TRANSACTION_STATUS: pending half messages per producer group (an
    optional ``producerGroup`` ext field narrows it to one group)."""

    def __init__(self, *, transactions: TransactionService) -> None:
        self.transactions = transactions

    def handle_transaction_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = TransactionStatusRequestHeader.from_ext_fields(cmd.ext_fields).producer_group
        if group is not None:
            ingress.check_group(group, "producerGroup")
        return cmd.response(body=orjson.dumps(self.transactions.status(group)))


class TransactionAdminProcessor:
    """KAIROS_END_HALF_MESSAGE (912): an admin commits or rolls back the pending half
    message at a commit-log offset (``kairosmq admin transactions commit|rollback``),
    through the producer's own path (``TransactionService.end``: a commit is one append,
    a rollback one op record, each exactly once across ``kill -9``)."""

    ACTIONS = {"commit": COMMIT, "rollback": ROLLBACK}

    def __init__(self, *, transactions: TransactionService, log: Any) -> None:
        self.transactions = transactions
        self.log = log

    def handle_end_half(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = EndHalfMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        kind = self.ACTIONS.get(h.action)
        if kind is None:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR, f"action {h.action[:32]!r} is not commit or rollback"
            )
        if h.commit_log_offset < 0:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR, f"commitLogOffset {h.commit_log_offset} is negative"
            )
        entry = self.transactions.pending.get(h.commit_log_offset)
        if entry is None:
            return cmd.error(
                ResponseCode.ILLEGAL_OPERATION,
                f"no pending half message at commitLogOffset {h.commit_log_offset} "
                f"(already committed, rolled back or discarded, or none there)",
            )
        try:
            remark = self.transactions.end(
                entry.group, entry.queue_offset, entry.phy, kind, False, f"admin {conn.peer}"
            )
        except TransactionError as err:
            return cmd.error(err.code, err.remark)
        body = {
            "msgId": entry.msg_id,
            "producerGroup": entry.group,
            "topic": entry.topic,
            "commitLogOffset": entry.phy,
            "action": h.action,
            "remark": remark,
        }
        return cmd.response(body=orjson.dumps(body))
