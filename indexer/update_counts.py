"""The index's counts and link statistics, kept up to date by differences.

Recounting after an update means scanning every edge (most of a PyTorch index's bytes);
instead the update subtracts what it removes and adds what it inserts:

* nodes and edges by kind: the evicted files' nodes, the edges eviction deletes (those of
  the files and those touching their nodes), the edges of refs it re-links; then the new
  nodes and the edges the linker wrote;
* per-scheme link statistics: a ref counts as unresolved (no edge), ambiguous (an edge
  marked ``ambiguous``, as the linker marks them) or resolved; refs are classified before
  they lose their edges and again after re-linking.

An old index without counts falls back to a full recount (:func:`full_counts`).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable

_CLASSIFY = (
    "SELECT r.scheme, CASE WHEN d.amb IS NULL THEN 'unresolved'"
    " WHEN d.amb > 0 THEN 'ambiguous' ELSE 'resolved' END, COUNT(*)"
    " FROM refs r LEFT JOIN (SELECT ref_id, MAX(COALESCE(instr(attrs, '\"ambiguous\":'), 0))"
    " AS amb FROM edges WHERE ref_id {edge_filter} GROUP BY ref_id) d ON d.ref_id = r.id"
    " WHERE r.target_id IS NULL {ref_filter} GROUP BY 1, 2"
)


def _temp_ids(conn: sqlite3.Connection, table: str, ids: Iterable[int]) -> None:
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}(id INTEGER PRIMARY KEY)")
    conn.execute(f"DELETE FROM {table}")
    conn.executemany(f"INSERT OR IGNORE INTO {table}(id) VALUES (?)", ((i,) for i in ids))


def classify(conn: sqlite3.Connection, ref_ids: Iterable[int]) -> Counter:
    """(scheme, outcome) -> refs, for the name refs among ``ref_ids``, as edges stand now."""
    _temp_ids(conn, "tt_refs", ref_ids)
    found: Counter = Counter()
    sql = _CLASSIFY.format(
        edge_filter="IN (SELECT id FROM tt_refs)", ref_filter="AND r.id IN (SELECT id FROM tt_refs)"
    )
    for scheme, outcome, count in conn.execute(sql):
        found[(scheme, outcome)] += count
    return found


def full_link_stats(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    found: Counter = Counter()
    for scheme, outcome, count in conn.execute(
        _CLASSIFY.format(edge_filter="IS NOT NULL", ref_filter="")
    ):
        found[(scheme, outcome)] += count
    return _stats(found)


def _stats(outcomes: Counter) -> dict[str, dict[str, int]]:
    stats: dict[str, dict[str, int]] = {}
    for (scheme, outcome), count in sorted(outcomes.items()):
        if count <= 0:
            continue
        entry = stats.setdefault(
            scheme, {"refs": 0, "resolved": 0, "ambiguous": 0, "unresolved": 0}
        )
        entry[outcome] += count
        entry["refs"] += count
    return stats


def count_by_kind(conn: sqlite3.Connection, table: str, where: str = "") -> Counter:
    return Counter(dict(conn.execute(f"SELECT kind, COUNT(*) FROM {table} {where} GROUP BY kind")))


def full_counts(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    return {
        "nodes": dict(sorted(count_by_kind(conn, "nodes").items())),
        "edges": dict(sorted(count_by_kind(conn, "edges").items())),
    }


class Ledger:
    """What an update removed and added, to derive the new counts from the old ones."""

    def __init__(self, meta: dict[str, str]) -> None:
        counts = json.loads(meta.get("counts") or "null")
        stats = json.loads(meta.get("link_stats") or "null")
        self.usable = isinstance(counts, dict) and isinstance(stats, dict)
        self.nodes: Counter = Counter()
        self.edges: Counter = Counter()
        self.outcomes: Counter = Counter()
        if self.usable:
            self.nodes.update(counts.get("nodes", {}))
            self.edges.update(counts.get("edges", {}))
            for scheme, entry in stats.items():
                for outcome in ("resolved", "ambiguous", "unresolved"):
                    self.outcomes[(scheme, outcome)] += entry.get(outcome, 0)

    def before_evict(
        self, conn: sqlite3.Connection, file_ids: list[int], ref_ids: Iterable[int]
    ) -> None:
        """Take out the evicted files' nodes, the edges eviction deletes, and the old
        outcome of the files' refs and of ``ref_ids`` (refs elsewhere losing edges)."""
        if not self.usable:
            return
        _temp_ids(conn, "tt_files", file_ids)
        self.nodes.subtract(count_by_kind(conn, "nodes", "WHERE file_id IN tt_files"))
        self.edges.subtract(
            count_by_kind(
                conn,
                "edges",
                "WHERE file_id IN tt_files"
                " OR src_id IN (SELECT id FROM nodes WHERE file_id IN tt_files)"
                " OR dst_id IN (SELECT id FROM nodes WHERE file_id IN tt_files)",
            )
        )
        own = [row[0] for row in conn.execute("SELECT id FROM refs WHERE file_id IN tt_files")]
        self.outcomes.subtract(classify(conn, [*own, *ref_ids]))

    def before_unlink(
        self, conn: sqlite3.Connection, ref_ids: Iterable[int], classified: set[int]
    ) -> None:
        """Take out the edges of refs about to be re-linked, and the old outcome of those
        not already taken out by :meth:`before_evict` (``classified``)."""
        if not self.usable:
            return
        ids = list(ref_ids)
        _temp_ids(conn, "tt_refs", ids)
        self.edges.subtract(count_by_kind(conn, "edges", "WHERE ref_id IN tt_refs"))
        self.outcomes.subtract(classify(conn, [i for i in ids if i not in classified]))

    def after_link(
        self, conn: sqlite3.Connection, node_files: list[int], ref_ids: Iterable[int]
    ) -> None:
        """Add the new files' nodes and the re-linked refs' edges and outcomes."""
        if not self.usable:
            return
        _temp_ids(conn, "tt_files", node_files)
        self.nodes.update(count_by_kind(conn, "nodes", "WHERE file_id IN tt_files"))
        self.outcomes.update(classify(conn, ref_ids))
        self.edges.update(count_by_kind(conn, "edges", "WHERE ref_id IN tt_refs"))

    def result(self, conn: sqlite3.Connection) -> tuple[dict, dict]:
        """(counts, link_stats) of the updated index."""
        if not self.usable:
            return full_counts(conn), full_link_stats(conn)
        counts = {
            "nodes": {kind: n for kind, n in sorted(self.nodes.items()) if n > 0},
            "edges": {kind: n for kind, n in sorted(self.edges.items()) if n > 0},
        }
        return counts, _stats(self.outcomes)
