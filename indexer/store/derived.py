"""Data derived from the graph, kept inside the index: one storage for all of it.

What selections read and would take seconds to derive again (the edges both ways, the
walk past the hub, chains to the hub) lives in tables of
``index.sqlite`` itself (docs/architecture.md, "Derived data"): each item a header row in
``derived`` (the key it was derived for, and JSON) and its arrays as blobs in
``derived_arrays``, split into numbered blocks so that an update rewrites only the
blocks it changed. Only index maintenance writes them, on the private copy of the
database before it is renamed into place (the graph's own discipline); readers find an
item only under the key they ask for, so one derived for an earlier index is never read
as this one's.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from array import array
from collections.abc import Iterable
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS derived (
    name   TEXT PRIMARY KEY,
    key    TEXT NOT NULL,     -- what it was derived for (index_key, and the deriving code)
    header TEXT NOT NULL      -- JSON object
);
CREATE TABLE IF NOT EXISTS derived_arrays (
    name  TEXT NOT NULL,
    array TEXT NOT NULL,
    block INTEGER NOT NULL,
    data  BLOB NOT NULL,      -- the array's machine values (array.tobytes)
    UNIQUE (name, array, block)
);
"""
# What an index's key is made of: its build metadata, ``generation`` written anew by every
# build and update (so two indexes never share a key, whatever their times say).
_META_KEYS = (
    "schema_version",
    "git_commit",
    "files_fingerprint",
    "built_at",
    "counts",
    "generation",
)


def index_key(meta: dict[str, str]) -> str:
    """The key of the graph an index holds: it changes whenever a build or an update
    writes the graph, and stays when the file is copied or loaded as a snapshot."""
    parts = [meta.get(key, "") for key in _META_KEYS]
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def ensure(conn: sqlite3.Connection) -> None:
    """Create the tables in an index made before they existed (a writer's connection;
    statement by statement: ``executescript`` would commit the caller's transaction)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def header(conn: sqlite3.Connection, name: str, key: str) -> dict[str, Any] | None:
    """The header of ``name`` if it was derived for ``key``; else None (also for an
    index without the tables, or a header that does not parse)."""
    try:
        row = conn.execute("SELECT key, header FROM derived WHERE name = ?", (name,)).fetchone()
    except sqlite3.OperationalError:  # an index made before the tables existed
        return None
    if row is None or row[0] != key:
        return None
    try:
        found = json.loads(row[1])
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def arrays(
    conn: sqlite3.Connection, name: str, typecodes: dict[str, str]
) -> dict[str, array] | None:
    """The arrays of ``name`` (name -> typecode), each its blocks joined in order; None
    when one is missing, another is there, or a blob is not whole values."""
    found = {array_name: array(typecode) for array_name, typecode in typecodes.items()}
    try:
        rows = conn.execute(
            "SELECT array, data FROM derived_arrays WHERE name = ? ORDER BY array, block", (name,)
        )
        for array_name, data in rows:
            values = found.get(array_name)
            if values is None or len(data) % values.itemsize:
                return None
            values.frombytes(data)
    except sqlite3.OperationalError:
        return None
    return found


def block_arrays(
    conn: sqlite3.Connection, name: str, typecodes: dict[str, str]
) -> dict[int, dict[str, array]] | None:
    """The arrays of ``name`` by block; None as for :func:`arrays`."""
    found: dict[int, dict[str, array]] = {}
    try:
        rows = conn.execute("SELECT block, array, data FROM derived_arrays WHERE name = ?", (name,))
        for block, array_name, data in rows:
            typecode = typecodes.get(array_name)
            if typecode is None:
                return None
            values = array(typecode)
            if len(data) % values.itemsize:
                return None
            values.frombytes(data)
            found.setdefault(block, {})[array_name] = values
    except sqlite3.OperationalError:
        return None
    return found


def write(
    conn: sqlite3.Connection,
    name: str,
    key: str,
    head: dict[str, Any],
    blocks: dict[int, dict[str, array]],
    *,
    replace: bool = True,
    block_count: int | None = None,
) -> None:
    """Keep ``name`` as derived for ``key``: its header, and the arrays of ``blocks``
    (block -> array name -> values). ``replace`` drops every block first; otherwise
    only the blocks given are rewritten, and those from ``block_count`` on dropped. In
    the caller's transaction."""
    conn.execute(
        "INSERT OR REPLACE INTO derived(name, key, header) VALUES (?, ?, ?)",
        (name, key, json.dumps(head, separators=(",", ":"))),
    )
    if replace:
        conn.execute("DELETE FROM derived_arrays WHERE name = ?", (name,))
    else:
        conn.executemany(
            "DELETE FROM derived_arrays WHERE name = ? AND block = ?",
            [(name, block) for block in blocks],
        )
        if block_count is not None:
            conn.execute(
                "DELETE FROM derived_arrays WHERE name = ? AND block >= ?", (name, block_count)
            )
    conn.executemany(
        "INSERT INTO derived_arrays(name, array, block, data) VALUES (?, ?, ?, ?)",
        [
            (name, array_name, block, values.tobytes())
            for block, named in blocks.items()
            for array_name, values in named.items()
        ],
    )


def drop(conn: sqlite3.Connection, names: Iterable[str]) -> None:
    """Forget the items ``names`` (in the caller's transaction)."""
    for name in names:
        conn.execute("DELETE FROM derived WHERE name = ?", (name,))
        conn.execute("DELETE FROM derived_arrays WHERE name = ?", (name,))
