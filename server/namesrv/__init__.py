"""The standalone name server (``kairosmq namesrv``): RocketMQ 4.x's route registry that
brokers register with (REGISTER_BROKER 103) and clients ask for routes.

Modules: ``routes`` (RouteInfoManager: the tables), ``processor`` (the request handlers),
``server`` (``NameServer``: listener, housekeeping, KV config), ``cli`` (the subcommand).
"""

from __future__ import annotations

from .routes import RouteInfoManager
from .server import NameServer

__all__ = ["NameServer", "RouteInfoManager"]
