"""Broker settings, as ``mqadmin updateBrokerConfig`` and rocketmq-dashboard change them:
UPDATE_BROKER_CONFIG (25). (GET_BROKER_CONFIG, 26, is ``broker.py``'s.)

Owns: ``BrokerConfigProcessor`` (services: ``BrokerSettings``, the names GET_BROKER_CONFIG
shows, the log): the request's properties text applied through
``tables/settings.py``'s ``BrokerSettings``.

Invariants: a change is answered only once ``broker.properties`` holds it (written in a
thread). A bad body, key or value is refused (``ingress.Rejected``: counted,
``request.rejected``) with SYSTEM_ERROR (a setting fixed at start: NO_PERMISSION, as
RocketMQ's black list) and a remark naming it, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers (see Handler)

from kairosmq.protocol.bodies import string_to_properties
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand

from ...remoting import ingress

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...tables.settings import BrokerSettings


class BrokerConfigProcessor:
    """UPDATE_BROKER_CONFIG (25): the settable subset (server/tables/settings.py)."""

    def __init__(
        self, *, settings: BrokerSettings, known: Callable[[], set[str]], log: Any
    ) -> None:
        self.settings = settings
        self.known = known  # the names GET_BROKER_CONFIG shows (fixed ones: NO_PERMISSION)
        self.log = log

    def handle_update_broker_config(self, conn: Connection, cmd: RemotingCommand) -> Any:
        try:
            props = string_to_properties(cmd.body.decode())
            self.settings.apply(props, self.known())
        except UnicodeDecodeError as err:
            raise ingress.Rejected(
                ResponseCode.SYSTEM_ERROR, f"string2Properties error: {err}"
            ) from None
        except PermissionError as err:
            raise ingress.Rejected(
                ResponseCode.NO_PERMISSION, f"Can not update config: {err}"
            ) from None
        except ValueError as err:
            raise ingress.Rejected(
                ResponseCode.SYSTEM_ERROR, f"Can not update config: {err}"
            ) from None
        self.log.info("broker.config_updated", keys=",".join(sorted(props)), peer=conn.peer)
        return self._persisted(cmd)

    async def _persisted(self, cmd: RemotingCommand) -> RemotingCommand:
        await self.settings.persist_async()
        return cmd.response()
