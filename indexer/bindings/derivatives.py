"""derivatives.yaml -> ``derivative`` nodes linked to their op and to what formulas call.

An entry ``name: mm(Tensor self, Tensor mat2) -> Tensor`` becomes the node ``aten::mm``
(kind ``derivative``) with its formulas; ``derives`` edges go to the op (scheme ``op``,
exact overload) and to every function a formula calls by name (scheme ``cpp``, as the
generated code sees it: inside ``torch::autograd::generated`` with
``torch::autograd::generated::details`` (FunctionsManual.cpp), ``at`` and ``at::native``
in scope). Method calls (``grad.expand_symint(...)``) name no function and are skipped.
"""

from __future__ import annotations

import re
from typing import Any

from indexer.bindings.schema import parse_schema
from indexer.bindings.yaml_entries import Entry
from indexer.graph.facts import FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind

_NON_FORMULA_KEYS = frozenset({"name", "output_differentiability", "dispatch"})
FORMULA_SCOPE = ["torch", "autograd", "generated", "details"]
FORMULA_USING = ["at", "at::native"]
# A call by name: not after '.', '->' or another identifier character.
_CALL = re.compile(r"(?<![\w.>:])((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*(?:<[^<>()]*>)?\s*\(")
_NOT_CALLS = frozenset(
    {
        "if",
        "for",
        "while",
        "return",
        "sizeof",
        "decltype",
        "static_cast",
        "reinterpret_cast",
        "const_cast",
        "dynamic_cast",
        "not_implemented",
        "TORCH_CHECK",
        "TORCH_INTERNAL_ASSERT",
    }
)


def formula_calls(formula: str) -> list[str]:
    """Names of the functions a formula calls, in order of first use."""
    names = []
    for match in _CALL.finditer(formula):
        name = match.group(1)
        if name.split("::")[-1] in _NOT_CALLS or name.startswith("std::"):
            continue
        names.append(name)
    return list(dict.fromkeys(names))


def _formulas(entry: Entry) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    plain = {
        key: str(value)
        for key, value in entry.data.items()
        if key not in _NON_FORMULA_KEYS and isinstance(value, str)
    }
    per_key: dict[str, dict[str, str]] = {}
    dispatch = entry.data.get("dispatch")
    if isinstance(dispatch, dict):
        for key, formulas in dispatch.items():
            if isinstance(formulas, dict):
                per_key[key] = {k: str(v) for k, v in formulas.items() if isinstance(v, str)}
    return plain, per_key


def read_derivatives(entries: list[Entry], facts: FileFacts) -> None:
    for entry in entries:
        schema = parse_schema(entry.text("name"))
        if schema is None or not schema.has_signature:
            facts.parse_errors += 1
            continue
        plain, per_key = _formulas(entry)
        attrs: dict[str, Any] = {
            "schema": " ".join(entry.text("name").split()),
            "formulas": plain,
        }
        if per_key:
            attrs["dispatch"] = per_key
        differentiability = entry.data.get("output_differentiability")
        if differentiability is not None:
            attrs["output_differentiability"] = differentiability
        qualname = f"aten::{schema.full_name}"
        node = facts.add_node(
            NodeKind.DERIVATIVE.value,
            schema.name,
            qualname,
            entry.line,
            entry.end_line,
            **attrs,
        )
        facts.add_ref(node, EdgeKind.DERIVES.value, "op", qualname, entry.line, exact=True)
        seen: set[str] = set()
        formula_groups = [(None, plain), *per_key.items()]
        for key, formulas in formula_groups:
            for input_name, formula in formulas.items():
                if key is None:
                    line = entry.line_of(input_name)
                else:
                    line = entry.nested_lines.get("dispatch", {}).get(key, entry.line)
                for callee in formula_calls(formula):
                    if callee in seen:
                        continue
                    seen.add(callee)
                    facts.add_ref(
                        node,
                        EdgeKind.DERIVES.value,
                        "cpp",
                        callee,
                        line,
                        scope=FORMULA_SCOPE,
                        using=FORMULA_USING,
                        formula=input_name,
                    )
