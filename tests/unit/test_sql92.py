"""The embedded broker's SQL92 selector (rocketmq_spark/embedded/sql92.py).

A table of Apache's answers (from its filter module's classes, quirks included), a table
of expressions Apache refuses to compile, and a property test: random selectors, rendered
as text, parsed and evaluated, against a reference evaluator written here directly over
the generated tree (its own conversion and three-valued logic rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketmq_spark.embedded.sql92 import SelectorError, compile_selector


def matches(text: str, **props: str) -> bool:
    return compile_selector(text).matches(props)


@pytest.mark.parametrize("text, props, expected", [
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "4"}, False),
    ("a > 5", {}, False),                                # NULL: unknown, not matched
    ("a > 5", {"a": "abc"}, False),                      # Integer.valueOf raises: not matched
    ("a = 5", {"a": "5.0"}, False),                      # an Integer literal parses Integer
    ("a = 5.0", {"a": "5"}, True),                       # a Double literal parses Double
    ("a = 5.0", {"a": " 5 "}, True),                     # Double.valueOf trims
    ("a = 5", {"a": " 5"}, False),                       # Integer.valueOf does not
    ("a = 3000000000", {"a": "3000000000"}, True),       # a Long literal
    ("a = 1", {"a": "3000000000"}, False),               # out of Integer's range: raises
    ("a > b", {"a": "10", "b": "9"}, True),              # two strings ordered as doubles
    ("a = b", {}, True),                                 # two NULLs are equal in Apache
    ("a <> b", {}, False),
    ("a = b", {"a": "1"}, False),
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a <> 'x'", {}, False),
    ("a = TRUE", {"a": "True"}, True),                   # Boolean.valueOf ignores case
    ("a = FALSE", {"a": "whatever"}, True),              # ... and anything else is false
    ("TRUE = a", {"a": "true"}, False),                  # Apache's ClassCastException
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {}, False),                  # NULL: unknown
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a BETWEEN -5 AND -10", {"a": "-7"}, False),        # not constants: not checked, never true
    ("TAGS = 'TagA' AND n > 1", {"TAGS": "TagA", "n": "2"}, True),
    ("a", {"a": "true"}, False),                         # a property is never a Boolean
    ("NOT a", {"a": "x"}, True),
    ("NOT a = 1", {"a": "1"}, False),                    # (NOT a) = 1
    ("a = 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # the left side raised first
    ("b = 'x' OR a = 5", {"a": "abc", "b": "x"}, True),   # ... or never ran
    ("a > 1 AND b > 1", {"a": "2"}, False),
    ("a > 1 OR b > 1", {"a": "2"}, True),
    ("NOT (a > 1 AND b > 1)", {"a": "0"}, True),
    ("NOT (a > 1 AND b > 1)", {"a": "2"}, False),         # NOT unknown is unknown
    ("-a > 1", {"a": "-5"}, False),                      # - of a string is NULL
    ("a > -1", {"a": "0"}, True),
    ("a = 1 b", {"a": "1"}, True),                       # what follows is ignored, as Apache's parser does
    ("a = 0L", {"a": "0"}, True),                        # "0" then an ignored L
    ("a LIKE 'x%'", {"a": "x"}, False),                  # the property alone (no LIKE in RocketMQ)
    ("a > 1.5e0", {"a": "NaN"}, True),                   # Double.compareTo: NaN above everything
    ("NULL", {}, False),
    ("TRUE", {}, True),
    ("a = 1 -- the rest\n", {"a": "1"}, True),
    ("/* c */ a = 1", {"a": "1"}, True),
])
def test_apache_answers(text: str, props: dict[str, str], expected: bool) -> None:
    assert compile_selector(text).matches(props) is expected


@pytest.mark.parametrize("text", [
    "", "  ", "a >", "a = NULL", "a > 'x'", "a > TRUE", "TRUE = 5", "5", "'x'", "a > 0.0",
    "a > 1e400", "a BETWEEN 3 AND 1", "a BETWEEN 'a' AND 'b'", "a BETWEEN NULL AND 1", "5 IN ('x')",
    "a IN (1, 2)", "a IN ()", "(a = 1) > 2", "a = 1 AND", "a = 9223372036854775808",
    "a = 1 AND (b = 2", "a # 1", "-a", "a CONTAINS 'x'",
])
def test_refused(text: str) -> None:
    with pytest.raises(SelectorError, match="Invalid MessageSelector"):
        compile_selector(text)


def test_a_lexical_error_past_the_expression_is_never_read() -> None:
    assert matches("a = 1 b #", a="1")
    with pytest.raises(SelectorError):
        compile_selector("a = 1 #")          # the token after the expression is read


# ------------------------------------------------------------------ property test

# The reference: a generated tree evaluated directly. Values: ("I", int) Integer, ("L", int)
# Long, ("D", float) Double, ("S", str) String, ("B", bool) Boolean; None for NULL; ERR
# where Apache's evaluation throws (the whole selector then does not match).
ERR = "ERR"
Tv = Union[None, str, tuple]

NUMERIC_TEXTS = ["0", "5", "-3", "+7", "10", "2.5", "1e3", " 7 ", "3000000000", "NaN", "-Infinity",
                 "5d", "abc", "", "true", "TRUE", "false", "x y", "0.1"]


def ref_int(s: str, long: bool) -> Tv:
    body = s[1:] if s[:1] in "+-" else s
    if not body or not all("0" <= c <= "9" for c in body):
        return ERR
    v = int(s)
    lim = 1 << (63 if long else 31)
    return ("L" if long else "I", v) if -lim <= v < lim else ERR


def ref_double(s: str) -> Tv:
    t = s.strip("".join(chr(c) for c in range(33)))
    core = t[:-1] if t[-1:] in "dDfF" and t not in ("NaN",) and not t.endswith("Infinity") else t
    if core.lstrip("+-") in ("NaN", "Infinity"):
        return ("D", float(core.replace("Infinity", "inf").replace("NaN", "nan")))
    if not core or any(c not in "0123456789.eE+-" for c in core):
        return ERR
    try:
        return ("D", float(core))
    except ValueError:
        return ERR


def ref_convert(lv: tuple, rv: tuple) -> tuple[Tv, Tv] | int:
    """Both sides in one type, ERR, or -1 where Apache gives up."""
    lk, rk = lv[0], rv[0]
    if lk == rk:
        return lv, rv
    num = {"I": 0, "L": 1, "D": 2}
    if lk in num and rk in num:
        wide = max(lk, rk, key=num.__getitem__)
        return (wide, float(lv[1]) if wide == "D" else lv[1]), (wide, float(rv[1]) if wide == "D" else rv[1])
    if lk == "S" and rk in num:
        c = ref_double(lv[1]) if rk == "D" else ref_int(lv[1], rk == "L")
        return (c, rv) if c != ERR else ERR  # type: ignore[return-value]
    if rk == "S" and lk in num:
        c = ref_double(rv[1]) if lk == "D" else ref_int(rv[1], lk == "L")
        return (lv, c) if c != ERR else ERR  # type: ignore[return-value]
    if lk == "S" and rk == "B":
        return ("B", lv[1].lower() == "true"), rv
    if lk == "B" and rk == "S":
        return ERR  # type: ignore[return-value]
    return -1


def ref_cmp(lv: tuple, rv: tuple) -> int | str:
    conv = ref_convert(lv, rv)
    if conv == ERR:
        return ERR
    if conv == -1:
        return -1
    a, b = conv  # type: ignore[misc]
    x, y = a[1], b[1]
    if a[0] == "D":
        if math.isnan(x) or math.isnan(y):
            return 0 if math.isnan(x) and math.isnan(y) else (1 if math.isnan(x) else -1)
        if x == y == 0:
            return (math.copysign(1, x) > math.copysign(1, y)) - (math.copysign(1, x) < math.copysign(1, y))
    return (x > y) - (x < y)


@dataclass(frozen=True)
class G:
    """A generated node: its text and how to evaluate it."""
    text: str
    kind: str          # "bool" (a condition), "prop", "num", "str", "boolconst"
    ev: object         # callable(props) -> Tv


def lit_num(v: int | float) -> G:
    if isinstance(v, float):
        return G(repr(v), "num", lambda p: ("D", v))
    return G(str(v), "num", lambda p: ("I", v) if v < 1 << 31 else ("L", v))


def prop(name: str) -> G:
    return G(name, "prop", lambda p: None if name not in p else ("S", p[name]))


names = st.sampled_from(["a", "b", "c"])
ints = st.one_of(st.integers(0, 20), st.just(3000000000))
floats = st.sampled_from([0.5, 2.5, 5.0, 1e3, 10.25])
strs = st.sampled_from(["x", "5", "it's", "true", ""])


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def operand() -> st.SearchStrategy[G]:
    return st.one_of(names.map(prop), ints.map(lit_num), floats.map(lit_num))


def comparison(draw_ops: tuple[str, G, G]) -> G:
    op, left, right = draw_ops

    def ev(p: dict) -> Tv:
        lv = left.ev(p)  # type: ignore[operator]
        if op in ("=", "<>"):
            rv = right.ev(p)  # type: ignore[operator]
            if lv == ERR or rv == ERR:
                return ERR
            if lv is None and rv is None:
                eq: Tv = ("B", True)
            elif lv is None:
                eq = None
            elif rv is None:
                eq = ("B", False)
            else:
                c = ref_cmp(lv, rv)
                eq = ERR if c == ERR else ("B", c == 0)
            if op == "<>" and isinstance(eq, tuple):
                return ("B", not eq[1])
            return eq
        if lv is None or lv == ERR:
            return lv
        rv = right.ev(p)  # type: ignore[operator]
        if rv is None or rv == ERR:
            return rv
        if lv[0] == "S" and rv[0] == "S":
            lv, rv = ref_double(lv[1]), ref_double(rv[1])
            if ERR in (lv, rv):
                return ERR
        c = ref_cmp(lv, rv)
        if c == ERR:
            return ERR
        return ("B", {"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op])
    return G(f"{left.text} {op} {right.text}", "bool", ev)


def string_eq(args: tuple[str, str, str]) -> G:
    name, op, s = args
    return comparison((op, prop(name), G(quote(s), "str", lambda p: ("S", s))))


def in_list(args: tuple[str, list[str], bool]) -> G:
    name, values, negated = args

    def ev(p: dict) -> Tv:
        if name not in p:
            return None
        return ("B", (p[name] in values) != negated)
    return G(f"{name} {'NOT ' if negated else ''}IN ({', '.join(map(quote, values))})", "bool", ev)


def null_test(args: tuple[str, bool]) -> G:
    name, negated = args
    return G(f"{name} IS {'NOT ' if negated else ''}NULL", "bool",
             lambda p: ("B", (name in p) == negated))


def between(args: tuple[str, int, int, bool]) -> G:
    name, lo, hi, negated = args
    lo, hi = min(lo, hi), max(lo, hi)
    low, high, v = lit_num(lo), lit_num(hi), prop(name)
    if negated:
        inner = logic(("OR", comparison(("<", v, low)), comparison((">", v, high))))
    else:
        inner = logic(("AND", comparison((">=", v, low)), comparison(("<=", v, high))))
    return G(f"{name} {'NOT ' if negated else ''}BETWEEN {lo} AND {hi}", "bool", inner.ev)


def logic(args: tuple[str, G, G]) -> G:
    op, left, right = args

    def ev(p: dict) -> Tv:
        lv = left.ev(p)  # type: ignore[operator]
        if lv == ERR:
            return ERR
        stop = ("B", op == "OR")
        if lv == stop:
            return stop
        rv = right.ev(p)  # type: ignore[operator]
        if rv == ERR:
            return ERR
        if rv == stop:
            return stop
        return None if lv is None or rv is None else ("B", op != "OR")
    return G(f"({left.text}) {op} ({right.text})", "bool", ev)


def negation(inner: G) -> G:
    def ev(p: dict) -> Tv:
        v = inner.ev(p)  # type: ignore[operator]
        return v if v is None or v == ERR else ("B", not v[1])
    return G(f"NOT ({inner.text})", "bool", ev)


def bare(name: str) -> G:
    return G(name, "bool", lambda p: None if name not in p else ("B", False))


leaves = st.one_of(
    st.tuples(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), operand(), operand()).map(comparison),
    st.tuples(names, st.sampled_from(["=", "<>"]), strs).map(string_eq),
    st.tuples(names, st.lists(strs, min_size=1, max_size=3), st.booleans()).map(in_list),
    st.tuples(names, st.booleans()).map(null_test),
    st.tuples(names, st.integers(0, 12), st.integers(0, 12), st.booleans()).map(between),
    st.sampled_from([True, False]).map(lambda b: G("TRUE" if b else "FALSE", "bool", lambda p: ("B", b))),
    names.map(bare),
)
conditions = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(st.sampled_from(["AND", "OR"]), inner, inner).map(logic), inner.map(negation)), max_leaves=8)
messages = st.dictionaries(names, st.sampled_from(NUMERIC_TEXTS), max_size=3)


@settings(max_examples=600, deadline=None)
@given(conditions, messages)
def test_evaluator_agrees_with_the_reference(cond: G, props: dict[str, str]) -> None:
    expected = cond.ev(props) == ("B", True)  # type: ignore[operator]
    assert compile_selector(cond.text).matches(props) is expected, cond.text
