"""Java value rules and evaluator closures of the SQL92 selector (see ``sql92``).

Owns: the Java types a selector computes with (String, Boolean, Integer = ``int``,
Long = ``JLong``, Double = ``float``, null = ``None``), the conversions and comparisons
of RocketMQ 4.9.8's ``ComparisonExpression.__compare`` (string conversion on), Java's
``Double.compareTo`` order, and the closures each node of a parsed selector compiles to.

Invariant: an evaluator returns ``True``/``False``/``None`` (or a value for a non-boolean
node) or raises ``EvalError`` exactly where the Java expression would throw; callers
treat ``EvalError`` as "the message does not match".
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any  # Any: SQL92 values are Java Objects: bool, int, JLong, float, str or None

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


# ------------------------------------------------------------------ values


class JLong(int):
    """A Java Long literal (an int literal wider than 32 bits, or with an L suffix)."""

    __slots__ = ()


class EvalError(Exception):
    """What Java raises while evaluating (NumberFormatException, ClassCastException)."""


# ------------------------------------------------------------------ Java conversions

_JINT = re.compile(r"[+-]?\d+\Z")
_JDBL = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)\Z", re.ASCII)
_JHEX = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
    r"[pP][+-]?\d+[fFdD]?\Z",
    re.ASCII,
)
_D2Q = struct.Struct(">d")
_Q = struct.Struct(">q")


def to_int(s: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    if _JINT.match(s):
        v = int(s)
        if lo <= v <= hi:
            return v
    raise EvalError(f"NumberFormatException: {s!r}")


def to_long(s: str) -> int:
    return JLong(to_int(s, LONG_MIN, LONG_MAX))


def to_double(s: str) -> float:
    t = s.strip("".join(chr(c) for c in range(33)))  # Java String.trim
    if _JDBL.match(t):
        return float(t[:-1] if t[-1] in "fFdD" else t)
    if _JHEX.match(t):
        return float.fromhex(t[:-1] if t[-1] in "fFdD" else t)
    raise EvalError(f"NumberFormatException: {s!r}")


def _bits(x: float) -> int:
    return 0x7FF8000000000000 if x != x else _Q.unpack(_D2Q.pack(x))[0]


def dcmp(x: float, y: float) -> int:
    """Java ``Double.compareTo``: NaN equals NaN and is above +Infinity; -0.0 < 0.0."""
    if x < y:
        return -1
    if x > y:
        return 1
    bx, by = _bits(x), _bits(y)
    return (bx > by) - (bx < by)


def compare(lv: Any, rv: Any) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (4.9.8's parse)."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:  # Boolean.valueOf((String) lv): a ClassCastException in Java
                raise EvalError("ClassCastException: Boolean vs String")
            return -1
        if lc is int or lc is JLong:
            if rc is float:
                lv = float(lv)
            elif rc is str:
                rv = to_int(rv) if lc is int else to_long(rv)
            elif rc is not int and rc is not JLong:
                return -1
        elif lc is float:
            if rc is int or rc is JLong:
                rv = float(rv)
            elif rc is str:
                rv = to_double(rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"
            elif rc is int:
                lv = to_int(lv)
            elif rc is JLong:
                lv = to_long(lv)
            elif rc is float:
                lv = to_double(lv)
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return dcmp(lv, rv)
    order: int = (lv > rv) - (lv < rv)  # same-typed values: bool - bool
    return order


def negate(v: Any) -> Any:
    t = type(v)
    if t is int or t is float:
        return -v
    if t is JLong:
        return JLong(-v)
    return None


# ------------------------------------------------------------------ nodes

Eval = Callable[[Mapping[str, str]], Any]


@dataclass(slots=True)
class Node:
    ev: Eval
    kind: str  # "const" (ConstantExpression), "prop", "bool" (BooleanExpression), "other"
    depth: int = 1
    value: Any = None
    boolean: bool = False  # BooleanExpression (also TRUE/FALSE/NULL constants)
    name: str = ""
    terms: tuple[Eval, ...] = ()  # operands of a flattened AND/OR
    op: str = ""


def const_node(v: Any, boolean: bool = False) -> Node:
    return Node(lambda p: v, "const", value=v, boolean=boolean)


def bool_node(ev: Eval, *children: Node, op: str = "", terms: tuple[Eval, ...] = ()) -> Node:
    return Node(ev, "bool", 1 + max(c.depth for c in children), boolean=True, op=op, terms=terms)


def show(n: Node) -> str:
    if n.kind == "const":
        v = n.value
        return (
            "NULL"
            if v is None
            else ("TRUE" if v else "FALSE")
            if type(v) is bool
            else "'" + v.replace("'", "''") + "'"
            if type(v) is str
            else repr(v)
        )
    return n.name or "expression"


# ------------------------------------------------------------------ evaluators


def not_node(n: Node) -> Node:
    ev = n.ev

    def not_(p: Mapping[str, str]) -> Any:
        v = ev(p)
        return None if v is None else not v

    return bool_node(not_, n)


def and_node(a: Node, b: Node) -> Node:
    ae, be = a.ev, b.ev

    def and_(p: Mapping[str, str]) -> Any:
        x = ae(p)
        if x is False:
            return False
        y = be(p)
        if y is False:
            return False
        return None if x is None or y is None else True

    return bool_node(and_, a, b)


def or_node(a: Node, b: Node) -> Node:
    ae, be = a.ev, b.ev

    def or_(p: Mapping[str, str]) -> Any:
        x = ae(p)
        if x is True:
            return True
        y = be(p)
        if y is True:
            return True
        return None if x is None or y is None else False

    return bool_node(or_, a, b)


def in_node(prop: Node, items: frozenset[str], negated: bool) -> Node:
    name = prop.name

    def in_(p: Mapping[str, str]) -> Any:
        v = p.get(name)
        return None if v is None else (v in items) is not negated

    return bool_node(in_, prop)


_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def ordered_node(left: Node, right: Node, op: str) -> Node:
    test = _TESTS[op]
    if left.kind == "prop" and right.kind == "const" and type(right.value) is not float:
        # the common ``a > 5``: the property converts to the literal's type (int or long)
        name, c, conv = left.name, right.value, (to_long if type(right.value) is JLong else to_int)

        def prop_num(p: Mapping[str, str]) -> Any:
            v = p.get(name)
            if v is None:
                return None
            n = conv(v)
            return test((n > c) - (n < c))

        return bool_node(prop_num, left, right)
    lev, rev = left.ev, right.ev

    def ordered(p: Mapping[str, str]) -> Any:
        lv = lev(p)
        if lv is None:
            return None
        rv = rev(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(dcmp(to_double(lv), to_double(rv)))
        return test(compare(lv, rv))

    return bool_node(ordered, left, right)


def equal_node(left: Node, right: Node) -> Node:
    if left.kind == "prop" and right.kind == "const" and type(right.value) is str:
        name, c = left.name, right.value

        def prop_str(p: Mapping[str, str]) -> Any:
            v = p.get(name)
            return None if v is None else v == c

        return bool_node(prop_str, left, right)
    lev, rev = left.ev, right.ev

    def equal(p: Mapping[str, str]) -> Any:
        lv = lev(p)
        rv = rev(p)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        if type(lv) is type(rv) and type(lv) is not float:
            return lv == rv
        return compare(lv, rv) == 0

    return bool_node(equal, left, right)


def cast_node(prop: Node) -> Node:
    """``UnaryExpression.createBooleanCast``: a property used as a boolean."""
    ev = prop.ev

    def cast(p: Mapping[str, str]) -> Any:
        v = ev(p)
        return None if v is None else (v if type(v) is bool else False)

    return bool_node(cast, prop)


def chain_node(terms: list[Node], kw: str) -> Node:
    """AND/OR over ``terms``, flattened: (a AND b) AND c == AND(a, b, c) under Java's
    left-to-right short circuit (AND stops at FALSE, OR at TRUE; null if any was null)."""
    flat: list[Eval] = []
    for n in terms:
        flat.extend(n.terms if n.op == kw else (n.ev,))
    evs = tuple(flat)
    stop = kw == "OR"

    def chain(p: Mapping[str, str]) -> Any:
        unknown = False
        for e in evs:
            v = e(p)
            if v is None:
                unknown = True
            elif v is stop:
                return stop
        return None if unknown else not stop

    return bool_node(chain, *terms, op=kw, terms=evs)
