"""C++ definitions of a symbol table, keyed for the scope lookups of the ``cpp`` resolver
(``indexer.cpp.resolve``, which documents the rules)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Protocol

from indexer.cpp import symbol_rows
from indexer.cpp.aten_api import AtenOps
from indexer.cpp.names import owner_arguments, split_qualified
from indexer.graph.vocabulary import NodeKind
from indexer.link.symbols import SymbolTable

_FUNCTION = NodeKind.CPP_FUNCTION.value
_KERNEL = NodeKind.CUDA_KERNEL.value
_STUB = NodeKind.DISPATCH_STUB.value
_CLASS = NodeKind.CPP_CLASS.value
CPP_KINDS = frozenset({_FUNCTION, _KERNEL, _STUB, _CLASS})
CALLABLE = frozenset({_FUNCTION, _KERNEL, _STUB})
STUBS = frozenset({_STUB})
CLASSES = frozenset({_CLASS})
_MAX_BASE_DEPTH = 4
_STRUCTURED_BASES = ("at::TensorIteratorBase", "at::impl::MetaBase")
AUTOGRAD_MEMBERS = ("forward", "backward")  # what an autograd function's apply runs


class _Names(Protocol):
    """A name's definitions: a dict of every row's, or :class:`_RowsNamed`."""

    def get(self, name: Any, default: Any = None) -> Any: ...


class CppSymbols:
    """The C++ definitions of a symbol table, keyed for scope lookups."""

    def __init__(self, symbols: SymbolTable) -> None:
        self.symbols = symbols
        # What is known of each C++ definition a lookup found (of every one, when all
        # rows are read): its kind, file, name, key...
        self.kind: dict[int, str] = {}
        self.file_id: dict[int, int] = {}
        self.name: dict[int, str] = {}
        self.key_of: dict[int, str] = {}
        # node -> the template arguments of its class as written (Vectorized<float>)
        self.specialization: dict[int, str | None] = {}
        self.arity: dict[int, tuple[int, int]] = {}
        self.local_only: set[int] = set()
        self.bases: dict[int, list[str]] = {}
        self.by_key: _Names
        self.by_name: _Names
        self.by_file_name: _Names
        self._all_rows = not (symbols.few_refs and symbol_rows.kept(symbols.conn))
        if self._all_rows:
            by_key: dict[str, list[int]] = defaultdict(list)
            by_name: dict[str, list[int]] = defaultdict(list)
            by_file_name: dict[tuple[int, str], list[int]] = defaultdict(list)
            for row in symbol_rows.read(symbols.conn):
                node_id, file_id, key, last, alias = self._take(row)
                by_key[key].append(node_id)
                by_name[last].append(node_id)
                by_file_name[(file_id, last)].append(node_id)
                if alias is not None:
                    by_key[alias].append(node_id)
            self.by_key, self.by_name, self.by_file_name = by_key, by_name, by_file_name
        else:  # a few refs to resolve: only the rows their lookups name
            self.by_key = _RowsNamed(self, symbol_rows.BY_KEY)
            self.by_name = _RowsNamed(self, symbol_rows.BY_LAST)
            self.by_file_name = _RowsNamed(self, symbol_rows.BY_FILE_LAST)
        self._prefixes: dict[tuple[str, ...], list[str]] = {}
        self._memo: dict[tuple, list[int]] = {}
        self.aten = AtenOps(symbols)
        self._suffixed: dict[str, list[int]] = {}
        self._bases_resolved: dict[int, list[int]] = {}
        self._structured_bases = [
            node_id
            for key in _STRUCTURED_BASES
            for node_id in self.by_key.get(key, ())
            if self.kind[node_id] == _CLASS
        ]

    def _take(self, row: symbol_rows.Row) -> tuple[int, int, str, str, str | None]:
        """Keep what ``row`` says of its node; (node, file, key, last component, alias)."""
        node_id, file_id, kind, name, key, last, alias, fewest, most, special, bases, local = row
        self.kind[node_id] = kind
        self.file_id[node_id] = file_id
        self.name[node_id] = name
        self.key_of[node_id] = key
        if fewest is not None:
            self.arity[node_id] = (fewest, most)  # type: ignore[assignment]
        if special is not None:
            self.specialization[node_id] = special
        if bases is not None:
            self.bases[node_id] = json.loads(bases)
        if local:
            self.local_only.add(node_id)
        return node_id, file_id, key, last, alias

    def specializations(self) -> set[str]:
        """The template arguments of every class specialization the tree defines, as
        written (``Vectorized<float>``)."""
        if self._all_rows:
            return {value for value in self.specialization.values() if value}
        return symbol_rows.specializations(self.symbols.conn)

    @classmethod
    def of(cls, symbols: SymbolTable) -> CppSymbols:
        """One index per symbol table (the linker passes the same table to every scheme)."""
        index = getattr(symbols, "_cpp_symbols", None)
        if index is None:
            index = cls(symbols)
            symbols._cpp_symbols = index  # type: ignore[attr-defined]
        return index

    def _visible(self, ids: list[int], file_id: int, want: frozenset[str]) -> list[int]:
        kind = self.kind
        local_only = self.local_only
        found: list[int] = []
        for node_id in ids:
            if node_id in local_only and self.file_id[node_id] != file_id:
                continue
            node_kind = kind[node_id]
            if node_kind in want:
                found.append(node_id)
            elif node_kind == _CLASS and want is not CLASSES:
                found.extend(self._constructors(node_id, file_id, want))
        return found

    def _constructors(self, class_id: int, file_id: int, want: frozenset[str]) -> list[int]:
        name = self.name[class_id]
        return [
            node_id
            for node_id in self.by_key.get(f"{self.key_of[class_id]}::{name}", ())
            if self.kind[node_id] in want and self.kind[node_id] != _CLASS
        ]

    def narrow(self, found: list[int], file_id: int, nargs: int | None) -> list[int]:
        """Several candidates: keep the overloads that accept ``nargs`` arguments, then, when
        all are one qualified name (template specializations, per-platform variants), the
        definitions in the caller's own file."""
        if nargs is not None:
            arity = self.arity
            fitting = []
            for node_id in found:
                bounds = arity.get(node_id)
                if bounds is None or (bounds[0] <= nargs and (bounds[1] < 0 or nargs <= bounds[1])):
                    fitting.append(node_id)
            if fitting:
                found = fitting
        if len(found) > 1:
            key_of = self.key_of
            first = key_of[found[0]]
            if all(key_of[node_id] == first for node_id in found):
                own = [node_id for node_id in found if self.file_id[node_id] == file_id]
                if own:
                    found = own
        return found

    def specialized(self, found: list[int], written: str) -> list[int]:
        """``Vectorized<float>::loadu`` names the float specialization, or else the primary
        template: not the members of other specializations."""
        wanted = owner_arguments(written)
        if wanted is None:
            return found
        specialization = self.specialization
        exact = [node_id for node_id in found if specialization.get(node_id) == wanted]
        if exact:
            return exact
        return [node_id for node_id in found if specialization.get(node_id) is None]

    def prefixes(self, scope: tuple[str, ...]) -> list[str]:
        """'a::b::', 'a::', '' for scope (a, b): innermost first."""
        prefixes = self._prefixes.get(scope)
        if prefixes is None:
            prefixes = ["::".join(scope[:level]) + "::" for level in range(len(scope), 0, -1)]
            prefixes.append("")
            self._prefixes[scope] = prefixes
        return prefixes

    def lookup(
        self,
        written: str,
        scope: tuple[str, ...],
        usings: tuple[str, ...],
        file_id: int,
        want: frozenset[str],
    ) -> list[int]:
        """Definitions ``written`` names from ``scope``, by the rules in the module docstring."""
        memo_key = (written, scope, usings, file_id, want)
        found = self._memo.get(memo_key)
        if found is None:
            found = self._memo[memo_key] = self._lookup(written, scope, usings, file_id, want)
        return found

    def _lookup(
        self,
        written: str,
        scope: tuple[str, ...],
        usings: tuple[str, ...],
        file_id: int,
        want: frozenset[str],
    ) -> list[int]:
        components = split_qualified(written)
        if not components:
            return []
        key = "::".join(components)
        by_key = self.by_key
        if written.startswith("::"):
            return self._visible(by_key.get(key, []), file_id, want)
        using_levels = _using_levels(usings, scope) if usings else ()
        depth = len(scope)
        for level, prefix in enumerate(self.prefixes(scope)):
            found = self._visible(by_key.get(prefix + key, []), file_id, want)
            for using_level, using in using_levels:
                if using_level == depth - level:
                    found += self._visible(by_key.get(f"{using}::{key}", []), file_id, want)
            if found:
                return found
        for using in usings:  # a using written relative to the caller's namespaces
            for prefix in self.prefixes(scope)[:-1]:
                found = self._visible(by_key.get(f"{prefix}{using}::{key}", []), file_id, want)
                if found:
                    return found
        if len(components) == 1 and scope:
            found = self._inherited(key, scope, file_id, want)
            if found:
                return found
        return self._fallback(components, key, file_id, want)

    def _fallback(
        self, components: list[str], key: str, file_id: int, want: frozenset[str]
    ) -> list[int]:
        if len(components) > 1:
            matching = self._suffixed.get(key)
            if matching is None:
                suffix = "::" + key
                key_of = self.key_of
                matching = [
                    node_id
                    for node_id in self.by_name.get(components[-1], ())
                    if key_of[node_id].endswith(suffix)
                ]
                self._suffixed[key] = matching
            return self._visible(matching, file_id, want)
        return self._visible(self.by_file_name.get((file_id, key), []), file_id, want)

    def member(
        self,
        receiver: str,
        name: str,
        scope: tuple[str, ...],
        usings: tuple[str, ...],
        file_id: int,
        want: frozenset[str],
    ) -> list[int]:
        """``name`` called on an object of class ``receiver`` (as written at the call)."""
        found = self.lookup(f"{receiver}::{name}", scope, usings, file_id, want)
        if found:
            return found
        classes = self.lookup(receiver, scope, usings, file_id, CLASSES)
        return self.in_classes(classes, name, file_id, want)

    def autograd_apply(
        self, written: str, scope: tuple[str, ...], usings: tuple[str, ...], file_id: int
    ) -> list[int]:
        """``F::apply(...)`` of ``struct F : torch::autograd::Function<F>``: ``apply`` is
        the base's, and runs ``F::forward`` (and, in the backward pass, ``F::backward``)."""
        components = split_qualified(written)
        if len(components) < 2 or components[-1] != "apply":
            return []
        owner = written[: written.rindex("::")]
        classes = [
            class_id
            for class_id in self.lookup(owner, scope, usings, file_id, CLASSES)
            if any(
                base.rsplit("::", 1)[-1].endswith("Function")
                for base in self.bases.get(class_id, ())
            )
        ]
        return [
            node_id
            for name in AUTOGRAD_MEMBERS
            for node_id in self.in_classes(classes, name, file_id, CALLABLE)
        ]

    def in_classes(
        self, classes: list[int], name: str, file_id: int, want: frozenset[str]
    ) -> list[int]:
        """``name`` as a member of these classes, else of their bases, nearest first."""
        seen: set[int] = set()
        found: list[int] = []
        for _ in range(_MAX_BASE_DEPTH):
            bases: list[int] = []
            for class_id in classes:
                if class_id in seen:
                    continue
                seen.add(class_id)
                found += self._visible(
                    self.by_key.get(f"{self.key_of[class_id]}::{name}", []), file_id, want
                )
                bases += self._base_classes(class_id, file_id)
            if found or not bases:
                return found
            classes = bases
        return found

    def _base_classes(self, class_id: int, file_id: int) -> list[int]:
        cached = self._bases_resolved.get(class_id)
        if cached is None:
            outer = tuple(self.key_of[class_id].split("::")[:-1])
            cached = []
            for base in self.bases.get(class_id, ()):
                cached += self.lookup(base, outer, (), file_id, CLASSES)
            self._bases_resolved[class_id] = cached
        return cached

    def _inherited(
        self, key: str, scope: tuple[str, ...], file_id: int, want: frozenset[str]
    ) -> list[int]:
        """An unqualified name used in a method: a member of a base of its class.

        The classes TORCH_META_FUNC / TORCH_IMPL_FUNC declare (``structured_add_out``)
        are generated; they derive from TensorIteratorBase or MetaBase.
        """
        for level in range(len(scope), 0, -1):
            owner = "::".join(scope[:level])
            classes = [
                node_id for node_id in self.by_key.get(owner, ()) if self.kind[node_id] == _CLASS
            ]
            bases = [base for class_id in classes for base in self._base_classes(class_id, file_id)]
            if not classes and scope[level - 1].startswith("structured_"):
                bases = self._structured_bases
            if bases:
                found = self.in_classes(bases, key, file_id, want)
                if found:
                    return found
        return []


def _using_levels(usings: tuple[str, ...], scope: tuple[str, ...]) -> list[tuple[int, str]]:
    """Each using-directive with the depth of the namespace enclosing both it and the scope."""
    levels = []
    for using in usings:
        parts = using.split("::")
        common = 0
        for a, b in zip(parts, scope, strict=False):
            if a != b:
                break
            common += 1
        levels.append((common, using))
    return levels


class _RowsNamed:
    """``by_key``, ``by_name`` or ``by_file_name`` read from the index's rows one name at a
    time: the same lists, in the same (node) order, as the dicts of every row."""

    def __init__(self, index: CppSymbols, where: str) -> None:
        self._index = index
        self._where = where
        self._found: dict[object, list[int]] = {}

    def get(self, name: str | tuple[int, str], default: Any = None) -> Any:
        found = self._found.get(name)
        if found is None:
            values = name if isinstance(name, tuple) else (name,)
            rows = symbol_rows.named(self._index.symbols.conn, self._where, values)
            found = self._found[name] = [self._index._take(row)[0] for row in rows]
        return found if found else default
