"""From changed native code to the ops and bindings whose execution reaches it.

The record says which tests executed which ops; the static graph says which ops reach a
changed line. This walk is the static half of that join, and only the C++ side of it:
backwards along ``calls``, ``launches``, ``dispatches`` (op -> kernel, stub -> kernel),
``binds`` and ``derives`` (a formula's helper -> its derivative entry), forwards along
``implements`` (a structured kernel -> its op) and ``derives`` (a derivative entry -> its
op). It never enters Python: which Python runs an op is what the record observed.

It stops at an op: a C++ caller of ``at::mm`` reaches it through the dispatcher, which
the record sees, so the tests that executed the caller's op are among those that executed
``aten::mm``. Except where the call may be newer than the record (a call site in a file
changed between the record's commit and the base, or on a line the change itself
touches): the walk goes on through those.

With ``stop_at_backward`` it does not go from a C++ autograd function's ``F::backward``
to the code calling ``F::apply``: the backward runs when the autograd engine evaluates F's node, which the
record sees (``torch::autograd::CppNode<F>``), not whenever the op calling ``apply`` runs.
A test that ran the forward op without a backward pass never ran it.

Edges come from SQLite, one query per node, or, when the caller holds the index's edges in
memory (``indexer.query.adjacency``), from those: a node's edges in the order its query
gives them (by evidence file and line; the adjacency's order of kind and edge id within a
line, which is the order SQLite's scan gives), so both walks reach the same nodes by the
same steps, the second without a query per node (a GEMM's walk: 88 nodes, 176 queries).
The arrays hold no attrs: the edges into the nodes some ``F::apply`` edge reaches, whose
``via`` the walk reads, still come from SQLite.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.index import Edge, Index

if TYPE_CHECKING:
    from collections.abc import Iterable

    from indexer.query.adjacency import Adjacency, EdgeRow

BACKWARD = (
    EdgeKind.CALLS.value,
    EdgeKind.LAUNCHES.value,
    EdgeKind.DISPATCHES.value,
    EdgeKind.BINDS.value,
    EdgeKind.DERIVES.value,
)
FORWARD = (EdgeKind.IMPLEMENTS.value, EdgeKind.DERIVES.value)
NATIVE = frozenset(
    {
        NodeKind.CPP_FUNCTION.value,
        NodeKind.CPP_CLASS.value,
        NodeKind.CUDA_KERNEL.value,
        NodeKind.DISPATCH_STUB.value,
        NodeKind.OP.value,
        NodeKind.BINDING.value,
        NodeKind.REGISTRATION.value,
        NodeKind.DERIVATIVE.value,
    }
)
OP = NodeKind.OP.value
BINDING = NodeKind.BINDING.value
DERIVATIVE = NodeKind.DERIVATIVE.value
AUTOGRAD_APPLY = "autograd_apply"  # the via of F::apply's edges to F::forward, F::backward


@dataclass
class NativeReach:
    """What the walk reached: each node with the edge it was reached by (None: a start)."""

    steps: dict[int, Edge | None] = field(default_factory=dict)
    origin: dict[int, int] = field(default_factory=dict)  # node -> the start it came from
    ops: list[int] = field(default_factory=list)  # in the order reached
    bindings: list[int] = field(default_factory=list)
    # ``F::backward`` nodes of C++ autograd functions reached -> F's qualified name
    backwards: dict[int, str] = field(default_factory=dict)

    def chain(self, node_id: int) -> list[Edge]:
        """Edges from ``node_id`` back to its start, each from the user to the used."""
        hops: list[Edge] = []
        edge = self.steps.get(node_id)
        while edge is not None:
            hops.append(edge)
            back = edge.dst if edge.src == node_id else edge.src
            node_id = back
            edge = self.steps.get(node_id)
        return hops


def walk_native(
    index: Index,
    starts: list[int],
    drifted: frozenset[str],
    changed_lines: dict[str, set[int]] | None = None,
    stop_at_backward: bool = False,
    graph: Adjacency | None = None,
) -> NativeReach:
    """The ops and bindings reaching ``starts`` through native code; ``drifted``: the
    repo paths changed since the record was made; ``changed_lines``: path -> the lines
    (new side) the change touches; ``stop_at_backward``: whether an autograd function's
    ``F::backward`` ends the walk (for a record, which sees F's node run) rather than
    leading on to the op that calls ``F::apply`` (as static answers need); ``graph``: the
    index's edges in memory, if the caller holds them (the steps' edges then carry no
    attrs)."""
    changed_lines = changed_lines or {}
    reach = NativeReach()
    edges = _EdgeSource(index, graph)
    kinds = edges.kinds(starts)
    queue: deque[int] = deque()
    for start in starts:
        if start not in reach.steps and kinds.get(start) in NATIVE:
            reach.steps[start] = None
            reach.origin[start] = start
            queue.append(start)
    while queue:
        node_id = queue.popleft()
        kind = kinds[node_id]
        if kind == OP:
            reach.ops.append(node_id)
        elif kind == BINDING:
            reach.bindings.append(node_id)
            continue  # Python calls it: the record saw who
        for edge in edges.into(node_id):
            if edge.attrs.get("via") == AUTOGRAD_APPLY and _is_backward(index, node_id):
                reach.backwards[node_id] = index.node(node_id).qualname.rsplit("::", 1)[0]
                if stop_at_backward:
                    continue  # run by the engine for F's node, not by apply's caller
            if kind == OP and not (
                edge.kind == EdgeKind.CALLS.value
                and (edge.path in drifted or edge.line in changed_lines.get(edge.path, ()))
            ):
                continue
            _reach(edges, reach, kinds, queue, node_id, edge.src, edge)
        for edge in edges.out_of(node_id):
            if edge.kind == EdgeKind.DERIVES.value and kind != DERIVATIVE:
                continue
            _reach(edges, reach, kinds, queue, node_id, edge.dst, edge)
    return reach


class _EdgeSource:
    """A node's walked edges and a node's kind, from SQLite or from the adjacency."""

    def __init__(self, index: Index, graph: Adjacency | None) -> None:
        self.index = index
        self.graph = graph
        if graph is not None:
            self.paths = index.file_paths()
            self.backward = graph.codes(BACKWARD)
            self.forward = graph.codes(FORWARD)
            self.with_attrs = autograd_apply_targets(index)

    def kinds(self, node_ids: list[int]) -> dict[int, str]:
        if self.graph is None:
            return {node.id: node.kind for node in self.index.nodes(node_ids)}
        return {n: kind for n in node_ids if (kind := self.graph.kind(n)) is not None}

    def kind(self, node_id: int) -> str:
        if self.graph is None:
            return self.index.node(node_id).kind
        kind = self.graph.kind(node_id)
        if kind is None:
            raise KeyError(node_id)  # as Index.node does
        return kind

    def into(self, node_id: int) -> list[Edge]:
        if self.graph is None or node_id in self.with_attrs:  # their edges' via is read
            return self.index.in_edges(node_id, BACKWARD)
        return self._sorted(self.graph.into((node_id,), self.backward))

    def out_of(self, node_id: int) -> list[Edge]:
        if self.graph is None:
            return self.index.out_edges(node_id, FORWARD)
        return self._sorted(self.graph.out_of((node_id,), self.forward))

    def _sorted(self, rows: Iterable[EdgeRow]) -> list[Edge]:
        # SQL orders by file path and line; within a line the adjacency's order (kind,
        # edge id) is the scan's, which a stable sort keeps.
        paths = self.paths
        edges = [
            Edge(src, dst, kind, paths[file_id], line, {})
            for src, dst, kind, file_id, line, _ in rows
            if file_id in paths  # as the query's join with files does
        ]
        edges.sort(key=lambda edge: (edge.path, edge.line))
        return edges


def _reach(
    edges: _EdgeSource,
    reach: NativeReach,
    kinds: dict[int, str],
    queue: deque[int],
    prev: int,
    node_id: int,
    edge: Edge,
) -> None:
    if node_id in reach.steps:
        return
    if node_id not in kinds:
        kinds[node_id] = edges.kind(node_id)
    if kinds[node_id] not in NATIVE:
        return  # Python, tests: the record answers for them
    if kinds[prev] == DERIVATIVE and edge.kind == EdgeKind.DERIVES.value and kinds[node_id] != OP:
        return  # a derivative's formulas use its helpers; the helpers do not use it
    reach.steps[node_id] = edge
    reach.origin[node_id] = reach.origin[prev]
    queue.append(node_id)


def autograd_apply_targets(index: Index) -> frozenset[int]:
    """The nodes an ``F::apply`` edge reaches (``F::forward``, ``F::backward``): the only
    ones whose edges' attrs the walk reads (read once per index, a scan of the edges)."""
    return index.shared(
        "autograd-apply-targets",
        lambda: frozenset(
            row[0]
            for row in index.conn.execute(
                "SELECT DISTINCT dst_id FROM edges WHERE attrs LIKE ?", (f"%{AUTOGRAD_APPLY}%",)
            )
        ),
    )


def _is_backward(index: Index, node_id: int) -> bool:
    return index.node(node_id).qualname.rsplit("::", 1)[-1] == "backward"
