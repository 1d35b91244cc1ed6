"""Opening index databases, and the rows one file contributes.

A database is never modified where readers can see it: a build or an update writes a
separate file and renames it over the old one, so a reader keeps a consistent snapshot
(the old inode) for as long as it holds its connection. That is why readers may open
with ``immutable=1``, which skips SQLite's locking entirely.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from indexer.errors import IndexMissingError, TorchTalkError
from indexer.graph.facts import FILE_NODE, FileFacts

# 2: module-level statement facts (py_statements) and the walk's facts on refs and nodes.
SCHEMA_VERSION = 2


def _sql(name: str) -> str:
    from importlib import resources  # here: readers of an index never create one

    return resources.files("indexer.store").joinpath(name).read_text(encoding="utf-8")


def create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_sql("schema.sql"))


def create_indexes(conn: sqlite3.Connection) -> None:
    conn.executescript(_sql("indexes.sql"))


def connect_writable(path: Path) -> sqlite3.Connection:
    """A connection for a private file that no reader sees until it is renamed into place."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-200000")
    return conn


def connect_readonly(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise IndexMissingError(f"no index at {path}; run 'torchtalk index build' first")
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
    try:
        version = read_meta(conn).get("schema_version")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise TorchTalkError(f"{path} is not a TorchTalk index ({exc})") from None
    if version != str(SCHEMA_VERSION):
        conn.close()
        raise TorchTalkError(
            f"{path} has schema version {version}, this torchtalk reads {SCHEMA_VERSION}; "
            "rebuild with 'torchtalk index build'"
        )
    return conn


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the index has ``name`` (tables a layer adds when it runs: precise mode's)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta"))


def write_meta(conn: sqlite3.Connection, values: dict[str, Any]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
        [
            (key, value if isinstance(value, str) else json.dumps(value, sort_keys=True))
            for key, value in values.items()
        ],
    )


_LAST_IDENTIFIER = re.compile(r"([A-Za-z_~][A-Za-z0-9_]*|operator\W+)\s*$")


def target_key(target: str | None) -> str | None:
    """The last identifier of a written name: 'at::native::gemm<float>' -> 'gemm'."""
    if target is None:
        return None
    depth = 0
    stripped = []
    for char in target:  # drop template arguments, which may contain '::' themselves
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            stripped.append(char)
    text = "".join(stripped).replace("::", ".").rstrip("(). ")
    match = _LAST_IDENTIFIER.search(text.rsplit(".", 1)[-1])
    return match.group(1) if match else text


def dump_attrs(attrs: dict[str, Any]) -> str | None:
    """Attributes as the index stores them (sorted, compact; None when there are none):
    what compares equal with a stored value."""
    return json.dumps(attrs, sort_keys=True, separators=(",", ":")) if attrs else None


class ReusedIds:
    """The ids an update gives the files it re-extracts: each file keeps its file id, and
    each node the id of the old node of the same kind and qualified name (the n-th of a
    name in the file the n-th's), so that what an update did not change keeps its
    identity in the graph: an edge between the same two functions is the same edge, and
    what is derived into the index (walks, chains) still names the same nodes. Anything
    new gets an id above every id the index had, never one freed by an evicted file
    whose facts are still to be written. Read before any file is evicted."""

    def __init__(self, conn: sqlite3.Connection, paths: list[str]) -> None:
        self._files: dict[str, int] = {}
        self._nodes: dict[tuple[str, str, str], list[int]] = {}  # unused ids, last first
        for path in paths:
            row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
            if row is None:
                continue
            self._files[path] = row[0]
            for node_id, kind, qualname in conn.execute(
                "SELECT id, kind, qualname FROM nodes WHERE file_id = ? ORDER BY id DESC",
                (row[0],),
            ):
                self._nodes.setdefault((path, kind, qualname), []).append(node_id)
        (self._next_file,) = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM files").fetchone()
        (self._next_node,) = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM nodes").fetchone()

    def file_id(self, path: str) -> int:
        found = self._files.pop(path, None)
        if found is None:
            found, self._next_file = self._next_file, self._next_file + 1
        return found

    def node_id(self, path: str, kind: str, qualname: str) -> int:
        ids = self._nodes.get((path, kind, qualname))
        if ids:
            return ids.pop()
        found, self._next_node = self._next_node, self._next_node + 1
        return found


def insert_file_facts(
    conn: sqlite3.Connection, facts: FileFacts, reuse: ReusedIds | None = None
) -> int:
    """Write one file's row, nodes and refs; returns the file id. The caller owns the
    transaction. ``reuse``: the ids the file had before it was evicted."""
    cursor = conn.execute(
        "INSERT INTO files(id, path, language, sha, size, parse_errors, error)"
        " VALUES (?,?,?,?,?,?,?)",
        (
            reuse.file_id(facts.path) if reuse is not None else None,
            facts.path,
            facts.language,
            facts.sha,
            facts.size,
            facts.parse_errors,
            facts.error,
        ),
    )
    file_id = cursor.lastrowid
    node_ids: list[int] = []
    for local, node in enumerate(facts.nodes):
        parent = node_ids[node.parent] if node.parent is not None and local > 0 else None
        cursor = conn.execute(
            "INSERT INTO nodes(id, file_id, kind, name, qualname, line, end_line, parent_id,"
            " attrs) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                reuse.node_id(facts.path, node.kind, node.qualname) if reuse is not None else None,
                file_id,
                node.kind,
                node.name,
                node.qualname,
                node.line,
                node.end_line,
                parent,
                dump_attrs(node.attrs),
            ),
        )
        node_ids.append(cursor.lastrowid)
    conn.executemany(
        "INSERT INTO refs(file_id, src_id, kind, scheme, target, target_key, target_id, line, attrs)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        [
            (
                file_id,
                node_ids[ref.src if ref.src is not None else FILE_NODE],
                ref.kind,
                ref.scheme,
                ref.target,
                target_key(ref.target),
                node_ids[ref.target_local] if ref.target_local is not None else None,
                ref.line,
                dump_attrs(ref.attrs),
            )
            for ref in facts.refs
        ],
    )
    if facts.statements:
        conn.executemany(
            "INSERT INTO py_statements(file_id, line, end_line, facts) VALUES (?,?,?,?)",
            [
                (file_id, first, last, dump_attrs(done) or "{}")
                for first, last, done in facts.statements
            ],
        )
    return file_id


def evict_file(conn: sqlite3.Connection, path: str) -> int | None:
    """Remove one file's rows and every edge that touches them; returns the old file id.

    Edges *into* the evicted nodes come from other files' refs: the caller must re-resolve
    those refs (their ids are returned by :func:`refs_into_file`) after re-adding files.
    """
    row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    file_id = row[0]
    conn.execute(
        "DELETE FROM edges WHERE file_id = :file OR src_id IN (SELECT id FROM nodes WHERE"
        " file_id = :file) OR dst_id IN (SELECT id FROM nodes WHERE file_id = :file)",
        {"file": file_id},
    )
    conn.execute("DELETE FROM refs WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM py_statements WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM nodes WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    return file_id


def refs_into_file(conn: sqlite3.Connection, path: str) -> list[int]:
    """Ids of refs (from any file) whose edges point into ``path``'s nodes."""
    return [
        ref_id
        for (ref_id,) in conn.execute(
            "SELECT DISTINCT e.ref_id FROM edges e JOIN nodes n ON n.id = e.dst_id"
            " JOIN files f ON f.id = n.file_id WHERE f.path = ? AND e.ref_id IS NOT NULL",
            (path,),
        )
    ]
