"""What changed between two snapshots: files by content, nodes and edges by identity.

Row ids differ between any two builds, so nodes compare by (kind, qualname, path, line)
and edges by (kind, source node, target node, evidence file and line). The comparison
runs inside SQLite over both databases attached read-only.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

_NODE_IDENTITY = "SELECT n.kind, n.qualname, f.path, n.line FROM {db}.nodes n JOIN {db}.files f ON f.id = n.file_id"
_EDGE_IDENTITY = (
    "SELECT e.kind, s.kind, s.qualname, sf.path, s.line, d.kind, d.qualname, df.path, d.line,"
    " ef.path, e.line FROM {db}.edges e"
    " JOIN {db}.nodes s ON s.id = e.src_id JOIN {db}.files sf ON sf.id = s.file_id"
    " JOIN {db}.nodes d ON d.id = e.dst_id JOIN {db}.files df ON df.id = d.file_id"
    " JOIN {db}.files ef ON ef.id = e.file_id"
)


def _by_kind(conn: sqlite3.Connection, left: str, right: str) -> dict[str, int]:
    """Per kind (first column), how many rows of ``left`` are not in ``right``."""
    return dict(
        conn.execute(
            f"SELECT c0, COUNT(*) FROM ({left} EXCEPT {right}) GROUP BY c0 ORDER BY c0"
        ).fetchall()
    )


def _columns(select: str, count: int) -> str:
    """Name the identity columns c0..cN so EXCEPT results can be grouped by kind."""
    head, _, tail = select.partition(" FROM ")
    names = [part.strip() for part in head[len("SELECT ") :].split(",")]
    assert len(names) == count
    return "SELECT " + ", ".join(f"{n} AS c{i}" for i, n in enumerate(names)) + " FROM " + tail


def diff_databases(a: Path, b: Path) -> dict[str, Any]:
    """Files added/modified/removed and nodes/edges added/removed per kind, from A to B."""
    conn = sqlite3.connect(":memory:", uri=True)
    try:
        conn.execute("ATTACH DATABASE ? AS a", (f"file:{a}?mode=ro&immutable=1",))
        conn.execute("ATTACH DATABASE ? AS b", (f"file:{b}?mode=ro&immutable=1",))
        files_added = [
            row[0]
            for row in conn.execute(
                "SELECT path FROM b.files EXCEPT SELECT path FROM a.files ORDER BY 1"
            )
        ]
        files_removed = [
            row[0]
            for row in conn.execute(
                "SELECT path FROM a.files EXCEPT SELECT path FROM b.files ORDER BY 1"
            )
        ]
        files_modified = [
            row[0]
            for row in conn.execute(
                "SELECT bf.path FROM b.files bf JOIN a.files af ON af.path = bf.path"
                " WHERE af.sha != bf.sha ORDER BY 1"
            )
        ]
        nodes_a = _columns(_NODE_IDENTITY.format(db="a"), 4)
        nodes_b = _columns(_NODE_IDENTITY.format(db="b"), 4)
        edges_a = _columns(_EDGE_IDENTITY.format(db="a"), 11)
        edges_b = _columns(_EDGE_IDENTITY.format(db="b"), 11)
        nodes = {
            "added": _by_kind(conn, nodes_b, nodes_a),
            "removed": _by_kind(conn, nodes_a, nodes_b),
        }
        edges = {
            "added": _by_kind(conn, edges_b, edges_a),
            "removed": _by_kind(conn, edges_a, edges_b),
        }
    finally:
        conn.close()
    return {
        "files_added": files_added,
        "files_modified": files_modified,
        "files_removed": files_removed,
        "nodes": nodes,
        "edges": edges,
        "changed": bool(
            files_added
            or files_modified
            or files_removed
            or any(nodes.values())
            or any(edges.values())
        ),
    }
