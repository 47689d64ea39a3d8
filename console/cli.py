"""``kairosmq console``: the web console's process (its HTTP API; docs/console.md).

Owns: the options (where the brokers are, the listen address, the users file, TLS, the
console's own ACL account, the Spark report directory), ``hash-password`` (a users-file
hash of a password read from stdin), structlog JSON lines on stderr (events catalogued
in ``protocol/events.py``: ``console.*``), uvloop, and SIGINT/SIGTERM -> a clean stop.

Invariants: a separate process that reaches brokers over the remoting protocol only (it
imports nothing from ``kairosmq.server``); without ``--users`` or with an unusable users
file it does not start (exit 2, the reason on stderr); a users file that does not exist
is created with one ``admin`` user (``first_admin``: its password from
``$KAIROSMQ_CONSOLE_ADMIN_PASSWORD`` or generated and printed once to stderr, never in
the JSON log), mode 0600; it listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import secrets
import signal
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import structlog
import uvloop
from kairosmq.client.admin import security_options
from kairosmq.protocol.events import record

from .api import Brokers, ConsoleApi
from .auth import FIRST_ADMIN, Users, UsersFileError, create_first_admin, hash_password
from .http import HttpServer

ADMIN_PASSWORD_ENV = "KAIROSMQ_CONSOLE_ADMIN_PASSWORD"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kairosmq console", description="The kairosmq web console (HTTP API)."
    )
    ap.add_argument(
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
        help="name server host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    ap.add_argument("--broker", default=None, help="one broker host:port instead of a cluster")
    ap.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8088, help="listen port (default 8088)")
    ap.add_argument(
        "--users",
        type=Path,
        help="the users file (YAML; see docs/console.md); created with one admin user if missing",
    )
    ap.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", type=Path, help="its private key (PEM)")
    ap.add_argument(
        "--access-key",
        default=None,
        help="the console's ACL account toward the brokers (default $KAIROS_ACCESS_KEY)",
    )
    ap.add_argument("--secret-key", default=None, help="its secret (prefer $KAIROS_SECRET_KEY)")
    ap.add_argument("--broker-tls", action="store_true", help="reach the brokers over TLS")
    ap.add_argument("--broker-tls-ca", default=None, help="verify the brokers against this CA")
    ap.add_argument("--timeout", type=float, default=10.0, help="per broker request, seconds")
    ap.add_argument(
        "--spark-report-dir",
        type=Path,
        default=None,
        help="show the newest delivery-quality report (kairosmq report -o) at or under this",
    )
    return ap


def _line(_logger: Any, level: str, fields: dict[str, Any]) -> str:
    """The broker's line format (``protocol/events.py``'s ``record``: epoch-ms ``ts``,
    format ``v``, the event, its level), so the Spark job reads console logs too."""
    event = str(fields.pop("event", ""))
    rec = record(event, {"component": "console", **fields}, int(time.time() * 1000), level)
    return orjson.dumps(rec).decode()


def _logger() -> Any:
    structlog.configure(
        processors=[_line],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    return structlog.get_logger()


async def serve(args: argparse.Namespace, ready: asyncio.Event | None = None) -> int:
    users = Users.load(args.users)
    opts = security_options(
        argparse.Namespace(
            access_key=args.access_key,
            secret_key=args.secret_key,
            tls=args.broker_tls,
            tls_ca=args.broker_tls_ca,
        )
    )
    from kairosmq.client.remoting import RemotingPool

    pool = RemotingPool(**opts)
    log = _logger()
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    api = ConsoleApi(
        users,
        Brokers(pool, namesrv=args.namesrv, broker=args.broker, timeout=args.timeout),
        log=log,
        secure_cookie=tls is not None,
        spark_report_dir=args.spark_report_dir,
    )
    server = HttpServer(api.handle, args.host, args.port, ssl_context=tls, log=log)
    await server.start()
    log.info(
        "console.started",
        host=args.host,
        port=server.port,
        namesrv=args.broker or args.namesrv,
        users=len(users.users),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await server.stop()
        pool.close()
    return 0


def first_admin(path: Path) -> None:
    """Create the users file with one ``admin`` user: the password from
    ``$KAIROSMQ_CONSOLE_ADMIN_PASSWORD``, else a generated one printed once to stderr (a
    plain line, before the JSON log starts; never logged)."""
    password = os.environ.get(ADMIN_PASSWORD_ENV, "")
    generated = not password
    if generated:
        password = secrets.token_urlsafe(18)
    create_first_admin(path, password)
    if generated:
        print(
            f"kairosmq console: created {path} with user {FIRST_ADMIN}, password {password} "
            f"(shown once; add users with `kairosmq console hash-password`)",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(
            f"kairosmq console: created {path} with user {FIRST_ADMIN}, password from "
            f"${ADMIN_PASSWORD_ENV}",
            file=sys.stderr,
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "hash-password":
        password = (
            sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass()
        )
        if not password:
            print("kairosmq console hash-password: an empty password", file=sys.stderr)
            return 2
        print(hash_password(password))
        return 0
    args = build_parser().parse_args(argv)
    if args.users is None:
        print("kairosmq console: give --users FILE (docs/console.md)", file=sys.stderr)
        return 2
    try:
        if not args.users.exists():
            first_admin(args.users)
        return uvloop.run(serve(args))
    except (UsersFileError, OSError, ssl.SSLError, ValueError) as err:
        print(f"kairosmq console: {err}", file=sys.stderr)
        return 2
