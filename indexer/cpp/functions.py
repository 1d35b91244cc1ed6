"""What a ``function_definition`` node defines: its name as written, parameters, macro.

A definition's declarator may be wrapped (``T* f()``, ``T& f()``), qualified
(``A::B<T>::f``), an operator (``operator()``, ``A::operator bool() const``), or a
macro that tree-sitter reads as a function: ``TORCH_IMPL_FUNC(add_out) (...) {...}``
(a declarator inside a declarator) and ``TORCH_LIBRARY_IMPL(aten, CPU, m) {...}`` (an
ALL_CAPS name with no return type).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.cpp import macros
from indexer.cpp.names import is_macro_name, parameters, split_qualified
from indexer.extract.source import cpp_parser

if TYPE_CHECKING:
    from tree_sitter import Node

_LANGUAGE = cpp_parser().language
# Kinds are compared by id: reading ``Node.type`` builds a string each time.
_WRAPPERS = frozenset(
    _LANGUAGE.id_for_node_kind(kind, True)
    for kind in (
        "pointer_declarator",
        "reference_declarator",
        "attributed_declarator",
        "parenthesized_declarator",
    )
)
_OPERATOR_FORMS = frozenset(
    _LANGUAGE.id_for_node_kind(kind, True) for kind in ("qualified_identifier", "operator_cast")
)
_FUNCTION_DECLARATOR = _LANGUAGE.id_for_node_kind("function_declarator", True)
_IDENTIFIER = _LANGUAGE.id_for_node_kind("identifier", True)
_CONST = re.compile(rb"\bconst\b")


@dataclass(slots=True)
class Shape:
    """A definition as written, before its enclosing scope is known."""

    components: list[str]  # the name as written, split: ['ReluHelper', 'apply']
    signature: str
    arity: tuple[int, int]
    name_start: int  # byte offset of the name (CUDA qualifiers come before it)
    declarator_start: int
    macro: str | None = None  # the macro that wrote it, if any
    macro_arguments: list[str] | None = None
    specialization: str | None = None  # the name with its template arguments, if written


def _text(data: bytes, node: Node) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def describe(node: Node, data: bytes) -> Shape | None:
    """The shape of a function_definition, or None when it names nothing usable."""
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.kind_id in _WRAPPERS:
        inner = declarator.child_by_field_name("declarator")
        if inner is None and declarator.named_child_count:
            inner = declarator.named_children[-1]
        declarator = inner
    if declarator is None:
        return None
    kind = declarator.kind_id
    if kind in _OPERATOR_FORMS:  # A::operator T() const
        text = _text(data, declarator)
        cut = text.find("(")
        close = text.rfind(")")
        if cut < 0 or close < cut:
            return None
        params = text[cut : close + 1]
        components = split_qualified(text[:cut])
        if not components:
            return None
        signature, bounds = parameters(params, "const" if "const" in text[close:] else "")
        return Shape(components, signature, bounds, declarator.start_byte, declarator.start_byte)
    if kind != _FUNCTION_DECLARATOR:
        return None
    name_node = declarator.child_by_field_name("declarator")
    params_node = declarator.child_by_field_name("parameters")
    if name_node is None or params_node is None:
        return None
    params = _text(data, params_node)
    trailing = data[params_node.end_byte : declarator.end_byte]
    signature, bounds = parameters(params, "const" if _CONST.search(trailing) else "")
    shape = Shape([], signature, bounds, name_node.start_byte, declarator.start_byte)
    name_kind = name_node.kind_id
    if name_kind == _FUNCTION_DECLARATOR:  # MACRO(args) (params) {...}
        macro_node = name_node.child_by_field_name("declarator")
        arguments_node = name_node.child_by_field_name("parameters")
        if macro_node is None or arguments_node is None:
            return None
        shape.macro = _text(data, macro_node)
        shape.macro_arguments = macros.split_arguments(_text(data, arguments_node)[1:-1])
        return shape
    name = _text(data, name_node)
    if (
        name_kind == _IDENTIFIER
        and is_macro_name(name)
        and node.child_by_field_name("type") is None
    ):  # MACRO(args) {...}: the parameter list holds the macro's arguments
        shape.macro = name
        shape.macro_arguments = macros.split_arguments(params[1:-1])
        return shape
    shape.components = split_qualified(name)
    if "<" in name and not shape.components[-1].startswith("operator"):
        shape.specialization = " ".join(name.split())  # Vectorized<float>::loadu
    return shape if shape.components else None


def macro_names(
    shape: Shape, registration_macros: frozenset[str]
) -> tuple[str, list[str], list[str], dict[str, object]]:
    """(name, qualname components, scope components its body sees, attrs) of a
    macro-written definition, relative to its enclosing scope.

    TORCH_IMPL_FUNC(add_out) -> 'add_out', [structured_add_out, impl];
    TORCH_LIBRARY_IMPL(aten, CPU, m) -> 'TORCH_LIBRARY_IMPL(aten, CPU)' (a registration
    block: the bindings extractor reads it, its calls are recorded from this node);
    any other MACRO(args) {...} -> 'MACRO(args)', so no body is lost.
    """
    macro = shape.macro or ""
    arguments = shape.macro_arguments or []
    attrs: dict[str, object] = {"macro": macro}
    expanded = macros.structured(macro, arguments)
    if expanded is not None:
        name, members = expanded
        return name, members, members[:-1], attrs
    if macro in registration_macros:
        attrs["registration"] = True
        label = macros.registration_label(macro, arguments)
        return label, [label], [], attrs
    label = macros.macro_label(macro, arguments)
    return label, [label], [], attrs
