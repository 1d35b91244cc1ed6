"""What an index holds and how fresh it is: for `torchtalk status` and MCP `get_status`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from indexer.precise.merge import not_superseded
from indexer.query.index import Index
from indexer.query.key_coverage import unread_uses


def index_status(index: Index, worst_files: int = 10) -> dict[str, Any]:
    meta = index.meta
    built_at = meta.get("built_at")
    age_s = None
    if built_at:
        age_s = int((datetime.now(timezone.utc) - datetime.fromisoformat(built_at)).total_seconds())
    conn = index.conn
    counts = {
        "nodes": dict(conn.execute("SELECT kind, COUNT(*) FROM nodes GROUP BY kind ORDER BY kind")),
        "edges": dict(conn.execute("SELECT kind, COUNT(*) FROM edges GROUP BY kind ORDER BY kind")),
        "unresolved_refs": conn.execute(
            "SELECT COUNT(*) FROM refs r WHERE r.target_id IS NULL AND NOT EXISTS"
            " (SELECT 1 FROM edges e WHERE e.ref_id = r.id)" + not_superseded(conn)
        ).fetchone()[0],
    }
    parse_errors = [
        {"path": path, "errors": errors}
        for path, errors in conn.execute(
            "SELECT path, parse_errors FROM files WHERE parse_errors > 0"
            " ORDER BY parse_errors DESC, path LIMIT ?",
            (worst_files,),
        )
    ]
    unreadable = [
        {"path": path, "error": error}
        for path, error in conn.execute(
            "SELECT path, error FROM files WHERE error IS NOT NULL ORDER BY path"
        )
    ]
    return {
        "db_path": str(index.db_path),
        "harness": meta.get("harness"),
        "source_path": meta.get("source_path"),
        "git_commit": meta.get("git_commit") or None,
        "built_at": built_at,
        "age_seconds": age_s,
        "files": int(meta.get("files", 0)),
        "files_with_parse_errors": conn.execute(
            "SELECT COUNT(*) FROM files WHERE parse_errors > 0"
        ).fetchone()[0],
        "worst_parse_errors": parse_errors,
        "file_problems": unreadable,
        "tree_problems": index.meta_json("tree_problems", []),
        "counts": counts,
        "link_stats": index.meta_json("link_stats", {}),
        "timings": index.meta_json("timings", {}),
        "precise": index.meta_json("precise", None),
        # uses in registration blocks that may register ops the index could not read
        "unread_registrations": unread_uses(index),
    }
