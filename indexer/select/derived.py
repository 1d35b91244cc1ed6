"""What selections read, derived from one index and kept inside it by index maintenance.

The edges both ways (``indexer.query.adjacency``), the walk past the hub
(``indexer.select.hub``) and chains to the hub from the most used ops
(``indexer.select.hub_chains``) are derived from one index.
They are written here, into the new index's private file before it is renamed into
place (``indexer.refresh`` hands :func:`prepare` to the build or update), never by a
selection or an MCP tool, which read them and make in memory what is missing
(docs/selection.md, "A current index"; docs/architecture.md, "Derived data").
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import hub as hub_walks
from indexer.select import hub_chains
from indexer.select.hub import find_hub
from indexer.select.impact import ImpactWalker
from indexer.store import derived

# Ops from which ``prepare`` keeps chains to the hub, the most used first: a central
# change's walk meets one within a few hops and follows it. All of them, whatever the
# time: a cap cut the set short on a loaded machine (docs/performance.md).
SEEDED_OPS = 400
# Kept last: everything above was derived for this index by this code (``is_prepared``).
PREPARED = "prepared"


@dataclass
class Prepared:
    """What :func:`prepare` did, and the adjacency it kept (a selection in the same
    process walks it next)."""

    what: str | None  # None when no test file imports a package (no hub)
    adjacency: adjacency.Adjacency
    meta: dict[str, str]


def is_prepared(index: Index) -> bool:
    """Whether the index holds what selections read, derived for it by this code."""
    return derived.header(index.conn, PREPARED, hub_walks.derived_key(index)) is not None


def prepare(source: Path, db_path: Path, conn: sqlite3.Connection) -> Prepared:
    """Derive and keep, in the index at ``db_path`` (a private file, through ``conn`` in one
    transaction), the adjacency, the hub's walk and the chains to the hub, each carried
    over an update where nothing it read changed (docs/selection.md, "The hub")."""
    derived.ensure(conn)
    index = Index(db_path)
    try:
        made = adjacency.derive(index.conn, index.meta)
        adjacency.hold(db_path, index.meta, made.adjacency)  # the walks below use it
        walker = ImpactWalker(index, splice_hub=True, keep=True)
        hub = find_hub(index)
        derivation = hub_walk = None
        what = None
        if hub is not None:
            kept, _ = hub_walks.kept_walk(index)
            if kept is not None and kept.hub == hub:
                walk = f"the walk past the hub ({kept.size} nodes) kept from the index before"
            else:
                walker.walk({hub: 0})
                walk = str(walker.hub_use)
            ops = _most_used_ops(index, SEEDED_OPS)
            before = hub_chains.before_update(index)
            derivation = hub_chains.derive(index, walker, hub, ops, before)
            hub_walk = walker.hub_walk or kept
            what = (
                f"{walk}; chains to it from {len(derivation.chains())} of the {len(ops)} most"
                f" used ops ({derivation.walked} walked, the others kept from the index before)"
            )
    finally:
        index.close()
        adjacency.forget(db_path)
    conn.execute("BEGIN")
    try:
        adjacency.store(conn, index.meta, made)
        if derivation is not None and hub_walk is not None:
            hub_walks.store(conn, index, hub_walk)
            hub_chains.store(conn, index, derivation)
        else:
            derived.drop(conn, (hub_walks.NAME, hub_chains.NAME))
        derived.write(conn, PREPARED, hub_walks.derived_key(index), {"hub": hub}, {})
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Prepared(what, made.adjacency, index.meta)


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
