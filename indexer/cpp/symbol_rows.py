"""What the ``cpp`` resolver's symbol table (``indexer.cpp.symbols.CppSymbols``) is built
from, one row per C++ definition, kept in the index as the ``cpp_symbols`` table.

A row is a function of its node and its file's path alone, so the full link derives the
table over every node and an update only for the files it re-extracts: linking one edited
file then reads the rows instead of splitting 70,000 qualified names and parsing their
attributes again (docs/architecture.md, "Linking"). Rows are read in node id order, the
order a scan of ``nodes`` gives, which the lookups' candidate lists keep.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator

from indexer.cpp.macros import STRUCTURED
from indexer.cpp.names import ANONYMOUS, split_qualified
from indexer.graph.vocabulary import NodeKind
from indexer.paths import is_header
from indexer.store.db import has_table

TABLE = "cpp_symbols"
CPP_KINDS = (
    NodeKind.CPP_FUNCTION.value,
    NodeKind.CUDA_KERNEL.value,
    NodeKind.DISPATCH_STUB.value,
    NodeKind.CPP_CLASS.value,
)
_CLASS = NodeKind.CPP_CLASS.value
_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    node_id        INTEGER PRIMARY KEY,
    file_id        INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    name           TEXT NOT NULL,
    key            TEXT NOT NULL,   -- the qualified name without anonymous namespaces
    last           TEXT NOT NULL,   -- its last component
    alias          TEXT,            -- TORCH_IMPL_FUNC(add_out): <namespace>::add_out
    fewest         INTEGER,         -- arity, when the node has one
    most           INTEGER,
    specialization TEXT,            -- Vectorized<float>, for members of a specialization
    bases          TEXT,            -- JSON list, classes with bases
    local_only     INTEGER NOT NULL -- static or in an anonymous namespace, outside a header
)"""
_COLUMNS = "node_id, file_id, kind, name, key, last, alias, fewest, most, specialization, bases, local_only"

# node id, file id, kind, name, key, last component, alias, fewest, most, specialization, bases, local only
Row = tuple[
    int, int, str, str, str, str, str | None, int | None, int | None, str | None, str | None, int
]
NodeRow = tuple[int, int, str, str, str, str | None]  # id, file id, kind, name, qualname, attrs


def derive(nodes: Iterable[NodeRow], paths: dict[int, str]) -> Iterator[Row]:
    """The rows of ``nodes`` (C++ ones; others are skipped), whose files ``paths`` names."""
    parsed: dict[str, dict] = {}  # many nodes share one attribute text
    headers: dict[int, bool] = {}
    for node_id, file_id, kind, name, qualname, raw in nodes:
        if kind not in CPP_KINDS:
            continue
        components = [part for part in split_qualified(qualname) if part != ANONYMOUS]
        if not components:
            continue
        attrs = {}
        if raw:
            attrs = parsed.get(raw)
            if attrs is None:
                attrs = parsed[raw] = json.loads(raw)
        fewest, most = attrs.get("arity", (None, None))
        alias = None
        if attrs.get("macro") in STRUCTURED and len(components) >= 2:
            alias = "::".join([*components[:-2], name])
        bases = attrs.get("bases") if kind == _CLASS else None
        local_only = 0
        if attrs.get("static") or ANONYMOUS in qualname:
            header = headers.get(file_id)
            if header is None:
                header = headers[file_id] = is_header(paths.get(file_id, ""))
            local_only = int(not header)
        yield (
            node_id,
            file_id,
            kind,
            name,
            "::".join(components),
            components[-1],
            alias,
            fewest,
            most,
            attrs.get("specialization"),
            json.dumps(bases) if bases else None,
            local_only,
        )


def _nodes(conn: sqlite3.Connection, file_ids: list[int] | None) -> Iterator[NodeRow]:
    marks = ",".join("?" * len(CPP_KINDS))
    query = f"SELECT id, file_id, kind, name, qualname, attrs FROM nodes WHERE kind IN ({marks})"
    if file_ids is None:
        yield from conn.execute(f"{query} ORDER BY id", CPP_KINDS)
        return
    for start in range(0, len(file_ids), 900):
        batch = file_ids[start : start + 900]
        yield from conn.execute(
            f"{query} AND file_id IN ({','.join('?' * len(batch))}) ORDER BY id",
            (*CPP_KINDS, *batch),
        )


def derive_all(conn: sqlite3.Connection) -> Iterator[Row]:
    """The rows of every node ``conn``'s index holds, in node order (none kept)."""
    return derive(_nodes(conn, None), dict(conn.execute("SELECT id, path FROM files")))


def write(conn: sqlite3.Connection, file_ids: list[int] | None = None) -> None:
    """Derive the rows of the nodes of ``file_ids`` (every file: None, the table made anew)
    into the index, in the caller's transaction."""
    if file_ids is None:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(_CREATE)
    paths = dict(conn.execute("SELECT id, path FROM files"))
    conn.executemany(
        f"INSERT INTO {TABLE}({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        derive(_nodes(conn, file_ids), paths),
    )
    for statement in _INDEXES:
        conn.execute(statement)


def forget(conn: sqlite3.Connection, file_ids: list[int]) -> None:
    """Drop the rows of the files ``file_ids`` (evicted by an update)."""
    for start in range(0, len(file_ids), 900):
        batch = file_ids[start : start + 900]
        conn.execute(f"DELETE FROM {TABLE} WHERE file_id IN ({','.join('?' * len(batch))})", batch)


def kept(conn: sqlite3.Connection) -> bool:
    """Whether the index keeps the rows (an index written before they were kept does not)."""
    return has_table(conn, TABLE)


def read(conn: sqlite3.Connection) -> Iterator[Row]:
    """The kept rows in node order, else those derived from the nodes now."""
    if not kept(conn):
        return derive_all(conn)
    return iter(conn.execute(f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY node_id"))


# The lookups of a symbol table read one name at a time (indexer/cpp/symbols.py).
BY_KEY = "key = ?1 OR alias = ?1"
BY_LAST = "last = ?1"
BY_FILE_LAST = "file_id = ?1 AND last = ?2"
_INDEXES = (
    f"CREATE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE}(key)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_alias ON {TABLE}(alias) WHERE alias IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_last ON {TABLE}(last, file_id)",
)


def named(conn: sqlite3.Connection, where: str, values: tuple) -> list[Row]:
    """The rows ``where`` (one of ``BY_*``) selects with ``values``, in node order."""
    return conn.execute(
        f"SELECT {_COLUMNS} FROM {TABLE} WHERE {where} ORDER BY node_id", values
    ).fetchall()


def specializations(conn: sqlite3.Connection) -> set[str]:
    """Every non-empty specialization the rows name."""
    return {
        value
        for (value,) in conn.execute(
            f"SELECT DISTINCT specialization FROM {TABLE} WHERE specialization IS NOT NULL"
        )
        if value
    }
