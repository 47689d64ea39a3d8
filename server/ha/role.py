"""BrokerRole: RocketMQ's three roles and what each may do.

Owns: ``BrokerRole`` (``ASYNC_MASTER``, ``SYNC_MASTER``, ``SLAVE``: RocketMQ's names),
``SLAVE_REFUSAL`` (the remark of SERVICE_NOT_AVAILABLE for a put on a slave) and
``parse_host_port``, the one parser of ``--ha-master-address`` and of the haServerAddr a
name server answers.

Invariants: a master has brokerId 0 and a slave brokerId >= 1 (RocketMQ's rule,
checked by ``BrokerConfig``); a slave appends nothing of its own: every put is refused by
the store's guard with ``SLAVE_REFUSAL`` and the bytes it holds are the master's.
"""

from __future__ import annotations

from enum import StrEnum


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


# RocketMQ's DefaultMessageStore.putMessage on a slave: SERVICE_NOT_AVAILABLE, logged as
# "message store is slave mode, so putMessage is forbidden"
SLAVE_REFUSAL = (
    "service not available now: the broker role is slave, messages are put to its master"
)


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ``ValueError`` naming ``what`` and the value."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {text!r} must be host:port")
    return host.strip("[]"), int(port)
