"""RocketMQ's SQL92 message selector: lexer, parser and compiler (sans-IO).

Owns: the selector grammar of Apache RocketMQ 4.9.8 (``filter/.../SelectorParser.jj``,
which has no CONTAINS/STARTSWITH/ENDSWITH - those came in 5.x) and its evaluation rules
(``ComparisonExpression``, ``LogicExpression``, ``UnaryExpression``,
``ConstantExpression``), ``SelectorSyntaxError`` (with the position), ``compile_selector``
and its bounded cache. The Java value rules and the closures nodes compile to are in
``sql92_eval``; the broker evaluates a selector over ``message.record_properties``.

Why hand-written: the grammar is ~10 productions; what matters is reproducing
SelectorParser's exact accept/reject behaviour (JavaCC longest-match tokens, LOOKAHEAD(2)
on ``IS NULL``/``NOT BETWEEN``/``NOT IN``, unary ``NOT`` binding tighter than ``=``, no
``<EOF>`` at the end so one trailing token that starts no rule is ignored) and its
parse-time checks (``create*`` reject ``a > 'x'``, ``a = NULL``, ``5 IN (...)``, a
BETWEEN whose constants are null or out of order, float literals outside
[Double.MIN_VALUE, MAX_VALUE] such as ``0.0``). A recursive-descent parser that mirrors
the productions one to one makes that auditable and needs no dependency; lark's
Earley/LALR front ends would have to be bent to JavaCC's lookahead and still need all of
the semantic checks by hand. The parse is one pass; evaluation is a tree of closures
built once per expression (cached by text, so once per subscription version or less).
tests/protocol/test_sql92.py checks the result against the RocketMQ 4.9.8 jars.

Literals: decimal only (no hex or octal: ``a = 0x10`` lexes as ``a = 0`` followed by the
identifier ``x10``, which, being the one trailing token, RocketMQ ignores too); floats
``5.``, ``.5``, ``5e3``; strings in single quotes with ``''`` for a quote; comments
``-- ...`` (to a line end) and ``/* ... */``; keywords and identifiers case-insensitive
ASCII (``[A-Za-z_$][A-Za-z0-9_$]*``), property names case-sensitive.

Evaluation rules (RocketMQ 4.9.8, where ``CONVERT_STRING_EXPRESSIONS`` is always on):
* property values are strings; a missing property is null; literals are Integer (fits
  32 bits, even with an ``L`` suffix), Long (wider), Double, String, TRUE/FALSE, NULL;
* comparing a string with a number converts the string to the number's type
  (``Integer.valueOf`` for an Integer literal: ``'10.5' > 5`` fails); a failed conversion
  aborts the whole evaluation and the message does not match (even inside an OR);
* ``> >= < <=`` on two strings compare them as doubles, else abort; a null operand
  gives null; ``=`` with a null left gives null, with only a null right FALSE;
* AND/OR are three-valued with left-to-right short circuit; NOT null is null; a bare
  property used as a boolean is FALSE (null if missing); ``IN`` needs a string;
* the message matches only when the result is TRUE.

Invariant: ``Selector.matches`` never raises; ``compile_selector`` raises only
``SelectorSyntaxError``; nesting is bounded (``MAX_DEPTH``) so no input can exhaust the
Python stack, and AND/OR chains are flattened; an expression is at most
``MAX_EXPRESSION_CHARS`` long (RocketMQ: no limit; this bounds one compile's work).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .sql92_eval import (
    INT_MAX,
    LONG_MAX,
    Eval,
    EvalError,
    JLong,
    Node,
    and_node,
    cast_node,
    chain_node,
    compare,
    const_node,
    equal_node,
    in_node,
    negate,
    not_node,
    or_node,
    ordered_node,
    show,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPRESSION_CHARS",
    "JLong",
    "Selector",
    "SelectorCache",
    "SelectorSyntaxError",
    "compile_selector",
]

MAX_DEPTH = 64
# RocketMQ's parser has no length limit: long ``IN`` lists are real (an IN of 20,000 ids is
# ~200 KiB). Compiling costs ~1.2 ms per KiB here (once per expression: SelectorCache)
MAX_EXPRESSION_CHARS = 256 * 1024
_DBL_MAX = 1.7976931348623157e308
_DBL_MIN = 5e-324


class SelectorSyntaxError(ValueError):
    """An expression RocketMQ's SelectorParser would refuse; ``offset`` is 0-based,
    ``line``/``column`` 1-based (JavaCC's convention)."""

    def __init__(self, message: str, expression: str, offset: int) -> None:
        self.message = message
        self.expression = expression
        self.offset = offset
        before = expression[:offset]
        self.line = before.count("\n") + 1
        self.column = offset - (before.rfind("\n") + 1) + 1
        super().__init__(self.remark)

    @property
    def remark(self) -> str:
        return (
            f"invalid SQL92 selector at line {self.line}, column {self.column} "
            f"(offset {self.offset}): {self.message}"
        )


# ------------------------------------------------------------------ lexer

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_SKIP = re.compile(r"(?:[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)+")
_CANDIDATES = (
    (
        "FLOAT",
        re.compile(
            r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
            r"|[0-9]+[eE][+-]?[0-9]+"
        ),
    ),
    ("DEC", re.compile(r"0|[1-9][0-9]*[lL]?")),
    ("STR", re.compile(r"'(?:''|[^'])*'")),
    ("ID", re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")),
    ("OP", re.compile(r"<>|<=|>=|[=<>(),+-]")),
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # a keyword, FLOAT, DEC, STR, ID, an operator's text, or EOF
    text: str
    pos: int


class _Lexer:
    """JavaCC-style: longest match, the first declared kind on a tie (keywords before
    ID); tokens are produced on demand, so only what the parser looks at is lexed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> _Tok:
        text, pos = self.text, self.pos
        m = _SKIP.match(text, pos)
        if m:
            pos = m.end()
        if pos >= len(text):
            self.pos = pos
            return _Tok("EOF", "", pos)
        best: tuple[str, int] | None = None
        for kind, rx in _CANDIDATES:
            m = rx.match(text, pos)
            if m and (best is None or m.end() > best[1]):
                best = (kind, m.end())
        if best is None:
            what = "unterminated string" if text[pos] == "'" else f"character {text[pos]!r}"
            raise SelectorSyntaxError(f"lexical error: unexpected {what}", text, pos)
        kind, end = best
        word = text[pos:end]
        if kind == "ID" and word.upper() in _KEYWORDS:
            kind = word.upper()
        elif kind == "OP":
            kind = word
        self.pos = end
        return _Tok(kind, word, pos)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lexer = _Lexer(text)
        self.buf: list[_Tok] = []
        self.depth = 0

    # tokens ----------------------------------------------------------
    def la(self, k: int = 1) -> _Tok:
        while len(self.buf) < k:
            self.buf.append(self.lexer.next())
        return self.buf[k - 1]

    def take(self, kind: str) -> _Tok:
        t = self.la()
        if t.kind != kind:
            self.fail(f"expected {kind!r}", t)
        return self.buf.pop(0)

    def fail(self, msg: str, t: _Tok) -> None:
        found = "end of expression" if t.kind == "EOF" else repr(t.text)
        raise SelectorSyntaxError(f"{msg}, found {found}", self.text, t.pos)

    def check(self, ok: bool, msg: str, t: _Tok) -> None:
        if not ok:
            raise SelectorSyntaxError(msg, self.text, t.pos)

    # productions (SelectorParser.jj) ---------------------------------
    def selector(self) -> Node:
        start = self.la()
        return self.as_boolean(self.or_expr(), start)

    def as_boolean(self, n: Node, at: _Tok) -> Node:
        if n.boolean:
            return n
        if n.kind == "prop":
            return cast_node(n)
        self.check(False, f"{show(n)} will not result in a boolean value", at)
        raise AssertionError  # pragma: no cover

    def _chain(self, sub: Callable[[], Node], kw: str) -> Node:
        start = self.la()
        left = sub()
        if self.la().kind != kw:
            return left
        terms = [self.as_boolean(left, start)]
        while self.la().kind == kw:
            self.take(kw)
            at = self.la()
            terms.append(self.as_boolean(sub(), at))
        return chain_node(terms, kw)

    def or_expr(self) -> Node:
        return self._chain(self.and_expr, "OR")

    def and_expr(self) -> Node:
        return self._chain(self.equality_expr, "AND")

    def equality_expr(self) -> Node:
        left = self.comparison_expr()
        while True:
            t = self.la()
            if t.kind in ("=", "<>"):
                self.take(t.kind)
                right = self.comparison_expr()
                self.check_equal_operands(left, right, t)
                left = equal_node(left, right)
                if t.kind == "<>":
                    left = not_node(left)
            elif t.kind == "IS":
                if self.la(2).kind == "NULL":
                    self.take("IS")
                    self.take("NULL")
                    left = equal_node(left, const_node(None, True))
                else:
                    self.take("IS")
                    self.take("NOT")
                    self.take("NULL")
                    left = not_node(equal_node(left, const_node(None, True)))
            else:
                return self.bounded(left, t)

    def comparison_expr(self) -> Node:
        left = self.unary()
        while True:
            t = self.la()
            k = t.kind
            if k in (">", ">=", "<", "<="):
                self.take(k)
                left = self.ordered(left, self.unary(), k, t)
            elif k == "BETWEEN" or (k == "NOT" and self.la(2).kind == "BETWEEN"):
                if k == "NOT":
                    self.take("NOT")
                self.take("BETWEEN")
                low = self.unary()
                self.take("AND")
                high = self.unary()
                if k == "BETWEEN":
                    self.check_between(low, high, t)
                    left = and_node(
                        self.ordered(left, low, ">=", t), self.ordered(left, high, "<=", t)
                    )
                else:
                    left = or_node(
                        self.ordered(left, low, "<", t), self.ordered(left, high, ">", t)
                    )
            elif k == "IN" or (k == "NOT" and self.la(2).kind == "IN"):
                if k == "NOT":
                    self.take("NOT")
                self.take("IN")
                self.take("(")
                items = [self.string()]
                while self.la().kind == ",":
                    self.take(",")
                    items.append(self.string())
                self.take(")")
                self.check(left.kind == "prop", f"expected a property for IN, got {show(left)}", t)
                left = in_node(left, frozenset(items), k == "NOT")
            elif k == "NOT":
                self.fail("expected BETWEEN or IN after NOT", self.la(2))
            else:
                return self.bounded(left, t)

    def unary(self) -> Node:
        t = self.la()
        self.depth += 1
        self.check(self.depth <= MAX_DEPTH, f"expression nested deeper than {MAX_DEPTH}", t)
        try:
            if t.kind == "+":
                self.take("+")
                return self.unary()
            if t.kind == "-":
                self.take("-")
                inner = self.unary()
                if inner.kind == "const" or inner.op == "neg-const":
                    v = negate(inner.value)
                    return Node(lambda p: v, "other", value=v, op="neg-const")
                iev = inner.ev
                return Node(lambda p: negate(iev(p)), "other", inner.depth + 1)
            if t.kind == "NOT":
                self.take("NOT")
                at = self.la()
                return not_node(self.as_boolean(self.unary(), at))
            return self.primary()
        finally:
            self.depth -= 1

    def primary(self) -> Node:
        t = self.la()
        k = t.kind
        if k == "(":
            self.take("(")
            n = self.or_expr()
            self.take(")")
            return n
        if k == "ID":
            self.take("ID")
            name = t.text
            return Node(lambda p: p.get(name), "prop", name=name)
        if k == "STR":
            return const_node(self.string())
        if k == "DEC":
            self.take("DEC")
            digits = t.text.rstrip("lL")
            v = int(digits)
            self.check(v <= LONG_MAX, f"{t.text} is out of the Long range", t)
            return const_node(v if v <= INT_MAX else JLong(v))
        if k == "FLOAT":
            self.take("FLOAT")
            f = float(t.text)
            self.check(f <= _DBL_MAX, f"{t.text} is greater than Double.MAX_VALUE", t)
            self.check(f >= _DBL_MIN, f"{t.text} is less than Double.MIN_VALUE", t)
            return const_node(f)
        if k in ("TRUE", "FALSE", "NULL"):
            self.take(k)
            return const_node({"TRUE": True, "FALSE": False, "NULL": None}[k], True)
        self.fail("expected a literal, a property or '('", t)
        raise AssertionError  # pragma: no cover

    def string(self) -> str:
        return self.take("STR").text[1:-1].replace("''", "'")

    # semantic checks (ComparisonExpression.create*) ------------------
    def bounded(self, n: Node, t: _Tok) -> Node:
        self.check(n.depth <= MAX_DEPTH, f"expression nested deeper than {MAX_DEPTH}", t)
        return n

    def check_less_than_operand(self, n: Node, t: _Tok) -> None:
        if n.kind == "const":
            v = n.value
            self.check(
                type(v) in (int, JLong, float),
                f"value {show(n)} cannot be compared with {t.text}",
                t,
            )
        self.check(not n.boolean, f"a boolean expression cannot be compared with {t.text}", t)

    def ordered(self, left: Node, right: Node, op: str, t: _Tok) -> Node:
        self.check_less_than_operand(left, t)
        self.check_less_than_operand(right, t)
        return ordered_node(left, right, op)

    def check_equal_operands(self, left: Node, right: Node, t: _Tok) -> None:
        for n in (left, right):
            self.check(
                not (n.kind == "const" and n.value is None),
                "NULL cannot be compared with = or <>; use IS [NOT] NULL",
                t,
            )
        if left.kind == "const" and right.kind == "const":
            self.check(
                not (left.boolean and not right.boolean),
                f"{show(left)} cannot be compared with {show(right)}",
                t,
            )

    def check_between(self, low: Node, high: Node, t: _Tok) -> None:
        if low.kind == "const" and high.kind == "const":
            lv, hv = low.value, high.value
            self.check(lv is not None and hv is not None, "BETWEEN values cannot be NULL", t)
            try:
                ok = compare(hv, lv) >= 0
            except EvalError as err:
                self.check(False, f"illegal BETWEEN values: {err}", t)
            self.check(ok, f"BETWEEN needs low <= high, got {show(low)} AND {show(high)}", t)


# ------------------------------------------------------------------ public API


class Selector:
    """A compiled SQL92 selector; ``matches(properties)`` is what the broker calls."""

    __slots__ = ("_ev", "expression")

    def __init__(self, expression: str, ev: Eval) -> None:
        self.expression = expression
        self._ev = ev

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        """TRUE, FALSE or None (unknown); raises ``ValueError`` where Java would throw."""
        try:
            v = self._ev(properties)
        except EvalError as err:
            raise ValueError(str(err)) from None
        return v if type(v) is bool else None

    def matches(self, properties: Mapping[str, str]) -> bool:
        try:
            return self._ev(properties) is True
        except Exception:  # noqa: BLE001 - Java catches Throwable here: no match
            return False

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


def compile_selector(expression: str) -> Selector:
    """Parse and compile; raise ``SelectorSyntaxError`` (with the position) if RocketMQ's
    SelectorParser would refuse the expression."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise SelectorSyntaxError(
            f"expression longer than {MAX_EXPRESSION_CHARS} characters",
            expression,
            MAX_EXPRESSION_CHARS,
        )
    node = _Parser(expression).selector()
    return Selector(expression, node.ev)


class SelectorCache:
    """Compiled selectors (and refusals) by expression text, least recently used out.

    Bounded by entries and by the total length of the cached expressions (a closure tree
    costs memory in proportion to its text), so hostile heartbeats cannot grow it."""

    def __init__(self, maxsize: int = 1024, max_chars: int = 4 * 1024 * 1024) -> None:
        self.maxsize = maxsize
        self.max_chars = max_chars
        self.chars = 0
        self._items: OrderedDict[str, Selector | SelectorSyntaxError] = OrderedDict()

    def get(self, expression: str) -> Selector:
        item = self._items.get(expression)
        if item is None:
            try:
                item = compile_selector(expression)
            except SelectorSyntaxError as err:
                item = err
            self._items[expression] = item
            self.chars += len(expression)
            while len(self._items) > 1 and (
                len(self._items) > self.maxsize or self.chars > self.max_chars
            ):
                old, _ = self._items.popitem(last=False)
                self.chars -= len(old)
        else:
            self._items.move_to_end(expression)
        if isinstance(item, SelectorSyntaxError):  # a fresh one: no traceback build-up
            raise SelectorSyntaxError(item.message, item.expression, item.offset)
        return item

    def __len__(self) -> int:
        return len(self._items)
