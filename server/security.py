"""Wiring of ACL and TLS into a broker's remoting server at start.

Owns: ``install_security(broker)`` (called by ``Broker`` before its first listener
opens): the ``AclGuard`` from ``--acl FILE`` as the transport's auth hook plus its
supervised reload service (``acl``), its request policy (``--acl-request-binding``,
``--acl-request-window``, ``--acl-admin-require-tls``) and its ``StoreLookups`` (the
store's checked read for send-backs, the transaction service's half messages for
END_TRANSACTION), the ``TlsServer`` as the transport's protocol
wrapper for ``--tls-mode permissive|enforcing``, and the start-up warning
``acl.disabled`` for a broker reachable beyond loopback without ``--acl``;
``is_loopback``.

Invariants: both listeners of a broker (broker port, its VIP port and the name-server
port) get the same hook and wrapper, so no port is left open. A bad ACL file or TLS
certificate fails the start (the operator asked for protection; silently running
without it would be worse).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import decode_record

from .acl import AclGuard, RequestPolicy, StoredTopic, StoreLookups, load_guard
from .logs import get_logger
from .tls import TlsMode, TlsServer, TlsSettings

if TYPE_CHECKING:
    from .broker import Broker


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the ports on this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name or a wildcard ("", "0.0.0.0" parses and is not loopback)


def tls_settings(broker: Broker) -> TlsSettings:
    cfg = broker.config
    return TlsSettings(TlsMode(cfg.tls_mode), cfg.tls_cert, cfg.tls_key, cfg.tls_ca)


def stored_topic(broker: Broker) -> StoredTopic:
    """Commit-log offset -> the topic of the stored record there (the store's checked read),
    or None: what a send-back would copy (server/acl.py)."""

    def topic_at(offset: int) -> str | None:
        if offset < 0:
            return None
        rec = broker.store.read_record(offset)
        if not isinstance(rec, bytes):
            return None  # no record there: the send-back handler refuses it
        try:
            return decode_record(rec).topic
        except MessageDecodeError:
            return None

    return topic_at


def install_security(broker: Broker) -> AclGuard | None:
    """Set the ACL hook and the TLS wrapper on ``broker.server``; the guard or None."""
    cfg = broker.config
    log = get_logger("acl")
    guard = None
    if cfg.acl_file is not None:
        policy = RequestPolicy(cfg.acl_request_binding, int(cfg.acl_request_window * 1000),
                               cfg.acl_admin_require_tls)
        guard = load_guard(cfg.acl_file, log, cfg.acl_reload_interval, policy)
        guard.lookups = StoreLookups(stored_topic=stored_topic(broker),
                                     half_topic=broker.transactions.half_topic)
        broker.server.auth = guard.check
        broker.supervisor.spawn("acl", guard.watch, reports_progress=True)
    elif not is_loopback(cfg.host):
        log.warning("acl.disabled", host=cfg.host,
                    reason="the broker is bound beyond loopback without --acl: anyone who "
                           "can reach its ports can create and delete topics, rewrite "
                           "offsets and read every message (docs/security.md)")
    settings = tls_settings(broker)
    if settings.mode is not TlsMode.DISABLED:
        if (problem := settings.problem()) is not None:
            raise ValueError(problem)
        broker.server.wrap_protocol = TlsServer(settings, get_logger("tls"))
    return guard
