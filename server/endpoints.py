"""Where this broker is reached: the advertised host and the bound ports.

Owns: ``Endpoints`` - the broker port and the embedded name server's port as bound (a
configured port of 0 becomes the port the OS chose) and the addresses built from them
(``brokerAddr`` in routes, ``namesrvAddr``).

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

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def namesrv_address(self) -> str:
        return f"{self.advertised_host}:{self.namesrv_port}"
