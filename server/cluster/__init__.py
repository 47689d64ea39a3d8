"""Brokers in a cluster: ``registration`` (a broker registering with external name servers:
RocketMQ's ``BrokerOuterAPI``, ``--namesrv``) and ``local`` (``kairosmq cluster``: a name
server and N broker processes on one machine, supervised). The name server itself is
``server/namesrv/``.
"""

from __future__ import annotations
