"""The broker's state tables, RocketMQ's "managers": ``topics`` (TopicConfigManager,
``topics.json``), ``subscriptions`` (SubscriptionGroupManager, ``subscriptionGroup.json``),
``offsets`` (ConsumerOffsetManager, ``consumerOffset.json``), ``clients`` (who is connected:
ClientRegistry, LockManager), ``settings`` (UPDATE_BROKER_CONFIG's settable subset,
``broker.properties``) and ``table_file`` (the coalesced, off-loop writer of those files).
"""

from __future__ import annotations
