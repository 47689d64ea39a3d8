"""The consumer room: RocketMQ's DefaultMQPushConsumerImpl and the parts it holds.

``push_consumer.py`` (``PushConsumer``: subscriptions, listener, timers, heartbeats),
``rebalance.py`` (``Rebalance``, RocketMQ's RebalanceImpl: the owned-queue table
``MessageQueue -> ProcessQueue`` and the rebalance pass), ``consume_service.py``
(ConsumeMessageConcurrentlyService / OrderlyService: listener calls, send-back),
``process_queue.py`` (ProcessQueue), ``pull.py`` (the pull loop, PullAPIWrapper),
``offset_store.py`` (OffsetStore, where a new queue starts), ``queue_lock.py`` (orderly
broker locks), ``selector.py`` (MessageSelector: tag or SQL92) and ``callbacks.py`` (the
broker's requests to a consumer: running info, online offset reset). User code imports
these names from ``kairosmq.client``.
"""

from __future__ import annotations
