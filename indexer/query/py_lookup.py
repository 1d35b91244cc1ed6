"""From a Python name as a user writes it to the definitions it means, in an Index.

``torch.nn.Linear`` is re-exported: its node is ``torch.nn.modules.linear.Linear``. The
lookup tries the exact qualified name, then the same re-export walk the linker uses
(:mod:`indexer.python.names`, here over SQL), then a short name (``Linear``).
"""

from __future__ import annotations

import difflib
from typing import Any

from indexer.python.names import resolve_dotted
from indexer.query.index import Index, Node

DEF_KINDS = ("python_class", "python_function", "test_utility")
PYTHON_KINDS = ("python_module", *DEF_KINDS)


def module_ids(index: Index) -> dict[str, int]:
    """Python module qualname -> its node id, read once per index: a lookup by qualname
    and kind reads every node of that qualname first, and vLLM's index holds 2,761
    external 'torch' nodes (7 ms for each question naming torch.ops.X)."""
    return index.shared(
        "python-module-ids",
        lambda: dict(
            index.conn.execute(
                "SELECT qualname, MIN(id) FROM nodes WHERE kind = 'python_module' GROUP BY qualname"
            )
        ),
    )


class IndexNames:
    """The :class:`indexer.python.names.NameSource` of an open Index (cached lookups)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._defs: dict[str, list[int]] = {}
        self._nodes: dict[int, Node] = {}

    def module(self, dotted: str) -> int | None:
        return module_ids(self.index).get(dotted)

    def defs(self, dotted: str) -> list[int]:
        if dotted not in self._defs:
            self._defs[dotted] = [
                row[0]
                for row in self.index.conn.execute(
                    f"SELECT id FROM nodes WHERE qualname = ? AND kind IN {DEF_KINDS}",
                    (dotted,),
                )
            ]
        return self._defs[dotted]

    def node(self, node_id: int) -> Node:
        if node_id not in self._nodes:
            self._nodes[node_id] = self.index.node(node_id)
        return self._nodes[node_id]

    def attrs(self, node_id: int) -> dict[str, Any]:
        return self.node(node_id).attrs

    def kind(self, node_id: int) -> str:
        return self.node(node_id).kind


def definitions(index: Index, name: str, names: IndexNames | None = None) -> tuple[list[Node], str]:
    """(nodes, how matched) for a Python module, class or function name."""
    name = name.strip()
    exact = [node for node in index.find(name, PYTHON_KINDS) if node.qualname == name]
    names = names or IndexNames(index)
    if exact and "." in name and all(node.kind == "python_module" for node in exact):
        # A submodule whose package binds its name to something else (``from .roi_align
        # import roi_align``): the name users type is that, as Python resolves it.
        resolved = resolve_dotted(names, name)
        if resolved and resolved[1] and set(resolved[0]) != {node.id for node in exact}:
            return index.nodes(resolved[0]), "re-export"
    if exact:
        return exact, "qualified name"
    bound = assignment(index, name) if "." in name else None
    if bound is not None:
        return [bound[0]], "assignment"
    if "." in name:
        resolved = resolve_dotted(names, name)
        if resolved and resolved[1]:
            return index.nodes(resolved[0]), "re-export"
    short = name.rsplit(".", 1)[-1]
    candidates = [node for node in index.find(short, PYTHON_KINDS) if node.name == short]
    if "." in name:  # a partly qualified name: keep the definitions it ends
        suffix = "." + name
        candidates = [node for node in candidates if ("." + node.qualname).endswith(suffix)]
    return candidates, "short name"


def reexported(index: Index, name: str) -> list[Node]:
    """The definitions a dotted name reaches only through packages' re-exports
    (``pkg.ops.nms`` for ``from .boxes import nms`` in ``pkg/ops/__init__.py``): the name
    users type, where the index keeps ``pkg.ops.boxes.nms``."""
    if "." not in name or "::" in name:
        return []
    resolved = resolve_dotted(IndexNames(index), name.strip())
    return index.nodes(resolved[0]) if resolved and resolved[1] else []


ASSIGNMENT = "python_assignment"  # the kind of an assignment-bound name's Node
NAMED_OPS = ("op", "binding")  # what an assignment may name besides definitions


def assignment(index: Index, name: str) -> tuple[Node, list[Node]] | None:
    """``torch.nn.functional.max_pool2d``, bound at module level to a call's result
    (``max_pool2d = boolean_dispatch(...)``): (a Node for the name, at the assignment's
    lines, and the definitions, ops and bindings the assignment names), or None. The index keeps such
    names as module variables, with their lines (``var_lines``), not as nodes."""
    module_name, _, var = name.strip().rpartition(".")
    if not module_name:
        return None
    modules = [n for n in index.find(module_name, ["python_module"]) if n.qualname == module_name]
    for module in modules:
        lines = (module.attrs.get("var_lines") or {}).get(var)
        if not lines:
            continue
        first, last = lines
        named = [
            index.node(edge.dst)
            for edge in index.out_edges(module.id, ["references"])
            if first <= edge.line <= last
        ]
        node = Node(
            module.id, ASSIGNMENT, var, name.strip(), module.path, first, last, module.id, {}
        )
        kept = {n.id: n for n in named if n.kind in DEF_KINDS or n.kind in NAMED_OPS}
        return node, list(kept.values())
    return None


def is_class(node: Node) -> bool:
    return node.kind in ("python_class", "test_class") or (
        node.kind == "test_utility" and node.attrs.get("py_kind") == "class"
    )


def short_names(index: Index) -> dict[str, list[str]]:
    """Python definitions' last name -> qualified names (read once per index)."""

    def read() -> dict[str, list[str]]:
        table: dict[str, list[str]] = {}
        for short, qualname in index.conn.execute(
            f"SELECT name, qualname FROM nodes WHERE kind IN {PYTHON_KINDS} OR kind = 'test_class'"
        ):
            table.setdefault(short, []).append(qualname)
        return table

    return index.shared("python-short-names", read)


def suggest(index: Index, name: str, limit: int = 5) -> list[str]:
    """Close Python names by their last component (``Lienar`` -> ``...Linear``), then the
    index's general suggestions."""
    by_short = short_names(index)
    short = name.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(short, list(by_short), n=limit, cutoff=0.6)
    found = [qual for match in close for qual in sorted(by_short[match], key=len)]
    return list(dict.fromkeys([*found[:limit], *index.suggest(name, limit)]))[:limit]
