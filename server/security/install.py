"""Wiring of ACL and TLS into a remoting server at start (a broker's, a name server's).

Owns: ``secure_server`` (the one installer: the ``AclGuard`` from ``--acl FILE`` as the
transport's auth hook plus its supervised reload service (``acl``) and its request policy
(``--acl-request-binding``, ``--acl-request-window``, ``--acl-admin-require-tls``), the
``TlsServer`` as
the transport's protocol wrapper for ``--tls-mode permissive|enforcing``, and the
start-up warning ``acl.disabled`` for a server reachable beyond loopback without
``--acl``), ``install_security`` (called by ``Broker`` before its first listener opens,
with only what it reads: the config, the server, the supervisor and the store reads
behind the guard's ``StoreLookups``, given at construction: the store's checked read for
send-backs, the transaction service's half messages for END_TRANSACTION; it never sees
the ``Broker``; the standalone name server calls ``secure_server`` itself, without
lookups),
``security_problem`` (the start-up check of the files, one line for the command),
``security_options`` (the security options of ``kairosmq namesrv`` and ``cluster``: TLS
settings, request policy, problem) and ``is_loopback``.

Invariants: every listener of a server (broker port, its VIP port and the name-server
port; the standalone name server's port) gets the same hook and wrapper, so no port is
left open. A bad ACL file or TLS certificate fails the start (the operator asked for
protection; silently running without it would be worse).
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import decode_record

from ..config import request_policy_problem
from ..observe.logs import get_logger
from .access import AclGuard, RequestPolicy, StoredTopic, StoreLookups, load_guard
from .tls import TlsMode, TlsServer, TlsSettings

if TYPE_CHECKING:
    from pathlib import Path

    from ..config import BrokerConfig
    from ..remoting.transport import RemotingServer
    from ..store.commitlog import RecordProblem
    from ..supervise import Supervisor


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the ports on this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name or a wildcard ("", "0.0.0.0" parses and is not loopback)


def tls_settings(cfg: BrokerConfig) -> TlsSettings:
    return TlsSettings(TlsMode(cfg.tls_mode), cfg.tls_cert, cfg.tls_key, cfg.tls_ca)


def stored_topic(read_record: Callable[[int], bytes | RecordProblem]) -> StoredTopic:
    """Commit-log offset -> the topic of the stored record there (``read_record``: the
    store's checked read), or None: what a send-back would copy (server/security/access.py)."""

    def topic_at(offset: int) -> str | None:
        if offset < 0:
            return None
        rec = read_record(offset)
        if not isinstance(rec, bytes):
            return None  # no record there: the send-back handler refuses it
        try:
            return decode_record(rec).topic
        except MessageDecodeError:
            return None

    return topic_at


Role = Literal["broker", "name server"]
_OPEN: dict[Role, str] = {
    "broker": "anyone who can reach its ports can create and delete topics, rewrite "
    "offsets and read every message",
    "name server": "anyone who can reach its port can register a broker at their own "
    "address, take brokers' write permission and change its settings",
}


def secure_server(
    server: RemotingServer,
    supervisor: Supervisor,
    *,
    acl_file: Path | None,
    acl_reload_interval: float,
    tls: TlsSettings,
    host: str,
    role: Role = "broker",
    policy: RequestPolicy | None = None,
    lookups: StoreLookups | None = None,
) -> AclGuard | None:
    """Set the ACL hook and the TLS wrapper on ``server`` (before it listens); the guard
    or None. ``role`` names the server in the ``acl.disabled`` warning; ``lookups`` are a
    broker's reads for the codes whose resource is a stored message."""
    log = get_logger("acl")
    guard = None
    if acl_file is not None:
        guard = load_guard(acl_file, log, acl_reload_interval, policy, lookups)
        server.auth = guard.check
        supervisor.spawn("acl", guard.watch, reports_progress=True)
    elif not is_loopback(host):
        log.warning(
            "acl.disabled",
            host=host,
            reason=f"the {role} is bound beyond loopback without --acl: "
            + _OPEN[role]
            + " (docs/security.md)",
        )
    if tls.mode is not TlsMode.DISABLED:
        if (problem := tls.problem()) is not None:
            raise ValueError(problem)
        server.wrap_protocol = TlsServer(tls, get_logger("tls"))
    return guard


def install_security(
    cfg: BrokerConfig,
    server: RemotingServer,
    supervisor: Supervisor,
    *,
    read_record: Callable[[int], bytes | RecordProblem],
    half_topic: StoredTopic,
) -> AclGuard | None:
    """Set the ACL hook and the TLS wrapper on a broker's ``server``; the guard or None.
    ``read_record`` is the store's checked read, ``half_topic`` the transaction service's
    lookup of a half message's real topic (the guard's ``StoreLookups``)."""
    policy = RequestPolicy(
        cfg.acl_request_binding, int(cfg.acl_request_window * 1000), cfg.acl_admin_require_tls
    )
    lookups = StoreLookups(stored_topic=stored_topic(read_record), half_topic=half_topic)
    return secure_server(
        server,
        supervisor,
        acl_file=cfg.acl_file,
        acl_reload_interval=cfg.acl_reload_interval,
        tls=tls_settings(cfg),
        host=cfg.host,
        policy=policy,
        lookups=lookups,
    )


def security_problem(acl_file: Path | None, tls: TlsSettings) -> str | None:
    """Check the ACL file and TLS files before starting (one clear line, exit code 2)."""
    import ssl

    from .acl_file import AclConfigError, load_rules
    from .tls import server_context

    if acl_file is not None:
        try:
            load_rules(acl_file)
        except (OSError, AclConfigError) as err:
            return f"--acl {acl_file}: {err}"
    if tls.mode is not TlsMode.DISABLED:
        if (problem := tls.problem()) is not None:
            return problem
        try:
            server_context(tls)
        except (OSError, ssl.SSLError) as err:
            return f"--tls-cert/--tls-key/--tls-ca: {err}"
    return None


def security_options(
    args: argparse.Namespace,
) -> tuple[TlsSettings, RequestPolicy | None, str | None]:
    """The options ``cli.add_security_options`` adds, as a name server or a cluster takes
    them: (TLS settings, request policy, problem). A problem (one line for the command)
    leaves the policy None."""
    tls = TlsSettings(TlsMode(args.tls_mode), args.tls_cert, args.tls_key, args.tls_ca)
    problem = security_problem(args.acl, tls) or request_policy_problem(
        args.acl_request_binding,
        args.acl_request_window,
        args.acl_admin_require_tls,
        args.tls_mode,
    )
    if problem is not None:
        return tls, None, problem
    policy = RequestPolicy(
        args.acl_request_binding, int(args.acl_request_window * 1000), args.acl_admin_require_tls
    )
    return tls, policy, None
