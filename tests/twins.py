"""The native twins for parity tests: each imported directly (whatever
``KAIROSMQ_NO_EXTENSIONS`` says, so the pure run compares both cores too).

Not built: the test skips with the reason, unless ``KAIROSMQ_REQUIRE_NATIVE=1`` (.ci/run
sets it: there the README's install must have built every twin), which fails it.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def twin(module: str) -> ModuleType:
    """The compiled twin of ``kairosmq.<module>`` (e.g. ``protocol.codec``)."""
    pkg, _, name = f"kairosmq.{module}".rpartition(".")
    try:
        return importlib.import_module(f"{pkg}._{name}")
    except ImportError as err:
        why = f"the native twin of {module} is not built ({err}); pip install -e . builds it"
        if os.environ.get("KAIROSMQ_REQUIRE_NATIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)


def outcome(fn, *args, **kwargs) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    """What a call gives: ``("ok", value)`` or ``("raised", type, message)``."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as err:  # noqa: BLE001 - the outcome compared is the exception
        return ("raised", type(err), str(err))
