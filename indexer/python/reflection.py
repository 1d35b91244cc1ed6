"""Names looked up at run time, as patterns of their written parts.

``getattr(kernels, "run_" + kind)``, ``getattr(torch.ops.ns, f"{name}_out")``,
``globals()["_impl_" + x]``, ``importlib.import_module("pkg.plugins." + name)``: the name
is not written, but its literal parts bound what it can be. The extractor records each as
a ``py`` ref to ``<owner>.<pattern>`` (``*`` for every computed part, attrs
``pattern``), and the resolver matches the pattern against what the owner holds: a
module's definitions, bindings and submodules, a class's members and its bases', the ops
of a ``torch.ops`` namespace (``indexer.python.resolve``). A name with no written part at
all (``getattr(obj, name)``) matches everything the owner holds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from functools import lru_cache

WILDCARD = "*"
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]")
_BRACES = re.compile(r"\{[^{}]*\}")


Strings = Callable[[str], "str | None"]  # a variable's pattern, where the scope knows it


def name_pattern(expr: ast.expr, strings: Strings = lambda name: None) -> str:
    """The glob of the strings ``expr`` can be: its literal parts, ``*`` for the rest;
    ``strings`` gives the pattern of a variable assigned a string (``f"_{name}"``)."""
    return re.sub(r"\*+", WILDCARD, _parts(expr, strings))


def string_pattern(expr: ast.expr, strings: Strings = lambda name: None) -> str | None:
    """``name_pattern`` of an expression that builds a string, else None."""
    if isinstance(expr, ast.Constant) and not isinstance(expr.value, str):
        return None
    if isinstance(expr, (ast.Constant, ast.JoinedStr, ast.BinOp)) or _is_format(expr):
        return name_pattern(expr, strings)
    return None


def _parts(expr: ast.expr, strings: Strings) -> str:
    if isinstance(expr, ast.Constant):
        return expr.value if isinstance(expr.value, str) else WILDCARD
    if isinstance(expr, ast.Name):
        return strings(expr.id) or WILDCARD
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _parts(expr.left, strings) + _parts(expr.right, strings)
    if isinstance(expr, ast.JoinedStr):
        return "".join(
            value.value if isinstance(value, ast.Constant) else _formatted(value, strings)
            for value in expr.values
        )
    if (
        isinstance(expr, ast.BinOp)
        and isinstance(expr.op, ast.Mod)
        and isinstance(expr.left, ast.Constant)
        and isinstance(expr.left.value, str)
    ):
        return _PERCENT.sub(WILDCARD, expr.left.value)  # "impl_%s" % name
    if _is_format(expr):
        return _BRACES.sub(WILDCARD, expr.func.value.value)  # "impl_{}".format(name)
    return WILDCARD


def _formatted(value: ast.expr, strings: Strings) -> str:
    """A ``{...}`` of an f-string: a variable's known pattern, else anything."""
    if isinstance(value, ast.FormattedValue) and value.format_spec is None:
        return _parts(value.value, strings) if isinstance(value.value, ast.Name) else WILDCARD
    return WILDCARD


def _is_format(expr: ast.expr) -> bool:
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "format"
        and isinstance(expr.func.value, ast.Constant)
        and isinstance(expr.func.value.value, str)
    )


def is_pattern(name: str) -> bool:
    return WILDCARD in name


@lru_cache(maxsize=4096)
def matcher(pattern: str) -> re.Pattern[str]:
    """A regex matching the names ``pattern`` (a glob of ``*`` only) stands for."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split(WILDCARD)) + r"\Z")


def lookup_call(call: ast.Call) -> tuple[ast.expr, ast.expr] | None:
    """(owner, name) of ``getattr(owner, name[, default])``, else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "getattr" and len(call.args) >= 2:
        return call.args[0], call.args[1]
    return None


def globals_lookup(node: ast.expr) -> ast.expr | None:
    """The name expression of ``globals()[name]`` or ``globals().get(name)``, else None."""
    if isinstance(node, ast.Subscript) and _is_globals_call(node.value):
        return node.slice
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and _is_globals_call(node.func.value)
    ):
        return node.args[0]
    return None


def _is_globals_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("globals", "vars")
        and not node.args
    )
