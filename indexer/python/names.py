"""Resolving a Python dotted name to the definition it reaches, through re-exports.

``minitorch.add`` is not a node: ``minitorch/__init__.py`` binds ``add`` to
``minitorch.functional.add``, which is. The walk takes the longest prefix that is a
module, then each further component as a definition of that module or class, a name the
module binds by import or alias (followed), a star import (tried), a module-level
variable (the module itself answers), or a member inherited from a base class.

The same walk serves the linker (dict lookups over a SymbolTable) and the query tools
(SQL lookups over an Index): both provide a :class:`NameSource`.
"""

from __future__ import annotations

from typing import Any, Protocol

CLASS_KINDS = frozenset({"python_class", "test_class"})
MAX_HOPS = 16


class NameSource(Protocol):
    def module(self, dotted: str) -> int | None: ...

    def defs(self, dotted: str) -> list[int]: ...

    def attrs(self, node_id: int) -> dict[str, Any]: ...

    def kind(self, node_id: int) -> str: ...


def is_class(source: NameSource, node_id: int) -> bool:
    kind = source.kind(node_id)
    return kind in CLASS_KINDS or (
        kind == "test_utility" and source.attrs(node_id).get("py_kind") == "class"
    )


def resolve_dotted(source: NameSource, target: str, hops: int = 0) -> tuple[list[int], bool] | None:
    """(node ids, exact) for ``target``; exact is False when only an enclosing class or
    module could be found for an attribute the index has no node for."""
    if hops > MAX_HOPS or not target:
        return None
    parts = target.split(".")
    current: list[int] = []
    index = len(parts)
    while index > 0:
        module = source.module(".".join(parts[:index]))
        if module is not None:
            current = [module]
            break
        index -= 1
    if not current:
        return None
    qual = ".".join(parts[:index])
    is_module = True
    for position in range(index, len(parts)):
        name = parts[position]
        nested = f"{qual}.{name}"
        found = source.defs(nested)
        if found:
            current, qual, is_module = found, nested, False
            continue
        rest = parts[position + 1 :]
        if is_module:
            attrs = source.attrs(current[0])
            bound = attrs.get("bindings", {}).get(name)
            if bound and bound != nested:
                return resolve_dotted(source, ".".join([bound, *rest]), hops + 1)
            for star in attrs.get("stars", ()):
                result = resolve_dotted(source, ".".join([star, *parts[position:]]), hops + 1)
                if result:
                    return result
            if name in attrs.get("vars", ()):
                return current, not rest
            return None
        inherited = _inherited(source, current, parts[position:], hops)
        if inherited:
            return inherited
        return (current, False) if any(is_class(source, n) for n in current) else None
    return current, True


def _inherited(
    source: NameSource, classes: list[int], member: list[str], hops: int
) -> tuple[list[int], bool] | None:
    for node_id in classes:
        if not is_class(source, node_id):
            continue
        for base in source.attrs(node_id).get("bases", ()):
            result = resolve_dotted(source, ".".join([base, *member]), hops + 1)
            if result and result[1]:
                return result
    return None


def resolve_member_of_bases(
    source: NameSource, class_dotted: str, member: str
) -> tuple[list[int], bool] | None:
    """``super().member``: the member as the bases of ``class_dotted`` define it."""
    found = resolve_dotted(source, class_dotted)
    if not found or not found[1]:
        return None
    return _inherited(source, found[0], [member], 0)
