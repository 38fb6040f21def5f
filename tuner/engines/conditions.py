"""The rule-condition language of the engine specs: a small, safe subset of Python expressions.

Conditions are checked when an engine YAML is loaded (so a typo fails at once, naming the rule) and
evaluated with Kleene logic against the facts of a config: a fact that is not known yet (UNKNOWN) makes
the condition undecided rather than false."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from tuner.errors import InputError

Severity = Literal["prune", "note"]


@dataclass(frozen=True)
class Verdict:
    rule_id: str
    severity: Severity
    reason: str
    source: str


class _Sentinel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# Not set: the engine's default applies (``default()`` supplies it). Undecided: a value that exists
# but is not known here (a param ``tune plan`` has not fixed yet); nothing can be concluded from it.
MISSING = _Sentinel("MISSING")


UNKNOWN = _Sentinel("UNKNOWN")


_VOID = (MISSING, UNKNOWN)


ROOTS = ("knobs", "hw", "engine", "workload", "model")


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


_ARITH: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


_HELPERS = {"known": 1, "default": 2}


@lru_cache(maxsize=None)
def compile_condition(text: str, rule_id: str = "condition") -> ast.Expression:
    """Parse a rule condition and reject anything outside the language, at engine-load time."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise InputError(f"rule {rule_id}: cannot parse condition {text!r}: {exc.msg}") from None
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        _check_node(node, rule_id, text)
        if isinstance(node, ast.Name) and node.id in _HELPERS and id(node) not in called:
            raise InputError(f"rule {rule_id}: {node.id} must be called ({text!r})")
    return tree


def _check_node(node: ast.AST, rule_id: str, text: str) -> None:
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
               ast.Compare, ast.BinOp, ast.Constant, ast.Name, ast.Attribute, ast.Load,
               ast.Tuple, ast.List, ast.Call, *_COMPARE, *_ARITH)
    if not isinstance(node, allowed):
        raise InputError(f"rule {rule_id}: {type(node).__name__} is not allowed in a condition "
                         f"({text!r})")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool,
                                                                       type(None))):
        raise InputError(f"rule {rule_id}: constant {node.value!r} is not allowed ({text!r})")
    if isinstance(node, ast.Attribute) and (node.attr.startswith("_")
                                            or not isinstance(node.value, (ast.Name, ast.Attribute))):
        raise InputError(f"rule {rule_id}: bad attribute .{node.attr} in {text!r}")
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _HELPERS or node.keywords or len(node.args) != _HELPERS[name]:
            raise InputError(f"rule {rule_id}: only known(x) and default(x, fallback) may be "
                             f"called ({text!r})")
    if isinstance(node, ast.Name) and node.id not in ROOTS and node.id not in _HELPERS:
        raise InputError(f"rule {rule_id}: unknown name {node.id!r}; conditions start from "
                         f"{', '.join(ROOTS)} ({text!r})")


def evaluate(tree: ast.Expression, ctx: Mapping[str, Mapping[str, Any]], rule_id: str = "") -> Any:
    """True, False or UNKNOWN (Kleene logic); raises InputError for type errors in the rule."""
    try:
        value = _eval(tree.body, ctx)
    except TypeError as exc:
        raise InputError(f"rule {rule_id}: {exc}") from None
    return UNKNOWN if value is MISSING else value


def _eval(node: ast.AST, ctx: Mapping[str, Mapping[str, Any]]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return ctx.get(node.id, {})
    if isinstance(node, ast.Attribute):
        base = _eval(node.value, ctx)
        if base in _VOID:
            return base
        return base.get(node.attr, MISSING) if isinstance(base, Mapping) else MISSING
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, ctx) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, ctx)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, ctx)
        if v in _VOID:
            return UNKNOWN
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, ctx), _eval(node.right, ctx)
        if a in _VOID or b in _VOID:
            return UNKNOWN
        try:
            return _ARITH[type(node.op)](a, b)
        except ZeroDivisionError:
            return UNKNOWN
    if isinstance(node, ast.Compare):
        return _compare(node, ctx)
    assert isinstance(node, ast.Call)  # compile_condition allows nothing else
    args = [_eval(a, ctx) for a in node.args]
    if node.func.id == "known":
        return UNKNOWN if args[0] is UNKNOWN else args[0] is not MISSING
    return args[1] if args[0] is MISSING else args[0]


def _bool_op(node: ast.BoolOp, ctx: Mapping[str, Mapping[str, Any]]) -> Any:
    is_and = isinstance(node.op, ast.And)
    unknown = False
    for operand in node.values:
        v = _eval(operand, ctx)
        if v in _VOID:
            unknown = True
        elif bool(v) != is_and:  # False decides an `and`, True decides an `or`
            return not is_and
    return UNKNOWN if unknown else is_and


def _compare(node: ast.Compare, ctx: Mapping[str, Mapping[str, Any]]) -> Any:
    left = _eval(node.left, ctx)
    result: Any = True
    for op, right_node in zip(node.ops, node.comparators):
        right = _eval(right_node, ctx)
        if left in _VOID or right in _VOID:
            result = UNKNOWN
        elif isinstance(right, tuple) and isinstance(op, (ast.In, ast.NotIn)):
            found = _member(left, right)
            if found is UNKNOWN:
                result = UNKNOWN
            elif found != isinstance(op, ast.In):
                return False
        else:
            a, b = _coerce_versions(left, right)
            if not _COMPARE[type(op)](a, b):
                return False
        left = right
    return result


def _member(x: Any, items: tuple) -> Any:
    """Kleene membership: a known match decides; otherwise an unknown item leaves it open."""
    if any(i not in _VOID and i == x for i in items):
        return True
    return UNKNOWN if any(i in _VOID for i in items) else False


def _coerce_versions(a: Any, b: Any) -> tuple[Any, Any]:
    """``engine.version < "0.12"`` compares as versions, not as strings."""
    try:
        if isinstance(a, Version) and isinstance(b, str):
            return a, Version(b)
        if isinstance(b, Version) and isinstance(a, str):
            return Version(a), b
    except InvalidVersion as exc:
        raise TypeError(f"not a version: {exc}") from None
    return a, b


def render_reason(text: str, ctx: Mapping[str, Mapping[str, Any]]) -> str:
    """Fill ``{knobs.max_num_tokens}``-style references (only names, never format specs)."""
    def sub(m: re.Match) -> str:
        node: Any = ctx
        for part in m.group(1).split("."):
            node = node.get(part, MISSING) if isinstance(node, Mapping) else MISSING
        return "unset" if node is MISSING else "?" if node is UNKNOWN else str(node)

    return re.sub(r"\{([a-z_]+(?:\.[a-z_0-9]+)+)\}", sub, text)
