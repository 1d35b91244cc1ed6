"""What a C++ change outside every function body touches: the names it (re)defines.

A changed namespace-scope line may define a constant, a macro, a type or a declaration;
the functions of the file that mention those names are affected. Lines whose effect
cannot be bounded by names (an ``#include``, an ``#if`` condition, ``using namespace``, a
namespace's own braces, a parse error) are *undecidable*: the caller then takes every
function of the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter

_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")

# Nodes whose children are declarations in their own right (load_time.py reads it too).
CONTAINERS = frozenset(
    {
        "translation_unit",
        "declaration_list",
        "namespace_definition",
        "linkage_specification",
        "preproc_if",
        "preproc_ifdef",
        "preproc_else",
        "preproc_elif",
        "preproc_elifdef",
    }
)
# Children of a container that are part of its own syntax, not declarations.
_CONTAINER_SYNTAX = {"namespace_identifier", "nested_namespace_specifier", "string_literal"}
_DECLARATIONS = {
    "declaration",
    "field_declaration",
    "type_definition",
    "alias_declaration",
    "struct_specifier",
    "class_specifier",
    "union_specifier",
    "enum_specifier",
    "concept_definition",
    "template_declaration",
    "static_assert_declaration",
    "friend_declaration",
}
_NAME_LEAVES = {
    "identifier",
    "field_identifier",
    "type_identifier",
    "namespace_identifier",
    "destructor_name",
    "operator_name",
}


@dataclass
class Scope:
    names: set[str] = field(default_factory=set)
    undecidable: list[str] = field(default_factory=list)  # why names cannot bound the change
    unplaced: list[int] = field(default_factory=list)  # lines of statements with no name
    last_include: int = 0  # line of the file's last #include

    def merge(self, other: Scope) -> None:
        self.names |= other.names
        self.undecidable += other.undecidable
        self.unplaced += other.unplaced


def _lines(node: tree_sitter.Node) -> range:
    start, end = node.start_point, node.end_point
    last = end[0] - (end[1] == 0 and end[0] > start[0])
    return range(start[0] + 1, last + 2)


def _declarator_names(node: tree_sitter.Node | None, out: set[str]) -> None:
    """The identifier a declarator declares, through pointers, arrays, functions, inits."""
    while node is not None:
        if node.type in _NAME_LEAVES:
            out.add(node.text.decode("utf-8", "replace").lstrip("~"))
            return
        if node.type in ("qualified_identifier", "template_function", "template_type"):
            inner = node.child_by_field_name("name")
            node = inner if inner is not None else None
            continue
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.named_children if c.type in _NAME_LEAVES), None
        )


def _defined_names(node: tree_sitter.Node) -> set[str]:
    names: set[str] = set()
    if node.type == "template_declaration":
        for child in node.named_children:
            if child.type != "template_parameter_list":
                names |= _defined_names(child)
        return names
    name = node.child_by_field_name("name")
    if name is not None:
        _declarator_names(name, names)
    for child in node.children_by_field_name("declarator"):
        _declarator_names(child, names)
    type_node = node.child_by_field_name("type")
    if type_node is not None and type_node.child_by_field_name("body") is not None:
        names |= _defined_names(type_node)  # struct S {...} s;
    if node.type == "enum_specifier":
        body = node.child_by_field_name("body")
        for item in body.named_children if body is not None else ():
            enumerator = item.child_by_field_name("name")
            if enumerator is not None:
                names.add(enumerator.text.decode("utf-8", "replace"))
    return names


def _visit(node: tree_sitter.Node, lines: set[int], scope: Scope) -> None:
    covered: set[int] = set()
    for child in node.named_children:
        hit = lines.intersection(_lines(child))
        if not hit:
            continue
        covered |= hit
        kind = child.type
        if kind == "comment":
            continue
        condition = node.child_by_field_name("condition") or (
            node.child_by_field_name("name") if node.type == "preproc_ifdef" else None
        )
        if condition is not None and child == condition:
            scope.undecidable.append(f"preprocessor condition (line {min(hit)})")
        elif kind in _CONTAINER_SYNTAX:
            scope.undecidable.append(f"namespace or linkage header (line {min(hit)})")
        elif kind in CONTAINERS:
            _visit(child, hit, scope)
        elif kind in ("preproc_def", "preproc_function_def"):
            if min(hit) < scope.last_include:
                scope.undecidable.append(
                    f"macro defined before an #include (line {min(hit)}): it may change the "
                    "included headers"
                )
            scope.names |= _defined_names(child)
        elif kind == "preproc_include":
            scope.undecidable.append(f"#include (line {min(hit)})")
        elif kind in _DECLARATIONS:
            names = _defined_names(child)
            if names:
                scope.names |= names
            else:
                scope.undecidable.append(f"{kind} with no name (line {min(hit)})")
        elif kind in ("function_definition", "expression_statement"):
            # A function the index does not hold (a registration macro block such as
            # TORCH_LIBRARY_IMPL(...) { ... }) or a macro call at namespace scope.
            scope.unplaced += sorted(hit)
        elif kind == "ERROR":
            scope.undecidable.append(f"unparsable code (line {min(hit)})")
        else:
            scope.undecidable.append(f"{kind} (line {min(hit)})")
    leftover = lines - covered
    if leftover and node.type != "translation_unit":
        scope.undecidable.append(f"{node.type} syntax (line {min(leftover)})")


def outside_scope(tree: tree_sitter.Tree, lines: set[int]) -> Scope:
    """Names defined (or undefined) by changed ``lines`` that lie outside function bodies."""
    scope = Scope(last_include=_last_include(tree.root_node))
    _visit(tree.root_node, set(lines), scope)
    return scope


def _last_include(root: tree_sitter.Node) -> int:
    last = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "preproc_include":
            last = max(last, node.start_point[0] + 1)
        elif node.type in CONTAINERS or node.type == "translation_unit":
            stack.extend(node.named_children)
    return last


def identifiers(data: bytes) -> set[str]:
    return {match.decode("ascii") for match in _IDENTIFIER.findall(data)}


_CUDA_QUALIFIERS = re.compile(
    rb"__(global|device|host|shared|forceinline|launch_bounds|constant|managed|restrict)__"
)


def error_lines(tree: tree_sitter.Tree, data: bytes) -> set[int]:
    """Lines inside ERROR regions: what tree-sitter could not parse there is unknown.

    tree-sitter-cpp does not know CUDA's qualifiers and leaves a one-line ERROR beside
    each (``__global__ void``); those are understood and not counted.
    """
    lines: set[int] = set()
    text_lines = data.split(b"\n")
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if not node.has_error:
            continue
        if node.type == "ERROR":
            row = node.start_point[0]
            if row == node.end_point[0] and _CUDA_QUALIFIERS.search(text_lines[row]):
                continue
            lines.update(_lines(node))
            continue
        stack.extend(node.children)
    return lines
