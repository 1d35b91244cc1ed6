"""Calls into ATen's generated C++ API, resolved to the op they stand for.

``at::mm(a, b)`` and ``self.add(other)`` call functions and Tensor methods that the build
generates from native_functions.yaml (ATen/Functions.h, TensorBody.h); they are not in the
source tree, but the op is: a call with no C++ definition in the tree that names an op of
namespace ``aten`` (as a function variant, or as a method on a Tensor) becomes an edge to
the op. Overloads are narrowed by the call's argument count (every schema argument is
positional in C++; defaulted ones may be left out); what remains is kept, ambiguous.

The generated API also spells ops with suffixes: ``at::nll_loss_forward_symint`` (SymInt
arguments) is ``aten::nll_loss_forward``, and ``at::mm_out`` / ``at::mm_outf`` (the out=
overload, the result first or last) are ``aten::mm.out``. A name that is an op itself is
that op; only a name no op has is read through its suffixes.
"""

from __future__ import annotations

import json
from collections import defaultdict

from indexer.graph.vocabulary import NodeKind
from indexer.link.symbols import SymbolTable

TENSOR_CLASSES = frozenset(
    {"Tensor", "at::Tensor", "TensorBase", "at::TensorBase", "torch::Tensor", "Variable"}
)
# Namespaces whose two-part names (at::mm, torch::zeros) are the generated API.
API_NAMESPACES = frozenset({"at", "torch"})
SYMINT = "_symint"
OUT_SUFFIXES = ("_outf", "_out")


def api_spellings(op_name: str) -> tuple[str, ...]:
    """Names the generated C++ API may call op ``op_name`` by (the relinker's keys)."""
    return tuple(
        op_name + suffix
        for suffix in (SYMINT, *OUT_SUFFIXES, *(SYMINT + out for out in OUT_SUFFIXES))
    )


def _is_out(arguments: list[dict]) -> bool:
    """An out= overload (whatever its name: ``out``, ``output``, ``grad_input``) writes
    keyword-only mutable arguments: ``*, Tensor(a!) out``."""
    return any(
        argument.get("kwarg_only") and "!" in str(argument.get("type", ""))
        for argument in arguments
    )


class AtenOps:
    """Ops of namespace aten by name, as functions and as Tensor methods, with arities."""

    def __init__(self, symbols: SymbolTable) -> None:
        self.functions: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self.methods: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self.outs: set[int] = set()  # out= overloads, which at::X_out / at::X_outf call
        op = NodeKind.OP.value  # read once: an enum's value is a property
        for node_id, name, qualname, raw in symbols.of_kind_rows(op):
            if not qualname.startswith("aten::"):
                continue
            attrs = json.loads(raw) if raw else {}
            arguments = attrs.get("arguments") or []
            most = len(arguments)
            fewest = sum(1 for argument in arguments if "default" not in argument)
            variants = attrs.get("variants") or ["function"]
            if "function" in variants:
                self.functions[name].append((node_id, fewest, most))
            if "method" in variants and arguments:
                self.methods[name].append((node_id, max(fewest - 1, 0), most - 1))
            if _is_out(arguments):
                self.outs.add(node_id)

    def _spelled(
        self, table: dict[str, list[tuple[int, int, int]]], name: str
    ) -> list[tuple[int, int, int]]:
        """The ops ``name`` calls: an op's own name, else read through the API's suffixes
        (an out= spelling takes the out= overloads, whose arity counts the results)."""
        if name in table:
            return table[name]
        out = False
        for suffix in OUT_SUFFIXES:
            if name.endswith(suffix):
                name, out = name[: -len(suffix)], True
                break
        if name.endswith(SYMINT):
            name = name[: -len(SYMINT)]
        candidates = table.get(name, [])
        if out:
            candidates = [c for c in candidates if c[0] in self.outs]
        return candidates

    @staticmethod
    def _fitting(candidates: list[tuple[int, int, int]], nargs: int | None) -> list[int]:
        if nargs is not None:
            fitting = [node for node, fewest, most in candidates if fewest <= nargs <= most]
            if fitting:
                return fitting
        return [node for node, _, _ in candidates]

    def function(self, components: list[str], nargs: int | None) -> list[int]:
        """``at::mm`` / ``torch::zeros`` -> the aten ops it can call."""
        if len(components) != 2 or components[0] not in API_NAMESPACES:
            return []
        return self._fitting(self._spelled(self.functions, components[1]), nargs)

    def method(self, receiver: str, name: str, nargs: int | None) -> list[int]:
        """``tensor.add(other)`` -> the aten ops with a method variant of that name."""
        if receiver not in TENSOR_CLASSES:
            return []
        return self._fitting(self._spelled(self.methods, name), nargs)
