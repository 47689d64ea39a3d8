"""Which core runs: the compiled twins or the pure-Python reference.

Owns: the choice, made once per module at import, between a pure module (``name.py``,
the reference: every rule is written there first) and its native twin (``_name.pyx``
beside it, compiled with Cython by ``setup.py``), and the report of that choice (the
broker's ``broker.core`` start-up event and ``kairosmq admin status``).

Invariants:
* The pure module is always imported and always complete; it asks ``twin()`` for its
  native twin last, and rebinds its public names to the twin's only if one is given.
  A twin is a different module name (``_codec``, never ``codec``), so a compiled file
  can never shadow the ``.py`` a reader edits (aiohttp's layout).
* ``KAIROSMQ_NO_EXTENSIONS`` set to anything but empty or ``0`` forces the pure core
  (read once, at the first import of this module).
* A twin whose ``.pyx`` is newer than its compiled file (edited, not rebuilt) is stale:
  the pure module runs and the report says so. Only ``os.stat``: no file is read.
* ``TWINS`` lists every native twin the build makes; a test holds it to the ``.pyx``
  files in the tree, so the report can say "native" only when every twin loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

DISABLE_ENV = "KAIROSMQ_NO_EXTENSIONS"

# pure module -> its twin (the ``_name.pyx`` beside it)
TWINS: dict[str, str] = {
    "kairosmq.protocol.codec": "kairosmq.protocol._codec",
    "kairosmq.protocol.headers": "kairosmq.protocol._headers",
    "kairosmq.protocol.message": "kairosmq.protocol._message",
    "kairosmq.protocol.properties": "kairosmq.protocol._properties",
    "kairosmq.server.handlers.send": "kairosmq.server.handlers._send",
    "kairosmq.server.observe.logs": "kairosmq.server.observe._logs",
    "kairosmq.server.observe.logsink": "kairosmq.server.observe._logsink",
    "kairosmq.server.put.path": "kairosmq.server.put._path",
    "kairosmq.server.remoting.transport": "kairosmq.server.remoting._transport",
    "kairosmq.server.handlers.pull": "kairosmq.server.handlers._pull",
    "kairosmq.server.remoting.longpoll": "kairosmq.server.remoting._longpoll",
    "kairosmq.server.schedule.reput": "kairosmq.server.schedule._reput",
    "kairosmq.server.schedule.delay.service": "kairosmq.server.schedule.delay._service",
    "kairosmq.server.schedule.delivered": "kairosmq.server.schedule._delivered",
    "kairosmq.server.schedule.timer.service": "kairosmq.server.schedule.timer._service",
    "kairosmq.server.schedule.timer.window": "kairosmq.server.schedule.timer._window",
    "kairosmq.server.store.undo": "kairosmq.server.store._undo",
    "kairosmq.server.store.record_check": "kairosmq.server.store._record_check",
    "kairosmq.server.store.consumequeue": "kairosmq.server.store._consumequeue",
    "kairosmq.server.store.reads": "kairosmq.server.store._reads",
    "kairosmq.server.store.index": "kairosmq.server.store._index",
    "kairosmq.server.store.message_store": "kairosmq.server.store._message_store",
    "kairosmq.server.ha.master": "kairosmq.server.ha._master",
}


# the header-only declarations every twin may cimport (compiled into each): an edit to
# one makes every twin stale until the next build
SHARED_PXD: tuple[str, ...] = tuple(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    for name in ("_slots.pxd", "_digits.pxd", "_capsules.pxd")
)


def disabled_by_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``KAIROSMQ_NO_EXTENSIONS`` asks for the pure core (``setup.py`` reads it too)."""
    return environ.get(DISABLE_ENV, "").strip() not in ("", "0")


DISABLED = disabled_by_env()

# pure module name -> "native" or why not ("disabled", "not built: ...", "stale: ...")
_CHOSEN: dict[str, str] = {}


def stale(compiled: str | None, source: str) -> bool:
    """Whether ``source`` (a ``.pyx``) changed after ``compiled`` was built from it. A
    source not present (an installed wheel ships only the compiled file) is not stale."""
    if compiled is None:
        return False
    try:
        src = os.stat(source).st_mtime_ns
    except OSError:
        return False
    try:
        return src > os.stat(compiled).st_mtime_ns
    except OSError:
        return False


def twin(pure: str, load: Callable[[], ModuleType]) -> ModuleType | None:
    """The native twin of the pure module named ``pure`` (``load`` imports it), or None:
    disabled by the environment, not built, or stale. The choice is recorded."""
    if DISABLED:
        _CHOSEN[pure] = f"disabled ({DISABLE_ENV}=1)"
        return None
    try:
        mod = load()
    except ImportError as err:
        _CHOSEN[pure] = f"not built ({err})"
        return None
    compiled = getattr(mod, "__file__", None)
    source = os.path.join(os.path.dirname(compiled or ""), mod.__name__.rsplit(".", 1)[1] + ".pyx")
    for src in (source, *SHARED_PXD):
        if stale(compiled, src):
            _CHOSEN[pure] = f"stale ({os.path.basename(src)} is newer than its build)"
            return None
    _CHOSEN[pure] = "native"
    return mod


def chosen() -> dict[str, str]:
    """Each pure module imported so far -> "native" or why its pure core runs."""
    return dict(_CHOSEN)


def core() -> str:
    """``native`` (every twin loaded), ``pure`` (none) or ``mixed``, for the twins of the
    modules imported so far (the broker has imported all of them when it reports)."""
    states = [_CHOSEN[m] == "native" for m in TWINS if m in _CHOSEN]
    if states and all(states):
        return "native"
    return "mixed" if any(states) else "pure"


def reason() -> str:
    """Why the core is not native: each pure module's reason, ``""`` when native."""
    return "; ".join(
        f"{m.rsplit('.', 1)[1]}: {why}" for m, why in sorted(_CHOSEN.items()) if why != "native"
    )


def describe() -> str:
    """One line for ``kairosmq admin status``: ``native`` or ``pure (why)``."""
    why = reason()
    return core() + (f" ({why})" if why else "")
