"""Admin processors (RocketMQ's admin codes as ``mqadmin`` and rocketmq-dashboard send them,
and kairosmq's own 900-range codes): ``topics`` (create, delete, list topics), ``messages``
(VIEW_MESSAGE_BY_ID, QUERY_MESSAGE), ``broker`` (AdminBrokerProcessor: runtime info, broker
config, topic stats, connections, consume stats), ``consume_stats`` (brokerConsumeStats,
queryCq), ``callbacks`` (answered by calling consumers: running info, offset reset),
``groups`` (subscription groups), ``broker_config`` (UPDATE_BROKER_CONFIG), ``kv`` (the KV
config of the embedded and the standalone name server), ``stats`` (statsAll) and ``kairos``
(``kairosmq admin``: lag, schedule backlog, DLQ resend, status). Built by
``handlers/__init__.py`` like every other processor.
"""

from __future__ import annotations
