"""The native core's build: each ``_name.pyx`` beside ``name.py`` compiled with Cython.

``pip install .`` and ``pip install -e .`` build every twin (Cython comes from
pyproject's ``[build-system]``; an editable install builds them in place, next to their
``.pyx``, which ``protocol/native.py`` checks for staleness). Never a failed install:
with ``KAIROSMQ_NO_EXTENSIONS=1`` at build time, without Cython importable (a
``--no-build-isolation`` build in an environment lacking it), when Cython refuses a
twin or when the C compiler fails on any twin, one warning is printed, every compiled
output is dropped and the package installs as pure Python (the broker's ``broker.core``
event then says why).
The ``.py`` modules always ship and stay the reference.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# source directories holding twins -> their import packages (pyproject.toml's package-dir)
PACKAGES = {"protocol": "kairosmq.protocol", "server": "kairosmq.server"}
WARNING = "kairosmq: building the pure-Python core only"


def _warn(msg: str) -> None:
    print(f"{WARNING}: {msg}", file=sys.stderr)


def _cpus() -> int:
    """The CPUs this build may use (its affinity where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def twin_sources(root: Path = HERE) -> dict[str, str]:
    """Extension name -> its ``.pyx`` path relative to ``root``."""
    out: dict[str, str] = {}
    for src, pkg in PACKAGES.items():
        for pyx in sorted((root / src).rglob("_*.pyx")):
            rel = pyx.relative_to(root)
            out[".".join([pkg, *rel.parent.parts[1:], pyx.stem])] = rel.as_posix()
    return out


def plan(environ: dict[str, str] | os._Environ[str], argv: list[str], have_cython: bool) -> str:
    """What to build: ``"native"``, ``"metadata"`` (nothing needs compiling) or the
    reason for the pure core (printed as the one warning)."""
    if environ.get("KAIROSMQ_NO_EXTENSIONS", "").strip() not in ("", "0"):
        return "KAIROSMQ_NO_EXTENSIONS is set"
    if {"egg_info", "dist_info", "sdist"} & set(argv):
        return "metadata"
    if not have_cython:
        return "Cython is not importable (pyproject's [build-system] provides it)"
    return "native"


def native_extensions() -> list[Any]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    decision = plan(os.environ, sys.argv, cythonize is not None)
    if decision != "native":
        if decision != "metadata":
            _warn(decision)
        return []
    assert cythonize is not None
    extensions = [
        Extension(name, [src], extra_compile_args=["-O2"]) for name, src in twin_sources().items()
    ]
    try:
        return cythonize(
            extensions,
            compiler_directives={
                "language_level": 3,
                "boundscheck": False,
                "wraparound": False,
                "cdivision": True,
                "embedsignature": True,
            },
            quiet=True,
            nthreads=_cpus(),
        )
    except Exception as err:  # noqa: BLE001 - Cython refused a twin: all or nothing
        _warn(f"Cython could not translate the twins ({type(err).__name__}: {err})")
        return []


class OptionalBuildExt(build_ext):
    """All or nothing: one twin that fails to compile or link drops every compiled
    output, so the package installs as pure Python. The twins compile in parallel, one
    compiler per usable CPU (``--parallel``/``-j`` given to ``build_ext`` wins); the
    outputs are dropped only after every compiler has finished, so none is left behind."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = _cpus()

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - no compiler, compile error, link error
            self._drop(err)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # noqa: BLE001 - setuptools raises CompileError/LinkError
            raise _Dropped from err

    def build_extensions(self) -> None:
        try:
            super().build_extensions()  # the parallel build waits for all its workers
        except _Dropped as dropped:
            self._drop(dropped.__cause__ or dropped)

    def _drop(self, err: BaseException) -> None:
        for out in self.get_outputs():
            Path(out).unlink(missing_ok=True)
        if self.extensions:
            _warn(f"the C build failed ({err})")
        self.extensions = []


class _Dropped(Exception):
    pass


if __name__ == "__main__":
    setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
