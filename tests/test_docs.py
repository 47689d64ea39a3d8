"""Docs stay true to the code: every module appears in docs/ARCHITECTURE.md's layout, and
the docs cite nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "protocol",
    "client",
    "client/producer",
    "client/consumer",
    "spark",
    "server",
    "server/store",
    "server/handlers",
    "server/schedule",
    "server/schedule/delay",
    "server/schedule/timer",
    "server/schedule/pending",
    "server/namesrv",
    "server/observe",
    "server/tables",
    "server/remoting",
    "server/security",
    "server/put",
    "server/transaction",
    "server/cluster",
    "server/ha",
    "server/handlers/admin",
    "console",
)


def _layout_block() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    m = re.search(r"## Layout\n+```\n(.*?)\n```", text, re.S)
    assert m, "docs/ARCHITECTURE.md has no fenced block under '## Layout'"
    return m.group(1)


def test_every_module_is_in_the_architecture_layout() -> None:
    layout = _layout_block()
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?=\.py\b)", layout))
    named |= set(re.findall(r"\b([a-z_][a-z0-9_]*)\b", layout))  # "consume, pull, ..." lists
    missing = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            if path.stem in ("__init__", "__main__"):
                continue
            if path.stem not in named:
                missing.append(f"{pkg}/{path.name}")
    assert not missing, f"modules missing from docs/ARCHITECTURE.md's layout: {missing}"


def test_layout_names_no_module_that_does_not_exist() -> None:
    layout = _layout_block()
    existing = {p.name for pkg in (".", *PACKAGES) for p in (ROOT / pkg).glob("*.py")}
    stale = sorted(
        n for n in set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*\.py)\b", layout)) if n not in existing
    )
    assert not stale, f"docs/ARCHITECTURE.md's layout names modules that do not exist: {stale}"


def test_docs_cite_nothing_outside_the_repository() -> None:
    offenders = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if "../shared" in line or "/work/" in line:
                offenders.append(f"{path.name}:{n}: {line.strip()[:80]}")
    assert not offenders, "docs cite paths outside the repository:\n" + "\n".join(offenders)
