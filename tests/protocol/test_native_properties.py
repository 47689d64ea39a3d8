"""The native properties codec (protocol/_properties.pyx) against the reference
(properties.py): the same dict from any text, the same text from any dict or pairs."""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import properties

from tests.twins import outcome, twin

ref = properties.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
# text made mostly of the separators and a few letters, so pairs, empty names and values,
# doubled and trailing separators all come up
dense = st.text(alphabet=st.sampled_from(["\x01", "\x02", "a", "b", "é", "\U0001f600"]))
names = st.text(max_size=6) | dense
values = st.text(max_size=8) | dense | st.integers() | st.none()


@pytest.fixture(scope="module")
def nat():  # type: ignore[no-untyped-def]
    return twin("protocol.properties")


@PARITY
@given(dense | st.text(max_size=40))
@example("")
@example("\x02")
@example("a\x01b\x02")
@example("a\x01b\x01c\x02\x01x\x02y\x01\x02a\x01d")
def test_decode_any_text(nat, text: str) -> None:  # type: ignore[no-untyped-def]
    got = nat.decode_properties(text)
    assert got == ref.decode_properties(text)
    assert list(got) == list(ref.decode_properties(text))  # the same order too
    # the C entry point the send twin calls (``DECODE``): the same dict, in the same order
    via_c = _decode_c(nat)(text)
    assert via_c == got
    assert list(via_c) == list(got)


def _decode_c(nat):  # type: ignore[no-untyped-def]
    """The twin's ``DECODE`` capsule as a callable."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(nat.DECODE, b"kairosmq.protocol._properties.DECODE")
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(ptr)


@PARITY
@given(st.dictionaries(names, values, max_size=6), st.lists(st.tuples(names, values), max_size=6))
def test_encode_any_dict_and_pairs(nat, props, pairs) -> None:  # type: ignore[no-untyped-def]
    assert outcome(nat.encode_properties, props) == outcome(ref.encode_properties, props)
    assert outcome(nat.encode_property_pairs, pairs) == outcome(ref.encode_property_pairs, pairs)
    assert nat.encode_property_pairs(iter(pairs)) == ref.encode_property_pairs(iter(pairs))


def test_encode_any_mapping_and_refuse_none_alike(nat) -> None:  # type: ignore[no-untyped-def]
    from collections import OrderedDict
    from types import MappingProxyType

    for props in (OrderedDict(a="1", b=""), MappingProxyType({"x": "y", "": "z"})):
        assert nat.encode_properties(props) == ref.encode_properties(props)
    assert outcome(nat.encode_properties, None)[:2] == outcome(ref.encode_properties, None)[:2]
    assert outcome(nat.decode_properties, None) == outcome(ref.decode_properties, None)
