"""protocol/ is sans-IO: no networking, event-loop or file-system module is imported and
builtin ``open()`` is never called (style anchors (b), asyncpg's test__sourcecode idea)."""

from __future__ import annotations

import ast
from pathlib import Path

import kairosmq.protocol
import pytest

PROTOCOL_DIR = Path(kairosmq.protocol.__file__).parent
FORBIDDEN = {"asyncio", "socket", "selectors", "ssl", "io", "pathlib", "shutil", "tempfile", "mmap"}
MODULES = sorted(PROTOCOL_DIR.glob("*.py"))


def _violations(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FORBIDDEN:
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("open", "__import__"):
                found.append(f"{f.id}() at line {node.lineno}")
            elif (
                isinstance(f, ast.Attribute)
                and f.attr == "open"
                and isinstance(f.value, ast.Name)
                and f.value.id in ("builtins", "os", "io")
            ):
                found.append(f"{f.value.id}.open() at line {node.lineno}")
            elif isinstance(f, ast.Attribute) and f.attr == "import_module":
                found.append(f"import_module() at line {node.lineno}")
    return found


def test_protocol_modules_found() -> None:
    names = {p.name for p in MODULES}
    assert {"codec.py", "schema.py", "message.py", "headers.py", "ids.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_module_is_sans_io(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    assert _violations(tree) == []


@pytest.mark.parametrize(
    "src",
    [
        "import asyncio",
        "import socket as s",
        "from io import BytesIO",
        "import os.path, pathlib",
        "from tempfile import mkstemp",
        "import mmap",
        "def f():\n    import ssl",
        "data = open('x').read()",
        "from selectors import DefaultSelector",
        "import shutil",
        "import builtins\nbuiltins.open('x')",
    ],
)
def test_checker_catches_violations(src: str) -> None:
    assert _violations(ast.parse(src))


def test_checker_allows_pure_code() -> None:
    src = "import struct\nimport zlib\nfrom .codes import X\nx = struct.pack('>i', 1)\n"
    assert _violations(ast.parse(src)) == []
