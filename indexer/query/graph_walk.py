"""The walks behind the ``graph`` tool: level by level over the stored edges, batched.

Edges point from the user to the used. Inbound walks (callers, impact) follow the code
edges everywhere and the Python-side edges (references, covers) from the start, from
Python code, and everywhere with ``walk_python``; ops and bindings reached otherwise are
the boundary. Unresolved references whose name could mean a reached definition are
*possible* callers (fuzzy matching), marked as such.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from indexer.cpp.names import strip_templates
from indexer.graph.vocabulary import Extractor, edge_extractor
from indexer.query.index import Index, Node

MAX_NODES = 20_000  # a walk stops here and says so, rather than answering slowly
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
ALSO_CAP = 600  # extra parents kept for tree rendering

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
    extractor: str = Extractor.FAST.value  # which extractor made the edge
    # the same caller's further call sites (file:line): every call is a place to look
    sites: list[str] = field(default_factory=list)

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
    # each parent (walked below the first only), so no start looks caller-less; and edges
    # between starts (a recursive call, one overload calling another).
    also: list[Reach] = field(default_factory=list)
    truncated: bool = False
    max_level: int = 0


def without_anonymous(qualname: str) -> str:
    return qualname.replace("(anonymous)::", "")


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
        written = strip_templates(target).lstrip(":")
        if "::" not in written:
            return True
        qualname = without_anonymous(node.qualname)
        return qualname == written or qualname.endswith("::" + written)
    if scheme == "py":
        return target.startswith(".") or "." not in target
    return False


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
            values = json.loads(attrs) if attrs else {}
            candidates.append(
                Reach(
                    other,
                    level,
                    parent,
                    kind,
                    path,
                    line,
                    values.get("ambiguous", 0),
                    extractor=edge_extractor(values),
                )
            )
        for src, dst, kind, path, line, target in fuzzy_rows:
            candidates.append(Reach(src, level, dst, kind, path, line, fuzzy_target=target))
        listed = {(r.node_id, r.parent): r for r in result.also if r.level == level}
        for reach in candidates:
            seen = result.reached.get(reach.node_id)
            if seen is not None:
                same = seen if seen.level == level and seen.parent == reach.parent else None
                same = same or listed.get((reach.node_id, reach.parent))
                if same is not None:
                    repeated = reach.evidence == same.evidence or reach.evidence in same.sites
                    if reach.fuzzy_target is None and not repeated:
                        same.sites.append(reach.evidence)
                    continue
                again = seen.level == level or (seen.level == 0 and reach.fuzzy_target is None)
                if again and len(result.also) < ALSO_CAP:
                    result.also.append(reach)
                    listed[(reach.node_id, reach.parent)] = reach
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
