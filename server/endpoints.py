"""Where this broker is reached: the advertised host and the bound ports.

Owns: ``Endpoints`` - the broker port, the HA port and the embedded name server's port
as bound (a configured port of 0 becomes the port the OS chose) and the addresses built
from them (``brokerAddr`` in routes, ``namesrvAddr``, ``haServerAddr``). With external
name servers (``--namesrv``) ``namesrv_address`` is their list as configured and
``namesrv_port`` is 0 (no listener).

Invariant: the one place a bound port lives. ``Broker`` sets it once per listener after
binding; routes, admin answers and the store host of new records read it from here, so
they never disagree with each other or with the socket.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Endpoints:
    advertised_host: str
    port: int
    namesrv_port: int
    external_namesrv: str | None = None  # "host:port;host:port" (--namesrv)
    ha_port: int = 0  # a master's HA listener as bound (0: none)

    @property
    def ha_address(self) -> str:
        """RocketMQ's haServerAddr: the HA listener, or RocketMQ's port + 1 form without one."""
        return f"{self.advertised_host}:{self.ha_port or self.port + 1}"

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def namesrv_address(self) -> str:
        if self.external_namesrv is not None:
            return self.external_namesrv
        return f"{self.advertised_host}:{self.namesrv_port}"
