"""Subscription groups, as ``mqadmin`` and rocketmq-dashboard change them:
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, ``updateSubGroup``), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201, the dashboard's consumer list) and DELETE_SUBSCRIPTIONGROUP (207, ``deleteSubGroup``).
(UPDATE_BROKER_CONFIG is ``broker_config.py``'s.)

Owns: ``SubscriptionGroupProcessor`` (services: the subscription-group table, the offset
table, the log), with RocketMQ's bodies: ``SubscriptionGroupConfig`` JSON,
``SubscriptionGroupWrapper`` (``subscriptionGroupTable`` + ``dataVersion``).

Invariants:
* A change is answered only once ``subscriptionGroup.json`` holds it (written in a
  thread). A bad body or name is refused (``ingress.Rejected``: counted,
  ``request.rejected``) with SYSTEM_ERROR and a remark naming it, and changes nothing.
* UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: fields missing from the body keep the group's
  current values (a new group: the broker's defaults).
* DELETE_SUBSCRIPTIONGROUP of an unknown group succeeds, as in RocketMQ; with
  ``removeOffset=true`` the group's consumer offsets go too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers (see Handler)

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import DeleteSubscriptionGroupRequestHeader

from ...remoting import ingress
from ...tables.subscriptions import SubscriptionGroupConfig
from ...tables.table_file import collect

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.subscriptions import SubscriptionGroupManager


class SubscriptionGroupProcessor:
    """200, 201 and 207 over the subscription-group table."""

    def __init__(
        self, *, subscriptions: SubscriptionGroupManager, offsets: ConsumerOffsetManager, log: Any
    ) -> None:
        self.subscriptions = subscriptions
        self.offsets = offsets
        self.log = log

    def handle_update_subscription_group(self, conn: Connection, cmd: RemotingCommand) -> Any:
        try:
            data = orjson.loads(cmd.body)
            base = (  # groupName: a str, checked below (mypy does not narrow a call)
                self.subscriptions.get(data.get("groupName"))  # type: ignore[arg-type]
                if isinstance(data, dict) and isinstance(data.get("groupName"), str)
                else None
            )
            cfg = SubscriptionGroupConfig.from_json(data, base or self.subscriptions.new_config(""))
            self.subscriptions.update(cfg)
        except (orjson.JSONDecodeError, ValueError) as err:
            raise ingress.Rejected(
                ResponseCode.SYSTEM_ERROR, f"bad subscription group config: {err}"
            ) from None
        return self._persisted(cmd)

    async def _persisted(self, cmd: RemotingCommand) -> RemotingCommand:
        await self.subscriptions.flushed()
        return cmd.response()

    def handle_delete_subscription_group(self, conn: Connection, cmd: RemotingCommand) -> Any:
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.group_name, "groupName")
        deleted = self.subscriptions.delete(h.group_name)
        if h.remove_offset:
            self.offsets.remove_group(h.group_name)
        return self._persisted(cmd) if deleted else cmd.response()

    async def handle_all_subscription_groups(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        # encoded in parts between other requests (a large table: table_file.collect)
        return cmd.response(body=await collect(self.subscriptions.json_parts()))
