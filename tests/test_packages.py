"""Package dependencies stay one-way: ``spark/`` and ``client/`` never import ``server/``.

``server/cli.py`` runs the Spark job (``kairosmq report``), so a ``spark -> server`` import
would be a package cycle; the log catalogue both read lives in sans-IO ``protocol/events.py``.
``client/`` talks to a broker over the wire only. The check walks every import statement's
AST (absolute, relative, and ``importlib.import_module("...")`` string literals).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package folder -> its dotted name (pyproject's package-dir mapping)
PACKAGES = {
    "spark": "kairosmq.spark",
    "client": "kairosmq.client",
    "client/producer": "kairosmq.client.producer",
    "client/consumer": "kairosmq.client.consumer",
    "console": "kairosmq.console",
}
FORBIDDEN = "kairosmq.server"


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree`` (a module of ``package``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def _server_imports(source: str, package: str) -> list[str]:
    return [
        f"line {line}: {mod}"
        for line, mod in _imported(ast.parse(source), package)
        if mod == FORBIDDEN or mod.startswith(FORBIDDEN + ".")
    ]


MODULES = [(folder, path) for folder in PACKAGES for path in sorted((ROOT / folder).glob("*.py"))]


def test_modules_found() -> None:
    names = {f"{folder}/{p.name}" for folder, p in MODULES}
    assert {"spark/job.py", "spark/schema.py", "client/producer/producer.py"} <= names


@pytest.mark.parametrize(
    ("folder", "path"), MODULES, ids=[f"{folder}/{p.name}" for folder, p in MODULES]
)
def test_module_does_not_import_server(folder: str, path: Path) -> None:
    assert _server_imports(path.read_text(), PACKAGES[folder]) == []


@pytest.mark.parametrize(
    "src",
    [
        "import kairosmq.server.logs",
        "from kairosmq.server.logs import CATALOGUE",
        "from kairosmq.server import logs",
        "from kairosmq import server",
        "from ..server import broker",
        "def f():\n    import kairosmq.server as s",
        "importlib.import_module('kairosmq.server.logs')",
    ],
)
def test_checker_catches_server_imports(src: str) -> None:
    assert _server_imports(src, "kairosmq.spark") != []


@pytest.mark.parametrize(
    "src",
    [
        "from kairosmq.protocol.events import CATALOGUE",
        "from . import schema",
        "from .schema import CORRUPT",
        "import kairosmq.spark.transforms",
        "from kairosmq.serverless import x",
    ],
)
def test_checker_allows_other_imports(src: str) -> None:
    assert _server_imports(src, "kairosmq.spark") == []


@pytest.mark.parametrize(
    ("path", "package"),
    [
        ("server/observe/metrics.py", "kairosmq.server.observe"),
        ("server/security/install.py", "kairosmq.server.security"),
    ],
)
def test_narrow_views_do_not_import_the_broker(path: str, package: str) -> None:
    """The metrics endpoint and the security installer get what they read (MetricsSources;
    config, server, supervisor, store lookups), never the ``Broker`` (not even for types)."""
    found = [mod for _line, mod in _imported(ast.parse((ROOT / path).read_text()), package)]
    assert not [
        m for m in found if m == "kairosmq.server.broker" or m.startswith("kairosmq.server.broker.")
    ], found


def test_every_package_is_in_pyproject() -> None:
    """A package folder missing from pyproject's ``packages``/``package-dir`` works in the
    editable install but is left out of a wheel (the Docker image)."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    mapped = {name: path for name, path in tool["package-dir"].items()}
    for top in ("protocol", "server", "client", "spark"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT).as_posix()
            name = "kairosmq." + folder.replace("/", ".")
            assert name in listed, f"{folder}/ is not in pyproject's packages"
            assert mapped.get(name) == folder, f"{folder}/ is not in pyproject's package-dir"
