"""RocketMQ's SQL92 message selector (``ExpressionType.SQL92``): parse and evaluate, no I/O.

How this works. ``compile_selector(text)`` tokenizes and parses the grammar of Apache's
filter module (a JMS selector without LIKE, arithmetic, hex or octal) into a tree of
frozen nodes, checking what Apache checks at parse time, and returns a ``Selector``;
``Selector.matches(properties)`` evaluates it against one message's properties (every
value a string, ``TAGS`` among them, a missing key NULL). Anything Apache refuses to
compile raises ``SelectorError``.

Evaluation follows Apache's classes, quirks included, because a consumer sees their
answers:

- three-valued logic: a comparison with a NULL operand is unknown (None); AND/OR as SQL,
  short-circuit from the left; a message matches only when the whole is TRUE;
- values are Integer (``int``), Long (``Long``), Double (``float``), String (``str``) or
  Boolean (``bool``); a comparison of two types converts one side as Java's
  ``ComparisonExpression`` does (an Integer literal against a property parses the
  property with ``Integer.valueOf``, a Double with ``Double.valueOf``, TRUE/FALSE with
  ``Boolean.valueOf``);
- a conversion that fails raises in Apache and the broker treats the message as not
  matching: here ``EvalError``, which ``matches`` turns into False, so ``a = 5 OR b = 'x'``
  with a = 'abc' does not match although b = 'x' (the left side raised first);
- ``a = b`` with both missing is TRUE (Apache compares the two nulls as equal);
- ``<``, ``<=``, ``>``, ``>=`` between two strings compare them as doubles;
- a bare property used as a condition is FALSE when present (it is never a Boolean);
- NOT binds tighter than comparisons (``NOT a = 1`` is ``(NOT a) = 1``);
- ``-`` of anything but a number is NULL; a float literal below ``Double.MIN_VALUE``
  (``0.0`` included) or over ``Double.MAX_VALUE`` is refused, as ``BETWEEN`` constants
  whose low end is above the high end are.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from dataclasses import dataclass
from typing import Callable, Mapping, Union


class SelectorError(ValueError):
    """An expression Apache refuses to compile (``MQFilterException``)."""


class EvalError(Exception):
    """What raises during Apache's evaluation (a failed conversion): the message does not match."""


class Long(int):
    """A Java Long (a decimal literal outside the Integer range); plain ``int`` is an Integer."""


Value = Union[None, bool, int, float, str]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MIN = 5e-324                       # Double.MIN_VALUE
DOUBLE_MAX = 1.7976931348623157e308        # Double.MAX_VALUE

# ------------------------------------------------------------------ Java conversions

_JAVA_INT = re.compile(r"[+-]?\d+\Z")        # Integer/Long.valueOf: Unicode digits, no blanks
_JAVA_DOUBLE = re.compile(r"[+-]?(?:(NaN|Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)\Z")
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?\Z")
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))   # String.trim: every char <= ' '


def java_int(text: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.valueOf`` (``Long.valueOf`` with the Long bounds); EvalError where Java throws."""
    if not _JAVA_INT.match(text):
        raise EvalError(f"For input string: {text!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise EvalError(f"For input string: {text!r} (out of range)")
    return value


def java_double(text: str) -> float:
    """``Double.valueOf``: trimmed, NaN, Infinity, a type suffix and hex floats allowed."""
    s = text.strip(_JAVA_TRIM)
    m = _JAVA_DOUBLE.match(s)
    if m:
        body = m.group(1) or m.group(2)
        sign = -1.0 if s.startswith("-") else 1.0
        if body == "NaN":
            return math.nan
        if body == "Infinity":
            return sign * math.inf
        return sign * float(body)
    m = _JAVA_HEX_DOUBLE.match(s)
    if m:
        return float.fromhex(m.group(1))
    raise EvalError(f"For input string: {text!r}")


def java_boolean(text: str) -> bool:
    return text.lower() == "true"              # Boolean.valueOf


_BITS = struct.Struct(">q")


def _double_key(d: float) -> int:
    """``Double.doubleToLongBits`` as a signed long: the order of ``Double.compareTo``
    (-0.0 < 0.0, NaN above everything and equal to itself)."""
    if d != d:
        return 0x7FF8000000000000
    (bits,) = _BITS.unpack(struct.pack(">d", d))
    return bits


def _sign(a: object, b: object) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def _same_type_compare(lv: Value, rv: Value) -> int:
    if isinstance(lv, float):
        assert isinstance(rv, float)
        if lv < rv:
            return -1
        if lv > rv:
            return 1
        return _sign(_double_key(lv), _double_key(rv))
    if isinstance(lv, str):
        # String.compareTo orders UTF-16 code units; equality is all that is ever asked of it
        return _sign(lv.encode("utf-16-be"), rv.encode("utf-16-be"))  # type: ignore[union-attr]
    return _sign(lv, rv)


def java_type(v: Value) -> str:
    if isinstance(v, bool):
        return "Boolean"
    if isinstance(v, Long):
        return "Long"
    if isinstance(v, int):
        return "Integer"
    if isinstance(v, float):
        return "Double"
    return "String"


# (left type, right type) -> how to bring both to one type: a converter for each side
_Conv = Callable[[Value], Value]
_KEEP: _Conv = lambda v: v      # noqa: E731


def _to_long(v: Value) -> Value:
    return Long(v) if not isinstance(v, str) else Long(java_int(v, LONG_MIN, LONG_MAX))


def _to_double(v: Value) -> Value:
    return float(v) if not isinstance(v, str) else java_double(v)  # type: ignore[arg-type]


def _to_int(v: Value) -> Value:
    return java_int(v)  # type: ignore[arg-type]


def _to_boolean(v: Value) -> Value:
    return java_boolean(v)  # type: ignore[arg-type]


def _class_cast(_v: Value) -> Value:
    # Apache casts the Boolean side to String here: a ClassCastException
    raise EvalError("java.lang.Boolean cannot be cast to java.lang.String")


CONVERSIONS: dict[tuple[str, str], tuple[_Conv, _Conv]] = {
    ("Integer", "Long"): (_to_long, _KEEP), ("Integer", "Double"): (_to_double, _KEEP),
    ("Integer", "String"): (_KEEP, _to_int),
    ("Long", "Integer"): (_KEEP, _to_long), ("Long", "Double"): (_to_double, _KEEP),
    ("Long", "String"): (_KEEP, _to_long),
    ("Double", "Integer"): (_KEEP, _to_double), ("Double", "Long"): (_KEEP, _to_double),
    ("Double", "String"): (_KEEP, _to_double),
    ("String", "Boolean"): (_to_boolean, _KEEP), ("String", "Integer"): (_to_int, _KEEP),
    ("String", "Long"): (_to_long, _KEEP), ("String", "Double"): (_to_double, _KEEP),
    ("Boolean", "String"): (_class_cast, _KEEP),
}


def java_compare(lv: Value, rv: Value) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (as the parser sets
    it): -1 for types that do not convert (a Boolean against a number)."""
    lt, rt = java_type(lv), java_type(rv)
    if lt != rt:
        conv = CONVERSIONS.get((lt, rt))
        if conv is None:
            return -1
        lv, rv = conv[0](lv), conv[1](rv)
    return _same_type_compare(lv, rv)


# ------------------------------------------------------------------ the tree

class Node:
    boolean = False          # a BooleanExpression in Apache's terms

    def eval(self, props: Mapping[str, str]) -> Value:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Node):
    value: Value

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.value is None or isinstance(self.value, bool)   # TRUE, FALSE, NULL

    def eval(self, props: Mapping[str, str]) -> Value:
        return self.value


@dataclass(frozen=True)
class Property(Node):
    name: str

    def eval(self, props: Mapping[str, str]) -> Value:
        return props.get(self.name)


@dataclass(frozen=True)
class Negate(Node):
    operand: Node

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.operand.eval(props)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if isinstance(v, Long):
            return Long(-v)
        if isinstance(v, int):
            return -v if v != INT_MIN else v   # Java's int negation wraps
        return -v


@dataclass(frozen=True)
class BooleanCast(Node):
    """A property used as a condition."""
    operand: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.operand.eval(props)
        if v is None:
            return None
        return v if isinstance(v, bool) else False


@dataclass(frozen=True)
class Not(Node):
    operand: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.operand.eval(props)
        return None if v is None else not v


@dataclass(frozen=True)
class And(Node):
    left: Node
    right: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        lv = self.left.eval(props)
        if lv is False:
            return False
        rv = self.right.eval(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True


@dataclass(frozen=True)
class Or(Node):
    left: Node
    right: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        lv = self.left.eval(props)
        if lv is True:
            return True
        rv = self.right.eval(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False


@dataclass(frozen=True)
class Equal(Node):
    """``=`` and IS NULL (against the NULL constant)."""
    left: Node
    right: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        lv, rv = self.left.eval(props), self.right.eval(props)
        if lv is None and rv is None:
            return True
        if lv is None:
            return None
        if rv is None:
            return False
        return java_compare(lv, rv) == 0


ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0,
}


@dataclass(frozen=True)
class Ordering(Node):
    op: str
    left: Node
    right: Node
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        lv = self.left.eval(props)
        if lv is None:
            return None
        rv = self.right.eval(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            lv, rv = java_double(lv), java_double(rv)     # strings are ordered as numbers
        return ORDERINGS[self.op](java_compare(lv, rv))


@dataclass(frozen=True)
class In(Node):
    operand: Property
    values: frozenset[str]
    negated: bool
    boolean = True

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.operand.eval(props)
        if not isinstance(v, str):
            return None
        return (v in self.values) != self.negated


# ------------------------------------------------------------------ tokens

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
# Keywords of Apache's newer grammars that the embedded broker does not evaluate
UNSUPPORTED_KEYWORDS = frozenset({"CONTAINS", "STARTSWITH", "ENDSWITH"})

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<decimal>0|[1-9][0-9]*[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str      # "float", "decimal", "string", "id", "op", a keyword, or "end"
    text: str
    at: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            # raised only if the parser reads this far (Apache's lexer is lazy, see _Parser)
            tokens.append(Token("error", f"Lexical error at column {pos + 1}: {text[pos]!r}", pos))
            return tokens
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment"):
            word = m.group().upper()
            if kind == "id" and word in UNSUPPORTED_KEYWORDS:
                tokens.append(Token("error", f"{word} is not supported by the embedded broker", pos))
                return tokens
            tokens.append(Token(word if kind == "id" and word in KEYWORDS else kind, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


# ------------------------------------------------------------------ parser

def _decimal(text: str) -> Constant:
    digits = text.rstrip("lL")
    value = int(digits)
    if value > LONG_MAX:
        raise SelectorError(f"Invalid MessageSelector. For input string: \"{digits}\"")
    return Constant(value if value <= INT_MAX else Long(value))


def _float(text: str) -> Constant:
    value = float(text)
    if value > DOUBLE_MAX:
        raise SelectorError(f"Invalid MessageSelector. {text} is greater than {DOUBLE_MAX}")
    if value < DOUBLE_MIN:
        raise SelectorError(f"Invalid MessageSelector. {text} is less than {DOUBLE_MIN}")
    return Constant(value)


def _string(text: str) -> str:
    return text[1:-1].replace("''", "'")


def check_ordering_operand(node: Node) -> None:
    """Only numbers (or what is not known before evaluation) can be ordered."""
    if isinstance(node, Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise SelectorError(f"Invalid MessageSelector. Value '{node.value}' cannot be compared.")
    elif node.boolean:
        raise SelectorError("Invalid MessageSelector. A condition cannot be compared.")


def check_equal_operands(left: Node, right: Node) -> None:
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise SelectorError("Invalid MessageSelector. 'NULL' cannot be compared.")
    if isinstance(left, Constant) and isinstance(right, Constant) and left.boolean and not right.boolean:
        raise SelectorError(f"Invalid MessageSelector. '{left.value}' cannot be compared with '{right.value}'")


class _Parser:
    """Recursive descent over Apache's grammar. As Apache's generated parser, it reads one
    token past the expression (two after IS or NOT) and ignores whatever follows: a
    selector ``a = 1 b`` compiles as ``a = 1``, and a lexical error further on is never
    seen."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> Token:
        t = self.tokens[min(self.i + ahead, len(self.tokens) - 1)]
        if t.kind == "error":
            raise SelectorError(f"Invalid MessageSelector. {t.text}")
        return t

    def take(self, kind: str, text: str | None = None) -> Token:
        t = self.peek()
        if t.kind != kind or (text is not None and t.text != text):
            want = text or kind
            raise SelectorError(f"Invalid MessageSelector. Encountered {t.text or '<EOF>'!r} at column "
                                f"{t.at + 1}, expected {want}")
        self.i += 1
        return t

    def at(self, kind: str, text: str | None = None, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t.kind == kind and (text is None or t.text == text)

    @staticmethod
    def condition(node: Node) -> Node:
        """Apache's ``asBooleanExpression``."""
        if node.boolean:
            return node
        if isinstance(node, Property):
            return BooleanCast(node)
        raise SelectorError(f"Invalid MessageSelector. Expression will not result in a boolean value: {node}")

    def selector(self) -> Node:
        return self.condition(self.or_expr())

    def or_expr(self) -> Node:
        left = self.and_expr()
        while self.at("OR"):
            self.i += 1
            left = Or(self.condition(left), self.condition(self.and_expr()))
        return left

    def and_expr(self) -> Node:
        left = self.equality()
        while self.at("AND"):
            self.i += 1
            left = And(self.condition(left), self.condition(self.equality()))
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            if self.at("op", "="):
                self.i += 1
                right = self.comparison()
                check_equal_operands(left, right)
                left = Equal(left, right)
            elif self.at("op", "<>"):
                self.i += 1
                right = self.comparison()
                check_equal_operands(left, right)
                left = Not(Equal(left, right))
            elif self.at("IS") and self.at("NULL", ahead=1):
                self.i += 2
                left = Equal(left, Constant(None))
            elif self.at("IS"):
                self.i += 1
                self.take("NOT")
                self.take("NULL")
                left = Not(Equal(left, Constant(None)))
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            t = self.peek()
            negated = t.kind == "NOT" and self.peek(1).kind in ("BETWEEN", "IN")
            if t.kind == "op" and t.text in ORDERINGS:
                self.i += 1
                right = self.unary()
                check_ordering_operand(left)
                check_ordering_operand(right)
                left = Ordering(t.text, left, right)
            elif t.kind == "BETWEEN" or (negated and self.peek(1).kind == "BETWEEN"):
                self.i += 2 if negated else 1
                low = self.unary()
                self.take("AND")
                high = self.unary()
                left = self.between(left, low, high, negated)
            elif t.kind == "IN" or negated:
                self.i += 2 if negated else 1
                left = self.in_list(left, negated)
            else:
                return left

    def between(self, value: Node, low: Node, high: Node, negated: bool) -> Node:
        if negated:
            return Or(self.ordering("<", value, low), self.ordering(">", value, high))
        if isinstance(low, Constant) and isinstance(high, Constant):
            if low.value is None or high.value is None:
                raise SelectorError("Invalid MessageSelector. Illegal values of between, values can not be null!")
            try:
                reversed_ = java_compare(high.value, low.value) < 0
            except EvalError as exc:
                raise SelectorError(f"Invalid MessageSelector. {exc}") from None
            if reversed_:
                raise SelectorError(f"Invalid MessageSelector. Illegal values of between, left value({low.value}) "
                                    f"must less than or equal to right value({high.value})")
        return And(self.ordering(">=", value, low), self.ordering("<=", value, high))

    @staticmethod
    def ordering(op: str, left: Node, right: Node) -> Node:
        check_ordering_operand(left)
        check_ordering_operand(right)
        return Ordering(op, left, right)

    def in_list(self, left: Node, negated: bool) -> Node:
        self.take("op", "(")
        values = [_string(self.take("string").text)]
        while self.at("op", ","):
            self.i += 1
            values.append(_string(self.take("string").text))
        self.take("op", ")")
        if not isinstance(left, Property):
            raise SelectorError(f"Invalid MessageSelector. Expected a property for In expression, got: {left}")
        return In(left, frozenset(values), negated)

    def unary(self) -> Node:
        if self.at("op", "+"):
            self.i += 1
            return self.unary()
        if self.at("op", "-"):
            self.i += 1
            return Negate(self.unary())
        if self.at("NOT"):
            self.i += 1
            return Not(self.condition(self.unary()))
        return self.primary()

    def primary(self) -> Node:
        t = self.peek()
        self.i += 1
        if t.kind == "string":
            return Constant(_string(t.text))
        if t.kind == "decimal":
            return _decimal(t.text)
        if t.kind == "float":
            return _float(t.text)
        if t.kind in ("TRUE", "FALSE"):
            return Constant(t.kind == "TRUE")
        if t.kind == "NULL":
            return Constant(None)
        if t.kind == "id":
            return Property(t.text)
        if t.kind == "op" and t.text == "(":
            inner = self.or_expr()
            self.take("op", ")")
            return inner
        self.i -= 1
        raise SelectorError(f"Invalid MessageSelector. Encountered {t.text or '<EOF>'!r} at column {t.at + 1}")


@dataclass(frozen=True)
class Selector:
    text: str
    root: Node

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        """TRUE, FALSE or None (unknown); EvalError where Apache's evaluation raises."""
        return self.root.eval(properties)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether the broker delivers a message with these properties."""
        try:
            return self.root.eval(properties) is True
        except EvalError:
            return False


@functools.lru_cache(maxsize=256)
def compile_selector(text: str) -> Selector:
    """The compiled selector; SelectorError for an expression Apache refuses."""
    if not text or not text.strip():
        raise SelectorError("Invalid MessageSelector. The expression is empty")
    return Selector(text, _Parser(text).selector())
