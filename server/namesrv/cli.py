"""``kairosmq namesrv``: run the standalone name server (RocketMQ's ``mqnamesrv``).

Owns: the subcommand's options (``add_namesrv_parser``) and ``cmd_namesrv`` (logging setup,
uvloop, SIGINT/SIGTERM -> ``NameServer.stop``). Defaults: 127.0.0.1:9876, KV config in
``./data/namesrv/kvConfig.json``, JSON-lines logs in ``<data-dir>/logs``, brokers dropped after
120 s without a REGISTER_BROKER, scanned every 10 s. ``--acl FILE`` and ``--tls-mode`` /
``--tls-cert`` / ``--tls-key`` / ``--tls-ca`` are the broker's options
(``cli.add_security_options``), checked before start like the broker's (a bad file: one
line, exit code 2).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from ..cli import add_security_options
from .server import BROKER_EXPIRY_S, DEFAULT_PORT, SCAN_INTERVAL_S, NameServer


def add_namesrv_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "namesrv",
        help="run a standalone name server that brokers register with (RocketMQ 4.x protocol)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 9876)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./data/namesrv"),
        help="kvConfig.json and logs/ live here (default ./data/namesrv)",
    )
    p.add_argument(
        "--scan-not-active-ms",
        type=float,
        default=SCAN_INTERVAL_S * 1000,
        help="how often silent brokers are looked for (default 10000)",
    )
    p.add_argument(
        "--broker-expiry-ms",
        type=float,
        default=BROKER_EXPIRY_S * 1000,
        help="a broker without REGISTER_BROKER for this long is dropped (default 120000)",
    )
    p.add_argument(
        "--order-message-enable",
        action="store_true",
        help="routes carry orderTopicConf from the ORDER_TOPIC_CONFIG KV namespace",
    )
    p.add_argument(
        "--delete-topic-with-broker-registration",
        action="store_true",
        help="a master's REGISTER_BROKER drops its topics missing from the body "
        "(only when every broker sends its whole table, as kairosmq brokers do; "
        "Apache RocketMQ 4.9 brokers register a new topic alone)",
    )
    p.add_argument(
        "--log-dir", type=Path, default=None, help="JSON-lines logs here (default <data-dir>/logs)"
    )
    p.add_argument("--no-log-file", action="store_true", help="log to stdout only")
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    add_security_options(p)


async def run_namesrv(ns: NameServer) -> None:
    await ns.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    guarded = [f"ACL {ns.acl_file}"] if ns.acl is not None else []
    if ns.tls.mode.value != "disabled":
        guarded.append(f"TLS {ns.tls.mode.value}")
    print(
        f"kairosmq name server on {ns.host}:{ns.port}, data in {ns.data_dir.resolve()}"
        + (f", {', '.join(guarded)}" if guarded else ""),
        file=sys.stderr,
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await ns.stop()


def cmd_namesrv(args: argparse.Namespace) -> int:
    import uvloop

    from ..observe.logs import close_sinks, configure_logging

    if not 0 <= args.port < 65536:
        print(f"kairosmq namesrv: --port {args.port} is not in 0..65535", file=sys.stderr)
        return 2
    if args.scan_not_active_ms <= 0 or args.broker_expiry_ms <= 0:
        print(
            "kairosmq namesrv: --scan-not-active-ms and --broker-expiry-ms must be > 0",
            file=sys.stderr,
        )
        return 2
    from ..security.install import security_options

    tls, policy, problem = security_options(args)
    if problem is not None:
        print(f"kairosmq namesrv: {problem}", file=sys.stderr)
        return 2
    log_dir = None if args.no_log_file else (args.log_dir or args.data_dir / "logs")
    json_mode = {"auto": None, "json": True, "console": False}[args.log_format]
    sink = configure_logging(
        json=json_mode,
        level=args.log_level,
        log_dir=log_dir,
        stdout=log_dir is None or sys.stdout.isatty(),
    )
    try:  # loggers bind at construction: after configure_logging
        ns = NameServer(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            scan_interval_s=args.scan_not_active_ms / 1000,
            broker_expiry_s=args.broker_expiry_ms / 1000,
            order_message_enable=args.order_message_enable,
            delete_topic_with_broker_registration=(args.delete_topic_with_broker_registration),
            acl_file=args.acl,
            tls=tls,
            policy=policy,
        )
        uvloop.run(run_namesrv(ns))
    except OSError as err:
        print(f"kairosmq namesrv: cannot listen on {args.host}:{args.port}: {err}", file=sys.stderr)
        return 1
    finally:
        del sink
        close_sinks()
    return 0
