"""What a module-level statement does with a name it mentions: call it while the module
is imported, bind module names to it, or only pass it along.

The impact walk asks this when a module is reached because its top-level code names a
changed definition (``references`` from the module node):

- the statement calls it (``_TABLE = build_table()``): importing the module runs the
  changed code, so everything importing the module is affected; unless the changed code
  sits in a function or class the called one only defines and returns
  (``Seq = as_seq_cls_model(Llama)`` runs none of the methods of the class it makes):
  then it is bound, as below;
- the statement binds names (``cached = lru_cache(get_tokenizer)``): the users of those
  names are affected, not every user of the module;
- it registers it as an op (``direct_register_custom_op(op_name="x", op_func=f)``, a
  harness's ``[python] op_registrars``): it runs where ``torch.ops.<ns>.x(...)`` is called;
- names bound so are followed through the module's later top-level statements
  (``_ALL = {**_TEXT_MODELS}``, then ``ModelRegistry = Registry(_ALL)``): what they bind
  from them is affected too;
- it does neither (``add_docstr(torch.atan2, ...)``): a compiled op passed along is not
  run by it; a Python definition passed along may be registered somewhere and run later,
  so the module counts as run at import (the conservative reading).

A statement that cannot be found or parsed counts as run at import.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from indexer.python.scope import callee_name
from indexer.select.judgments import Judgments, content_key
from indexer.select.pysource import (
    DEFINITIONS,
    FUNCTIONS,
    FunctionNode,
    parse,
    statements,
    targets,
)
from indexer.select.receivers import Receivers

# What a call of the enclosing function only defines: their bodies run later, if ever.
_DEFERRED = (*FUNCTIONS, ast.Lambda)


@dataclass(frozen=True)
class StatementUse:
    run_at_import: bool  # importing the module may run the named code
    names: frozenset[str]  # module names bound to it (when not run at import)
    op_name: str | None = None  # the op it is registered as (run where that op is called)
    # ``Cls.attr`` it is installed as (``SparseTensor.partition = partition``): run where
    # ``.attr`` is called or ``Cls.attr`` named, not by every importer of the module.
    attribute: str | None = None


RUN = StatementUse(True, frozenset())


def _as_list(use: StatementUse) -> list:
    """A StatementUse as the judgments keep it (JSON): [run, names, op name, attribute]."""
    return [use.run_at_import, sorted(use.names), use.op_name, use.attribute]


def _is_use(kept: Any, fields: int) -> bool:
    """Whether a kept value reads as the first ``fields`` fields of ``_as_list``."""
    return (
        isinstance(kept, list)
        and len(kept) == fields
        and isinstance(kept[0], bool)
        and isinstance(kept[1], list)
        and all(isinstance(name, str) for name in kept[1])
        and (fields < 3 or kept[2] is None or isinstance(kept[2], str))
        and (fields < 4 or kept[3] is None or isinstance(kept[3], str))
    )


def _is_plan(kept: Any) -> bool:
    """Whether a kept value reads as ``_use_plan`` gives it: [calls, *_as_list]."""
    return (
        isinstance(kept, list) and bool(kept) and isinstance(kept[0], bool) and _is_use(kept[1:], 4)
    )


def _from_list(kept: list) -> StatementUse:
    return StatementUse(bool(kept[0]), frozenset(kept[1]), kept[2], kept[3])


@lru_cache(maxsize=1024)
def _call_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}\s*\(")


@lru_cache(maxsize=1024)
def _line_end_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}\s*$")


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


# getattr(owner, name)(...), on one line; or its value kept whole to be called later.
_CALLED_LOOKUP = re.compile(r"\bgetattr\s*\((?:[^()]|\([^()]*\))*\)\s*\(")
_ASSIGNED = re.compile(
    r"(?:^\s*|:=|\bif\s|\bwhile\s|\()?(?<![.\w\]])([A-Za-z_]\w*)\s*(?::[^=]*)?:?=\s*getattr\s*\("
)
_KEPT_LOOKUP = re.compile(r"(?:(?<![=!<>])=|\breturn|\blambda[^:]*:)\s*getattr\s*\(")


@lru_cache(maxsize=1024)
def _looked_up_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\bgetattr\s*\(.*[\"']{re.escape(name)}[\"']")


@lru_cache(maxsize=1024)
def _stored_pattern(name: str) -> re.Pattern[str]:
    """``self.op = torch.ops._C.silu_and_mul`` or ``return torch.ops._C.x``: the op kept
    (or handed back) whole, to be called later through the name it is given."""
    return re.compile(rf"(?:(?<![=!<>])=|\breturn)\s*(?:[\w.]+\.)?{re.escape(name)}\s*(?:#.*)?$")


def _registered_op(call: ast.Call, name: str) -> str | None:
    """The op name a registrar call gives ``name``: the ``op_name=``/``name=`` keyword or
    the first string argument, without its namespace and overload (``ns::x.out`` -> x)."""
    passed = any(
        callee_name(arg) == name for arg in [*call.args, *(k.value for k in call.keywords)]
    )
    if not passed:
        return None
    strings = [k.value for k in call.keywords if k.arg in ("op_name", "name")] + list(call.args)
    for value in strings:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
            return value.value.rsplit("::", 1)[-1].split(".", 1)[0]
    return None


def _bound(written: list[ast.expr]) -> tuple[set[str], bool]:
    """Names bound by assignment targets, and whether a target mutates an object
    (``REGISTRY[key] = f``, ``obj.attr = f``) rather than binding a module name."""
    names: set[str] = set()
    mutates = False
    stack = list(written)
    while stack:
        target = stack.pop()
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            stack.extend(target.elts)
        elif isinstance(target, ast.Starred):
            stack.append(target.value)
        else:
            mutates = True
    return names, mutates


def _installed_as(stmt: ast.stmt, name: str) -> str | None:
    """``Cls.attr`` of ``Cls.attr = name`` (a function made a method of a class, as
    torch_sparse's ``SparseTensor.partition = partition``): ``Cls`` a capitalized name,
    the value ``name`` itself, nothing else assigned."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target, value = stmt.targets[0], stmt.value
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id[:1].isupper()
        and isinstance(value, ast.Name)
        and value.id == name
    ):
        return f"{target.value.id}.{target.attr}"
    return None


def _defined_at(tree: ast.Module, line: int) -> FunctionNode | None:
    """The function whose ``def`` or a decorator is on ``line``."""
    return next(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, FUNCTIONS)
            and line in (node.lineno, *(d.lineno for d in node.decorator_list))
        ),
        None,
    )


def _opens_block(text: str) -> bool:
    """Whether a line starts a top-level statement (not a continuation of the one above:
    a closing bracket, ``else``, ``elif``, ``except``, ``finally``, a comment)."""
    if not text or text[0].isspace() or text.startswith(("#", ")", "]", "}")):
        return False
    return not text.startswith(("else", "elif", "except", "finally"))


class ModuleStatements:
    """Top-level statements of Python files under ``root``, parsed once each. What a
    statement does with a name, whether a line lies in a nested function and what names
    derive from others are judgments of a file's text: kept in ``judgments`` by its
    content, as the walk's call judgments are, so later walks parse nothing for them."""

    def __init__(self, root: Path | None, judgments: Judgments | None = None) -> None:
        self.root = root
        self.judgments = judgments if judgments is not None else Judgments(None)
        self._trees: dict[str, ast.Module | None] = {}
        self._lines: dict[str, list[str] | None] = {}
        self.receivers = Receivers(self._tree, self.lines)
        # Answers that depend only on a file's text, once per walker.
        self._digests: dict[str, str | None] = {}
        self._calls: dict[tuple[str, int, str], bool] = {}
        self._statements: dict[tuple[str, int], ast.stmt | None] = {}
        self._blocks: dict[tuple[str, int, int], tuple[int, list[ast.stmt]]] = {}
        self._statement_calls: dict[ast.stmt, list[tuple[ast.Call, str | None]]] = {}
        self._reads: dict[ast.stmt, tuple[set[str], set[str], bool]] = {}
        self._words: dict[str, dict[str, list[int]]] = {}
        self._derived: dict[tuple[str, frozenset[str]], StatementUse] = {}
        self._outer: dict[tuple[str, int], tuple[FunctionNode | None, int]] = {}
        self._deferred: dict[tuple[str, int, int], bool] = {}

    def lines(self, path: str) -> list[str] | None:
        """The lines of a file under the root (None if it cannot be read)."""
        if path not in self._lines:
            try:
                text = (self.root / path).read_text(encoding="utf-8", errors="replace")
                self._lines[path] = text.splitlines()
            except (OSError, TypeError):
                self._lines[path] = None
        return self._lines[path]

    def digest(self, path: str) -> str | None:
        """A hash of the file's content as read now (None if it cannot be read)."""
        if path not in self._digests:
            try:
                self._digests[path] = content_key((self.root / path).read_bytes())
            except (OSError, TypeError):
                self._digests[path] = None
        return self._digests[path]

    def calls_at(self, path: str, line: int, name: str) -> bool:
        """Whether ``name`` is called on ``line`` of ``path`` (``name(`` or ``name (``), or
        stored whole to be called later (``self.op = ...name``, ``return ...name``);
        True when the line cannot be read, so that unknown counts as a call."""
        key = (path, line, name)
        if key not in self._calls:
            self._calls[key] = self._calls_at(path, line, name)
        return self._calls[key]

    def _calls_at(self, path: str, line: int, name: str) -> bool:
        lines = self.lines(path)
        if lines is None or not 0 < line <= len(lines):
            return True
        pattern = _call_pattern(name)
        text = lines[line - 1]
        if pattern.search(text) or _stored_pattern(name).search(text):
            return True
        if "getattr" in text and _looked_up_pattern(name).search(text):
            return self._looks_up_to_call(text, lines)  # getattr(torch.ops.ns, "x")(...)
        # name at the end of the line, its arguments on the next: torch.atan2\n(a, b)
        return bool(
            line < len(lines)
            and lines[line].lstrip().startswith("(")
            and _line_end_pattern(name).search(text)
        )

    def looks_up_to_call(self, path: str, line: int, where: tuple[int, int] | None = None) -> bool:
        """Whether the ``getattr`` on ``line`` is made to call what it finds: called at
        once (``getattr(torch.ops.aten, name)(x)``) or kept whole (``fn = getattr(...)``,
        ``return getattr(...)``), not only passed along (``register_meta(getattr(aten,
        name))`` registers a kernel for the op, running none of its own). A value kept
        in a variable counts when ``where`` (the lines of the definition making the
        lookup; the whole file if None) calls that variable. True when the line cannot be
        read."""
        lines = self.lines(path)
        if lines is None or not 0 < line <= len(lines):
            return True
        if where is not None and where[0] <= line <= where[1]:
            return self._looks_up_to_call(lines[line - 1], lines[where[0] - 1 : where[1]])
        return self._looks_up_to_call(lines[line - 1], lines)

    @staticmethod
    def _looks_up_to_call(text: str, lines: list[str] | None = None) -> bool:
        """See ``looks_up_to_call``; a lookup kept in a variable counts when the file
        calls that variable somewhere (``aten_fn = getattr(aten, name)`` only handed to
        ``out_wrapper()(aten_fn)`` is not; unknown without ``lines``: it counts)."""
        if _CALLED_LOOKUP.search(text):
            return True
        kept = _KEPT_LOOKUP.search(text)
        if kept is None:
            return False
        variable = _ASSIGNED.search(text)
        if variable is None or lines is None:
            return True  # return getattr(...), lambda: getattr(...), self.x = getattr(...)
        called = _call_pattern(variable.group(1))
        return any(called.search(other) for other in lines)

    def _tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            tree = None
            if self.root is not None:
                try:
                    tree = parse((self.root / path).read_bytes())
                except OSError:
                    tree = None
            self._trees[path] = tree
        return self._trees[path]

    def _statement_at(self, path: str, line: int) -> ast.stmt | None:
        """The top-level statement (inside module-level blocks) holding ``line``, parsed
        once per walker (callers only read it)."""
        key = (path, line)
        if key not in self._statements:
            self._statements[key] = self._parse_statement_at(path, line)
        return self._statements[key]

    def _parse_statement_at(self, path: str, line: int) -> ast.stmt | None:
        """Only the lines of the top-level block around ``line`` are parsed: whole
        library files cost ~30 ms each, and a selection asks of hundreds."""
        lines = self.lines(path)
        if lines is None or not 0 < line <= len(lines):
            return None
        start = line - 1
        while start > 0 and not _opens_block(lines[start]):
            start -= 1
        while start > 0 and lines[start - 1].startswith("@"):
            start -= 1  # the decorators of a definition
        end = line
        while end < len(lines) and not _opens_block(lines[end]):
            end += 1
        start, found = self._block(path, lines, start, end)
        at = line - start  # the line in the chunk's numbering
        return next((s for s in found if s.lineno <= at <= (s.end_lineno or s.lineno)), None)

    def _block(
        self, path: str, lines: list[str], start: int, end: int
    ) -> tuple[int, list[ast.stmt]]:
        """The statements of the top-level block at lines [start, end), parsed once per
        walker however many of its lines are asked about (a module-level table names
        hundreds of definitions), and the offset of their line numbers."""
        key = (path, start, end)
        if key not in self._blocks:
            chunk = parse("\n".join(lines[start:end]))
            offset = start
            if chunk is None:
                chunk = self._tree(path)  # a string spanning the guess: the whole file
                offset = 0
            found = statements(chunk.body, blocks=False, definitions=True) if chunk else []
            self._blocks[key] = (offset, found)
        return self._blocks[key]

    def _calls_in(self, stmt: ast.stmt) -> list[tuple[ast.Call, str | None]]:
        """The calls a statement makes when it runs (in ``ast.walk`` order) with their
        callee names, once per statement (statements are kept by ``_block``). Calls in a
        lambda it only makes (``"gelu_new": lambda: NewGELU()`` in a registry) are left
        out: they run when the lambda is called, by the users of what the statement binds."""
        if stmt not in self._statement_calls:
            found = []
            queue: deque[ast.AST] = deque([stmt])  # breadth first, as ast.walk
            while queue:
                node = queue.popleft()
                if isinstance(node, ast.Lambda):
                    queue.extend(node.args.defaults)  # evaluated when the lambda is made
                    continue
                if isinstance(node, ast.Call):
                    found.append((node, callee_name(node.func)))
                queue.extend(ast.iter_child_nodes(node))
            self._statement_calls[stmt] = found
        return self._statement_calls[stmt]

    def deferred(self, path: str, def_line: int, line: int) -> bool:
        """Whether ``line`` lies in a function (or a method of a class) nested in the
        function defined at ``def_line``: calling that function defines it, runs none of it."""
        key = (path, def_line, line)
        if key not in self._deferred:
            self._deferred[key] = self._kept(
                f"nested:{def_line}:{line}",
                path,
                lambda: self._nested(path, def_line, line),
                lambda kept: isinstance(kept, bool),
            )
        return self._deferred[key]

    def _kept(
        self, what: str, path: str, judge: Callable[[], Any], valid: Callable[[Any], bool]
    ) -> Any:
        """``judge()``, kept in the judgments by the content of ``path`` (and ``what``
        is asked); asked afresh when the file cannot be read, or when what is kept is not
        ``valid`` (a damaged answer is judged again, not trusted)."""
        digest = self.digest(path)
        if digest is None:
            return judge()
        key = f"{digest}:{what}"
        answer = self.judgments.get(key)
        if answer is None or not valid(answer):
            answer = judge()
            self.judgments.put(key, answer)
        return answer

    def _nested(self, path: str, def_line: int, line: int) -> bool:
        if (path, def_line) not in self._outer:
            self._outer[(path, def_line)] = self._function_at(path, def_line)
        outer, offset = self._outer[(path, def_line)]
        if outer is None:
            return False
        at = line - offset  # the line in the parsed text's numbering
        for node in ast.walk(outer):
            if node is not outer and isinstance(node, _DEFERRED):
                body = node.body if isinstance(node, ast.Lambda) else node.body[0]
                if body.lineno <= at <= (node.end_lineno or node.lineno):
                    return True
        return False

    def _function_at(self, path: str, def_line: int) -> tuple[FunctionNode | None, int]:
        """The function defined (or decorated) at ``def_line``, and the offset of the
        parsed text's line numbers. Its own lines are parsed alone when they parse and
        hold it (a body cut short by a string or bracket does not parse), else the
        whole file."""
        lines = self.lines(path)
        if lines is not None and 0 < def_line <= len(lines):
            start = def_line - 1
            header = start
            while header < min(len(lines), start + 50) and not lines[header].lstrip().startswith(
                ("def ", "async def ")
            ):
                header += 1  # decorators above the def
            level = len(lines[start]) - len(lines[start].lstrip())
            end = header + 1
            while end < len(lines):
                text = lines[end].lstrip()
                indent = len(lines[end]) - len(text)
                if text and not text.startswith(("#", ")", "]", "}")) and indent <= level:
                    break
                end += 1
            chunk = parse(textwrap.dedent("\n".join(lines[start:end])))
            found = _defined_at(chunk, def_line - start) if chunk is not None else None
            if found is not None:
                return found, start
        tree = self._tree(path)
        return (_defined_at(tree, def_line) if tree is not None else None), 0

    def derived(self, path: str, names: frozenset[str]) -> StatementUse:
        """``names`` and the module names later top-level statements bind from them,
        transitively (``_ALL = {**_TEXT_MODELS}``, then ``ModelRegistry = Registry(_ALL)``):
        their users are affected too. A statement reading one that binds no module name
        (a call, a store into an object) counts as run at import. Only the top-level
        blocks of lines naming them are parsed."""
        key = (path, names)
        if key not in self._derived:
            run, found = self._kept(
                f"derived:{','.join(sorted(names))}",
                path,
                lambda: _as_list(self._derive(path, names))[:2],
                lambda kept: _is_use(kept, 2),
            )
            self._derived[key] = StatementUse(run, frozenset(found))
        return self._derived[key]

    def _derive(self, path: str, names: frozenset[str]) -> StatementUse:
        found = set(names)
        seen: set[int] = set()
        frontier = set(names)
        words = self._word_lines(path)
        while frontier:
            lines = sorted({line for name in frontier for line in words.get(name, ())})
            frontier = set()
            for line in lines:
                stmt = self._statement_at(path, line)
                if stmt is None or id(stmt) in seen or isinstance(stmt, DEFINITIONS):
                    continue
                seen.add(id(stmt))
                read, bound, mutates = self._reads_of(stmt)
                if not read & found:
                    continue
                if mutates or not bound:
                    return RUN
                frontier |= bound - found
                found |= bound
        return StatementUse(False, frozenset(found))

    def _word_lines(self, path: str) -> dict[str, list[int]]:
        """Each identifier of the file -> the lines it appears on, once per walker."""
        if path not in self._words:
            words: dict[str, list[int]] = {}
            for line, text in enumerate(self.lines(path) or (), 1):
                for word in set(_IDENTIFIER.findall(text)):
                    words.setdefault(word, []).append(line)
            self._words[path] = words
        return self._words[path]

    def _reads_of(self, stmt: ast.stmt) -> tuple[set[str], set[str], bool]:
        """(names read, names bound, stores into an object) of a top-level statement."""
        if stmt not in self._reads:
            read = {
                node.id
                for node in ast.walk(stmt)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            }
            bound, mutates = _bound(targets(stmt))
            self._reads[stmt] = (read, bound, mutates)
        return self._reads[stmt]

    def use(
        self,
        path: str,
        line: int,
        name: str,
        compiled: bool,
        registrars: frozenset[str] = frozenset(),
        deferred: Callable[[], bool] = lambda: False,
    ) -> StatementUse:
        """How the top-level statement at ``line`` of ``path`` uses ``name``.

        ``compiled``: the name is an op or a binding (running it needs a call).
        ``registrars``: names of functions that register a Python function as an op.
        ``deferred``: whether calling ``name`` runs none of the changed code (see
        ``deferred``), asked only of a statement that calls it.
        """
        what = f"use:{line}:{name}:{int(compiled)}:{','.join(sorted(registrars))}"
        calls, *otherwise = self._kept(
            what,
            path,
            lambda: self._use_plan(path, line, name, compiled, registrars),
            _is_plan,
        )
        if calls and not deferred():
            return RUN
        return _from_list(otherwise)

    def _use_plan(
        self, path: str, line: int, name: str, compiled: bool, registrars: frozenset[str]
    ) -> list:
        """[whether the statement calls ``name``, then the use should that call run none
        of the changed code (as ``_as_list``)]: the statement's text decides all but
        that, which depends on what the walk has reached."""
        stmt = self._statement_at(path, line)
        if stmt is None or isinstance(stmt, DEFINITIONS):
            # a decorator or a base class: registration or inheritance
            return [False, *_as_list(RUN)]
        calls = False
        registered = None
        for node, callee in self._calls_in(stmt):
            if callee == name and compiled and self.receivers.module_level(path, node.func):
                continue  # SKIPLIST.add(x) on a module-level set: not the op
            if callee == name:
                calls = True
            if callee in registrars and registered is None:
                registered = _registered_op(node, name)
        if registered is not None:
            return [calls, *_as_list(StatementUse(False, frozenset(), registered))]
        attribute = _installed_as(stmt, name)
        if attribute is not None:
            return [calls, *_as_list(StatementUse(False, frozenset(), None, attribute))]
        names, mutates = _bound(targets(stmt))
        if mutates:
            # stored into a registry or an object: run later, by anyone
            return [calls, *_as_list(RUN)]
        if names:
            return [calls, *_as_list(StatementUse(False, frozenset(names)))]
        return [calls, *_as_list(StatementUse(not compiled, frozenset()))]
