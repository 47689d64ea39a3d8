"""Each module of protocol/ and server/ that imports ``typing.Any`` says why, in a
``# Any: <reason>`` comment on that import (or on the line just above it).

``Any`` switches mypy off for a value; the reason (decoded JSON, structlog's dynamic
logger, an untyped library's object, ...) tells a reader what the value really is and
tells a reviewer whether a real type would do. Run by scripts/check; exits 1 and lists
the modules that give no reason.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("protocol", "server")
MARK = "# Any:"


def missing_reasons(path: Path) -> list[int]:
    """Line numbers of ``Any`` imports in ``path`` with no ``# Any:`` reason."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text, str(path))):
        imports_any = (
            isinstance(node, ast.ImportFrom)
            and node.module == "typing"
            and any(alias.name == "Any" for alias in node.names)
        )
        if imports_any:
            first, last = node.lineno - 1, node.end_lineno or node.lineno
            around = lines[max(first - 1, 0) : last]  # the line above, then the import
            if not any(MARK in line and line.split(MARK, 1)[1].strip() for line in around):
                out.append(node.lineno)
    return out


def main() -> int:
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for top in CHECKED
        for path in sorted((ROOT / top).rglob("*.py"))
        for line in missing_reasons(path)
    ]
    for where in bad:
        print(f"{where}: imports typing.Any with no '{MARK} <reason>' comment beside it")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
