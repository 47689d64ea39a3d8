"""docker-compose.acl.yml and examples/acl/plain_acl.yml, checked without Docker: the ACL
directory is mounted read-only where ``--acl`` points, the example file parses, and with it
the image's healthcheck (signed by the monitor account from the environment) passes against
a live broker while an unsigned one fails; the demo account can send and consume TopicTest."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from kairosmq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from kairosmq.server.broker import Broker
from kairosmq.server.security.acl_file import load_rules

from tests.helpers import Collector

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
ACL = yaml.safe_load((REPO / "docker-compose.acl.yml").read_text())
DEFAULT = re.compile(r"\$\{[A-Z_]+:-([^}]*)\}")


def expand(value: str) -> str:
    """Compose's ``${VAR:-default}`` with no variable set."""
    return DEFAULT.sub(lambda m: m.group(1), value)


def env_of(service: str) -> dict[str, str]:
    return {k: expand(v) for k, v in ACL["services"][service]["environment"].items()}


def test_acl_directory_is_mounted_read_only_where_acl_points() -> None:
    broker = ACL["services"]["broker"]
    argv = [expand(a) for a in broker["command"]]
    acl_path = argv[argv.index("--acl") + 1]
    mounts = [expand(v).split(":") for v in broker["volumes"]]
    [(src, dst, mode)] = [m for m in mounts if acl_path.startswith(m[1] + "/")]
    assert mode == "ro"
    host_file = REPO / src / Path(acl_path).relative_to(dst)
    rules = load_rules(host_file)
    assert rules.global_white == ()  # every request signed
    # the base file's arguments are kept (compose replaces `command` whole)
    base_argv = [expand(a) for a in BASE["services"]["broker"]["command"]]
    assert argv[: len(base_argv)] == base_argv
    for svc in ("broker", "producer", "consumer"):
        env = env_of(svc)
        account = rules.accounts[env["KAIROS_ACCESS_KEY"]]
        assert account.secret_key == env["KAIROS_SECRET_KEY"]


@pytest.mark.slow  # the CLI in child processes
async def test_healthcheck_and_demo_account_against_a_live_broker(
    broker_factory: Callable[..., Awaitable[Broker]],
) -> None:
    broker = await broker_factory(acl_file=REPO / "examples" / "acl" / "plain_acl.yml")
    health = BASE["services"]["broker"]["healthcheck"]["test"][1:]
    ports = {"9876": str(broker.namesrv_port), "10911": str(broker.port)}
    argv = [str(Path(sys.executable).parent / "kairosmq")] + [
        re.sub(r":(\d+)$", lambda m: ":" + ports.get(m.group(1), m.group(1)), a) for a in health[1:]
    ]
    clean = {k: v for k, v in os.environ.items() if not k.endswith(("_ACCESS_KEY", "_SECRET_KEY"))}
    for env, ok in ((clean, False), ({**clean, **env_of("broker")}, True)):
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        assert (proc.returncode == 0) is ok, (out, err)
    app = env_of("producer")
    creds = {"access_key": app["KAIROS_ACCESS_KEY"], "secret_key": app["KAIROS_SECRET_KEY"]}
    got = Collector()
    async with Producer("example_producer_group", broker.namesrv_address, **creds) as p:  # type: ignore[arg-type]
        await p.send(Message("TopicTest", b"hello"))
        c = PushConsumer(
            "example_consumer_group",
            broker.namesrv_address,  # type: ignore[arg-type]
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **creds,
        )
        c.subscribe("TopicTest", "*")
        c.register_listener(got)
        await c.start()
        try:
            await got.wait_for(1, timeout=10.0)
        finally:
            await c.shutdown()
    assert got.bodies == [b"hello"]
    assert broker.acl.denied == {"no_access_key": 1}  # the unsigned healthcheck only
