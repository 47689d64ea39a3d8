"""SQL92 selector (protocol/sql92.py): RocketMQ 4.9.8's grammar, null and type rules.

The table's expected values were produced by Apache RocketMQ 4.9.8's own
``SelectorParser`` + ``MessageEvaluationContext`` (its jars, at
``tests.helpers.ROCKETMQ_HOME``); the last test re-checks the table and random
expressions against those jars when Java is present.
Results: TRUE (delivered), FALSE / NULL (not delivered), EXC (Java throws while
evaluating: not delivered), ERR (refused at compile time: SUBSCRIPTION_PARSE_FAILED).
"""

from __future__ import annotations

import glob
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from kairosmq.protocol.message import encode_record, record_properties
from kairosmq.protocol.properties import encode_properties
from kairosmq.protocol.sql92 import (
    MAX_DEPTH,
    SelectorCache,
    SelectorSyntaxError,
    compile_selector,
)

from tests.helpers import ROCKETMQ_HOME

# (expression, message properties, RocketMQ 4.9.8's result)
TABLE: list[tuple[str, dict[str, str], str]] = [
    ("a > 5", {"a": "10"}, "TRUE"),
    ("a > 5", {"a": "3"}, "FALSE"),
    ("a > 5", {}, "NULL"),
    ("a > 5", {"a": "10.5"}, "EXC"),
    ("a > 5.0", {"a": "10.5"}, "TRUE"),
    ("a > 5", {"a": "abc"}, "EXC"),
    ("a > 5", {"a": "3000000000"}, "EXC"),
    ("a > 3000000000", {"a": "3000000001"}, "TRUE"),
    ("a > 5", {"a": "+10"}, "TRUE"),
    ("a > 5", {"a": " 10"}, "EXC"),
    ("a > 5.0", {"a": " 10 "}, "TRUE"),
    ("a >= 10", {"a": "10"}, "TRUE"),
    ("a < 5", {"a": "-3"}, "TRUE"),
    ("a <= 10", {"a": "10"}, "TRUE"),
    ("a = 10", {"a": "10"}, "TRUE"),
    ("a = 10", {"a": "10.0"}, "EXC"),
    ("a = 10.0", {"a": "10"}, "TRUE"),
    ("a <> 10", {"a": "11"}, "TRUE"),
    ("a <> 10", {}, "NULL"),
    ("a = '10'", {"a": "10"}, "TRUE"),
    ("a = 'it''s'", {"a": "it's"}, "TRUE"),
    ("a <> 'x'", {"a": "x"}, "FALSE"),
    ("a <> 'x'", {}, "NULL"),
    ("a > 5 AND region = 'eu'", {"a": "10", "region": "eu"}, "TRUE"),
    ("a > 5 AND region = 'eu'", {"a": "10", "region": "us"}, "FALSE"),
    ("a > 5 AND region = 'eu'", {"region": "eu"}, "NULL"),
    ("a > 5 OR region = 'eu'", {"region": "eu"}, "TRUE"),
    ("a > 5 OR region = 'eu'", {"a": "abc", "region": "eu"}, "EXC"),
    ("region = 'eu' OR a > 5", {"a": "abc", "region": "eu"}, "TRUE"),
    ("a > 5 AND b = 'x'", {"a": "abc", "b": "y"}, "EXC"),
    ("b = 'x' AND a > 5", {"a": "abc", "b": "y"}, "FALSE"),
    ("a = b", {"a": "5", "b": "5"}, "TRUE"),
    ("a = b", {"a": "5"}, "FALSE"),
    ("a = b", {"b": "5"}, "NULL"),
    ("a > b", {"a": "5", "b": "4.5"}, "TRUE"),
    ("a > b", {"a": "x", "b": "4"}, "EXC"),
    ("a = TRUE", {"a": "true"}, "TRUE"),
    ("a = TRUE", {"a": "TRUE"}, "TRUE"),
    ("a = TRUE", {"a": "yes"}, "FALSE"),
    ("TRUE = a", {"a": "true"}, "EXC"),
    ("a IS NULL", {}, "TRUE"),
    ("a IS NULL", {"a": "1"}, "FALSE"),
    ("a IS NOT NULL", {"a": "1"}, "TRUE"),
    ("a IS NOT NULL", {}, "FALSE"),
    ("a BETWEEN 1 AND 10", {"a": "1"}, "TRUE"),
    ("a BETWEEN 1 AND 10", {"a": "10"}, "TRUE"),
    ("a BETWEEN 1 AND 10", {"a": "11"}, "FALSE"),
    ("a BETWEEN 1 AND 10", {}, "NULL"),
    ("a NOT BETWEEN 1 AND 10", {"a": "11"}, "TRUE"),
    ("a NOT BETWEEN 1 AND 10", {"a": "5"}, "FALSE"),
    ("a NOT BETWEEN 1 AND 10", {}, "NULL"),
    ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, "TRUE"),
    ("a BETWEEN 5 AND -5", {"a": "0"}, "FALSE"),
    ("a IN ('eu', 'us')", {"a": "eu"}, "TRUE"),
    ("a IN ('eu', 'us')", {"a": "cn"}, "FALSE"),
    ("a IN ('eu', 'us')", {}, "NULL"),
    ("a NOT IN ('eu', 'us')", {"a": "cn"}, "TRUE"),
    ("a NOT IN ('eu', 'us')", {}, "NULL"),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagA"}, "TRUE"),
    ("TAGS = 'TagA' OR a > 5", {"TAGS": "TagB", "a": "6"}, "TRUE"),
    ("NOT (a > 5)", {"a": "3"}, "TRUE"),
    ("NOT (a > 5)", {}, "NULL"),
    ("NOT a = 10", {"a": "10"}, "FALSE"),
    ("NOT (a = 10)", {"a": "10"}, "FALSE"),
    ("NOT a", {"a": "1"}, "TRUE"),
    ("NOT a", {}, "NULL"),
    ("a", {"a": "true"}, "FALSE"),
    ("TRUE", {}, "TRUE"),
    ("FALSE", {}, "FALSE"),
    ("NULL", {}, "NULL"),
    ("TRUE OR a > 5", {}, "TRUE"),
    ("FALSE OR a IS NULL", {}, "TRUE"),
    ("a > 5 AND a < 20 AND a <> 15", {"a": "15"}, "FALSE"),
    ("a > 5 AND a < 20 AND a <> 15", {"a": "16"}, "TRUE"),
    ("a < 0 OR a > 5 OR b = 'x'", {"a": "3", "b": "x"}, "TRUE"),
    ("a < 0 OR a > 5 OR b = 'x'", {"a": "3"}, "NULL"),
    ("a = 1 xyz", {"a": "1"}, "TRUE"),
    ("a = 1 )", {"a": "1"}, "TRUE"),
    ("1 = 1.0", {}, "TRUE"),
    ("5 = 5", {}, "TRUE"),
    ("-a = 5", {"a": "-5"}, "NULL"),
    ("a > -5", {"a": "-4"}, "TRUE"),
    ("a > - - 5", {"a": "6"}, "TRUE"),
    ("a = 5L", {"a": "5"}, "TRUE"),
    ("a > 2147483648", {"a": "2147483649"}, "TRUE"),
    ("a = 1 = TRUE", {"a": "1"}, "TRUE"),
    ("a > 1e2", {"a": "101"}, "TRUE"),
    ("a > .5", {"a": "0.6"}, "TRUE"),
    ("a > 5.", {"a": "6"}, "TRUE"),
    ("a = NaN", {"a": "NaN"}, "FALSE"),
    ("A = 1", {"a": "1"}, "NULL"),
    ("A = 1", {"A": "1"}, "TRUE"),
    ("$x = 1", {"$x": "1"}, "TRUE"),
    ("_x = 'y'", {"_x": "y"}, "TRUE"),
    ("a = 1 -- trailing comment\n", {"a": "1"}, "TRUE"),
    ("a = /* inline */ 1", {"a": "1"}, "TRUE"),
    ("a = 1 AND", {"a": "1"}, "ERR"),
    ("a >", {}, "ERR"),
    ("a > 'x'", {}, "ERR"),
    ("a = NULL", {}, "ERR"),
    ("a > NULL", {}, "ERR"),
    ("TRUE = 1", {}, "ERR"),
    ("5 AND a = 1", {}, "ERR"),
    ("5 IN ('5')", {}, "ERR"),
    ("a BETWEEN 3 AND 1", {}, "ERR"),
    ("a BETWEEN NULL AND 1", {}, "ERR"),
    ("a BETWEEN 'a' AND 'b'", {}, "ERR"),
    ("a = 0.0", {}, "ERR"),
    ("a = 1e400", {}, "ERR"),
    ("a = 9223372036854775808", {}, "ERR"),
    ("a = 0x10", {}, "NULL"),
    ("a = 010", {}, "NULL"),
    ("a != 1", {}, "ERR"),
    ("a == 1", {}, "ERR"),
    ("a = 'open", {}, "ERR"),
    ("(a = 1", {}, "ERR"),
    ("a = 1 NOT x", {}, "ERR"),
    ("a = 1 IS x", {}, "ERR"),
    ("a.b = 1", {}, "ERR"),
    ("NOT a BETWEEN 1 AND 2", {}, "ERR"),
    ("a IN ()", {}, "ERR"),
    ("a IN (1)", {}, "ERR"),
    ("a = 1 /* open", {}, "ERR"),
]


def _result(expr: str, props: dict[str, str]) -> str:
    try:
        sel = compile_selector(expr)
    except SelectorSyntaxError:
        return "ERR"
    try:
        v = sel.evaluate(props)
    except ValueError:
        assert not sel.matches(props)
        return "EXC"
    assert sel.matches(props) is (v is True)
    return {True: "TRUE", False: "FALSE", None: "NULL"}[v]


@pytest.mark.parametrize(
    ("expr", "props", "expected"), TABLE, ids=[f"{i}:{e}" for i, (e, _p, _r) in enumerate(TABLE)]
)
def test_grammar_table(expr: str, props: dict[str, str], expected: str) -> None:
    assert _result(expr, props) == expected


@pytest.mark.parametrize(
    ("expr", "line", "column", "words"),
    [
        ("a >", 1, 4, "end of expression"),
        ("a > 5 AND", 1, 10, "end of expression"),
        ("a != 1", 1, 3, "'!'"),
        ("a = 'open", 1, 5, "unterminated string"),
        ("a > 'x'", 1, 3, "cannot be compared"),
        ("a = NULL", 1, 3, "IS [NOT] NULL"),
        ("a BETWEEN 3 AND 1", 1, 3, "low <= high"),
        ("x = 1 AND\n  y IN ()", 2, 9, "found ')'"),
        ("(a = 1", 1, 7, "expected ')'"),
        ("a = 1 NOT x", 1, 11, "BETWEEN or IN"),
        ("5 AND a = 1", 1, 1, "will not result in a boolean"),
        ("a = 0.0", 1, 5, "Double.MIN_VALUE"),
    ],
)
def test_syntax_errors_carry_the_position(expr: str, line: int, column: int, words: str) -> None:
    with pytest.raises(SelectorSyntaxError) as info:
        compile_selector(expr)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert f"line {line}, column {column}" in err.remark and words in err.remark


def test_nesting_is_bounded_and_long_chains_do_not_recurse() -> None:
    deep = "(" * (MAX_DEPTH + 5) + "a = 1" + ")" * (MAX_DEPTH + 5)
    with pytest.raises(SelectorSyntaxError, match="nested deeper"):
        compile_selector(deep)
    with pytest.raises(SelectorSyntaxError, match="nested deeper"):
        compile_selector("NOT " * 5000 + "a")
    with pytest.raises(SelectorSyntaxError, match="nested deeper"):
        compile_selector("a = 1" + " = TRUE" * 200)
    ok = compile_selector("(" * 20 + "a = 1" + ")" * 20)
    assert ok.matches({"a": "1"})
    chain = compile_selector(" AND ".join(f"p{i} = '{i}'" for i in range(1500)))
    props = {f"p{i}": str(i) for i in range(1500)}
    assert chain.matches(props)
    props["p1499"] = "x"
    assert not chain.matches(props)
    ors = compile_selector(" OR ".join(f"(p{i} = 'x' OR q > {i})" for i in range(1000)))
    assert ors.matches({"q": "999"}) and not ors.matches({"q": "-1"})
    # RocketMQ has no length limit: an IN list of 10,000 ids (~110 KiB) compiles
    ids = compile_selector("uid IN (" + ",".join(f"'u{i:06d}'" for i in range(10_000)) + ")")
    assert ids.matches({"uid": "u009999"}) and not ids.matches({"uid": "u010000"})
    with pytest.raises(SelectorSyntaxError, match="longer than"):
        compile_selector("a = 1 OR " * 30_000 + "a = 1")


def test_cache_compiles_once_and_remembers_refusals() -> None:
    cache = SelectorCache(maxsize=2)
    a = cache.get("a > 1")
    assert cache.get("a > 1") is a
    with pytest.raises(SelectorSyntaxError):
        cache.get("a >")
    with pytest.raises(SelectorSyntaxError):
        cache.get("a >")
    cache.get("b > 1")  # evicts the least recently used
    assert len(cache) == 2 and cache.get("a > 1") is not a
    small = SelectorCache(maxsize=100, max_chars=20)
    for i in range(10):
        small.get(f"abc = {i}")  # 7 characters each: at most two fit
    assert len(small) == 2 and small.chars == 14


@pytest.mark.parametrize("v6", [False, True])
def test_record_properties_reads_a_stored_record(v6: bool) -> None:
    props = {"a": "7", "region": "eu", "TAGS": "TagA", "UNIQ_KEY": "X"}
    host = (b"\x00" * 15 + b"\x01", 9) if v6 else (b"\x7f\x00\x00\x01", 9)
    rec = encode_record(
        topic=b"T",
        body=b"\x01\x02body\x02\x01",
        queue_id=0,
        flag=0,
        queue_offset=3,
        physical_offset=100,
        sys_flag=0,
        born_timestamp=1,
        born_host=host,
        store_timestamp=2,
        store_host=host,
        reconsume_times=0,
        properties=encode_properties(props).encode(),
    )
    buf = b"junk" + rec + b"more"
    assert record_properties(buf, 4) == props
    assert record_properties(buf[: len(rec)], 4) == {}  # lengths do not fit: no properties


ORACLE_JAVA = r"""
import java.io.*;
import java.util.*;
import org.apache.rocketmq.filter.parser.SelectorParser;
import org.apache.rocketmq.filter.expression.BooleanExpression;
import org.apache.rocketmq.broker.filter.MessageEvaluationContext;

public class Oracle {
    public static void main(String[] a) throws Exception {
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        String line;
        while ((line = r.readLine()) != null) {
            String[] parts = line.split("\u001f", -1);
            String expr = parts[0].replace("\u001e", "\n");
            Map<String, String> props = new HashMap<>();
            if (parts.length > 1 && !parts[1].isEmpty()) {
                for (String kv : parts[1].split("\u0002")) {
                    int i = kv.indexOf('\u0001');
                    props.put(kv.substring(0, i), kv.substring(i + 1));
                }
            }
            BooleanExpression e;
            try { e = SelectorParser.parse(expr); }
            catch (Throwable t) { out.println("ERR"); continue; }
            try {
                Object v = e.evaluate(new MessageEvaluationContext(props));
                out.println(v == null ? "NULL" : v.toString().toUpperCase());
            } catch (Throwable t) { out.println("EXC"); }
        }
    }
}
"""
JARS = sorted(glob.glob(str(ROCKETMQ_HOME / "lib" / "*.jar")))


def _random_expression(rnd: random.Random, depth: int = 0) -> str:
    atoms = [
        "a",
        "b",
        "region",
        "5",
        "10",
        "'eu'",
        "'10'",
        "1.5",
        "TRUE",
        "NULL",
        "-5",
        "- a",
        "3000000000",
        "5L",
        ".5",
    ]
    r = rnd.random()
    if depth > 3 or r < 0.3:
        return (
            f"{rnd.choice(atoms)} {rnd.choice(['=', '<>', '>', '>=', '<', '<='])} "
            f"{rnd.choice(atoms)}"
        )
    if r < 0.4:
        return f"{rnd.choice(atoms)} BETWEEN {rnd.choice(atoms)} AND {rnd.choice(atoms)}"
    if r < 0.45:
        return f"{rnd.choice(atoms)} NOT BETWEEN {rnd.choice(atoms)} AND {rnd.choice(atoms)}"
    if r < 0.5:
        return f"{rnd.choice(atoms)} {rnd.choice(['', 'NOT '])}IN ('eu', '10')"
    if r < 0.55:
        return f"{rnd.choice(atoms)} IS {rnd.choice(['', 'NOT '])}NULL"
    if r < 0.65:
        return f"NOT {_random_expression(rnd, depth + 1)}"
    if r < 0.75:
        return f"({_random_expression(rnd, depth + 1)})"
    return (
        f"{_random_expression(rnd, depth + 1)} {rnd.choice(['AND', 'OR'])} "
        f"{_random_expression(rnd, depth + 1)}"
    )


@pytest.mark.slow  # javac and a JVM
@pytest.mark.skipif(
    not JARS or shutil.which("javac") is None,
    reason=f"needs javac and the RocketMQ 4.9.8 jars in {ROCKETMQ_HOME}",
)
def test_differential_against_rocketmq_4_9_8(tmp_path: Path) -> None:
    cp = ":".join(JARS)
    (tmp_path / "Oracle.java").write_text(ORACLE_JAVA)
    subprocess.run(
        ["javac", "-cp", cp, "-d", str(tmp_path), str(tmp_path / "Oracle.java")],
        check=True,
        capture_output=True,
    )
    rnd = random.Random(92)
    words = [
        "a",
        "b",
        "5",
        "0",
        "1.5",
        "'eu'",
        "TRUE",
        "NULL",
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "IS",
        "(",
        ")",
        ",",
        "=",
        "<>",
        ">",
        "<=",
        "-",
        "5L",
        "/*c*/",
        "x1",
    ]
    exprs = [e for e, _p, _r in TABLE]
    exprs += [_random_expression(rnd) for _ in range(400)]
    exprs += [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 7))) for _ in range(300)]
    propsets = [
        {},
        {"a": "10"},
        {"a": "10.5", "b": "x"},
        {"a": "abc", "region": "eu"},
        {"a": "5", "b": "5"},
        {"a": "true", "b": "-3"},
        {"a": "3000000000"},
    ]
    cases = [(e, p) for e in exprs for p in propsets] + [(e, p) for e, p, _r in TABLE]
    lines = "".join(
        e.replace("\n", "\x1e") + "\x1f" + "\x02".join(f"{k}\x01{v}" for k, v in p.items()) + "\n"
        for e, p in cases
    )
    out = (
        subprocess.run(
            ["java", "-cp", f"{cp}:{tmp_path}", "Oracle"],
            input=lines.encode(),
            capture_output=True,
            check=True,
            timeout=240,
        )
        .stdout.decode()
        .split()
    )
    assert len(out) == len(cases)
    wrong = [
        (e, p, j, _result(e, p)) for (e, p), j in zip(cases, out, strict=True) if _result(e, p) != j
    ]
    assert not wrong, wrong[:10]
