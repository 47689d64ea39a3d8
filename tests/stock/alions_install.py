"""Install the stock npm client ali-ons for tests, reproducibly: ``await ensure_alions()``.

Owns: ``tests/stock/alions/node_modules`` (git-ignored). It is created only by ``npm ci``
from the committed ``alions/package-lock.json`` (exact versions and integrity hashes),
through an npm cache under ``~/.cache/kairosmq/npm`` (``$XDG_CACHE_HOME`` if set) that CI
can keep between runs; with that cache warm, no network is needed.

Invariants: after ``ensure_alions()`` returns, ``node_modules`` is the lockfile's tree:
a stamp file written after a successful ``npm ci`` holds the lockfile's SHA-256, and any
other lockfile (or a missing stamp, or a different ali-ons version) means a new ``npm ci``.
The caller is skipped (``pytest.skip``, the reason naming what is missing) only when
``node``/``npm`` are not on PATH or the registry cannot be reached with a cold cache; any
other install failure (say, a lockfile that no longer matches package.json) fails it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

ALIONS_DIR = Path(__file__).parent / "alions"
NODE_MODULES = ALIONS_DIR / "node_modules"
ALIONS_VERSION = "3.12.0"
NPM_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kairosmq" / "npm"
_STAMP = NODE_MODULES / ".kairosmq-lock-sha256"
# `npm error code <X>` values that mean "the registry cannot be reached", not a broken install.
NETWORK_ERRORS = frozenset(
    {
        "ENOTFOUND",
        "EAI_AGAIN",
        "ECONNREFUSED",
        "ECONNRESET",
        "ETIMEDOUT",
        "ENETUNREACH",
        "EHOSTUNREACH",
        "ENETDOWN",
        "ERR_SOCKET_TIMEOUT",
    }
)
NPM_CI_TIMEOUT = 240.0


def node() -> str:
    """The ``node`` executable, or skip the caller saying it is missing."""
    path = shutil.which("node")
    if path is None:
        pytest.skip("stock ali-ons client not run: `node` is not on PATH (install Node.js >= 16)")
    return path


def installed_version() -> str | None:
    try:
        return str(json.loads((NODE_MODULES / "ali-ons" / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _lock_digest() -> str:
    return hashlib.sha256((ALIONS_DIR / "package-lock.json").read_bytes()).hexdigest()


def _up_to_date(digest: str) -> bool:
    try:
        stamp = _STAMP.read_text().strip()
    except OSError:
        return False
    return stamp == digest and installed_version() == ALIONS_VERSION


async def ensure_alions() -> Path:
    """``node_modules`` holding the locked ali-ons tree (``npm ci`` if it is not there yet)."""
    node()
    digest = _lock_digest()
    if _up_to_date(digest):
        return NODE_MODULES
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("stock ali-ons client not run: `node` is installed but `npm` is not on PATH")
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        npm,
        "ci",
        "--cache",
        str(NPM_CACHE),
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--fetch-retries",
        "1",
        cwd=ALIONS_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out_b, _ = await asyncio.wait_for(proc.communicate(), NPM_CI_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.skip(
            f"stock ali-ons client not run: `npm ci` did not finish within "
            f"{NPM_CI_TIMEOUT:.0f} s (npm registry unreachable or too slow)"
        )
    out = out_b.decode(errors="replace")
    if proc.returncode != 0:
        m = re.search(r"npm (?:error|ERR!) code (\S+)", out)
        if m and m.group(1) in NETWORK_ERRORS:
            pytest.skip(
                f"stock ali-ons client not run: `npm ci` could not reach the npm registry "
                f"({m.group(1)}) and {NPM_CACHE} does not hold the locked packages"
            )
        pytest.fail(f"npm ci (tests/stock/alions/package-lock.json) failed:\n{out[-4000:]}")
    version = installed_version()
    assert version == ALIONS_VERSION, f"npm ci installed ali-ons {version}, not {ALIONS_VERSION}"
    _STAMP.write_text(digest + "\n")
    return NODE_MODULES
