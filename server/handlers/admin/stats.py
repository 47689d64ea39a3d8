"""VIEW_BROKER_STATS_DATA (315): one stats item's minute / hour / day figures, as
``mqadmin statsAll`` asks for them (``TOPIC_PUT_NUMS`` by topic, ``GROUP_GET_NUMS`` by
``topic@group``; also ``BROKER_PUT_NUMS`` / ``BROKER_GET_NUMS`` by cluster name).

Owns: ``BrokerStatsProcessor`` (service: ``stats_items.BrokerStatsManager``), answering
RocketMQ's ``BrokerStatsData`` body (``statsMinute`` / ``statsHour`` / ``statsDay``, each
``{sum, tps, avgpt}``).

Invariant: read-only; an item that does not exist (a topic never put to, a group that never
pulled the topic, a stats name kairosmq does not keep) answers SYSTEM_ERROR with
RocketMQ's remark ``The stats <name> <key> not exist``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import ViewBrokerStatsDataRequestHeader

if TYPE_CHECKING:
    from ...observe.stats_items import BrokerStatsManager
    from ...remoting.transport import Connection


class BrokerStatsProcessor:
    def __init__(self, *, stats_manager: BrokerStatsManager) -> None:
        self.stats_manager = stats_manager

    def handle_view_broker_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_ext_fields(cmd.ext_fields)
        snap = self.stats_manager.snapshot(h.stats_name, h.stats_key)
        if snap is None:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        return cmd.response(body=orjson.dumps(snap))
