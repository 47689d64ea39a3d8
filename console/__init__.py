"""The kairosmq web console's process (``kairosmq console``): a protocol client of the
brokers with its own HTTP API, accounts, roles and CSRF protection (``http``, ``auth``,
``api``, ``cli``; docs/console.md). It imports nothing from ``kairosmq.server``.
"""

from __future__ import annotations
