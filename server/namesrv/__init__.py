"""The standalone name server (``kairosmq namesrv``): RocketMQ 4.x's route registry that
brokers register with (REGISTER_BROKER 103) and clients ask for routes."""

from __future__ import annotations
