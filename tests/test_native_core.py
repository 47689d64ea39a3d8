"""The native core's build and choice (setup.py, protocol/native.py).

Always: the twins in the tree are the ones ``native.TWINS`` reports, each ``_name.pyx``
sits beside its reference ``name.py``, and no compiled file in the tree can shadow a
``.py``; setup.py's build decision; the runtime choice (``KAIROSMQ_NO_EXTENSIONS``,
not built, stale). Real builds (slow): a wheel built with a failing C compiler and one
built without Cython both install as pure Python with one warning; the README's
editable install has built every twin in place (``KAIROSMQ_REQUIRE_NATIVE=1``, as
.ci/run sets it, turns a missing twin into a failure instead of a skip).
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
from kairosmq.protocol import native

from tests.twins import twin

ROOT = Path(__file__).resolve().parents[1]
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="kairosmq_setup")  # no setup() call


def test_the_twins_in_the_tree_are_the_ones_reported() -> None:
    found = SETUP["twin_sources"](ROOT)
    assert set(found) == set(native.TWINS.values())
    for pure, compiled in native.TWINS.items():
        assert compiled.rsplit(".", 1)[0] == pure.rsplit(".", 1)[0]  # same package
        pyx = ROOT / found[compiled]
        assert pyx.name == "_" + pure.rsplit(".", 1)[1] + ".pyx"
        assert pyx.with_name(pyx.name[1:-4] + ".py").is_file(), f"{pyx} has no reference"


def test_no_compiled_file_shadows_a_python_module() -> None:
    for d in ("protocol", "server", "client", "spark"):
        for so in (ROOT / d).rglob("*.so"):
            stem = so.name.split(".", 1)[0]
            assert stem.startswith("_") and so.with_name(stem + ".pyx").is_file(), (
                f"{so} is not a twin of a .pyx: it could shadow a .py"
            )


@pytest.mark.parametrize(
    ("env", "argv", "have_cython", "expected"),
    [
        ({}, ["bdist_wheel"], True, "native"),
        ({}, ["editable_wheel"], True, "native"),
        ({"KAIROSMQ_NO_EXTENSIONS": "0"}, ["build_ext"], True, "native"),
        ({"KAIROSMQ_NO_EXTENSIONS": "1"}, ["bdist_wheel"], True, "KAIROSMQ_NO_EXTENSIONS"),
        ({}, ["bdist_wheel"], False, "Cython is not importable"),
        ({}, ["egg_info"], False, "metadata"),
        ({}, ["dist_info"], True, "metadata"),
    ],
)
def test_build_decision(env, argv, have_cython, expected) -> None:  # type: ignore[no-untyped-def]
    assert SETUP["plan"](env, argv, have_cython).startswith(expected)


def test_disabled_by_env() -> None:
    assert not native.disabled_by_env({})
    assert not native.disabled_by_env({"KAIROSMQ_NO_EXTENSIONS": "0"})
    assert not native.disabled_by_env({"KAIROSMQ_NO_EXTENSIONS": ""})
    assert native.disabled_by_env({"KAIROSMQ_NO_EXTENSIONS": "1"})
    assert native.disabled_by_env({"KAIROSMQ_NO_EXTENSIONS": "yes"})


def test_stale_twin_is_not_chosen(tmp_path: Path) -> None:
    so, pyx = tmp_path / "_x.cpython-311-x86_64-linux-gnu.so", tmp_path / "_x.pyx"
    so.write_bytes(b"")
    pyx.write_text("")
    os.utime(so, ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    os.utime(pyx, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    assert not native.stale(str(so), str(pyx))
    os.utime(pyx, ns=(3_000_000_000_000_000_000, 3_000_000_000_000_000_000))
    assert native.stale(str(so), str(pyx))
    assert not native.stale(str(so), str(tmp_path / "absent.pyx"))  # a wheel ships no .pyx


def test_a_shared_pxd_newer_than_the_build_makes_the_twin_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every twin compiles protocol/'s header-only .pxd files into itself, so an edit to
    one of them runs the pure core until the next build, as an edit to the twin's .pyx."""
    here = Path(native.__file__).parent
    assert {Path(p).name for p in native.SHARED_PXD} == {p.name for p in here.glob("*.pxd")}
    monkeypatch.setattr(native, "DISABLED", False)  # (this may be the pure run)
    so, pxd = tmp_path / "_x.cpython-311-x86_64-linux-gnu.so", tmp_path / "_shared.pxd"
    so.write_bytes(b"")
    pxd.write_text("")
    os.utime(so, ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    os.utime(pxd, ns=(3_000_000_000_000_000_000, 3_000_000_000_000_000_000))
    monkeypatch.setattr(native, "SHARED_PXD", (str(pxd),))
    mod = types.ModuleType("kairosmq.protocol._x")
    mod.__file__ = str(so)
    try:
        assert native.twin("kairosmq.protocol.x", lambda: mod) is None
        assert (
            native.chosen()["kairosmq.protocol.x"] == "stale (_shared.pxd is newer than its build)"
        )
        os.utime(pxd, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
        assert native.twin("kairosmq.protocol.x", lambda: mod) is mod
    finally:
        native._CHOSEN.pop("kairosmq.protocol.x", None)


def test_not_built_twin_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "DISABLED", False)  # (this may be the pure run)

    def missing():  # type: ignore[no-untyped-def]
        raise ImportError("No module named 'kairosmq.protocol._nothing'")

    try:
        assert native.twin("kairosmq.protocol.nothing", missing) is None
        assert native.chosen()["kairosmq.protocol.nothing"].startswith("not built")
        assert "nothing: not built" in native.reason()
    finally:
        native._CHOSEN.pop("kairosmq.protocol.nothing", None)


def _probe(env: dict[str, str]) -> str:
    code = (
        "import kairosmq.server.broker\n"  # imports every module that has a twin
        "from kairosmq.protocol import codec, message, native\n"
        "print(native.describe())\n"
        "print(codec.decode_payload is codec.reference.decode_payload)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return r.stdout


def test_no_extensions_forces_the_pure_core() -> None:
    out = _probe({"KAIROSMQ_NO_EXTENSIONS": "1"}).splitlines()
    assert out[0].startswith("pure (codec: disabled (KAIROSMQ_NO_EXTENSIONS=1)")
    assert out[1] == "True"


def test_built_twins_are_chosen() -> None:
    if native.DISABLED:
        pytest.skip("KAIROSMQ_NO_EXTENSIONS is set in this run")
    for compiled in native.TWINS.values():
        twin(compiled.removeprefix("kairosmq.").replace("._", "."))
    out = _probe({"KAIROSMQ_NO_EXTENSIONS": ""}).splitlines()
    assert out == ["native", "False"]


def _build_wheel(
    python: str, out: Path, env: dict[str, str], *flags: str, root: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "pip", "wheel", "-v", "--no-deps", *flags, "-w", str(out), str(root)],
        env={**os.environ, "KAIROSMQ_NO_EXTENSIONS": "", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _copy_tree(dest: Path) -> Path:
    """The checkout's files (tracked and new, not ignored: no build output) under ``dest``."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("case", ["no C compiler", "no Cython", "a twin Cython refuses"])
def test_a_failed_native_build_installs_pure_python(tmp_path: Path, case: str) -> None:
    if case == "no C compiler":  # the isolated build of pyproject's [build-system]
        r = _build_wheel(sys.executable, tmp_path / "wheel", {"CC": str(tmp_path / "no-cc")})
    elif case == "a twin Cython refuses":
        tree = _copy_tree(tmp_path / "tree")
        with (tree / "protocol" / "_codec.pyx").open("a") as f:
            f.write("\ncdef int broken = undefined_name_here(\n")
        r = _build_wheel(sys.executable, tmp_path / "wheel", {}, root=tree)
    else:  # a build environment without Cython (pip install --no-build-isolation)
        subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
        python = str(tmp_path / "venv" / "bin" / "python")
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "setuptools>=68", "wheel"],
            check=True,
            timeout=300,
        )
        r = _build_wheel(python, tmp_path / "wheel", {}, "--no-build-isolation")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    log = r.stdout + r.stderr
    assert log.count(SETUP["WARNING"]) == 1, log[-3000:]
    wheel = next((tmp_path / "wheel").glob("kairosmq-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "kairosmq/protocol/codec.py" in names
    assert not [n for n in names if n.endswith((".so", ".c", ".pyx"))]


async def test_the_broker_says_which_core_runs(broker_factory) -> None:  # type: ignore[no-untyped-def]
    import structlog

    with structlog.testing.capture_logs() as logs:
        broker = await broker_factory()
    (event,) = [e for e in logs if e["event"] == "broker.core"]
    assert event["core"] == native.core() and event["reason"] == native.reason()
    chosen = native.core() == "native" or native.DISABLED
    assert event["log_level"] == ("info" if chosen else "warning")
    assert broker.status()["core"] == native.describe()
    assert broker.status()["core"].startswith("pure (" if native.DISABLED else "native")
