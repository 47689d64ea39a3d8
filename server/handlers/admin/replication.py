"""What a slave asks its master for that is not in the commit log (RocketMQ 4.9.8's
SlaveSynchronize): GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_DELAY_OFFSET (45); and
KAIROS_PROMOTE (913, ``kairosmq admin promote``): a slave becomes the master.
GET_ALL_TOPIC_CONFIG (21) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) are topics.py's and
groups.py's; the slave's side is server/ha/sync.py.

Owns: ``SlaveSyncProcessor`` (services: the consumer-offset table, the scheduler's
progress), with RocketMQ's bodies: ``ConsumerOffsetSerializeWrapper``
(``{"offsetTable": {"topic@group": {queueId: offset}}}``) and the delayOffset.json form
(``{"offsetTable": {level: offset}}``).

Invariant: reads only; any broker answers (Apache's master answers a slave and mqadmin
alike); the ACL classes both as admin reads (security/access.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any  # Any: the JSON status a promotion answers

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...tables.offsets import ConsumerOffsetManager


class SlaveSyncProcessor:
    """43, 45 and 913."""

    def __init__(
        self,
        *,
        offsets: ConsumerOffsetManager,
        delay_progress: Callable[[], dict[int, int]],
        promote: Callable[[], Awaitable[dict[str, Any]]],
    ) -> None:
        self.offsets = offsets
        self.delay_progress = delay_progress
        self.promote = promote  # Broker.promote

    async def handle_promote(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            answer = await self.promote()
        except ValueError as err:
            return cmd.error(ResponseCode.SYSTEM_ERROR, str(err))
        return cmd.response(body=orjson.dumps(answer))

    def handle_all_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table = {
            f"{topic}@{group}": dict(queues)
            for group, topics in list(self.offsets.table.items())
            for topic, queues in list(topics.items())
        }
        body = orjson.dumps({"offsetTable": table}, option=orjson.OPT_NON_STR_KEYS)
        return cmd.response(body=body)

    def handle_all_delay_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = orjson.dumps(
            {"offsetTable": dict(self.delay_progress())}, option=orjson.OPT_NON_STR_KEYS
        )
        return cmd.response(body=body)
