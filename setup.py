"""Optional native build: the broker's hot modules compiled with mypyc (docs/performance.md).

Off unless ``KAIROSMQ_NATIVE=1`` is set at build time, so ``pip install -e .`` and
``pip install .`` stay pure Python and need no C compiler. With it (and mypy importable,
e.g. ``pip install mypy && KAIROSMQ_NATIVE=1 pip install --no-build-isolation .``), the
modules in ``HOT`` are compiled; if mypy, the compiler or any module's build fails, every
native output is dropped and the package installs as pure Python (a warning says why).
The ``.py`` files always ship: an interpreter the ``.so`` files were not built for (another
Python version) imports them instead. Never built in place: a ``.so`` next to its source
would shadow later edits of it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# package dir -> import name (pyproject.toml's package-dir)
PACKAGES = {"protocol": "kairosmq/protocol", "server": "kairosmq/server"}
HOT = [
    "protocol/codec.py",
    "protocol/message.py",
    "protocol/properties.py",
    "protocol/events.py",
    "protocol/commands.py",
    "protocol/timer.py",
    "protocol/ids.py",
    "protocol/naming.py",
    "server/store/message_store.py",
    "server/store/commitlog.py",
    "server/store/index.py",
    "server/store/consumequeue.py",
    "server/store/reads.py",
    "server/store/guard.py",
    "server/store/mapped.py",
    "server/clock.py",
    "server/put/path.py",
    "server/put/requeue.py",
    "server/schedule/delay/service.py",
    "server/schedule/delay/levels.py",
    "server/schedule/reput.py",
    "server/schedule/delivered.py",
    "server/schedule/recalls.py",
    "server/remoting/transport.py",
    "server/remoting/ingress.py",
    "server/remoting/longpoll.py",
    "server/observe/logs.py",
    "server/observe/logsink.py",
    "server/handlers/send.py",
    "server/handlers/pull.py",
    "server/schedule/timer/service.py",
    "server/schedule/timer/admission.py",
]


def _warn(msg: str) -> None:
    print(f"kairosmq: {msg}; installing the pure-Python modules", file=sys.stderr)


def native_extensions() -> list:  # type: ignore[type-arg]
    if os.environ.get("KAIROSMQ_NATIVE") != "1":
        return []
    if {"egg_info", "dist_info", "sdist"} & set(sys.argv):  # metadata only: nothing to build
        return []
    if {"editable_wheel", "develop", "--inplace"} & set(sys.argv):
        _warn("no native build for an editable install (a .so would shadow its .py)")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("KAIROSMQ_NATIVE=1 but mypy is not importable (use --no-build-isolation)")
        return []
    # mypyc names modules after their paths: stage protocol/ and server/ as kairosmq/...
    stage = HERE / "build" / "native-src"
    shutil.rmtree(stage, ignore_errors=True)
    for src, dst in PACKAGES.items():
        shutil.copytree(
            HERE / src, stage / dst, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    (stage / "mypy.ini").write_text(
        f"[mypy]\nmypy_path = {stage}\nexplicit_package_bases = True\n"
        "ignore_missing_imports = True\nfollow_imports = silent\n"
    )
    try:
        return mypycify(
            ["--config-file", str(stage / "mypy.ini")] + [str(stage / "kairosmq" / p) for p in HOT],
            opt_level="3",
            group_name="kairosmq_native",
            target_dir=str(stage / "c"),
        )
    except BaseException as err:  # noqa: BLE001 - mypyc exits (SystemExit) on type errors
        _warn(f"mypyc refused the modules ({err!r})")
        return []


class OptionalBuildExt(build_ext):
    """All or nothing: one failed extension (the group's shared library above all, which
    every module's shim imports) drops every native output."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - no compiler, compile error, link error
            for out in self.get_outputs():
                Path(out).unlink(missing_ok=True)
            self.extensions = []
            _warn(f"the native build failed ({err})")


setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
