"""graph: who calls a function, what it calls, and what a change to it can reach.

Three walks over the stored edges (which point from the user to the used):

- ``callers``: inbound, as a tree ``depth`` levels deep (default 1);
- ``calls``: outbound, as a tree (default 1);
- ``impact``: every transitive caller up to ``depth`` levels (default 3), by level.

The walk stays on the C++ side by default: ops and bindings (where C++ meets Python) are
reported but not walked through; ``walk_python`` continues from them into the Python code
that uses them and the tests that cover it. A call the linker could not attribute is not
dropped: ``fuzzy`` name matching lists unresolved references with the same name as
*possible* callers (at the first level, or at every level with ``fuzzy_all_levels``).
``focus`` narrows what is listed (a node kind, ``tests``/``python``/``cpp``/``cuda``, or
a repo-relative path prefix), never what is walked.
"""

from __future__ import annotations

import re
from typing import Any

from indexer.graph.vocabulary import NODE_KINDS, Extractor
from indexer.query.answer import Answer, Item
from indexer.query.graph_walk import MAX_NODES, Reach, Walk, walk, without_anonymous
from indexer.query.index import Index, Node
from indexer.query.py_lookup import reexported

MODES = ("callers", "calls", "impact")
DEFAULT_DEPTH = {"callers": 1, "calls": 1, "impact": 3}
MORE_SITES = 6  # further call sites of one caller its line names
MAX_DEPTH = 10
LIMIT = 60  # lines of an answer; the rest is counted, not shown
MAX_STARTS = 50

FOCUS_ALIASES = {
    "tests": ("test_file", "test_class", "test_function"),
    "python": ("python_module", "python_class", "python_function"),
    "cpp": ("cpp_function", "cpp_class", "dispatch_stub"),
    "cuda": ("cuda_kernel",),
    "ops": ("op",),
    "bindings": ("binding",),
}


# --- finding the start ------------------------------------------------------------------


def _split(name: str) -> list[str]:
    return [part for part in re.split(r"::|\.", name) if part]


def resolve_start(index: Index, func: str) -> tuple[list[Node], str]:
    """The nodes ``func`` names, and how they were matched.

    Exact qualified or short name first; then a qualified suffix (``native::add_kernel``,
    anonymous namespaces optional) or an op's overloads (``aten::add`` ->
    ``aten::add.Tensor``); then a Python spelling recorded on an op or binding
    (``torch.add``).
    """
    exact = [node for node in index.find_spelled(func) if node.kind != "file"]
    if exact:
        return exact, "exact"
    parts = _split(func)
    if not parts:
        return [], "none"
    suffixes = (f"::{func}", f".{func}")
    by_last = [node for node in index.find(parts[-1]) if node.kind != "file"]
    # An anonymous namespace is invisible where the function is used: `at::native::foo`
    # names `at::native::(anonymous)::foo` as well.
    matched = [
        n
        for n in by_last
        if n.qualname.endswith(suffixes)
        or without_anonymous(n.qualname) == func
        or without_anonymous(n.qualname).endswith(suffixes)
    ]
    if not matched and len(parts) > 1:
        # An op written without its overload: every overload of it.
        head = _split(func)[-1]
        matched = [
            n
            for n in index.find(head, kinds=["op"])
            if n.qualname.startswith((f"{func}.",)) or n.qualname == func
        ]
    if matched:
        return matched, "suffix"
    spelled = _by_python_name(index, func)
    if spelled:
        return spelled, "python name"
    exported = reexported(index, func)
    if exported:
        return exported, "re-export"
    return [], "none"


def _by_python_name(index: Index, func: str) -> list[Node]:
    pattern = f'%"{func}"%'
    rows = index.conn.execute(
        "SELECT n.id FROM nodes n WHERE n.kind IN ('op', 'binding') AND n.attrs LIKE ?",
        (pattern,),
    ).fetchall()
    nodes = index.nodes(row[0] for row in rows)
    return [n for n in nodes if func in (n.attrs.get("python_names") or [])]


# --- focus ------------------------------------------------------------------------------


def focus_filter(index: Index, focus: str | None) -> tuple[Any, str]:
    """A predicate on nodes for ``focus``, and its description; ValueError if unknown."""
    if focus is None or not focus.strip():
        return (lambda node: True), ""
    focus = focus.strip()
    if focus in FOCUS_ALIASES:
        kinds = frozenset(FOCUS_ALIASES[focus])
        return (lambda node: node.kind in kinds), f"focus {focus}"
    if focus in NODE_KINDS:
        return (lambda node: node.kind == focus), f"focus {focus}"
    prefix = focus.lstrip("./")
    hit = index.conn.execute(
        "SELECT 1 FROM files WHERE substr(path, 1, ?) = ? LIMIT 1", (len(prefix), prefix)
    ).fetchone()
    if hit is None:
        known = ", ".join([*FOCUS_ALIASES, "or a node kind"])
        raise ValueError(
            f"focus {focus!r} is neither a kind ({known}) nor a path prefix of any indexed file"
        )
    return (lambda node: node.path.startswith(prefix)), f"focus {prefix}"


# --- rendering --------------------------------------------------------------------------


def _detail(reach: Reach, node: Node, show_level: bool) -> str:
    parts = [node.kind]
    if reach.kind:
        edge = reach.kind
        if reach.fuzzy_target is not None:
            edge = f"possible {edge}: unresolved '{reach.fuzzy_target}' matches by name"
        elif reach.ambiguous:
            edge = f"{edge}, ambiguous: {reach.ambiguous} candidates"
        if reach.extractor != Extractor.FAST.value:
            edge = f"{edge} ({reach.extractor})"
        parts.append(edge)
    if show_level:
        parts.append(f"level {reach.level}")
    if reach.sites:
        shown = ", ".join(reach.sites[:MORE_SITES])
        extra = len(reach.sites) - MORE_SITES
        parts.append(f"also at {shown}" + (f" and {extra} more" if extra > 0 else ""))
    return ", ".join(parts)


def _item(reach: Reach, node: Node, indent: int, show_level: bool, via: Node | None) -> Item:
    data = {
        "id": node.id,
        "kind": node.kind,
        "qualname": node.qualname,
        "defined_at": node.evidence,
        "level": reach.level,
        "edge": reach.kind,
    }
    if via is not None:
        data["via"] = via.qualname
    if reach.ambiguous:
        data["ambiguous"] = reach.ambiguous
    if reach.kind:
        data["extractor"] = reach.extractor
    if reach.fuzzy_target is not None:
        data["unresolved_name"] = reach.fuzzy_target
    if reach.sites:
        data["call_sites"] = [reach.evidence, *reach.sites]
    python_names = node.attrs.get("python_names")
    if python_names:
        data["python_names"] = python_names
    return Item(
        label=node.qualname,
        # The call site is the evidence of a caller; a start node's own definition.
        evidence=reach.evidence or node.evidence,
        detail=_detail(reach, node, show_level),
        depth=indent,
        data=data,
    )


def _tree_items(result: Walk, nodes: dict[int, Node], starts: list[Node]) -> list[Item]:
    children: dict[int, list[Reach]] = {}
    for reach in [*result.reached.values(), *result.also]:
        if reach.parent is not None:
            children.setdefault(reach.parent, []).append(reach)
    for siblings in children.values():
        siblings.sort(key=lambda r: (r.fuzzy_target is not None, r.path, r.line))
    items: list[Item] = []
    asked = {start.id for start in starts}
    shown: set[int] = set(asked)

    def visit(node_id: int, indent: int) -> None:
        for child in children.get(node_id, ()):
            item = _item(child, nodes[child.node_id], indent, False, None)
            if child.node_id == node_id:
                item.detail += ", recursive call"
                items.append(item)
                continue
            if child.node_id in asked:  # one overload calling another
                item.detail += ", one of the definitions asked"
                items.append(item)
                continue
            if child.node_id in shown:
                item.detail += ", listed above"
                items.append(item)
                continue
            shown.add(child.node_id)
            items.append(item)
            visit(child.node_id, indent + 1)

    for start in starts:
        if len(starts) > 1:
            items.append(_item(result.reached[start.id], start, 0, False, None))
            visit(start.id, 1)
        else:
            visit(start.id, 0)
    return items


def _flat_items(result: Walk, nodes: dict[int, Node], keep: Any) -> list[Item]:
    reaches = [r for r in result.reached.values() if r.level > 0 and keep(nodes[r.node_id])]
    reaches.sort(key=lambda r: (r.level, r.fuzzy_target is not None, r.path, r.line))
    return [
        _item(r, nodes[r.node_id], 0, True, nodes.get(r.parent) if r.parent else None)
        for r in reaches
    ]


def _through_ops(result: Walk) -> bool:
    """Whether a first-level caller is an op or registration dispatching to the start."""
    return any(
        reach.level == 1 and result.nodes[node_id].kind in ("op", "registration")
        for node_id, reach in result.reached.items()
        if node_id in result.nodes
    )


def graph(
    index: Index,
    func: str,
    mode: str = "callers",
    depth: int | None = None,
    fuzzy_all_levels: bool = False,
    walk_python: bool = False,
    focus: str | None = None,
) -> Answer:
    """Callers, callees or the transitive impact of ``func``, each line with file:line."""
    func = (func or "").strip()
    if not func:
        raise ValueError("func must name a function, kernel, op or binding (got an empty name)")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    asked = depth
    depth = DEFAULT_DEPTH[mode] if depth is None else depth
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be between 1 and {MAX_DEPTH} (got {depth})")
    keep, focus_note = focus_filter(index, focus)
    query = f"{mode} {func}"
    starts, how = resolve_start(index, func)
    if not starts:
        return Answer.not_found("graph", func, "Function", index.suggest(func))
    notes: list[str] = []
    if len(starts) > MAX_STARTS:
        notes.append(
            f"{len(starts)} definitions match {func!r}; walked from the first {MAX_STARTS}"
        )
        starts = starts[:MAX_STARTS]
    if how != "exact":
        notes.append(f"{func!r} matched by {how}: {', '.join(n.qualname for n in starts[:5])}")
    inbound = mode != "calls"
    asked_depth = depth
    result = walk(index, starts, inbound, depth, fuzzy_all_levels, walk_python)
    if mode == "callers" and asked is None and _through_ops(result):
        # A kernel's callers are the op's: at::nll_loss_nd(...) calls it through the op.
        depth += 1
        result = walk(index, starts, inbound, depth, fuzzy_all_levels, walk_python)
        notes.append(
            "an op dispatches to it: callers of the op (C++ calling it through ATen's API)"
            f" are listed one level further (depth {depth}; depth={asked_depth} for one level)"
        )
    nodes = result.nodes
    if mode == "impact" or focus_note:
        items = _flat_items(result, nodes, keep)
    else:
        items = _tree_items(result, nodes, starts)
    if mode == "calls":
        for ref in result.unresolved:
            if len(items) > 10 * LIMIT:
                break
            src = nodes.get(ref.src)
            items.append(
                Item(
                    label=ref.target,
                    evidence=f"{ref.path}:{ref.line}",
                    detail=f"unresolved {ref.kind}" + (f" from {src.qualname}" if src else ""),
                    depth=ref.level - 1,
                    data={"unresolved": True, "edge": ref.kind, "level": ref.level},
                )
            )
    found_count = sum(1 for r in result.reached.values() if r.level > 0)
    fuzzy_count = sum(1 for r in result.reached.values() if r.fuzzy_target is not None)
    what = {"callers": "callers", "calls": "callees", "impact": "transitive callers"}[mode]
    where = starts[0].qualname if len(starts) == 1 else f"{len(starts)} definitions of {func}"
    at = starts[0].evidence if len(starts) == 1 else f"matched by {how.replace('exact', 'name')}"
    title = f"{what} of {where} ({at}), depth {depth}"
    title += f": {found_count} found"
    if fuzzy_count:
        title += f" ({fuzzy_count} only by unresolved name match)"
    if focus_note:
        title += f"; listing {focus_note}: {len(items)}"
    if result.unresolved and mode == "calls":
        title += f"; {len(result.unresolved)} unresolved calls listed last"
    answer = Answer("graph", query, title=title, items=items, notes=notes)
    if result.truncated:
        answer.notes.append(f"walk stopped after {MAX_NODES} nodes; lower depth to see all")
    if result.boundary:
        names = sorted(nodes[i].qualname for i in result.boundary if i in nodes)
        answer.notes.append(
            f"{len(names)} ops/bindings reached; their Python users and tests are not walked "
            f"(walk_python=true continues): {', '.join(names[:8])}"
            + (" ..." if len(names) > 8 else "")
        )
    if found_count == 0 and not result.unresolved:
        answer.notes.append(
            f"no {what} recorded for {where}: an entry point, or reached only in ways the "
            "index cannot see (virtual calls, function pointers, macros)"
        )
    levels: dict[int, int] = {}
    for reach in result.reached.values():
        if reach.level:
            levels[reach.level] = levels.get(reach.level, 0) + 1
    answer.data = {
        "mode": mode,
        "depth": depth,
        "starts": [{"qualname": n.qualname, "kind": n.kind, "at": n.evidence} for n in starts],
        "matched_by": how,
        "found": found_count,
        "by_level": levels,
        "possible_by_name": fuzzy_count,
        "unresolved": len(result.unresolved),
        "boundary": sorted(nodes[i].qualname for i in result.boundary if i in nodes),
        "truncated": result.truncated,
    }
    return answer.truncate(LIMIT)
