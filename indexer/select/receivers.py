"""Receivers that are not tensors: ``x.add(k)`` is an op only if ``x`` may be a tensor.

The index matches an untyped ``x.add(...)`` to the tensor method ``add`` (aten::add), so
library code keeping a set (``memo.add(module)``) or a trie (``PYTORCH_TRIE.add(src)``)
would seem to run the add kernel, and through module imports reach every test. Here a
call's receiver is typed from the file itself, and only where every binding of the name
agrees:

- a builtin container or string: ``memo = set()``, ``SKIP = {...}``, ``SKIP |= {...}``;
- an instance of a class defined at module level in the same file that defines the
  method: ``PYTORCH_TRIE = Trie()`` with ``class Trie: def add(...)``.

Names are looked up in the innermost enclosing function (its own statements, nested
definitions left out), else at module level. A parameter counts only when it defaults to
None and the body gives it such a value (``memo=None`` then ``memo = set()``); anything
else, including a name bound by an import, may be a tensor.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CONTAINER_NODES = (
    ast.Set,
    ast.Dict,
    ast.List,
    ast.Tuple,
    ast.SetComp,
    ast.DictComp,
    ast.ListComp,
    ast.JoinedStr,
)
# Builtin and standard-library containers (collections, weakref, queue).
_CONTAINER_TYPES = frozenset(
    {
        *("set", "dict", "list", "tuple", "frozenset", "str", "bytearray"),
        *("defaultdict", "OrderedDict", "deque", "Counter", "ChainMap"),
        *("WeakSet", "WeakValueDictionary", "WeakKeyDictionary", "Queue", "SimpleQueue"),
    }
)


class Receivers:
    """Receiver typing over the files a ``tree(path)`` callable parses (cached there)."""

    def __init__(self, tree: Callable[[str], ast.Module | None]) -> None:
        self._tree = tree
        self._module_names: dict[tuple[str, str], frozenset[str]] = {}

    def not_a_tensor_at(self, path: str, line: int, method: str) -> bool:
        """Whether every ``.method(...)`` call on ``line`` of ``path`` has a receiver the
        file shows is no tensor."""
        tree = self._tree(path)
        if tree is None:
            return False
        scope: ast.AST = tree
        for node in ast.walk(tree):
            if (
                isinstance(node, FUNCTIONS)
                and node.lineno <= line <= (node.end_lineno or node.lineno)
                and node.lineno > getattr(scope, "lineno", 0)
            ):
                scope = node  # the innermost function around the line
        calls = [
            node.func
            for node in ast.walk(scope)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == method
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ]
        if not calls or not all(isinstance(func.value, ast.Name) for func in calls):
            return False
        known = set(self._at_module_level(path, method))
        if isinstance(scope, FUNCTIONS):
            typed = _typer(_local_classes(tree, method))
            known = (known - _bound_names(scope)) | _function_names(scope, typed)
        return all(func.value.id in known for func in calls)

    def module_level(self, path: str, func: ast.expr) -> bool:
        """Whether ``func`` is ``NAME.method`` with ``NAME`` a module-level name of ``path``
        the file shows is no tensor."""
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return False
        return func.value.id in self._at_module_level(path, func.attr)

    def _at_module_level(self, path: str, method: str) -> frozenset[str]:
        key = (path, method)
        if key not in self._module_names:
            tree = self._tree(path)
            names: frozenset[str] = frozenset()
            if tree is not None:
                typed = _typer(_local_classes(tree, method))
                names = _typed_names(_flatten(tree.body), typed)
            self._module_names[key] = names
        return self._module_names[key]


def _local_classes(tree: ast.Module, method: str) -> frozenset[str]:
    """Module-level classes of the file that define ``method``."""
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(item, FUNCTIONS) and item.name == method for item in node.body)
    )


def _typer(classes: frozenset[str]) -> Callable[[ast.expr | None], bool]:
    def typed(value: ast.expr | None) -> bool:
        if isinstance(value, _CONTAINER_NODES):
            return True
        if isinstance(value, ast.Constant):
            return isinstance(value.value, str)
        if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.BitOr, ast.Add)):
            return typed(value.left)  # {...} | OTHER, [...] + OTHER: still a container
        if not isinstance(value, ast.Call):
            return False
        callee = value.func
        if isinstance(callee, ast.Name):
            return callee.id in _CONTAINER_TYPES or callee.id in classes
        return isinstance(callee, ast.Attribute) and callee.attr in _CONTAINER_TYPES

    return typed


def _flatten(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body and its blocks, nested definitions left out."""
    found: list[ast.stmt] = []
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (*FUNCTIONS, ast.ClassDef)):
            continue
        found.append(stmt)
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(stmt, field, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            stack.extend(handler.body)
    return found


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [stmt.target]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    return []


def _typed_names(
    statements: list[ast.stmt], typed: Callable[[ast.expr | None], bool]
) -> frozenset[str]:
    """Names every binding of which in ``statements`` is a value ``typed`` accepts."""
    good: set[str] = set()
    other: set[str] = set()
    for stmt in statements:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            other.update((alias.asname or alias.name).split(".")[0] for alias in stmt.names)
            continue
        value = (
            getattr(stmt, "value", None)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            else None
        )
        for target in _targets(stmt):
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    plain = target is name and value is not None
                    (good if plain and typed(value) else other).add(name.id)
    return frozenset(good - other)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr | None]:
    """Each parameter and its default (None when it has none)."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    found = dict(zip((a.arg for a in positional), [*defaults, *args.defaults], strict=False))
    found.update(zip((a.arg for a in args.kwonlyargs), args.kw_defaults, strict=False))
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            found[extra.arg] = None
    return found


def _bound_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set(_parameters(function))
    for stmt in _flatten(function.body):
        for target in _targets(stmt):
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _function_names(
    function: ast.FunctionDef | ast.AsyncFunctionDef, typed: Callable[[ast.expr | None], bool]
) -> set[str]:
    """Names the function binds only to accepted values; a parameter only when it
    defaults to None and is given such a value in the body."""
    names = set(_typed_names(_flatten(function.body), typed))
    for name, default in _parameters(function).items():
        if name in names and not (isinstance(default, ast.Constant) and default.value is None):
            names.discard(name)
    return names
