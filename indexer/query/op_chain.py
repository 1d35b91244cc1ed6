"""The chain behind one op, read from the graph: dispatch table, implementations per key,
DispatchStubs and their registered kernels, CUDA kernels launched, backward formulas.

Pure reads through :class:`Index`; ``trace`` formats the result. Walks are bounded (depth
and node budgets) so a hub function cannot make an answer slow; a budget that cuts a walk
short is reported, never silent.
"""

from __future__ import annotations

import heapq
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from indexer.query import adjacency
from indexer.query.index import Index, Node

STUB_DEPTH = 2  # calls from an implementation to the DispatchStub it invokes
LAUNCH_DEPTH = 7  # calls from a host function to the kernel launch, through gpu_kernel's helpers
WALK_BUDGET = 400  # nodes one bounded walk may visit

_DISPATCH_SQL = (
    "SELECT e.dst_id, f.path, e.line, e.attrs, r.attrs, r.target FROM edges e"
    " JOIN files f ON f.id = e.file_id LEFT JOIN refs r ON r.id = e.ref_id"
    " WHERE e.src_id = ? AND e.kind = 'dispatches' ORDER BY e.line, e.id"
)
_UNRESOLVED_SQL = (
    "SELECT r.src_id, r.target, f.path, r.line, r.attrs FROM refs r"
    " JOIN files f ON f.id = r.file_id WHERE r.file_id = ? AND r.kind = ? AND r.scheme = 'cpp'"
    " AND r.target_id IS NULL AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)"
    " ORDER BY r.line"
)
_STUB_KERNELS_SQL = (
    "SELECT e.dst_id, f.path, e.line, r.attrs FROM nodes n"
    " JOIN edges e ON e.src_id = n.id AND e.kind = 'dispatches'"
    " JOIN refs r ON r.id = e.ref_id JOIN files f ON f.id = e.file_id"
    " WHERE n.kind = 'file' AND r.attrs LIKE '%\"stub\"%'"
)


@dataclass
class Hop:
    """One edge of a chain: the node reached and the text (file:line) that links it."""

    node: Node
    path: str
    line: int
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def evidence(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Unresolved:
    target: str
    path: str
    line: int
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def evidence(self) -> str:
        return f"{self.path}:{self.line}"


def _json(raw: str | None) -> dict[str, Any]:
    return json.loads(raw) if raw else {}


def dispatch_hops(index: Index, node_id: int) -> list[Hop]:
    """``dispatches`` edges out of an op or registration, with the ref's attrs merged in
    (the dispatch key is on the ref; resolvers may or may not copy it onto the edge)."""
    hops = []
    for dst, path, line, edge_attrs, ref_attrs, target in index.conn.execute(
        _DISPATCH_SQL, (node_id,)
    ):
        attrs = {**_json(ref_attrs), **_json(edge_attrs)}
        if target:
            attrs.setdefault("written", target)
        hops.append(Hop(index.node(dst), path, line, attrs))
    return hops


# (index, built_at, file id, kind) -> source node -> its unresolved refs. refs has no
# src_id index, so finding one node's refs scans its file's: native_functions.yaml has
# thousands, and a trace asks for a dozen of its ops. One scan per file serves them all.
_unresolved_cache: dict[tuple[str, str, int, str], dict[int, list[tuple]]] = {}
_unresolved_lock = threading.Lock()
_UNRESOLVED_CACHE_FILES = 256


def unresolved(index: Index, node_id: int, kind: str = "dispatches") -> list[Unresolved]:
    """``cpp`` refs of ``kind`` from ``node_id`` the linker found no definition for."""
    row = index.conn.execute("SELECT file_id FROM nodes WHERE id = ?", (node_id,)).fetchone()
    if row is None:
        return []
    key = (str(index.db_path), index.meta.get("built_at", ""), row[0], kind)
    with _unresolved_lock:
        by_source = _unresolved_cache.get(key)
    if by_source is None:
        by_source = {}
        for src, target, path, line, attrs in index.conn.execute(_UNRESOLVED_SQL, (row[0], kind)):
            by_source.setdefault(src, []).append((target, path, line, attrs))
        with _unresolved_lock:
            if len(_unresolved_cache) >= _UNRESOLVED_CACHE_FILES or any(
                cached[:2] != key[:2] for cached in _unresolved_cache
            ):
                _unresolved_cache.clear()  # another index, or enough files: start over
            _unresolved_cache[key] = by_source
    return [
        Unresolved(target, path, line, _json(attrs))
        for target, path, line, attrs in by_source.get(node_id, [])
    ]


_CPP_KINDS = ("cpp_function", "cuda_kernel", "dispatch_stub", "cpp_class")


def same_name(index: Index, written: str, limit: int = 5) -> list[Node]:
    """Definitions whose name (and qualified suffix, anonymous namespaces aside) match a
    name the linker could not resolve by scope rules: candidates, never edges."""
    parts = [part for part in written.split("::") if part]
    if not parts:
        return []
    suffix = "::".join(parts)
    found = []
    nodes = index.find(parts[-1], kinds=_CPP_KINDS)
    for node in nodes:
        plain = "::".join(p for p in node.qualname.split("::") if p != "(anonymous)")
        if plain == suffix or plain.endswith(f"::{suffix}"):
            found.append(node)
    if not found and len(parts) > 1:
        # A definition whose namespace the parser lost (or wrote differently): the same
        # name in any namespace, the structured kernel's class with it.
        tail = parts[-2:] if parts[-1] == "impl" else parts[-1:]
        loose = "::".join(tail)
        found = [
            node for node in nodes if node.qualname == loose or node.qualname.endswith(f"::{loose}")
        ]
    return found[:limit]


def searched_for(written: str) -> str:
    """What :func:`same_name` looked for, said in an answer that found nothing."""
    parts = [part for part in written.split("::") if part]
    tail = "::".join(parts[-2:] if parts[-1:] == ["impl"] else parts[-1:])
    return f"{written}, and {tail} in any namespace"


def ambiguity(attrs: dict[str, Any]) -> str:
    """What a dispatch hop's text says when its kernel's name had several definitions
    (the linker kept each): '' when it had one. A ufunc's inner loop is one of its
    scalar / vectorized overloads, not a doubt."""
    count = attrs.get("ambiguous")
    if not count:
        return ""
    if attrs.get("role") == "ufunc_inner_loop":
        return f"; one of {count} overloads (scalar / vectorized loops)"
    return f"; ambiguous: one of {count} definitions of the name"


def keys_of(attrs: dict[str, Any]) -> list[str]:
    """The dispatch key of one ref (``key``), else the keys it was written with."""
    if attrs.get("key"):
        return [str(attrs["key"])]
    return [str(key) for key in attrs.get("keys") or []]


def merge_keys(hops: list[Any]) -> list[tuple[Any, list[str]]]:
    """One entry per (target, evidence) with the keys of every ref that wrote it."""
    merged: dict[tuple[Any, str], tuple[Any, list[str]]] = {}
    for hop in hops:
        target = hop.node.id if isinstance(hop, Hop) else hop.target
        slot = merged.setdefault((target, hop.evidence), (hop, []))
        for key in keys_of(hop.attrs):
            if key not in slot[1]:
                slot[1].append(key)
    return list(merged.values())


# --- DispatchStub registrations (REGISTER_DISPATCH), cached per index file ---------------

_stub_cache: dict[tuple[str, str], dict[str, list[tuple[int, str, int, dict]]]] = {}
_stub_lock = threading.Lock()


def stub_registrations(index: Index) -> dict[str, list[tuple[int, str, int, dict]]]:
    """stub name -> (kernel node, path, line, ref attrs) of every REGISTER_*_DISPATCH."""
    cache_key = (str(index.db_path), index.meta.get("built_at", ""))
    with _stub_lock:
        cached = _stub_cache.get(cache_key)
        if cached is not None:
            return cached
    table: dict[str, list[tuple[int, str, int, dict]]] = {}
    for dst, path, line, raw in index.conn.execute(_STUB_KERNELS_SQL):
        attrs = _json(raw)
        stub = attrs.get("stub")
        if stub:
            table.setdefault(str(stub), []).append((dst, path, line, attrs))
    with _stub_lock:
        _stub_cache.clear()  # one index at a time is the common case; keep memory bounded
        _stub_cache[cache_key] = table
    return table


def backend_of(hop: Hop) -> str:
    """The backend a stub's kernel registration serves: REGISTER_DISPATCH names none, so
    the registering file's place says it (native/cpu/, native/cuda/ or a .cu)."""
    if hop.path.endswith((".cu", ".cuh")) or "/cuda/" in hop.path:
        return "CUDA"
    if "/cpu/" in hop.path:
        return "CPU"
    return hop.attrs.get("key") or "registered"


def stub_kernels(index: Index, stub: Node) -> list[Hop]:
    hops = [
        Hop(index.node(dst), path, line, attrs)
        for dst, path, line, attrs in stub_registrations(index).get(stub.name, [])
    ]
    hops.extend(
        Hop(index.node(e.dst), e.path, e.line, e.attrs)
        for e in index.out_edges(stub.id, ["dispatches"])
    )
    unique = {(hop.node.id, hop.line, hop.path): hop for hop in hops}
    return sorted(unique.values(), key=lambda hop: (hop.path, hop.line))


# --- bounded walks over calls -----------------------------------------------------------


@dataclass
class Reach:
    hops: list[Hop] = field(default_factory=list)  # edges found, in order of discovery
    truncated: bool = False


_WALK_SQL = (
    "SELECT e.src_id, e.dst_id, f.path, e.line, e.attrs, n.kind FROM edges e"
    " JOIN files f ON f.id = e.file_id JOIN nodes n ON n.id = e.dst_id"
    " WHERE e.src_id IN ({ids}) AND e.kind IN ({kinds})"
)
_BATCH = 900  # ids per query, under SQLite's bound-parameter limit


class _UnreadAttrs(NamedTuple):
    """Where to read an edge's attrs from, for an edge taken from the edges in memory
    (which hold no attrs): only the edges an answer keeps are read."""

    kind: str
    file_id: int
    ref: int | None


def _level_edges(index: Index, frontier: list[int], kinds: list[str]) -> list[tuple]:
    """(src, dst, path, line, attrs, dst kind) of every edge of ``kinds`` out of
    ``frontier``, in the order per-node reads would give (frontier order, then file and
    line): from the edges in memory when this process holds them (attrs then an
    :class:`_UnreadAttrs`, see :func:`_edge_attrs`), else one query per batch."""
    graph = adjacency.held(index.db_path, index.meta)
    if graph is not None:
        paths = index.file_paths()
        rows = [
            (src, dst, paths[file_id], line, _UnreadAttrs(kind, file_id, ref), dst_kind)
            for src, dst, kind, file_id, line, ref in graph.out_of(frontier, graph.codes(kinds))
            if (dst_kind := graph.kind(dst)) is not None and file_id in paths
        ]
    else:
        rows = []
        kind_marks = ",".join("?" * len(kinds))
        for start in range(0, len(frontier), _BATCH):
            batch = frontier[start : start + _BATCH]
            sql = _WALK_SQL.format(ids=",".join("?" * len(batch)), kinds=kind_marks)
            rows.extend(index.conn.execute(sql, [*batch, *kinds]))
    position = {node_id: i for i, node_id in enumerate(frontier)}
    rows.sort(key=lambda row: (position[row[0]], row[2], row[3]))
    return rows


def _edge_attrs(
    index: Index, src: int, dst: int, line: int, attrs: str | _UnreadAttrs | None
) -> str | None:
    """The edge's attrs as stored: ``attrs`` itself when read from SQLite, else those of
    the first edge (by id) made from that ref, or of that kind, file and line from
    ``src`` to ``dst``."""
    if not isinstance(attrs, _UnreadAttrs):
        return attrs
    kind, file_id, ref = attrs
    if ref is not None:
        sql = "SELECT attrs FROM edges WHERE ref_id = ? AND dst_id = ? ORDER BY id LIMIT 1"
        row = index.conn.execute(sql, (ref, dst)).fetchone()
    else:
        row = index.conn.execute(
            "SELECT attrs FROM edges WHERE src_id = ? AND kind = ? AND dst_id = ?"
            " AND file_id = ? AND line = ? ORDER BY id LIMIT 1",
            (src, kind, dst, file_id, line),
        ).fetchone()
    return row[0] if row else None


def walk_out(
    index: Index, starts: Iterable[int], kinds: list[str], depth: int, want: set[str]
) -> Reach:
    """Edges (of ``kinds``) from ``starts`` up to ``depth`` levels that reach a node of a
    kind in ``want``; each such edge once, the walk capped at WALK_BUDGET nodes.

    Each level is one batched query that also reads the target's kind, so only the
    targets kept as hops are read in full (a per-edge read made trace('torch.add') take
    thousands of queries on PyTorch)."""
    reach = Reach()
    seen = set(starts)
    frontier = list(seen)
    found: set[tuple[int, int]] = set()
    kept: list[tuple[int, int, str, int, str | None]] = []  # (src, dst, path, line, attrs)
    for _ in range(depth):
        following = []
        for src, dst, path, line, attrs, kind in _level_edges(index, frontier, kinds):
            if kind in want and (src, dst) not in found:
                found.add((src, dst))
                kept.append((src, dst, path, line, attrs))
            if dst not in seen and kind == "cpp_function":
                seen.add(dst)
                following.append(dst)
                if len(seen) >= WALK_BUDGET:
                    reach.truncated = True
                    break
        if reach.truncated:
            break
        frontier = following
        if not frontier:
            break
    nodes = {node.id: node for node in index.nodes(dst for _, dst, _, _, _ in kept)}
    reach.hops = [
        Hop(
            nodes[dst],
            path,
            line,
            {**_json(_edge_attrs(index, src, dst, line, attrs)), "from": src},
        )
        for src, dst, path, line, attrs in kept
        if dst in nodes
    ]
    return reach


_MEMO_SIZE = 4096  # walks one index keeps the result of
T = TypeVar("T")


def memoized(index: Index, name: str, key: tuple, compute: Callable[[], T]) -> T:
    """``compute()``, kept per index under (``name``, ``key``): a trace asks for the
    same kernels' stubs and launches several times, and a server for the same ops again."""
    memo, lock = index.shared(f"memo:{name}", lambda: ({}, threading.Lock()))
    with lock:
        if key in memo:
            return memo[key]
    value = compute()
    with lock:
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = value
    return value


def stubs_called(index: Index, function_ids: Iterable[int]) -> Reach:
    ids = tuple(sorted(set(function_ids)))
    return memoized(
        index,
        "stubs",
        ids,
        lambda: walk_out(index, ids, ["calls"], STUB_DEPTH, {"dispatch_stub"}),
    )


def kernels_launched(index: Index, function_ids: Iterable[int]) -> Reach:
    ids = tuple(sorted(set(function_ids)))
    return memoized(
        index,
        "launches",
        ids,
        lambda: walk_out(index, ids, ["calls", "launches"], LAUNCH_DEPTH, {"cuda_kernel"}),
    )


def backward_entries(index: Index, op: Node) -> list[Node]:
    return [
        index.node(edge.src)
        for edge in index.in_edges(op.id, ["derives"])
        if index.node(edge.src).kind == "derivative"
    ]


# refs has no index on src_id: the entry's file (derivatives.yaml) narrows it first
_FORMULA_CALLS_SQL = (
    "SELECT r.target, f.path, r.line, r.attrs FROM refs r JOIN files f ON f.id = r.file_id"
    " WHERE r.file_id = (SELECT file_id FROM nodes WHERE id = ?) AND r.src_id = ?"
    " AND r.kind = 'derives' AND r.attrs LIKE '%\"formula\"%' ORDER BY r.line"
)
# Every call a backward formula makes, read once per index from the files holding
# derivatives (by target_key, a name like 'add' has thousands of refs to look through).
_EVERY_FORMULA_CALL_SQL = (
    "SELECT r.target_key, r.src_id, f.path, r.line, r.attrs FROM refs r"
    " JOIN files f ON f.id = r.file_id JOIN nodes d ON d.id = r.src_id"
    " WHERE r.file_id IN (SELECT DISTINCT file_id FROM nodes WHERE kind = 'derivative')"
    " AND r.kind = 'derives' AND d.kind = 'derivative' AND r.attrs LIKE '%\"formula\"%'"
    " ORDER BY f.path, r.line"
)


def dispatch_keys(index: Index, edges: bool = False) -> frozenset[str]:
    """The dispatch keys the index holds a kernel or registration for, lower-cased: the
    yaml's dispatch entries, TORCH_LIBRARY_IMPL blocks and the backends DispatchStub
    kernels are registered for; with ``edges``, keyed ``m.impl`` calls too (a slower read:
    every dispatch edge)."""

    def read(sql: str) -> frozenset[str]:
        keys = {"cpu", "cuda"}
        for (raw,) in index.conn.execute(sql):
            attrs = _json(raw)
            keys.update(str(key).lower() for key in (attrs.get("dispatch") or {}))
            keys.update(str(key).lower() for key in attrs.get("impl_keys") or [])
            keys.update(key.lower() for key in keys_of(attrs))
        return frozenset(keys)

    if edges:
        sql = "SELECT attrs FROM edges WHERE kind = 'dispatches' AND attrs LIKE '%key%'"
        return index.shared("dispatch_keys:edges", lambda: read(sql))
    sql = "SELECT attrs FROM nodes WHERE kind IN ('op', 'registration')"
    return index.shared("dispatch_keys", lambda: read(sql))


def formula_ops(index: Index, derivative: Node) -> list[Hop]:
    """The backward ops a derivatives.yaml entry's formulas call (``threshold_backward``
    in relu's ``self:``), each with the formula's line; forward-mode ``result:`` and the
    helpers a formula also calls (``zeros_like``, ``grad.sum``) left out. The formula names
    the op unqualified (``at::`` is in scope): its ``aten::`` op."""
    found: dict[int, Hop] = {}
    rows = index.conn.execute(_FORMULA_CALLS_SQL, (derivative.id, derivative.id))
    for target, path, line, raw in rows:
        attrs = _json(raw)
        name = str(target or "").removeprefix("at::")
        # A backward op's own formula may call it (double backward): kept, its kernels
        # compute that gradient too.
        if attrs.get("formula") == "result" or "backward" not in name:
            continue
        for op in index.find(name, ["op"]):
            if op.qualname == f"aten::{name}" and op.id not in found:
                found[op.id] = Hop(op, path, line, attrs)
    return list(found.values())


def formula_calls(index: Index) -> dict[str, list[tuple[int, str, int, str | None]]]:
    """Name called (target_key) -> (derivative entry, path, line, attrs) of each call a
    backward formula makes, in file order; read once per index."""

    def load() -> dict[str, list[tuple[int, str, int, str | None]]]:
        by_name: dict[str, list[tuple[int, str, int, str | None]]] = {}
        for key, src, path, line, raw in index.conn.execute(_EVERY_FORMULA_CALL_SQL):
            by_name.setdefault(key, []).append((src, path, line, raw))
        return by_name

    return index.shared("formula-calls", load)


def calling_formulas(index: Index, op: Node) -> list[Hop]:
    """The derivatives.yaml entries whose backward formulas call ``op`` (by its name without
    overload), each with the formula's line: the forward ops it is the backward of."""
    if not op.qualname.startswith("aten::"):
        return []
    base = op.qualname.removeprefix("aten::").split(".", 1)[0]
    hops = []
    for src, path, line, raw in formula_calls(index).get(base, ()):
        attrs = _json(raw)
        if attrs.get("formula") != "result":
            hops.append(Hop(index.node(src), path, line, attrs))
    return hops


# A reference from a test file: a path whose first component is test/tests or that has
# one below the root (case-sensitive, as paths are).
_IS_TEST_SQL = (
    "(f.path IN ('test', 'tests') OR f.path GLOB 'test/*' OR f.path GLOB 'tests/*'"
    " OR f.path GLOB '*/test/*' OR f.path GLOB '*/tests/*')"
)
_REFERENCES_SQL = (
    f"SELECT e.src_id, f.path, e.line, e.attrs FROM edges e JOIN files f ON f.id = e.file_id"
    f" WHERE e.dst_id = ? AND e.kind = 'references' ORDER BY {_IS_TEST_SQL}, f.path, e.line"
    " LIMIT ?"
)
_REFERENCE_COUNT_SQL = (
    "SELECT COUNT(*) FROM edges e JOIN files f ON f.id = e.file_id"
    " WHERE e.dst_id = ? AND e.kind = 'references'"
)


def _test_file_ids(index: Index) -> frozenset[int]:
    """Files ``_IS_TEST_SQL`` holds for: a path whose first component is test/tests or
    that has one below the root."""

    def is_test(path: str) -> bool:
        return (
            path in ("test", "tests")
            or path.startswith(("test/", "tests/"))
            or ("/test/" in path or "/tests/" in path)
        )

    return frozenset(file_id for file_id, path in index.file_paths().items() if is_test(path))


def python_references(index: Index, node: Node, limit: int = 10) -> tuple[list[Hop], int]:
    """Python code that names the op or binding (``references`` edges into it), library
    code before tests; and how many references there are in all. A common op
    (``aten::add``) has thousands of references, of which ten are shown: sorted in memory
    when this process holds the edges, else sorted and counted in SQL."""
    graph = adjacency.held(index.db_path, index.meta)
    if graph is not None:
        paths = index.file_paths()
        tests = index.shared("test-file-ids", lambda: _test_file_ids(index))
        references = graph.into([node.id], graph.codes(["references"]))
        if limit <= 0:  # only counted: aten::add has thousands, not worth a sort
            total = sum(1 for row in references if row[3] in paths)
            edges = []
        else:
            edges = [
                (file_id in tests, paths[file_id], line, src, file_id, ref)
                for src, _, _, file_id, line, ref in references
                if file_id in paths
            ]
            total = len(edges)
            edges = heapq.nsmallest(limit, edges, key=lambda edge: edge[:3])
        rows = [
            (
                src,
                path,
                line,
                _edge_attrs(index, src, node.id, line, _UnreadAttrs("references", file_id, ref)),
            )
            for _, path, line, src, file_id, ref in edges
        ]
    else:
        rows = index.conn.execute(_REFERENCES_SQL, (node.id, limit)).fetchall()
        (total,) = index.conn.execute(_REFERENCE_COUNT_SQL, (node.id,)).fetchone()
    sources = {found.id: found for found in index.nodes(row[0] for row in rows)}
    hops = [
        Hop(sources[src], path, line, _json(attrs))
        for src, path, line, attrs in rows
        if src in sources
    ]
    return hops, total
