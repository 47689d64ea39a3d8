"""Shared test helpers: broker config, raw send/pull requests, a collecting listener, event
waits with deadlines and a virtual-time event loop. Every test module and conftest imports
shared non-fixture helpers from here (fixtures stay in conftest files; raw-frame peers in
``tests/wire.py``).

Owns: ``FIXTURES``/``FAST_LEVELS``/``fast_config`` (an in-process broker on port 0 with tiny
delay levels), ``send_ext``/``send``/``pull`` (raw-protocol request builders, no client),
``Collector`` (an async push-consumer listener that records messages), ``wait_until``
(poll a predicate with a generous deadline instead of a fixed sleep), ``stays_false``,
``mqadmin_argv`` (Apache's mqadmin command line, its JVM prepared once per test run),
and ``VirtualLoop`` (an asyncio loop whose clock only moves when every
task is idle: it jumps straight to the next timer, so a test can assert *when* code wakes
and for how long it asked to sleep, without real waiting).

Invariants: ``VirtualLoop`` never sleeps in real time; a state where every task waits and
no timer is set raises ``VirtualDeadlock`` instead of hanging, and a callback storm that
never lets the clock move raises ``VirtualLivelock`` after ``max_iterations`` loop turns,
so a broken implementation fails the test quickly.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import random
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kairosmq.client import ConsumeContext, ConsumeStatus, MessageExt
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.properties import encode_properties
from kairosmq.server.config import BrokerConfig

from tests.wire import RawPeer

T = TypeVar("T")

# Apache RocketMQ 4.9.8 (jars, mqadmin.sh) for interop tests: $KAIROS_ROCKETMQ_HOME, else
# ``shared/apache-rocketmq`` beside the repository; tests that need it skip when absent.
ROCKETMQ_HOME = Path(
    os.environ.get("KAIROS_ROCKETMQ_HOME")
    or Path(__file__).resolve().parents[2] / "shared" / "apache-rocketmq"
)

FIXTURES = Path(__file__).parent / "fixtures" / "real-client-frames"
FAST_LEVELS = (
    "50ms 100ms 150ms 200ms 250ms 300ms 350ms 400ms 450ms 500ms 550ms 600ms "
    "650ms 700ms 750ms 800ms 850ms 900ms"
)


ROCKETMQ_JARS = sorted((ROCKETMQ_HOME / "lib").glob("*.jar"))
# for the JVMs of tests (clients, mqadmin, Apache's name server and broker): C1 only, as a
# test's JVM lives seconds and the C2 compiler's work would never pay off
SHORT_JVM = ["-XX:TieredStopAtLevel=1"]
# JAVA_OPT_EXT of start_namesrv.sh / start_broker.sh, unless the environment sets its own
APACHE_JAVA_OPT_EXT = os.environ.get("JAVA_OPT_EXT", " ".join(SHORT_JVM))
# Apache's broker launcher, and why a test that starts one cannot run here (None: it can)
START_BROKER = ROCKETMQ_HOME / "start_broker.sh"
APACHE_BROKER_MISSING = (
    f"{START_BROKER} not found"
    if not START_BROKER.exists()
    else "java is not on PATH"
    if shutil.which("java") is None
    else None
)


def _listen_port_range() -> range:
    """Ports a test may listen on: below the kernel's ephemeral range (where outgoing
    connections take their local ports, so a port probed free there can be taken before
    the process binds it), else above it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(10_000, low - 4) if low > 12_000 else range(high + 4, 65_530)


def free_port(below: int = 0, above: int = 0) -> int:
    """A free port p to listen on, with p - ``below`` .. p + ``above`` free too, outside
    the ephemeral range (see ``_listen_port_range``)."""
    ports = _listen_port_range()
    for _ in range(500):
        p = random.choice(ports)
        try:
            for port in range(p - below, p + above + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port")


def free_broker_port() -> int:
    """A port p with p-2 (an Apache broker's VIP channel), p and p+1 (HA) free."""
    return free_port(below=2, above=1)


async def start_apache_broker(
    store: Path, port: int, namesrv: str, cluster: str, name: str = "apache-a"
) -> asyncio.subprocess.Process:
    """Apache's broker (``start_broker.sh``) on ``port``, registered with ``namesrv``; its
    own process group (stop it with ``os.killpg``)."""
    env = {
        **os.environ,
        "STORE_DIR": str(store),
        "BROKER_PORT": str(port),
        "NAMESRV": namesrv,
        "BROKER_NAME": name,
        "CLUSTER": cluster,
        "JAVA_OPT_EXT": APACHE_JAVA_OPT_EXT,
    }
    return await asyncio.create_subprocess_exec(
        str(START_BROKER),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )


async def compile_java(dest: Path, name: str, source: str) -> str:
    """Write ``<name>.java`` into ``dest`` and compile it against the RocketMQ 4.9.8 jars
    (``ROCKETMQ_JARS``); return the classpath that runs it."""
    import asyncio as _asyncio

    cp = ":".join(str(j) for j in ROCKETMQ_JARS)
    (dest / f"{name}.java").write_text(source)
    proc = await _asyncio.create_subprocess_exec(
        "javac",
        "-cp",
        cp,
        "-d",
        str(dest),
        str(dest / f"{name}.java"),
        stdout=_asyncio.subprocess.PIPE,
        stderr=_asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    return f"{cp}:{dest}"


def jvm_flags() -> list[str]:
    """The JVM flags the shared RocketMQ build runs Java 17 with (``jvm_flags.sh``; none
    when a build lacks the file)."""
    path = ROCKETMQ_HOME / "jvm_flags.sh"
    if not path.exists():
        return []
    text = path.read_text()
    return text.split('RMQ_JAVA17_FLAGS="', 1)[1].split('"', 1)[0].split()


MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
_MQADMIN_EXIT = """
/** Apache RocketMQ's mqadmin, unchanged (MQAdminStartup.main with the same arguments), then
 *  exit: left alone the JVM idles 2 s in Netty's shutdown quiet period after the command. */
public class MQAdminExit {
    public static void main(String[] args) throws Exception {
        org.apache.rocketmq.tools.command.MQAdminStartup.main(args);
        System.out.flush();
        System.err.flush();
        System.exit(0);
    }
}
"""
_mqadmin_lock = threading.Lock()
_mqadmin_launch: list[list[str]] = []  # [[jvm options..., "-cp", cp, main]] once prepared


def _mqadmin_launcher() -> list[str]:
    """JVM options, classpath and main class for mqadmin (prepared once per test run):
    ``MQAdminExit`` in a jar beside the RocketMQ jars, and a class-data-sharing archive of
    the classes mqadmin loads (made by one run against a closed port). A missing javac
    leaves plain ``MQAdminStartup``; a failed archive dump leaves the archive out."""
    with _mqadmin_lock:
        if _mqadmin_launch:
            return _mqadmin_launch[0]
        cp = f"{ROCKETMQ_HOME / 'lib'}/*"
        launch = ["-cp", cp, MQADMIN_MAIN]
        work = Path(tempfile.mkdtemp(prefix="kairos-mqadmin-"))
        atexit.register(shutil.rmtree, work, True)
        src = work / "MQAdminExit.java"
        src.write_text(_MQADMIN_EXIT)
        try:
            if (
                shutil.which("javac") is not None
                and subprocess.run(
                    ["javac", "-nowarn", "-cp", cp, "-d", str(work), str(src)],
                    capture_output=True,
                    timeout=120,
                    check=False,
                ).returncode
                == 0
            ):
                with zipfile.ZipFile(work / "mqadmin-exit.jar", "w") as jar:
                    jar.write(work / "MQAdminExit.class", "MQAdminExit.class")
                launch = ["-cp", f"{cp}:{work / 'mqadmin-exit.jar'}", "MQAdminExit"]
                jsa = work / "mqadmin.jsa"
                dump = subprocess.run(
                    [
                        "java",
                        f"-XX:ArchiveClassesAtExit={jsa}",
                        *_MQADMIN_JVM,
                        *jvm_flags(),
                        f"-Duser.home={work}",
                        f"-Drocketmq.client.logRoot={work}/logs",
                        *launch,
                        "clusterList",
                        "-n",
                        "127.0.0.1:1",
                    ],
                    capture_output=True,
                    timeout=120,
                    check=False,
                    cwd=work,
                )
                if dump.returncode == 0 and jsa.exists():
                    launch = [f"-XX:SharedArchiveFile={jsa}", *launch]
        except subprocess.TimeoutExpired:
            pass  # whatever was prepared before the stuck step is used
        _mqadmin_launch.append(launch)
        return launch


# mqadmin.sh's JVM options + the Java 17 flags; C1 only (a command runs for about a second)
# and JVM warnings to stderr (stdout is the command's output)
_MQADMIN_JVM = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    *SHORT_JVM,
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
]


def mqadmin_argv(
    *args: str, user_home: Path, rocketmq_home: Path | None = None, log_root: Path | None = None
) -> list[str]:
    """The command line of Apache RocketMQ 4.9.8's ``mqadmin <args>``: what ``mqadmin.sh``
    runs (its JVM options, the RocketMQ jars, ``MQAdminStartup`` with ``args``), started
    through ``MQAdminExit`` with a shared class archive: ~1 s a command instead of ~4 s.
    ``user_home`` (``STORE_DIR`` of the script) also holds the logs unless ``log_root``;
    ``rocketmq_home`` is ``rocketmq.home.dir`` (``ROCKETMQ_HOME``). ``$KAIROS_MQADMIN`` set
    (and no ``rocketmq_home``): that script, as is. Blocks for a few seconds on the
    test run's first call."""
    script = os.environ.get("KAIROS_MQADMIN")
    if script and rocketmq_home is None:
        return [script, *args]
    return [
        "java",
        *_MQADMIN_JVM,
        *jvm_flags(),
        f"-Duser.home={user_home}",
        f"-Drocketmq.home.dir={rocketmq_home or ROCKETMQ_HOME}",
        f"-Drocketmq.client.logRoot={log_root or user_home / 'logs' / 'rocketmqlogs'}",
        *_mqadmin_launcher(),
        *args,
    ]


async def spawn_java(classpath: str, main: str, *args: str, home: Path) -> Any:
    """Start ``java <main> <args>`` with RocketMQ's flags, client logging to stderr, and
    ``home`` as ROCKETMQ_HOME and HOME (the client writes there); stdout/stderr piped."""
    import asyncio as _asyncio

    return await _asyncio.create_subprocess_exec(
        "java",
        *SHORT_JVM,
        *jvm_flags(),
        "-Drocketmq.client.logUseSlf4j=false",
        "-cp",
        classpath,
        main,
        *args,
        stdout=_asyncio.subprocess.PIPE,
        stderr=_asyncio.subprocess.PIPE,
        env={**os.environ, "ROCKETMQ_HOME": str(home), "HOME": str(home)},
    )


async def java_done(proc: Any, timeout: float) -> tuple[list[str], Any]:
    """Wait for a ``spawn_java`` process (killed after ``timeout`` s, which fails the test);
    assert it exited 0 after printing ``done``. Returns (stdout lines, diagnostics)."""
    import asyncio as _asyncio

    try:
        stdout, stderr = await _asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        raise
    lines = stdout.decode().splitlines()
    diag = (lines, stderr.decode()[-3000:])
    assert proc.returncode == 0 and "done" in lines, diag
    return lines, diag


def fast_config(data_dir: Path, **overrides: Any) -> BrokerConfig:
    opts: dict[str, Any] = {
        "data_dir": data_dir,
        "port": 0,
        "namesrv_port": 0,
        "vip_channel": False,
        "delay_levels": FAST_LEVELS,
        "commitlog_segment_size": 4 * 1024 * 1024 + 65536,
        "max_message_size": 4 * 1024 * 1024,
        "consumequeue_units_per_file": 1000,
        "checkpoint_interval": 0.5,
        "flush_interval": 0.05,
    }
    opts.update(overrides)
    return BrokerConfig(**opts)


def send_ext(
    topic: str, props: dict[str, str] | None = None, queue_id: int = 0, **extra: Any
) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "a": "PG",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": 1700000000000,
        "h": 0,
        "i": encode_properties(props or {}),
    }
    ext.update(extra)
    return ext


async def send(
    peer: RawPeer,
    topic: str,
    body: bytes = b"x",
    props: dict[str, str] | None = None,
    queue_id: int = 0,
    **extra: Any,
) -> RemotingCommand:
    return await peer.call(
        RequestCode.SEND_MESSAGE_V2, send_ext(topic, props, queue_id, **extra), body
    )


async def pull(
    peer: RawPeer,
    topic: str,
    queue_id: int = 0,
    offset: int = 0,
    *,
    group: str = "G",
    sys_flag: int = 0,
    suspend_ms: int = 1000,
    max_n: int = 32,
    subscription: str | None = None,
    timeout: float = 5.0,
) -> RemotingCommand:
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_n,
        "sysFlag": sys_flag,
        "commitOffset": 0,
        "suspendTimeoutMillis": suspend_ms,
        "subVersion": 0,
    }
    if subscription is not None:
        ext["subscription"] = subscription
    return await peer.call(RequestCode.PULL_MESSAGE, ext, timeout=timeout)


async def pull_all(peer: RawPeer, topic: str, queues: int = 4) -> list[Any]:
    """Every message stored in ``topic``'s first ``queues`` queues, pulled from offset 0
    (no long poll), as decoded records in queue order."""
    from kairosmq.protocol.codes import ResponseCode
    from kairosmq.protocol.message import decode_records

    got: list[Any] = []
    for q in range(queues):
        offset = 0
        while True:
            r = await pull(peer, topic, queue_id=q, offset=offset, max_n=256, suspend_ms=0)
            if r.code != ResponseCode.SUCCESS:
                break
            got += decode_records(r.body)
            offset = int(r.ext_fields["nextBeginOffset"])
    return got


class Collector:
    """An async listener that records messages; ``status`` decides the answer."""

    def __init__(self, status: Callable[[MessageExt], ConsumeStatus] | None = None) -> None:
        self.msgs: list[MessageExt] = []
        self.contexts: list[ConsumeContext] = []
        self._status = status
        self._changed = asyncio.Event()

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        self.msgs.extend(msgs)
        self.contexts.append(ctx)
        self._changed.set()
        if self._status is not None:
            return self._status(msgs[0])
        return ConsumeStatus.CONSUME_SUCCESS

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]

    async def wait_for(self, n: int, timeout: float = 5.0) -> None:
        await wait_until(lambda: len(self.msgs) >= n, timeout)


async def wait_until(
    pred: Callable[[], Any],
    timeout: float = 5.0,
    *,
    interval: float = 0.005,
    what: str = "condition",
) -> None:
    """Return as soon as ``pred()`` is true; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)


async def stays_false(pred: Callable[[], Any], duration: float, *, interval: float = 0.01) -> bool:
    """True if ``pred()`` stays false for ``duration`` seconds ("nothing extra arrives")."""
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    while loop.time() < end:
        if pred():
            return False
        await asyncio.sleep(interval)
    return not pred()


class VirtualDeadlock(RuntimeError):
    """Every task waits, no timer is armed and no I/O is registered: nothing can happen."""


class VirtualLivelock(RuntimeError):
    """The loop turned ``max_iterations`` times without the test finishing."""


@dataclass(frozen=True, slots=True)
class TimerRequest:
    """A timer armed on a ``VirtualLoop``: by which task, at what time, for when."""

    task: str | None
    at: float
    when: float

    @property
    def delay(self) -> float:
        return self.when - self.at


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)  # real I/O (the loop's self-pipe) never waits
        if events:
            return events
        assert self.loop is not None
        if timeout is None:
            raise VirtualDeadlock("every task waits and no timer is armed")
        if timeout > 0:
            self.loop.advance(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """A selector loop on a virtual clock (starts at 0.0 s, moves only to the next timer).

    ``timers`` records every ``call_at``/``call_later`` (so every ``asyncio.sleep``) with
    the name of the task that armed it; ``wakes`` records every instant the clock jumped to.
    """

    def __init__(self, max_iterations: int = 1_000_000) -> None:
        self._vnow = 0.0
        self.timers: list[TimerRequest] = []
        self.wakes: list[float] = []
        self.max_iterations = max_iterations
        self._turns = 0
        selector = _VirtualSelector()
        super().__init__(selector=selector)
        selector.loop = self

    def time(self) -> float:
        return self._vnow

    def advance(self, seconds: float) -> None:
        self._vnow += seconds
        self.wakes.append(self._vnow)

    def call_at(
        self, when: float, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        task = asyncio.current_task(self) if self.is_running() else None
        self.timers.append(TimerRequest(task.get_name() if task else None, self._vnow, when))
        return super().call_at(when, callback, *args, context=context)

    def _run_once(self) -> None:
        self._turns += 1
        if self._turns > self.max_iterations:
            raise VirtualLivelock(f"{self.max_iterations} loop turns at t={self._vnow:.3f}s")
        super()._run_once()  # type: ignore[misc]

    def timers_of(self, task_name: str) -> list[TimerRequest]:
        return [t for t in self.timers if t.task == task_name]


def run_virtual(
    main: Callable[[VirtualLoop], Coroutine[Any, Any, T]], max_iterations: int = 1_000_000
) -> T:
    """Run ``main(loop)`` to completion on a fresh ``VirtualLoop`` and close it."""
    loop = VirtualLoop(max_iterations)
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def assert_reput_not_early(
    broker: Any, commit_log_offset: int, topic: str, body: str, level: int, delay_ms: int
) -> None:
    """Broker side of "never early": the record at ``commit_log_offset`` (what a consumer got)
    was re-put from the schedule topic's level ``level`` no earlier than that schedule
    record's store time + ``delay_ms``, and not before its due time."""
    from kairosmq.protocol.message import decode_record
    from kairosmq.protocol.naming import SCHEDULE_TOPIC
    from kairosmq.protocol.properties import DELIVER_TIME, SCHEDULE_ORIGIN

    rec = decode_record(broker.store.read_at(commit_log_offset))
    assert rec.topic == topic and rec.body.decode() == body
    origin_level, sched_offset = map(int, rec.properties[SCHEDULE_ORIGIN].split(":"))
    assert origin_level == level
    sched_ts = broker.store.store_time_at(SCHEDULE_TOPIC, level - 1, sched_offset)
    assert sched_ts is not None
    assert rec.store_timestamp - sched_ts >= delay_ms
    assert rec.store_timestamp >= int(rec.properties[DELIVER_TIME])


@contextmanager
def small_tmpfs(parent: Path, size: str, why_skip: str = "") -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. ``"4m"``) mounted under ``parent``, so a disk really fills;
    the test is skipped where it cannot be mounted (needs root and mount)."""
    import pytest

    mnt = parent / f"fs-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot mount a small tmpfs here ({err}){why_skip}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=10)
