"""How directly a test tests what a query names: the order ``tests`` lists tests in.

Tiers, most direct first (:func:`tier`):

0. the test is what the query names;
1. the test's own code names the op or function (an edge from the test to a start);
2. an OpInfo-driven test whose ``@ops(...)`` list holds the op's entry;
3. tests reached further away (through library code, fixtures, helpers).

An ``@ops`` list is honoured (:class:`OpsFilters`): ``@ops([op for op in op_db if op.name
in aliasing_ops])``, ``@ops(filter(lambda op: "linalg" in op.name, op_db))`` keep only
the entries their condition holds for, read from the test file's own literals; a test
whose list excludes the op's entry is dropped. A list too long for the index's attribute
(abbreviated with "...") is read in full from the test's own decorator in the source. A condition that cannot be read keeps the
test (select more, never less), in tier 3.

A source of better evidence ranks before these tiers: tests a record saw execute the op
or function (:class:`RecordedIds`) come first.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NAMED, DIRECT, OPINFO, FURTHER = range(4)
TIER_TEXT = {
    NAMED: "named",
    DIRECT: "names it",
    OPINFO: "OpInfo test",
    FURTHER: "further away",
}
_OP_FIELDS = ("name", "aten_name")


def tier(depth: int, via_kind: str | None) -> int:
    """The tier of a test reached at ``depth`` whose first hop ends at a ``via_kind``."""
    if depth == 0:
        return NAMED
    if via_kind == "opinfo":
        return OPINFO
    return DIRECT if depth == 1 else FURTHER


class RecordedIds:
    """Whether a test the index holds is one a record saw run: recorded node ids
    (``test/test_x.py::TestFooCPU::test_bar_cpu_float32[p]``) matched to the index's tests
    (``test/test_x.py::TestFoo::test_bar``: device-generic classes and their tests take
    a device and dtype suffix when instantiated), files and classes."""

    def __init__(self, nodeids: Iterable[str]) -> None:
        self.by_file: dict[str, list[list[str]]] = {}
        for nodeid in nodeids:
            path, _, rest = nodeid.partition("::")
            parts = rest.split("[", 1)[0].split("::") if rest else []
            self.by_file.setdefault(path, []).append(parts)

    def ran(self, kind: str, qualname: str) -> bool:
        path, _, rest = qualname.partition("::")
        recorded = self.by_file.get(path)
        if not recorded:
            return False
        if kind == "test_file":
            return True
        parts = rest.split("::")
        return any(_same_test(parts, kind, seen) for seen in recorded)


def _same_test(parts: list[str], kind: str, recorded: list[str]) -> bool:
    """Whether the index's ``parts`` ([Class, ]name) stand for the recorded ones."""
    if kind == "test_class":
        return len(recorded) > 1 and recorded[0].startswith(parts[0])
    if len(parts) != len(recorded):
        return False
    if len(parts) == 1:
        return parts[0] == recorded[0]
    (cls, name), (seen_cls, seen_name) = parts, recorded
    if cls == seen_cls:
        return name == seen_name
    return seen_cls.startswith(cls) and seen_name.startswith(name + "_")


class OpsFilters:
    """Evaluates ``@ops`` list conditions against one OpInfo entry, reading module-level
    string collections from test files (each file parsed once per index)."""

    def __init__(self, source_root: str | None) -> None:
        self.root = Path(source_root) if source_root else None
        self._literals: dict[tuple[str, str], frozenset[str] | None] = {}
        self._lock = threading.Lock()

    def holds(
        self, list_text: str | None, path: str, entry: dict[str, Any], line: int | None = None
    ) -> bool | None:
        """Whether the entry is in the list ``list_text`` (the decorator's argument as
        written, of the test defined at ``path``:``line``): True, False, or None when the
        list's condition cannot be read."""
        if list_text and list_text.endswith("...") and line is not None:
            list_text = self._full_list(path, line) or list_text
        if not list_text or list_text.endswith("..."):
            return None if list_text else True
        condition = _parsed(list_text)
        if condition is None:
            return None
        if condition is _NO_FILTER:
            return True  # every entry of the lists it names
        variable, test = condition
        return self._evaluate(test, variable, path, entry)

    def _evaluate(self, test: ast.expr, var: str, path: str, entry: dict[str, Any]) -> bool | None:
        if isinstance(test, ast.BoolOp):
            values = [self._evaluate(value, var, path, entry) for value in test.values]
            if isinstance(test.op, ast.And):
                if False in values:
                    return False
                return None if None in values else True
            if True in values:
                return True
            return None if None in values else False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._evaluate(test.operand, var, path, entry)
            return None if inner is None else not inner
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, right, op = test.left, test.comparators[0], test.ops[0]
            if isinstance(op, (ast.In, ast.NotIn)):
                found = self._membership(left, right, var, path, entry)
                if found is None:
                    return None
                return found if isinstance(op, ast.In) else not found
            if isinstance(op, (ast.Eq, ast.NotEq)):
                value, constant = _field(left, var, entry), _string(right)
                if value is None or constant is None:
                    return None
                return (value == constant) == isinstance(op, ast.Eq)
        return None

    def _membership(
        self, left: ast.expr, right: ast.expr, var: str, path: str, entry: dict[str, Any]
    ) -> bool | None:
        needle = _string(left)
        if needle is not None:  # "linalg" in op.name
            value = _field(right, var, entry)
            return None if value is None else needle in value
        value = _field(left, var, entry)
        if value is None:
            return None
        if isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            names = [_string(element) for element in right.elts]
            return None if None in names else value in names
        if isinstance(right, ast.Name):
            names = self._module_strings(path, right.id)
            return None if names is None else value in names
        return None

    def _full_list(self, path: str, line: int) -> str | None:
        """The whole first argument of the ``@ops(...)`` decorating the test whose ``def``
        is at ``line`` (the index keeps 120 characters of it)."""
        key = (path, f"@ops:{line}")
        with self._lock:
            if key in self._literals:
                found = self._literals[key]
                return next(iter(found)) if found else None
        text = self._decorator_list(path, line)
        with self._lock:
            self._literals[key] = frozenset([text]) if text else None
        return text

    def _decorator_list(self, path: str, line: int) -> str | None:
        if self.root is None:
            return None
        try:
            lines = (self.root / path).read_text(encoding="utf-8", errors="replace").split("\n")
        except OSError:
            return None
        above = "\n".join(lines[max(0, line - 1 - _DECORATOR_LINES) : max(0, line - 1)])
        starts = list(_OPS_DECORATOR.finditer(above))
        if not starts:
            return None
        start = above.index("@", starts[-1].start()) + 1  # after the "@"
        statement = above[start : _statement_end(above, start)]
        try:
            call = ast.parse(statement.strip(), mode="eval").body
        except SyntaxError:
            return None
        if not isinstance(call, ast.Call) or not call.args:
            return None
        return ast.unparse(call.args[0])

    def _module_strings(self, path: str, name: str) -> frozenset[str] | None:
        """The strings of ``name = [...]`` (a list, tuple or set literal, or one wrapped
        in ``set(...)``) at module level in ``path``; None if it is not one. Only that
        statement is parsed: test files run to thousands of lines."""
        key = (path, name)
        with self._lock:
            if key in self._literals:
                return self._literals[key]
        found = self._read_strings(path, name)
        with self._lock:
            self._literals[key] = found
        return found

    def _read_strings(self, path: str, name: str) -> frozenset[str] | None:
        if self.root is None:
            return None
        try:
            text = (self.root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        match = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=", text, re.M)
        if match is None:
            return None
        statement = text[match.start() : _statement_end(text, match.end())]
        try:
            tree = ast.parse(statement)
        except SyntaxError:
            return None
        value = getattr(tree.body[0], "value", None) if tree.body else None
        if isinstance(value, ast.Call) and len(value.args) == 1:
            value = value.args[0]  # set([...]), frozenset({...}), tuple(...)
        if not isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            return None
        names = [_string(element) for element in value.elts]
        return None if None in names else frozenset(names)  # type: ignore[arg-type]


def _statement_end(text: str, start: int) -> int:
    """Where the statement going on at ``start`` ends: the first newline outside
    brackets and strings (a rough scan: comments and string prefixes aside)."""
    depth = 0
    quote = ""
    position = start
    while position < len(text):
        char = text[position]
        if quote:
            if char == "\\":
                position += 1
            elif text.startswith(quote, position):
                position += len(quote) - 1
                quote = ""
        elif char in "\"'":
            quote = (
                text[position : position + 3]
                if text[position : position + 3] in ('"""', "'''")
                else char
            )
            position += len(quote) - 1
        elif char == "#":
            newline = text.find("\n", position)
            position = len(text) if newline < 0 else newline - 1
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "\n" and depth <= 0:
            return position
        position += 1
    return len(text)


_NO_FILTER = ("", ast.Constant(True))
_OPS_DECORATOR = re.compile(r"^[ \t]*@(?:\w+\.)*ops\(", re.M)
_DECORATOR_LINES = 60  # how far above a def its @ops decorator may start


@functools.lru_cache(maxsize=1024)
def _parsed(list_text: str) -> tuple[str, ast.expr] | None:
    """(loop variable, condition) of an @ops list, ``_NO_FILTER`` if it filters nothing,
    None if it cannot be read (parsed once per text: OpInfo tests share a few lists)."""
    try:
        expr = ast.parse(list_text, mode="eval").body
    except SyntaxError:
        return None
    return _condition(expr) or _NO_FILTER


def _condition(expr: ast.expr) -> tuple[str, ast.expr] | None:
    """(loop variable, condition) of ``[op for op in X if C]`` or ``filter(lambda op: C, X)``."""
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and len(expr.generators) == 1:
        generator = expr.generators[0]
        if isinstance(generator.target, ast.Name) and generator.ifs:
            test = generator.ifs[0]
            for more in generator.ifs[1:]:
                test = ast.BoolOp(op=ast.And(), values=[test, more])
            return generator.target.id, test
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "filter"
        and expr.args
        and isinstance(expr.args[0], ast.Lambda)
        and len(expr.args[0].args.args) == 1
    ):
        return expr.args[0].args.args[0].arg, expr.args[0].body
    return None


def _string(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _field(node: ast.expr, var: str, entry: dict[str, Any]) -> str | None:
    """``op.name`` / ``op.aten_name`` of the entry, for the loop variable ``var``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == var
        and node.attr in _OP_FIELDS
    ):
        value = entry.get(node.attr) or (entry.get("name") if node.attr == "aten_name" else None)
        return str(value) if value is not None else None
    return None
