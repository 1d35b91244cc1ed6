"""Where the impact walk reads a frontier's edges: SQLite, or the index's adjacency.

A small walk asks SQLite for each 900-node batch's edges. Once a walk has reached
``ADJACENCY_AFTER`` nodes, or the index keeps one derived for its graph, the edges come
from the in-memory adjacency (``indexer.query.adjacency``) instead. Both give a batch's
edges in the same order (by node, kind, edge id), so the walk reaches the same nodes by
the same steps either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query import adjacency
from indexer.select.bridges import placeholders

if TYPE_CHECKING:
    from indexer.query.index import Index

BATCH = 900
CHUNK = 2000  # adjacency rows made (and their ref names read) at a time
# Reached nodes after which building the adjacency (seconds on PyTorch, once per index
# version) costs less than querying SQLite for the rest of the walk.
ADJACENCY_AFTER = 3000
# (src, dst, edge kind, evidence file, line, src kind, src file, ref id or None)
EdgeRow = tuple[int, int, str, int, int, str, int, int | None]
# Edges the walk still reads from nodes it reached already: a module's references (it
# may widen) and a module's imports (reached for some names, it becomes live when what it
# imports does: ``import pkg.sub`` runs a changed ``pkg/__init__.py``).
REVISIT = frozenset(
    {(EdgeKind.REFERENCES.value, NodeKind.PYTHON_MODULE.value)}
    | {
        (EdgeKind.IMPORTS.value, kind.value)
        for kind in (NodeKind.PYTHON_MODULE, NodeKind.TEST_FILE, NodeKind.FILE)
    }
)


class EdgeRows:
    """Edge reading for a walker over ``index`` (mixed into ``ImpactWalker``)."""

    index: Index

    def __init__(self) -> None:
        self._targets: dict[int, str] = {}
        # Refs whose line names the target without running it (judged at extraction:
        # indexer.python.call_facts), among those whose targets were read.
        self._named_only: set[int] = set()
        self._graph: adjacency.Adjacency | None = None
        self._graph_looked = False

    def graph(self, reached: int = 0) -> adjacency.Adjacency | None:
        """The index's adjacency: read from the index if it keeps one derived for its
        graph, else built once the walk has reached ``ADJACENCY_AFTER`` nodes; None before."""
        if self._graph is None and not self._graph_looked:
            self._graph_looked = True
            self._graph = adjacency.cached(self.index.db_path, self.index.conn, self.index.meta)
        if self._graph is None and reached >= ADJACENCY_AFTER:
            self._graph = adjacency.shared(self.index.db_path, self.index.conn, self.index.meta)
        return self._graph

    def _target(self, ref_id: int | None) -> str:
        """The name as written of the ref an edge came from ('' for local edges)."""
        if ref_id is None:
            return ""
        if ref_id not in self._targets:
            self._load_targets([ref_id])
        return self._targets[ref_id]

    def _runs_named(self, ref_id: int | None) -> bool:
        """Whether the line of the ref an edge came from runs what it names (local
        edges do)."""
        if ref_id is None:
            return True
        self._target(ref_id)
        return ref_id not in self._named_only

    def _load_targets(self, ref_ids: list[int]) -> None:
        """Read the targets of many refs at once (one query per 900)."""
        wanted = list({r for r in ref_ids if r not in self._targets})
        for start in range(0, len(wanted), BATCH):
            batch = wanted[start : start + BATCH]
            found = {}
            for ref_id, target, named_only in self.index.conn.execute(
                "SELECT id, target, json_extract(attrs, '$.named_only') FROM refs"
                f" WHERE id IN ({placeholders(batch)})",
                batch,
            ):
                found[ref_id] = target
                if named_only:
                    self._named_only.add(ref_id)
            for ref_id in batch:
                self._targets[ref_id] = found.get(ref_id) or ""

    def _node_rows(self, ids: list[int]) -> list[tuple[int, str, int]]:
        graph = self.graph()
        if graph is not None:
            # In id order, as SQLite returns the rows of an IN list.
            ids = sorted(set(ids))
            return [(n, graph.kind(n), graph.file(n)) for n in ids if graph.kind(n) is not None]
        rows = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            rows += self.index.conn.execute(
                f"SELECT id, kind, file_id FROM nodes WHERE id IN ({placeholders(batch)})", batch
            ).fetchall()
        return rows

    def _from_sqlite(
        self, end: str, other: str, extra: str, batch: list[int], kinds: list[str]
    ) -> list[tuple]:
        """Edges of ``kinds`` whose ``end`` is in ``batch``, with the kind and file of the
        node at their ``other`` end (and ``extra`` columns), as the adjacency gives them."""
        return self.index.conn.execute(
            f"SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, n.kind, n.file_id{extra}"
            f" FROM edges e JOIN nodes n ON n.id = e.{other}"
            f" WHERE e.{end} IN ({placeholders(batch)}) AND e.kind IN ({placeholders(kinds)})",
            [*batch, *kinds],
        ).fetchall()

    def _rows_into(
        self,
        batch: list[int],
        kinds: list[str],
        seen: dict[int, Any],
        asks_target: Callable[[EdgeRow], bool],
    ) -> Iterator[EdgeRow]:
        """Edges of ``kinds`` into ``batch``: (src, dst, kind, file, line, src kind, src
        file, ref id), ordered by dst, kind, edge id. From the adjacency, edges from
        ``seen`` nodes are left out (the walk skips them, save a module's references,
        which may widen it), rows are made as the walk takes them (it may stop early),
        and the names of the refs ``asks_target`` of are read in one query per chunk."""
        graph = self.graph()
        if graph is None:
            yield from self._from_sqlite("dst_id", "src_id", ", e.ref_id", batch, kinds)
            return
        rows = graph.into_unseen(batch, graph.codes(kinds), seen, REVISIT)
        while chunk := list(islice(rows, CHUNK)):
            self._load_targets([row[7] for row in chunk if row[7] is not None and asks_target(row)])
            yield from chunk

    def _rows_out_of(self, batch: list[int], kinds: list[str]) -> list[tuple]:
        """Edges of ``kinds`` out of ``batch``: (src, dst, kind, file, line, dst kind, dst
        file), ordered by src, kind, edge id."""
        graph = self.graph()
        if graph is None:
            return self._from_sqlite("src_id", "dst_id", "", batch, kinds)
        return [
            (src, dst, kind, file_id, line, graph.kind(dst), graph.file(dst))
            for src, dst, kind, file_id, line, _ in graph.out_of(batch, graph.codes(kinds))
            if graph.kind(dst) is not None
        ]
