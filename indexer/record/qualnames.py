"""Qualified names of a source file's code objects, for Pythons whose code objects lack
``co_qualname`` (3.10).

The recorder names a function ``path:qualname`` (``test_x.py:TestFoo.test_bar``), the name
the index gives it. On 3.11+ the code object carries it; on 3.10 only ``co_name``
(``test_bar``) is there, which would name every method and nested function by its bare
name and join with nothing. So on 3.10 the file's source is parsed once and each function,
class, lambda and comprehension is named as CPython's compiler names it
(``compiler_set_qualname``): ``Class.method``, ``outer.<locals>.inner``, a ``global``
declaration in the enclosing scope dropping the prefix, and what a scope evaluates in the
enclosing one (decorators, defaults, bases, a comprehension's first iterable) named there.

A code object is found by what it has on 3.10: its first line (a decorated definition
starts at its first decorator) and its name. Where one line holds two code objects of the
same name with different qualified names (``[[y for y in x] for x in z]``), the key is
ambiguous and the caller falls back to the bare name rather than guess.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field

_COMPREHENSIONS = {
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
    ast.GeneratorExp: "<genexpr>",
}


@dataclass
class _Scope:
    kind: str  # "module", "function" (def, async def, lambda), "class", "comprehension"
    qualname: str
    declared_global: set[str] = field(default_factory=set)


class _Namer(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names: dict[tuple[int, str], str | None] = {}
        self._scopes = [_Scope("module", "")]

    def _qualify(self, name: str, may_be_global: bool) -> str:
        parent = self._scopes[-1]
        if parent.kind == "module" or (may_be_global and name in parent.declared_global):
            return name
        if parent.kind == "function":
            return f"{parent.qualname}.<locals>.{name}"
        return f"{parent.qualname}.{name}"

    def _name(self, line: int, name: str, qualname: str) -> None:
        key = (line, name)
        if key in self.names and self.names[key] != qualname:
            self.names[key] = None  # ambiguous: two code objects share line and name
        else:
            self.names[key] = qualname

    def _inside(self, scope: _Scope, nodes: list) -> None:
        self._scopes.append(scope)
        for node in nodes:
            self.visit(node)
        self._scopes.pop()

    def visit_Global(self, node: ast.Global) -> None:
        self._scopes[-1].declared_global.update(node.names)

    def _visit_arguments_outside(self, args: ast.arguments) -> None:
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)

    def _visit_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_arguments_outside(node.args)
        every_arg = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        every_arg += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
        for annotation in [a.annotation for a in every_arg] + [node.returns]:
            if annotation is not None:
                self.visit(annotation)
        first_line = min([node.lineno] + [d.lineno for d in node.decorator_list])
        qualname = self._qualify(node.name, may_be_global=True)
        self._name(first_line, node.name, qualname)
        self._inside(_Scope("function", qualname), node.body)

    visit_FunctionDef = _visit_def
    visit_AsyncFunctionDef = _visit_def

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_arguments_outside(node.args)
        qualname = self._qualify("<lambda>", may_be_global=False)
        self._name(node.lineno, "<lambda>", qualname)
        self._inside(_Scope("function", qualname), [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for outside in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(outside)
        first_line = min([node.lineno] + [d.lineno for d in node.decorator_list])
        qualname = self._qualify(node.name, may_be_global=True)
        self._name(first_line, node.name, qualname)
        self._inside(_Scope("class", qualname), node.body)

    def _visit_comprehension(self, node: ast.expr) -> None:
        name = _COMPREHENSIONS[type(node)]
        first, *rest = node.generators
        self.visit(first.iter)  # evaluated in the enclosing scope
        qualname = self._qualify(name, may_be_global=False)
        self._name(node.lineno, name, qualname)
        parts = [first.target, *first.ifs, *rest]
        if isinstance(node, ast.DictComp):
            parts += [node.key, node.value]
        else:
            parts.append(node.elt)
        self._inside(_Scope("comprehension", qualname), parts)

    visit_ListComp = _visit_comprehension
    visit_SetComp = _visit_comprehension
    visit_DictComp = _visit_comprehension
    visit_GeneratorExp = _visit_comprehension


def qualnames_by_line(source: str) -> dict[tuple[int, str], str | None]:
    """(first line, name) of each code object the source compiles to -> its qualified
    name, None where two share the key; {} when the source does not parse."""
    namer = _Namer()
    try:
        with warnings.catch_warnings():  # invalid escapes warn; the run may make that fatal
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
        namer.visit(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    return namer.names
