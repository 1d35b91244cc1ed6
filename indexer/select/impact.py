"""From changed entities back to the tests that reach them: reverse reachability.

Edges point from the user to the used, so impact flows backwards along most kinds (a
caller is affected by its callee, an op by its kernel, a test by what it covers). Two
kinds carry impact forwards: a structured kernel ``implements`` its op, and a derivative
entry ``derives`` its op (a changed formula helper reaches the derivative backwards, then
its op forwards).

Python needs care, or one reached class reaches everything:

- a method reaches its class (``contains`` backwards) only if it runs implicitly through
  the class: dunders (``C(...)`` runs ``__init__``), ``forward``, properties. A method
  called by name is reached through the ``obj.m()`` calls naming it, from files that can
  see its class (``indexer.select.bridges``);
- ``imports`` carries impact only from a module whose import runs changed code (changed
  at module level, or importing such a module). Importing a function runs none of its
  body, and a module that merely names a changed definition affects the users of its
  names (``references`` to it), not everything that imports it.

A decorated function reaches the registry its decorator fills (``@op.register_impl``).
An OpInfo entry reaches the ``@ops`` tests iterating its list through their ``covers``
edges. No depth cap; each node is visited once, so cycles end.

The walk is breadth-first over whole frontiers, one SQL query per 900 nodes, so a
closure of a hundred thousand nodes costs a few hundred queries, not a hundred thousand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.index import Index
from indexer.select.bridges import Bridges, Step, placeholders

REVERSE_KINDS = (
    EdgeKind.CALLS.value,
    EdgeKind.LAUNCHES.value,
    EdgeKind.DISPATCHES.value,
    EdgeKind.BINDS.value,
    EdgeKind.DERIVES.value,
    EdgeKind.IMPORTS.value,
    EdgeKind.REFERENCES.value,
    EdgeKind.COVERS.value,
    EdgeKind.INCLUDES.value,
    EdgeKind.EXTERNAL_REF.value,
    EdgeKind.CONTAINS.value,
)
FORWARD_KINDS = (EdgeKind.IMPLEMENTS.value, EdgeKind.DERIVES.value)
CLASS_KINDS = frozenset({NodeKind.PYTHON_CLASS.value, NodeKind.TEST_CLASS.value})
MODULE_KINDS = frozenset(
    {NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value, NodeKind.FILE.value}
)
_BATCH = 900


@dataclass
class Reach:
    steps: dict[int, Step | None] = field(default_factory=dict)  # None: a start node
    origin: dict[int, int] = field(default_factory=dict)  # node -> index of its entity
    kind: dict[int, str] = field(default_factory=dict)
    file_id: dict[int, int] = field(default_factory=dict)
    # Modules whose import runs changed code: changed at module level, or importing one
    # that is. A module merely naming a changed definition affects its names' users only.
    import_live: set[int] = field(default_factory=set)
    depth: dict[int, int] = field(default_factory=dict)  # hops from a start (absent: 0)

    def merge(self, other: Reach) -> None:
        """Add what ``other`` reached and this did not; chains stay paths of real steps."""
        for node_id, step in other.steps.items():
            if node_id in self.steps:
                continue
            self.steps[node_id] = step
            self.kind[node_id] = other.kind[node_id]
            self.file_id[node_id] = other.file_id[node_id]
            self.depth[node_id] = other.depth.get(node_id, 0)
            self.origin[node_id] = other.origin[node_id]
        for node_id in other.steps:
            # A chain now runs through this walk's steps where the two meet: credit it
            # to the entity it really starts from.
            chain = self.chain(node_id)
            start = chain[0].prev if chain else node_id
            self.origin[node_id] = self.origin.get(start, self.origin[node_id])
        self.import_live |= other.import_live

    def chain(self, node_id: int) -> list[Step]:
        """The steps from a start node out to ``node_id``."""
        steps: list[Step] = []
        step = self.steps.get(node_id)
        while step is not None:
            steps.append(step)
            step = self.steps.get(step.prev)
        return steps[::-1]


class ImpactWalker(Bridges):
    """Reverse reachability over one index; reusable across walks."""

    def __init__(self, index: Index) -> None:
        super().__init__()
        self.index = index

    def _node_rows(self, ids: list[int]) -> list[tuple[int, str, int]]:
        rows = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            rows += self.index.conn.execute(
                f"SELECT id, kind, file_id FROM nodes WHERE id IN ({placeholders(batch)})", batch
            ).fetchall()
        return rows

    def walk(
        self,
        starts: dict[int, int],
        until: Callable[[int], bool] | None = None,
        max_depth: int | None = None,
    ) -> Reach:
        """Everything that reaches the ``starts`` (node id -> entity index).

        ``until(file_id)`` stops the walk as soon as a reached node's file satisfies it
        (to ask only *whether* something is reached); ``max_depth`` caps the hops (None:
        no cap, as selection walks).
        """
        reach = Reach()
        for node_id, kind, file_id in self._node_rows(list(starts)):
            reach.steps[node_id] = None
            reach.origin[node_id] = starts[node_id]
            reach.kind[node_id] = kind
            reach.file_id[node_id] = file_id
            if kind in MODULE_KINDS:
                reach.import_live.add(node_id)
        frontier = list(reach.steps)
        reverse = list(REVERSE_KINDS)
        forward = list(FORWARD_KINDS)
        conn = self.index.conn
        depth = 0
        while frontier and (max_depth is None or depth < max_depth):
            depth += 1
            found: list[tuple[int, Step, str, int]] = []
            explicit = self._explicit_methods(frontier, reach)
            if explicit:
                found += self._method_callers(explicit)
            found += self._registrations(frontier, reach)
            for start in range(0, len(frontier), _BATCH):
                batch = frontier[start : start + _BATCH]
                for src, dst, kind, file_id, line, src_kind, src_file in conn.execute(
                    "SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, s.kind, s.file_id"
                    " FROM edges e JOIN nodes s ON s.id = e.src_id"
                    f" WHERE e.dst_id IN ({placeholders(batch)})"
                    f" AND e.kind IN ({placeholders(reverse)})",
                    [*batch, *reverse],
                ):
                    if kind == EdgeKind.CONTAINS.value and (
                        src_kind not in CLASS_KINDS or dst in explicit
                    ):
                        continue
                    if kind == EdgeKind.IMPORTS.value and dst not in reach.import_live:
                        continue  # importing a name runs none of its body
                    found.append(
                        (src, Step(dst, kind, src, dst, file_id, line), src_kind, src_file)
                    )
                for src, dst, kind, file_id, line, dst_kind, dst_file in conn.execute(
                    "SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, d.kind, d.file_id"
                    " FROM edges e JOIN nodes d ON d.id = e.dst_id"
                    f" WHERE e.src_id IN ({placeholders(batch)})"
                    f" AND e.kind IN ({placeholders(forward)})",
                    [*batch, *forward],
                ):
                    if kind == EdgeKind.DERIVES.value and not (
                        reach.kind.get(src) == NodeKind.DERIVATIVE.value
                        and dst_kind == NodeKind.OP.value
                    ):
                        continue
                    found.append(
                        (dst, Step(src, kind, src, dst, file_id, line), dst_kind, dst_file)
                    )
            ops = [n for n in frontier if reach.kind.get(n) == NodeKind.OP.value]
            if ops:
                found += self._dispatcher_callers(ops)
            frontier = []
            for node_id, step, kind, file_id in found:
                if node_id in reach.steps:
                    continue
                reach.steps[node_id] = step
                reach.depth[node_id] = depth
                reach.origin[node_id] = reach.origin[step.prev]
                reach.kind[node_id] = kind
                reach.file_id[node_id] = file_id
                if step.kind == EdgeKind.IMPORTS.value and kind in MODULE_KINDS:
                    reach.import_live.add(node_id)  # importing it runs changed module code
                frontier.append(node_id)
                if until is not None and until(file_id):
                    return reach
        return reach
