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
import re
import textwrap
from collections.abc import Callable, Iterator
from functools import lru_cache

from indexer.python.class_source import class_defines
from indexer.python.pysource import FUNCTIONS, FunctionNode, parse, statements, targets

_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)


# After a name at the start of a line: ``= [`` / ``= {`` / ``= "..."`` / ``= set(`` /
# ``= Trie(`` (groups: the literal's opening, the callee), ``: T =`` and ``|=`` too.
_ASSIGNED = re.compile(
    r"[ \t]*(?::[^=\n]+)?\|?=(?!=)[ \t]*(?:([\[{'\"]|[rbf]+['\"])|(\w+)[ \t]*\()"
)


@lru_cache(maxsize=4096)
def _assignment_of(name: str) -> re.Pattern[str]:
    # A literal first, so the regex engine scans for the name rather than trying every
    # position; line starts are checked by the caller.
    return re.compile(re.escape(name) + _ASSIGNED.pattern)


def _assignments(text: str, name: str) -> Iterator[re.Match[str]]:
    """Each line of ``text`` that starts with ``name`` (after indentation) and gives it
    a literal or a call's value (groups: the literal's opening, the callee). A match
    never spans lines, so each such line is found."""
    for match in _assignment_of(name).finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if not text[line_start : match.start()].strip(" \t"):
            yield match


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
    """Receiver typing over the files a ``tree(path)`` callable parses (cached there);
    ``lines(path)`` gives a file's lines, to rule most calls out before parsing."""

    def __init__(
        self,
        tree: Callable[[str], ast.Module | None],
        lines: Callable[[str], list[str] | None],
    ) -> None:
        self._tree = tree
        self._lines = lines
        self._globals: dict[tuple[str, str, str], bool] = {}
        self._answers: dict[tuple[str, int, str], bool] = {}
        self._texts: dict[str, str] = {}
        self._typed: dict[tuple[str, str], bool] = {}
        self._file_classes: dict[str, set[str]] = {}
        # Judgments that depend only on a file's text, kept per walker: a selection asks
        # of the same functions and classes for many lines and many receivers.
        self._functions: dict[tuple[str, int, int], FunctionNode | None] = {}
        self._bound: dict[tuple[str, int, int], set[str]] = {}
        self._function_typed: dict[tuple[str, int, int, str], set[str]] = {}
        self._spans: dict[tuple[str, int], tuple[int, int] | None] = {}
        self._defines_method: dict[tuple[str, str, str], bool] = {}

    def not_a_tensor_at(self, path: str, line: int, method: str) -> bool:
        """Whether every ``.method(...)`` call on ``line`` of ``path`` has a receiver the
        file shows is no tensor."""
        key = (path, line, method)
        if key not in self._answers:
            self._answers[key] = self._not_a_tensor_at(path, line, method)
        return self._answers[key]

    def _not_a_tensor_at(self, path: str, line: int, method: str) -> bool:
        lines = self._lines(path)
        if lines is None or not 0 < line <= len(lines):
            return False
        text = lines[line - 1]
        named = re.escape(method)
        receivers = set(re.findall(rf"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*{named}\s*\(", text))
        if not receivers or len(re.findall(rf"\.\s*{named}\s*\(", text)) != len(
            re.findall(rf"(?<![\w.])[A-Za-z_]\w*\s*\.\s*{named}\s*\(", text)
        ):
            return False  # some receiver is no plain name (self.x.add, f().add)
        if not all(self._may_be_typed(path, receiver) for receiver in receivers):
            return False  # decided from the text (the common case)
        pending = set(receivers)
        span = self._enclosing(path, lines, line - 1)
        # From the innermost function outwards: a name not bound in one is a free variable
        # of the next (a closure), then a module-level name.
        while span is not None and pending:
            if self._function(path, lines, span) is None:
                return False
            local = pending & self._bound[(path, *span)]
            if not local <= self._function_names(path, lines, span, method):
                return False
            pending -= local
            span = self._enclosing(path, lines, span[0])
        return all(self._global_typed(path, receiver, method) for receiver in pending)

    def _enclosing(self, path: str, lines: list[str], index: int) -> tuple[int, int] | None:
        key = (path, index)
        if key not in self._spans:
            self._spans[key] = _enclosing_function(lines, index)
        return self._spans[key]

    def _function(self, path: str, lines: list[str], span: tuple[int, int]) -> FunctionNode | None:
        """The function at ``span`` parsed alone (whole library files cost ~50 ms each to
        parse), once per walker; None when it does not parse as one."""
        key = (path, *span)
        if key not in self._functions:
            snippet = parse(textwrap.dedent("\n".join(lines[span[0] : span[1]])))
            function = snippet.body[0] if snippet is not None and snippet.body else None
            if not isinstance(function, FUNCTIONS):
                function = None
            self._functions[key] = function
            if function is not None:
                self._bound[key] = _bound_names(function)
        return self._functions[key]

    def _function_names(
        self, path: str, lines: list[str], span: tuple[int, int], method: str
    ) -> set[str]:
        """The names the function at ``span`` binds only to values no tensor can be, for
        receivers of ``method`` (instances of the file's classes defining it count)."""
        key = (path, *span, method)
        if key not in self._function_typed:
            function = self._function(path, lines, span)
            typed = _typer(lambda name: self._defines(path, method, name))
            self._function_typed[key] = (
                _function_names(function, typed) if function is not None else set()
            )
        return self._function_typed[key]

    def _text(self, path: str) -> str:
        if path not in self._texts:
            self._texts[path] = "\n".join(self._lines(path) or ())
        return self._texts[path]

    def _may_be_typed(self, path: str, name: str) -> bool:
        """A textual filter, before parsing: is ``name`` ever given a container literal,
        a container, or an instance of a class the file defines? (One regex pass per
        file and name: an assignment matches within one line, so the matches for one
        name are those a pass over every assignment would find.)"""
        key = (path, name)
        if key not in self._typed:
            self._typed[key] = any(
                match.group(1)
                or match.group(2) in _CONTAINER_TYPES
                or match.group(2) in self._class_names(path)
                for match in _assignments(self._text(path), name)
            )
        return self._typed[key]

    def _class_names(self, path: str) -> set[str]:
        if path not in self._file_classes:
            self._file_classes[path] = set(_CLASS.findall(self._text(path)))
        return self._file_classes[path]

    def _defines(self, path: str, method: str, name: str) -> bool:
        """Whether the file's module-level class ``name`` defines ``method``."""
        key = (path, name, method)
        if key not in self._defines_method:
            self._defines_method[key] = class_defines(
                self._text(path), self._lines(path) or [], name, method, lambda: self._tree(path)
            )
        return self._defines_method[key]

    def module_level(self, path: str, func: ast.expr) -> bool:
        """Whether ``func`` is ``NAME.method`` with ``NAME`` a module-level name of ``path``
        the file shows is no tensor."""
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return False
        return self._global_typed(path, func.value.id, func.attr)

    def _global_typed(self, path: str, name: str, method: str) -> bool:
        """Whether ``name`` is assigned at module level and every assignment of it in the
        file (at any depth: a same-named local only makes this more cautious) gives an
        accepted value. Each assignment statement is parsed alone."""
        key = (path, name, method)
        if key in self._globals:
            return self._globals[key]
        text = self._text(path)
        answer = _assigned_at_module_level(name, text) and self._may_be_typed(path, name)
        if answer and _bound_otherwise(name, text):
            answer = False  # also a parameter, a loop variable, an import...
        if answer:
            lines = self._lines(path) or []
            typed = _typer(lambda callee: self._defines(path, method, callee))
            pattern = re.compile(rf"^\s*{re.escape(name)}\s*(?::[^=\n]+)?\|?=(?!=)")
            for index, line in enumerate(lines):
                if pattern.match(line):
                    value = _assigned_value(lines, index)
                    if value is None or not typed(value):
                        answer = False
                        break
        self._globals[key] = answer
        return answer


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _enclosing_function(lines: list[str], index: int) -> tuple[int, int] | None:
    """(first, end) line indexes of the innermost ``def`` around line ``index``, found by
    indentation; None at module level or in a class body."""
    limit = _indent(lines[index])
    start = None
    for i in range(index - 1, -1, -1):
        stripped = lines[i].lstrip()
        if not stripped or stripped.startswith(("#", ")", "]", "}")):
            continue  # blank, comment, or the end of a multi-line signature
        if _indent(lines[i]) >= limit:
            continue
        if stripped.startswith(("def ", "async def ")):
            start = i
            break
        if stripped.startswith("class ") or _indent(lines[i]) == 0:
            return None
        limit = _indent(lines[i])
    if start is None:
        return None
    level = _indent(lines[start])
    end = start + 1
    while end < len(lines):
        stripped = lines[end].lstrip()
        closes = stripped.startswith((")", "]", "}"))  # the end of a multi-line signature
        if (
            stripped
            and not stripped.startswith("#")
            and _indent(lines[end]) <= level
            and not closes
        ):
            break
        end += 1
    return start, end


def _assigned_value(lines: list[str], index: int) -> ast.expr | None:
    """The value of the assignment starting on line ``index`` (parsed alone, with as
    many following lines as it spans; None if it cannot be read)."""
    for end in range(index + 1, min(index + 60, len(lines)) + 1):
        module = parse(textwrap.dedent("\n".join(lines[index:end])))
        if module is None:
            continue
        stmt = module.body[0] if module.body else None
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return stmt.value
        return None
    return None


def _bound_otherwise(name: str, text: str) -> bool:
    """Whether ``name`` is bound anywhere in the file other than by ``name = ...``: an
    import, a parameter, a ``for``/``with``/``except``/walrus/lambda target. (Each
    pattern starts at a word; see ``_found_at``.)"""
    n = re.escape(name)
    return any(
        _found_at(re.compile(pattern), text, _word_start)
        for pattern in (
            rf"import\b[^\n]*\b{n}\b",
            rf"def\s+\w+\s*\([^)]*\b{n}\b",
            rf"for\s+[^:\n]*\b{n}\b[^:\n]*\bin\b",
            rf"as\s+{n}\b",
            rf"{n}\s*:=",
            rf"lambda\b[^:\n]*\b{n}\b[^:\n]*:",
        )
    )


def _assigned_at_module_level(name: str, text: str) -> bool:
    pattern = re.compile(rf"{re.escape(name)}\s*(?::[^=\n]+)?\|?=")
    return _found_at(pattern, text, _line_start)


def _word_start(text: str, position: int) -> bool:
    return position == 0 or not (text[position - 1].isalnum() or text[position - 1] == "_")


def _line_start(text: str, position: int) -> bool:
    return position == 0 or text[position - 1] == "\n"


def _found_at(pattern: re.Pattern[str], text: str, start_ok: Callable[[str, int], bool]) -> bool:
    """Whether ``pattern`` matches at a position of ``text`` that ``start_ok`` accepts:
    ``\\bword...`` or ``^word...`` (MULTILINE) written with the anchor checked here, so
    the regex engine scans for its leading literal instead of trying every position
    (25x faster on library files). Every match start is tried, as the anchored search
    would."""
    match = pattern.search(text)
    while match is not None:
        if start_ok(text, match.start()):
            return True
        match = pattern.search(text, match.start() + 1)
    return False


def _typer(local_class: Callable[[str], bool]) -> Callable[[ast.expr | None], bool]:
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
            return callee.id in _CONTAINER_TYPES or local_class(callee.id)
        return isinstance(callee, ast.Attribute) and callee.attr in _CONTAINER_TYPES

    return typed


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
        for target in targets(stmt):
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
    for stmt in statements(function.body, blocks=True, definitions=False):
        for target in targets(stmt):
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _function_names(
    function: ast.FunctionDef | ast.AsyncFunctionDef, typed: Callable[[ast.expr | None], bool]
) -> set[str]:
    """Names the function binds only to accepted values; a parameter only when it
    defaults to None and is given such a value in the body."""
    names = set(_typed_names(statements(function.body, blocks=True, definitions=False), typed))
    for name, default in _parameters(function).items():
        if name in names and not (isinstance(default, ast.Constant) and default.value is None):
            names.discard(name)
    return names
