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

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from indexer.graph.vocabulary import NODE_KINDS
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node

MODES = ("callers", "calls", "impact")
DEFAULT_DEPTH = {"callers": 1, "calls": 1, "impact": 3}
MAX_DEPTH = 10
LIMIT = 60  # lines of an answer; the rest is counted, not shown
MAX_NODES = 20_000  # a walk stops here and says so, rather than answering slowly
MAX_STARTS = 50
MAX_FUZZY_PER_LEVEL = 200

# Edge kinds that mean "uses" in a call graph. `contains`, `includes`, `imports` and
# `implements` relate code without one calling the other.
CODE_EDGES = ("calls", "launches", "dispatches", "binds", "derives")
PYTHON_EDGES = ("references", "covers", "external_ref")
BOUNDARY_KINDS = frozenset({"op", "binding"})  # where the C++ side meets Python
PYTHON_SIDE = ("python_", "test_", "opinfo")
SCHEME_OF_KIND = {
    "cpp_function": "cpp",
    "cpp_class": "cpp",
    "cuda_kernel": "cpp",
    "dispatch_stub": "cpp",
    "op": "op",
    "binding": "py",
    "python_function": "py",
    "python_class": "py",
    "python_module": "py",
}
FOCUS_ALIASES = {
    "tests": ("test_file", "test_class", "test_function"),
    "python": ("python_module", "python_class", "python_function"),
    "cpp": ("cpp_function", "cpp_class", "dispatch_stub"),
    "cuda": ("cuda_kernel",),
    "ops": ("op",),
    "bindings": ("binding",),
}

_EDGE_SQL = (
    "SELECT e.src_id, e.dst_id, e.kind, f.path, e.line, e.attrs FROM edges e"
    " JOIN files f ON f.id = e.file_id WHERE e.{column} IN ({ids}) AND e.kind IN ({kinds})"
    " ORDER BY f.path, e.line"
)
_MEMBER_SQL = (
    "SELECT e.src_id, e.dst_id, e.kind, f.path, e.line, e.attrs FROM edges e"
    " JOIN files f ON f.id = e.file_id JOIN nodes c ON c.id = e.src_id"
    " WHERE e.dst_id IN ({ids}) AND e.kind = 'contains' AND c.kind = 'python_class'"
)
_UNRESOLVED_IN_SQL = (
    "SELECT r.src_id, r.kind, f.path, r.line, r.target, r.target_key, r.scheme FROM refs r"
    " JOIN files f ON f.id = r.file_id WHERE r.target_key IN ({keys}) AND r.target_id IS NULL"
    " AND r.kind IN ({kinds}) AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)"
    " ORDER BY f.path, r.line LIMIT {limit}"
)
# refs has no index on src_id: a node's refs are found through its file (refs_file).
_UNRESOLVED_OUT_SQL = (
    "SELECT r.src_id, r.kind, f.path, r.line, r.target, r.scheme FROM nodes s"
    " JOIN refs r ON r.file_id = s.file_id AND r.src_id = s.id"
    " JOIN files f ON f.id = r.file_id WHERE s.id IN ({ids}) AND r.target_id IS NULL"
    " AND r.kind IN ({kinds}) AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)"
    " ORDER BY f.path, r.line LIMIT {limit}"
)


@dataclass
class Reach:
    """How the walk reached one node: from ``parent`` by an edge at ``path:line``."""

    node_id: int
    level: int
    parent: int | None
    kind: str | None  # edge kind; None for a start node
    path: str = ""
    line: int = 0
    ambiguous: int = 0
    fuzzy_target: str | None = None  # set when reached through an unresolved name match

    @property
    def evidence(self) -> str | None:
        return f"{self.path}:{self.line}" if self.path else None


@dataclass
class Unresolved:
    """An outbound reference the linker could not attribute (listed by ``calls``)."""

    src: int
    level: int
    kind: str
    target: str
    path: str
    line: int


@dataclass
class Walk:
    reached: dict[int, Reach] = field(default_factory=dict)
    nodes: dict[int, Node] = field(default_factory=dict)  # every reached node
    unresolved: list[Unresolved] = field(default_factory=list)
    boundary: set[int] = field(default_factory=set)  # ops/bindings not walked through
    # Further edges into nodes already reached at this level: a tree lists the node under
    # each parent (walked below the first only), so no start looks caller-less.
    also: list[Reach] = field(default_factory=list)
    truncated: bool = False
    max_level: int = 0


# --- finding the start ------------------------------------------------------------------


def _split(name: str) -> list[str]:
    return [part for part in re.split(r"::|\.", name) if part]


def _without_anonymous(qualname: str) -> str:
    return qualname.replace("(anonymous)::", "")


def resolve_start(index: Index, func: str) -> tuple[list[Node], str]:
    """The nodes ``func`` names, and how they were matched.

    Exact qualified or short name first; then a qualified suffix (``native::add_kernel``,
    anonymous namespaces optional) or an op's overloads (``aten::add`` -> ``aten::add.Tensor``); then a Python spelling
    recorded on an op or binding (``torch.add``).
    """
    exact = [node for node in index.find(func) if node.kind != "file"]
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
        or _without_anonymous(n.qualname) == func
        or _without_anonymous(n.qualname).endswith(suffixes)
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


# --- the walk ---------------------------------------------------------------------------


def _in_chunks(ids: list[int], size: int = 900) -> Iterable[list[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _python_side(kind: str) -> bool:
    return kind.startswith(PYTHON_SIDE)


def _edges(
    index: Index, ids: list[int], inbound: bool, kinds: tuple[str, ...], class_members: bool = False
) -> list[tuple]:
    """Edges into (or out of) ``ids``; ``class_members`` adds class -> method ``contains``
    edges, so a change to a method reaches the users of its class."""
    rows: list[tuple] = []
    column = "dst_id" if inbound else "src_id"
    for batch in _in_chunks(ids):
        marks = ",".join("?" * len(batch))
        sql = _EDGE_SQL.format(column=column, ids=marks, kinds=",".join("?" * len(kinds)))
        rows.extend(index.conn.execute(sql, [*batch, *kinds]))
        if class_members:
            rows.extend(index.conn.execute(_MEMBER_SQL.format(ids=marks), batch))
    return rows


def _unresolved_callers(index: Index, nodes: list[Node], kinds: tuple[str, ...]) -> list[tuple]:
    """Unattributed references whose written name ends in one of ``nodes``' names."""
    by_key: dict[str, list[Node]] = {}
    for node in nodes:
        if node.kind in SCHEME_OF_KIND:
            by_key.setdefault(node.name, []).append(node)
    if not by_key:
        return []
    keys = list(by_key)
    sql = _UNRESOLVED_IN_SQL.format(
        keys=",".join("?" * len(keys)),
        kinds=",".join("?" * len(kinds)),
        limit=10 * MAX_FUZZY_PER_LEVEL,
    )
    out = []
    for src, kind, path, line, target, key, scheme in index.conn.execute(sql, [*keys, *kinds]):
        for node in by_key.get(key, ()):
            if SCHEME_OF_KIND.get(node.kind) == scheme and _may_name(scheme, target, node):
                out.append((src, node.id, kind, path, line, target))
    return out[:MAX_FUZZY_PER_LEVEL]


def _may_name(scheme: str, target: str, node: Node) -> bool:
    """Whether an unresolved name, as written, could still mean ``node``.

    C++ lookup depends on scopes, using-directives and generated headers the index does
    not see, so a bare name may mean any definition of that name, and a qualified one
    (``dnnl::matmul``) any definition whose qualified name ends with it (anonymous
    namespaces and template arguments aside). A Python dotted name is absolute once
    aliases are expanded: only a method call on an unknown receiver (``.add_``) or a bare
    name can mean a definition elsewhere.
    """
    if scheme == "cpp":
        written = _without_templates(target).lstrip(":")
        if "::" not in written:
            return True
        qualname = _without_anonymous(node.qualname)
        return qualname == written or qualname.endswith("::" + written)
    if scheme == "py":
        return target.startswith(".") or "." not in target
    return False


def _without_templates(name: str) -> str:
    depth, kept = 0, []
    for char in name:
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def walk(
    index: Index,
    starts: list[Node],
    inbound: bool,
    depth: int,
    fuzzy_all_levels: bool = False,
    walk_python: bool = False,
) -> Walk:
    """Breadth-first, level by level, with batched queries; each node is reached once."""
    result = Walk()
    nodes = result.nodes
    nodes.update((node.id, node) for node in starts)
    for node in starts:
        result.reached[node.id] = Reach(node.id, 0, None, None)
    frontier = [node.id for node in starts]
    for level in range(1, depth + 1):
        expand = frontier
        if inbound:
            # Python-side edges (references, covers) are followed from the start, from
            # Python code, and everywhere with walk_python; otherwise ops and bindings are
            # the boundary: their C++ callers are walked, their Python users are not.
            python_ok = (
                walk_python or level == 1 or any(_python_side(nodes[i].kind) for i in expand)
            )
            kinds = CODE_EDGES + (PYTHON_EDGES if python_ok else ())
            if not python_ok:
                result.boundary.update(i for i in expand if nodes[i].kind in BOUNDARY_KINDS)
        else:
            kinds = (*CODE_EDGES, "references")
        rows = _edges(index, expand, inbound, kinds, class_members=inbound and python_ok)
        fuzzy = level == 1 or fuzzy_all_levels
        fuzzy_rows: list[tuple] = []
        if fuzzy and inbound:
            fuzzy_rows = _unresolved_callers(index, [nodes[i] for i in expand], kinds)
        elif fuzzy:
            sql = _UNRESOLVED_OUT_SQL.format(
                ids=",".join("?" * len(expand)),
                kinds=",".join("?" * len(kinds)),
                limit=MAX_FUZZY_PER_LEVEL,
            )
            for src, kind, path, line, target, _scheme in index.conn.execute(
                sql, [*expand, *kinds]
            ):
                result.unresolved.append(Unresolved(src, level, kind, target, path, line))
        new: list[int] = []
        candidates: list[Reach] = []
        for src, dst, kind, path, line, attrs in rows:
            other, parent = (src, dst) if inbound else (dst, src)
            ambiguous = json.loads(attrs).get("ambiguous", 0) if attrs else 0
            candidates.append(Reach(other, level, parent, kind, path, line, ambiguous))
        for src, dst, kind, path, line, target in fuzzy_rows:
            candidates.append(Reach(src, level, dst, kind, path, line, fuzzy_target=target))
        for reach in candidates:
            seen = result.reached.get(reach.node_id)
            if seen is not None:
                again = seen.level == level and seen.parent != reach.parent
                if again and len(result.also) < 10 * LIMIT:
                    result.also.append(reach)
                continue
            if len(result.reached) >= MAX_NODES:
                result.truncated = True
                break
            result.reached[reach.node_id] = reach
            new.append(reach.node_id)
        if new:
            result.max_level = level
            nodes.update((node.id, node) for node in index.nodes(new))
        if result.truncated:
            break
        frontier = new
    return result


# --- rendering --------------------------------------------------------------------------


def _detail(reach: Reach, node: Node, show_level: bool) -> str:
    parts = [node.kind]
    if reach.kind:
        edge = reach.kind
        if reach.fuzzy_target is not None:
            edge = f"possible {edge}: unresolved '{reach.fuzzy_target}' matches by name"
        elif reach.ambiguous:
            edge = f"{edge}, ambiguous: {reach.ambiguous} candidates"
        parts.append(edge)
    if show_level:
        parts.append(f"level {reach.level}")
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
    if reach.fuzzy_target is not None:
        data["unresolved_name"] = reach.fuzzy_target
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
    shown: set[int] = set()

    def visit(node_id: int, indent: int) -> None:
        for child in children.get(node_id, ()):
            item = _item(child, nodes[child.node_id], indent, False, None)
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
    result = walk(index, starts, inbound, depth, fuzzy_all_levels, walk_python)
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
