"""Names in scope in one Python file: imports, aliases and local definitions.

Extraction expands every name it records through these bindings, so a ref says
``torch.ops._C.rms_norm`` rather than ``ops.rms_norm`` and the resolver needs no
knowledge of the file it came from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


def dotted_chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ``["a", "b", "c"]``; None unless the chain is rooted at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    parts.reverse()
    return parts


def callee_name(func: ast.expr) -> str | None:
    """The last identifier of a callee: ``ops`` for ``ops(...)`` and ``x.y.ops(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def absolute_module(module: str | None, level: int, current: str, is_package: bool) -> str | None:
    """The absolute name of ``from <level dots><module> import``, or None if it escapes the
    top package."""
    if level == 0:
        return module
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level - 1 > len(base):
        return None
    if level > 1:
        base = base[: len(base) - (level - 1)]
    if module:
        base = [*base, *module.split(".")]
    return ".".join(base) if base else None


@dataclass
class Scope:
    """Bindings of one scope. ``aliases`` map a name to a dotted target (an import or an
    assignment of an imported chain); ``defs`` map a module-level definition to its local
    node; a name mapped to None in ``aliases`` is a local variable that hides the outer one.
    """

    aliases: dict[str, str | None] = field(default_factory=dict)
    defs: dict[str, int] = field(default_factory=dict)
    def_quals: dict[str, str] = field(default_factory=dict)
    parent: Scope | None = None
    # Names assigned a string built from written parts (``name = f"_{op}"``), as the
    # pattern of what they can hold (indexer.python.reflection), and how often each name
    # is bound in this scope: a pattern counts only for a name bound once.
    strings: dict[str, str] = field(default_factory=dict)
    stores: dict[str, int] = field(default_factory=dict)

    def store(self, name: str, pattern: str | None = None) -> None:
        self.stores[name] = self.stores.get(name, 0) + 1
        if pattern is None:
            self.strings.pop(name, None)
        else:
            self.strings[name] = pattern

    def string(self, name: str) -> str | None:
        """The pattern of a name's string value, if its binding is one and the only one in
        its scope (once the scope is walked whole: a loop may rebind it before a use)."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.strings:
                return scope.strings[name] if scope.stores.get(name) == 1 else None
            if name in scope.aliases or name in scope.defs or name in scope.stores:
                return None
            scope = scope.parent
        return None

    def lookup(self, name: str) -> tuple[str, str | int] | None:
        """("alias", dotted) or ("local", node index), or None if unknown or hidden."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.aliases:
                target = scope.aliases[name]
                return ("alias", target) if target is not None else None
            if name in scope.defs:
                return ("local", scope.defs[name])
            scope = scope.parent
        return None

    def expand(self, parts: list[str]) -> str | None:
        """The dotted name a chain stands for, through aliases and local definitions."""
        found = self.lookup(parts[0])
        if found is None:
            return None
        kind, value = found
        if kind == "alias":
            head = str(value)
        else:
            head = self._def_qual(parts[0])
            if head is None:
                return None
        return ".".join([head, *parts[1:]])

    def _def_qual(self, name: str) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.def_quals:
                return scope.def_quals[name]
            scope = scope.parent
        return None


def parameter_names(args: ast.arguments) -> list[str]:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if args.vararg:
        names.append(args.vararg.arg)
    if args.kwarg:
        names.append(args.kwarg.arg)
    return names
