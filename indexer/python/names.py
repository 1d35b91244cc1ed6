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
MAX_PARTS = 24  # no real dotted name is longer; a longer one is a walk feeding on itself


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


Result = tuple[list[int], bool] | None


def resolve_dotted(
    source: NameSource, target: str, memo: dict[str, Result] | None = None
) -> Result:
    """(node ids, exact) for ``target``; exact is False when only an enclosing class or
    module could be found for an attribute the index has no node for.

    ``memo`` caches answers across calls (the linker passes one per link run). Within a
    call every intermediate name is resolved once: star imports fan out (torch/__init__.py
    star-imports many modules, which star-import others), and without the cache the walk
    is exponential in their depth.
    """
    return _resolve(source, target, {} if memo is None else memo, set())


def _resolve(source: NameSource, target: str, memo: dict[str, Result], active: set[str]) -> Result:
    if target in memo:
        return memo[target]
    if target in active or len(active) > MAX_HOPS or not target or target.count(".") > MAX_PARTS:
        return None  # a re-export cycle, or a chain too long to be real
    active.add(target)
    try:
        result = _walk(source, target, memo, active)
    finally:
        active.discard(target)
    memo[target] = result
    return result


def _walk(source: NameSource, target: str, memo: dict[str, Result], active: set[str]) -> Result:
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
    if index > 1:
        # ``from .roi_align import roi_align`` in a package binds the name over the
        # submodule the import set as its attribute: ``ops.roi_align`` is the function.
        package = source.module(".".join(parts[: index - 1]))
        bindings = source.attrs(package).get("bindings", {}) if package is not None else {}
        bound = bindings.get(parts[index - 1])
        if bound and bound != ".".join(parts[:index]):
            rebound = _resolve(source, ".".join([bound, *parts[index:]]), memo, active)
            if rebound:
                return rebound
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
                return _resolve(source, ".".join([bound, *rest]), memo, active)
            for star in attrs.get("stars", ()):
                # A star import from a module the index has no file for (torch._C is
                # compiled) cannot supply the name; following it would re-enter this
                # module with an ever longer name (torch._C._C._C.float32).
                if source.module(star) is None:
                    continue
                result = _resolve(source, ".".join([star, *parts[position:]]), memo, active)
                if result:
                    return result
            if name in attrs.get("vars", ()):
                return current, not rest
            return None
        inherited = _inherited(source, current, parts[position:], memo, active)
        if inherited:
            return inherited
        return (current, False) if any(is_class(source, n) for n in current) else None
    return current, True


def _inherited(
    source: NameSource,
    classes: list[int],
    member: list[str],
    memo: dict[str, Result],
    active: set[str],
) -> Result:
    for node_id in classes:
        if not is_class(source, node_id):
            continue
        for base in source.attrs(node_id).get("bases", ()):
            result = _resolve(source, ".".join([base, *member]), memo, active)
            if result and result[1]:
                return result
    return None


def resolve_member_of_bases(
    source: NameSource, class_dotted: str, member: str
) -> tuple[list[int], bool] | None:
    """``super().member``: the member as the bases of ``class_dotted`` define it."""
    memo: dict[str, Result] = {}
    found = _resolve(source, class_dotted, memo, set())
    if not found or not found[1]:
        return None
    return _inherited(source, found[0], [member], memo, set())
