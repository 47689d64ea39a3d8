"""What ``kairosmq report`` checks before it touches Spark, and Spark's console logging setup.

Owns: ``problem()`` (None, or one sentence saying what is missing - PySpark or Java 17+ - and
the exact command that installs it), ``quiet_log4j_options()`` (the driver JVM options that
keep Spark's INFO/WARN lines off the console), ``class_archive()`` / ``keep_archive()`` (the
JVM's class-data-sharing archive of Spark's classes) and the install hints.

Invariants:
* Imports nothing from PySpark at module level: this module must work where PySpark is absent.
* ``problem()`` finds Java the way Spark's launcher does: ``$JAVA_HOME/bin/java`` when
  JAVA_HOME is set, else ``java`` on PATH; it runs ``java -version`` once (about 0.1 s).
* The quiet log4j2 configuration is written once per process to a private temp file; errors
  (a failed job's cause) still reach stderr, as do Spark's own lines with ``--verbose``.
* The class archive (a JDK dynamic CDS archive, about 150 MB) lives under
  ``$XDG_CACHE_HOME/kairosmq`` (``~/.cache/kairosmq``), named by a digest of the ``java``
  binary, its ``-version`` text, the pyspark version and its jar names, so a different JVM
  or Spark never maps it. The first run dumps it to a temporary name at JVM exit;
  ``keep_archive`` renames it only after that JVM exited with 0, so a half-written archive
  is never used. ``KAIROSMQ_SPARK_CDS=off`` turns it off. The JVM's CDS log lines are off.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL_SPARK = "pip install 'kairosmq[spark]'"
INSTALL_JAVA = (
    "install Java 17 or newer (Debian/Ubuntu: apt-get install -y "
    "openjdk-17-jre-headless) and put `java` on PATH or set JAVA_HOME"
)
MIN_JAVA = 17

QUIET_LOG4J2 = """\
# kairosmq report: Spark's console logging without INFO/WARN noise (--verbose restores it)
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# the loggers Spark's shell start-up compares with the root (no "Setting default log level")
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def java_binary() -> str | None:
    """The ``java`` Spark's launcher would run, or None."""
    home = os.environ.get("JAVA_HOME")
    if home:
        exe = Path(home) / "bin" / "java"
        return str(exe) if exe.exists() else None
    return shutil.which("java")


def java_major(java: str) -> int | None:
    """Major version of ``java`` (8 for ``1.8.0_x``, 17 for ``17.0.15``); None if unknown."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def problem(*, need_java: bool = True) -> str | None:
    """None when PySpark imports and a Java 17+ runs; else what is missing and how to fix it."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        return (
            f"the report needs PySpark, which is not installed ({exc}).\n"
            f"  install it with:  {INSTALL_SPARK}\n"
            f"  Spark also needs Java {MIN_JAVA}+: {INSTALL_JAVA}"
        )
    if not need_java:
        return None
    java = java_binary()
    where = f"JAVA_HOME={os.environ['JAVA_HOME']}" if os.environ.get("JAVA_HOME") else "PATH"
    if java is None:
        return f"Spark needs Java {MIN_JAVA}+ and found no `java` ({where}).\n  {INSTALL_JAVA}"
    major = java_major(java)
    if major is None:
        return f"{java} -version did not run or said no version.\n  {INSTALL_JAVA}"
    if major < MIN_JAVA:
        return f"Spark needs Java {MIN_JAVA}+, {java} is Java {major}.\n  {INSTALL_JAVA}"
    return None


_CONFIG: list[str] = []


def quiet_log4j_options() -> str:
    """``-Dlog4j2.configurationFile=...`` for ``spark.driver.extraJavaOptions`` (ERROR only)."""
    if not _CONFIG:
        fd, name = tempfile.mkstemp(prefix="kairosmq-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(QUIET_LOG4J2)
        atexit.register(lambda: Path(name).unlink(missing_ok=True))
        _CONFIG.append(name)
    return f"-Dlog4j2.configurationFile=file:{_CONFIG[0]}"


CDS_ENV = "KAIROSMQ_SPARK_CDS"
CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@functools.lru_cache(maxsize=4)
def _version_text(java: str) -> str:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stderr + out.stdout


def class_archive() -> tuple[str, Path | None]:
    """JVM options that map Spark's classes from the class archive, and the path a first run
    dumps to (``keep_archive`` promotes it), or ``("", None)`` when off or impossible.

    Measured: it halves the CPU of starting Spark and running its first job (docs/spark.md).
    """
    if os.environ.get(CDS_ENV, "on").lower() in ("0", "off", "no", "false"):
        return "", None
    java = java_binary()
    if java is None or (java_major(java) or 0) < MIN_JAVA:
        return "", None
    try:
        import pyspark

        jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
        ident = "\n".join([os.path.realpath(java), _version_text(java), pyspark.__version__, *jars])
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kairosmq"
        cache.mkdir(parents=True, exist_ok=True)
    except (ImportError, OSError):
        return "", None
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    final = cache / f"spark-{pyspark.__version__}-{digest}.jsa"
    if final.is_file():
        return f"-XX:SharedArchiveFile={final} {CDS_QUIET}", None
    pending = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    return f"-XX:ArchiveClassesAtExit={pending} {CDS_QUIET}", pending


def keep_archive(
    pending: Path | None, proc: subprocess.Popen[bytes] | None = None, timeout: float = 120.0
) -> None:
    """After the session stopped: end the driver JVM this process started (``proc``, its
    stdin closed: Spark's gateway exits; None: the JVM has already exited with 0) and, once
    it exited with 0, rename the archive it dumped at exit to its final name; otherwise drop
    the partial file."""
    if pending is None:
        return
    try:
        ok = True
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            ok = proc.wait(timeout=timeout) == 0
        if ok and pending.is_file():
            pending.replace(pending.with_name(pending.name.rsplit(".", 2)[0]))
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        pending.unlink(missing_ok=True)
