"""Which of the tree's ``operator...`` definitions an operator use (indexer/cpp/operators.py)
runs, from the declared classes of its operands.

* The operand types are looked up as classes from the caller's scope; a type the tree does
  not define as a class (``int64_t``, ``std::string``, a template parameter) contributes
  nothing, so built-in arithmetic never reaches an edge.
* A left or unary operand's class (and its bases) contributes its member operators taking
  the right number of arguments (``a + b``: one; ``-a``, ``*it``, ``++it``: none;
  ``it++``: one, the ``int`` tag); of a class template, those of the specialization the
  operand was declared with (``Vectorized<float>``), else of the primary template; with
  none written (``*this``), of the specialization the caller is a member of.
* Free operators of that name contribute when they take one more argument, name one of the
  operand classes in their parameters, and are declared in a namespace that encloses the
  class (argument-dependent lookup) or the caller (ordinary lookup). One whose parameters
  name only another specialization the tree defines (``Vectorized<double>`` for a
  ``Vectorized<float>`` operand) is left out; ones naming the operand's own
  specialization are preferred to the generic ones, as for members.

What remains is every candidate; the linker marks several as ambiguous (overloads on
other parameter types that text cannot tell apart).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from indexer.cpp.names import owner_arguments
from indexer.graph.vocabulary import NodeKind

if TYPE_CHECKING:
    from indexer.cpp.symbols import CppSymbols
    from indexer.link.symbols import Ref

_CLASS = NodeKind.CPP_CLASS.value
CLASSES = frozenset({_CLASS})
CALLABLE = frozenset(
    {NodeKind.CPP_FUNCTION.value, NodeKind.CUDA_KERNEL.value, NodeKind.DISPATCH_STUB.value}
)


class OperatorIndex:
    """The free operator definitions of a symbol table, by operator name (built once per
    table, on its first operator ref: :meth:`of`)."""

    @classmethod
    def of(cls, index: CppSymbols) -> OperatorIndex:
        """One per symbol table's C++ index (as ``CppSymbols.of`` keeps one per table)."""
        found = getattr(index, "_operators", None)
        if found is None:
            found = index._operators = cls(index)  # type: ignore[attr-defined]
        return found

    def __init__(self, index: CppSymbols) -> None:
        self.index = index
        self._free: dict[str, list[tuple[int, tuple[str, ...], str]]] = {}
        # Class template specializations the tree defines, as written: Vectorized<float>.
        self.specializations = {"".join(value.split()) for value in index.specializations()}

    def free(self, name: str) -> list[tuple[int, tuple[str, ...], str]]:
        """(node, its namespace, its signature) of each non-member ``name`` in the tree."""
        cached = self._free.get(name)
        if cached is None:
            index = self.index
            cached = []
            for node_id in index.by_name.get(name, ()):
                if index.kind[node_id] not in CALLABLE:
                    continue
                owner = index.key_of[node_id].rpartition("::")[0]
                if any(index.kind[other] == _CLASS for other in index.by_key.get(owner, ())):
                    continue  # a member: found through its class
                signature = str(index.symbols.attrs(node_id).get("signature", ""))
                namespace = tuple(owner.split("::")) if owner else ()
                cached.append((node_id, namespace, signature))
            self._free[name] = cached
        return cached


def _fits(index: CppSymbols, node_id: int, nargs: int) -> bool:
    bounds = index.arity.get(node_id)
    return bounds is None or (bounds[0] <= nargs and (bounds[1] < 0 or nargs <= bounds[1]))


def _encloses(namespace: tuple[str, ...], scope: tuple[str, ...]) -> bool:
    return scope[: len(namespace)] == namespace


def operator_targets(
    ref: Ref, scope: tuple[str, ...], usings: tuple[str, ...], index: CppSymbols
) -> list[int]:
    """The definitions an operator ref can run, by the rules in the module docstring."""
    attrs = ref.attrs
    name = ref.target
    nargs = int(attrs.get("nargs", 1))
    file_id = ref.file_id
    found: list[int] = []
    class_names: set[str] = set()
    class_scopes: list[tuple[str, ...]] = []
    wanted: set[str] = set()  # the operands' specializations: Vectorized<float>
    for position, written in enumerate(attrs.get("operand_types", ())):
        if not written:
            continue
        classes = index.lookup(written, scope, usings, file_id, CLASSES)
        if not classes:
            continue
        for class_id in classes:
            class_names.add(index.name[class_id])
            class_scopes.append(tuple(index.key_of[class_id].split("::")[:-1]))
        arguments = owner_arguments(f"{written}::{name}")
        own = None
        if arguments is None:
            # No template arguments written (`*this`, `Vectorized` in its own members):
            # the class the caller is a member of, as specialized there.
            own = index.specialization.get(ref.src_id)
            if own is not None:
                wanted.add(own)
        else:
            wanted.add(arguments)
        if position == 0:  # only the left (or only) operand's class owns a member operator
            members = index.in_classes(classes, name, file_id, CALLABLE)
            if arguments is None and len(members) > 1:
                members = [m for m in members if index.specialization.get(m) == own] or members
            for node_id in index.specialized(members, f"{written}::{name}"):
                if _fits(index, node_id, nargs) and node_id not in found:
                    found.append(node_id)
    if not class_names:
        return []
    names = "|".join(map(re.escape, sorted(class_names)))
    mentions = re.compile(r"\b(?:" + names + r")\b(?:\s*<((?:[^<>]|<[^<>]*>)*)>)?")
    operators = OperatorIndex.of(index)
    free: list[int] = []
    exact: list[int] = []
    for node_id, namespace, signature in operators.free(name):
        if node_id in found or not _fits(index, node_id, nargs + 1):
            continue
        named = ["".join(match.group(0).split()) for match in mentions.finditer(signature)]
        if not named:
            continue
        if any(written in wanted for written in named):
            exact.append(node_id)
        elif all(written in operators.specializations for written in named):
            continue  # only another specialization's operator: Vectorized<double> for <float>
        if not (_encloses(namespace, scope) or any(_encloses(namespace, s) for s in class_scopes)):
            continue
        if node_id in index.local_only and index.file_id[node_id] != file_id:
            continue
        free.append(node_id)
    exact = [node_id for node_id in exact if node_id in free]
    return found + (exact or free)
