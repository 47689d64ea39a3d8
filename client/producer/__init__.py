"""The producer room: RocketMQ's DefaultMQProducerImpl and what it uses.

``producer.py`` (``Producer``: routes, queue choice, retries, every send mode),
``send.py`` (``SendRequest``: one send's payload and where it may go; the queue
selectors), ``fault.py`` (``FaultStrategy``: RocketMQ's MQFaultStrategy),
``request.py`` (request-reply: ``create_reply``, the requester's reply waiters, as
RocketMQ's RequestFutureHolder) and ``transaction.py`` (``TransactionProducer``,
RocketMQ's TransactionMQProducer). User code imports these names from
``kairosmq.client``.
"""

from __future__ import annotations
