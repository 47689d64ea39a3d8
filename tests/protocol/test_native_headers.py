"""The native header codecs (protocol/_headers.pyx) against the reference (headers.py's
generated ``from_ext``/``to_ext``): for every header class, in both wire spellings, the
same header (or the same ``HeaderError``) from any ext fields, and the same ext fields
back from it."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import headers

from tests.twins import outcome, twin

PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow],
)
CLASSES = sorted(
    (
        c
        for c in vars(headers).values()
        if isinstance(c, type) and issubclass(c, headers.Header) and c is not headers.Header
    ),
    key=lambda c: c.__name__,
)
values = (
    st.sampled_from(["", "0", "1", "-1", "true", "TRUE", "false", " 7 ", "1_0", "x"])
    | st.sampled_from(["-", "+5", "-0", "007", "\u0661\u0662", "9" * 18, "-" + "9" * 18, "9" * 19])
    | st.sampled_from(["True", "tRuE", "truE ", "1 ", "\u0130", "TRU\u0395", "2", "yes"])
    | st.sampled_from([None, 1, 1.5, b"1"])
    | st.from_regex(r"-?[0-9]{1,21}", fullmatch=True)
    | st.text(max_size=8)
)


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("protocol.headers")


def _from_ext_c(nat):  # type: ignore[no-untyped-def]
    """The twin's ``FROM_EXT`` capsule as a callable: the C entry point the handler twins
    call instead of ``FromExt.__call__``."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(nat.FROM_EXT, b"kairosmq.protocol._headers.FROM_EXT")
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object)(ptr)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    assert a == b
    if a[0] == "ok" and dataclasses.is_dataclass(a[1]):
        for f in dataclasses.fields(a[1]):
            assert type(getattr(a[1], f.name)) is type(getattr(b[1], f.name)), f.name


def test_every_header_class_is_covered() -> None:
    assert len(CLASSES) > 30


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
@PARITY
@given(v2=st.booleans(), data=st.data())
def test_header_codecs(nat, cls, v2: bool, data) -> None:  # type: ignore[no-untyped-def]
    names = []
    for f in dataclasses.fields(cls):
        names.append(f.metadata["wire"])
        if f.metadata["v2"]:
            names.append(f.metadata["v2"])
    ext = data.draw(
        st.dictionaries(st.sampled_from(names) | st.text(max_size=4), values, max_size=12)
    )
    ref_from, ref_to = headers.reference.compile(cls, v2)
    nat_from, nat_to = nat.compile_codec(cls, v2)
    a, b = outcome(nat_from, ext), outcome(ref_from, ext)
    _same(a, b)
    assert type(nat_from) is nat.FromExt
    _same(outcome(_from_ext_c(nat), nat_from, ext), b)  # the C entry point: the same
    if a[0] == "ok":
        assert nat_to(a[1]) == ref_to(a[1])
    # every field required, present and well-formed: a header that decodes
    full = {}
    for f in dataclasses.fields(cls):
        key = f.metadata["v2"] if v2 and f.metadata["v2"] else f.metadata["wire"]
        kind = str(f.type).split("|")[0].strip()
        full[key] = {"int": "12", "bool": "true", "str": "s"}[kind]
    hdr = ref_from(full)
    _same(outcome(nat_from, full), ("ok", hdr))
    _same(outcome(_from_ext_c(nat), nat_from, full), ("ok", hdr))
    assert nat_to(hdr) == ref_to(hdr)


def test_no_ext_fields_is_an_error_not_a_crash(nat) -> None:  # type: ignore[no-untyped-def]
    from_ext, _ = nat.compile_codec(headers.SendMessageRequestHeader, False)
    with pytest.raises(TypeError):
        from_ext(None)
