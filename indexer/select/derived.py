"""What selections read beside the index, made by index maintenance only.

The edges both ways (``indexer.query.adjacency``), the walk past the hub
(``indexer.select.hub``), chains to the hub from the most used ops
(``indexer.select.hub_chains``) and the judgments those walks made
(``indexer.select.judgments``) are derived from one index and the tree it describes.
They are written here, by the refresh that builds or updates the index
(``indexer.refresh``), never by a selection or an MCP tool, which read them and make
in memory what is missing (docs/selection.md, "A current index").
"""

from __future__ import annotations

from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import hub as hub_walks
from indexer.select import hub_chains
from indexer.select.hub import find_hub
from indexer.select.impact import ImpactWalker
from indexer.workspace import Workspace

# Ops from which ``prepare`` keeps chains to the hub, the most used first: a central
# change's walk meets one within a few hops and follows it. All of them, whatever the
# time: a cap cut the set short on a loaded machine (docs/performance.md).
SEEDED_OPS = 400


def prepare(workspace: Workspace) -> str | None:
    """Keep the derived data of the workspace's index: the adjacency, the hub's walk
    (carried over from the index an update started from when nothing it met changed,
    else walked), and chains to the hub from the most used ops (after an update, each
    op's chain is kept when nothing its walk read changed, else walked again:
    ``indexer.select.hub_chains``). The index was just made from the tree, so the text
    the walks read is what it describes. What was done, or None when no test file
    imports a package."""
    index = Index(workspace.db_path)
    try:
        adjacency.keep(index.db_path, index.conn, index.meta)
        walker = ImpactWalker(index, workspace.source, splice_hub=True, keep=True)
        hub = find_hub(index)
        if hub is None:
            return None
        kept, carried = hub_walks.kept_walk(index)
        if kept is not None and kept.hub == hub:
            if carried:  # nothing it met changed: kept under this index's key
                hub_walks.save(index, kept)
            walk = f"the walk past the hub ({kept.size} nodes) kept from the index before"
        else:
            walker.walk({hub: 0})
            walk = str(walker.hub_use)
        ops = _most_used_ops(index, SEEDED_OPS)
        derivation = hub_chains.derive(index, walker, hub, ops, hub_chains.before_update(index))
        walker.save()
        hub_chains.save(index, derivation)
        return (
            f"{walk}; chains to it from {len(derivation.chains())} of the {len(ops)} most"
            f" used ops ({derivation.walked} walked, the others kept from the index before)"
        )
    finally:
        index.close()


def _most_used_ops(index: Index, count: int) -> list[int]:
    """Ops by how many edges lead into them (calls, references, dispatches), most first."""
    return [
        op
        for (op,) in index.conn.execute(
            "SELECT e.dst_id FROM edges e JOIN nodes d ON d.id = e.dst_id"
            " WHERE d.kind = 'op' AND e.kind IN ('calls', 'references', 'dispatches')"
            " GROUP BY e.dst_id ORDER BY COUNT(*) DESC, e.dst_id LIMIT ?",
            (count,),
        )
    ]
