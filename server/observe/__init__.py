"""What the broker tells about itself: ``logs`` (structlog JSON events, ``MessageLog``) and
``logsink`` (the sinks that write them off the loop), ``stats`` (the counters the hot paths
bump), ``stats_items`` (RocketMQ's minute/hour/day rates of them) and ``metrics`` (the
Prometheus endpoint).
"""

from __future__ import annotations
