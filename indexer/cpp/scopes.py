"""Which namespaces, classes and functions enclose what: one sweep over byte ranges.

The query captures namespace, class and function nodes wherever they are (also inside
ERROR regions); sorting them by start and keeping a stack of open ranges nests them
without walking the rest of the tree in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from indexer.cpp.names import ANONYMOUS, split_qualified

if TYPE_CHECKING:
    from tree_sitter import Node

NAMESPACE, CLASS, FUNCTION = 0, 1, 2


@dataclass(slots=True)
class Region:
    start: int
    end: int
    kind: int  # NAMESPACE, CLASS or FUNCTION
    node: Node
    names: list[str] = field(default_factory=list)  # components it adds to the scope
    scope: list[str] = field(default_factory=list)  # the scope outside it
    parent: Region | None = None  # the innermost region around it
    owner: Region | None = None  # innermost enclosing class, for members
    in_function: bool = False  # nested in a function body (a local class's method)
    local: int = 0  # node index in the file's facts (classes, functions)
    qual: list[str] | None = None  # a function's qualified name, once known
    specialization: str | None = None  # a class's name with template arguments, if written
    caller: Any = None  # a function's calls.Caller, once known


def _text(data: bytes, node: Node | None) -> str:
    if node is None:
        return ""
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def nest(
    data: bytes, namespaces: list[Node], classes: list[Node], functions: list[Node]
) -> list[Region]:
    """Regions in document order, each with the scope that encloses it."""
    regions = [Region(n.start_byte, n.end_byte, NAMESPACE, n) for n in namespaces]
    regions += [Region(n.start_byte, n.end_byte, CLASS, n) for n in classes]
    regions += [Region(n.start_byte, n.end_byte, FUNCTION, n) for n in functions]
    regions.sort(key=lambda region: (region.start, -region.end, region.kind))
    stack: list[Region] = []
    for region in regions:
        while stack and stack[-1].end <= region.start:
            stack.pop()
        if stack:
            outer = stack[-1]
            region.parent = outer
            region.scope = outer.scope + outer.names
            region.in_function = outer.in_function or outer.kind == FUNCTION
            region.owner = outer if outer.kind == CLASS else outer.owner
        if region.kind == NAMESPACE:
            name = region.node.child_by_field_name("name")
            region.names = split_qualified(_text(data, name)) if name is not None else [ANONYMOUS]
        elif region.kind == CLASS:
            name = region.node.child_by_field_name("name")
            written = _text(data, name) if name is not None else ""
            region.names = split_qualified(written)[-1:] if written else []
            if "<" in written:  # template <> struct Vectorized<float> {...}
                region.specialization = "".join(written.split())
        stack.append(region)
    return regions


def namespace_at(namespaces: list[Region], offset: int) -> list[str]:
    """The namespace components enclosing a byte offset (namespaces in document order)."""
    scope: list[str] = []
    for region in namespaces:
        if region.start > offset:
            break
        if offset < region.end:
            scope = region.scope + region.names
    return scope
