"""The adjacency carried across an incremental update, instead of rebuilt from every edge.

An update changes the edges of a few thousand nodes (the re-extracted files' own, and
the other files' edges into them); rebuilding the arrays from all ~960,000 edges of
PyTorch costs ~5 s, most of a PR job's selection. So the update notes which nodes it
touched (temporary triggers on ``nodes`` and ``edges``: every row inserted, deleted or
updated names its ends) and stores them in the new index's meta with the key of the
index it started from (``indexer.store.derived.index_key``). The update's copy of the
database still holds what was derived for that index; the refresh splices the touched
nodes' rows, read from SQLite in the order a build gives, into the base arrays
(``indexer.query.adjacency.splice``) and rewrites the blocks they are in.

The result equals a build from scratch (tested array for array); anything it cannot
express that way (a node or edge kind the base never had, a delta too large to be worth
it, nothing derived for the base) is built from scratch instead.
"""

from __future__ import annotations

import json
import sqlite3
from array import array
from dataclasses import dataclass

from indexer.query import moved_facts
from indexer.store import derived
from indexer.store.db import read_meta
from indexer.store.derived import index_key

META_KEY = "adjacency_delta"
# Past this share of the nodes (and this many), splicing saves little over a build.
MAX_SHARE = 0.1
MAX_NODES = 20_000
MAX_CHAIN = 4  # deltas kept per index: from its base, and from that one's bases
# Temporary tables (a trigger may not name a schema): every node whose row or edges
# changed, and every node whose own row did (inserted, deleted, updated).
_TOUCHED = "torchtalk_touched"
_ROWS = "torchtalk_rows"
_EDGES_GONE = "torchtalk_edges_gone"
_EDGES_ADDED = "torchtalk_edges_added"
_IN_PLACE = -1  # noted among the added ids when an edge row was updated in place
# The edge rows of the latest update, kept in the index's derived data beside the delta:
# the adjacency is spliced from them without reading the touched nodes' other rows.
EDGE_ROWS = "adjacency_edge_rows"
MAX_EDGE_ROWS = 2_000_000


@dataclass(frozen=True)
class Delta:
    """What an update changed, against the index it started from."""

    base: str  # that index's key (``index_key``)
    nodes: list[int]  # nodes whose row or edges changed: the ends of every changed edge
    rows: list[int]  # nodes whose own row changed
    # The same, rows that only moved to other lines aside (``indexer.query.moved_facts``);
    # None when not compared (then ``nodes`` and ``rows`` are all there is).
    changed: list[int] | None = None
    changed_rows: list[int] | None = None
    # Per file id (as text: JSON keys), old line -> new line, for files whose facts moved.
    lines: dict[str, dict[str, int]] | None = None

    def as_json(self) -> dict:
        """The fields as they are (``dataclasses.asdict`` would copy every list deeply)."""
        return dict(vars(self))

    def moved_line(self, file_id: int, line: int) -> int | None:
        """Where evidence at ``line`` of the file is now; None when it is not known."""
        if self.lines is None:
            return None
        moved = self.lines.get(str(file_id))
        if moved is None:
            return line
        return moved.get(str(line))


def track_touched(conn: sqlite3.Connection) -> None:
    """From now on, note every node whose row or edges change on ``conn``, and which
    edge rows: those of the index before that go (their content) and the first id of
    those that come (rows added take ids above every row kept: ``INTEGER PRIMARY KEY``)."""
    for table in (_TOUCHED, _ROWS, _EDGES_ADDED):
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}(id INTEGER PRIMARY KEY)")
    conn.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {_EDGES_GONE}(id INTEGER PRIMARY KEY, src_id INTEGER,"
        " dst_id INTEGER, kind TEXT, file_id INTEGER, line INTEGER, ref_id INTEGER)"
    )
    for table, ends in (("nodes", ("id",)), ("edges", ("src_id", "dst_id"))):
        for event, rows in (("INSERT", ("new",)), ("DELETE", ("old",)), ("UPDATE", ("old", "new"))):
            values = ", ".join(f"({row}.{end})" for row in rows for end in ends)
            body = f"INSERT OR IGNORE INTO {_TOUCHED}(id) VALUES {values};"
            if table == "nodes":
                body += f" INSERT OR IGNORE INTO {_ROWS}(id) VALUES {values};"
            elif event == "INSERT":
                body += f" INSERT OR IGNORE INTO {_EDGES_ADDED}(id) VALUES (new.id);"
            elif event == "DELETE":  # a row of the index before (not one added since)
                body += (
                    f" INSERT OR IGNORE INTO {_EDGES_GONE} SELECT old.id, old.src_id, old.dst_id,"
                    " old.kind, old.file_id, old.line, old.ref_id"
                    f" WHERE old.id NOT IN (SELECT id FROM {_EDGES_ADDED});"
                )
            else:  # an edge changed in place keeps its id: only re-reading its ends says it
                body += f" INSERT OR IGNORE INTO {_EDGES_ADDED}(id) VALUES ({_IN_PLACE});"
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS torchtalk_touch_{table}_{event.lower()}"
                f" AFTER {event} ON {table} BEGIN {body} END"
            )


def store_delta(conn: sqlite3.Connection, base_meta: dict[str, str]) -> None:
    """Write what changed into ``conn``'s meta as deltas: from the index of ``base_meta``,
    and from each index that one's own deltas start from (what it holds may have been
    derived for one of those: an index updated by code that did not derive). None are
    kept when there is none worth keeping."""
    touched = [node for (node,) in conn.execute(f"SELECT id FROM temp.{_TOUCHED} ORDER BY id")]
    rows = [node for (node,) in conn.execute(f"SELECT id FROM temp.{_ROWS} ORDER BY id")]
    nodes = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    limit = max(MAX_SHARE * nodes, MAX_NODES)
    moves = moved_facts.compare(conn)
    latest = Delta(index_key(base_meta), touched, rows)
    if moves is not None:
        lines = {str(f): {str(o): n for o, n in m.items()} for f, m in moves.lines.items()}
        latest = Delta(latest.base, touched, rows, moves.changed, moves.changed_rows, lines)
    deltas = [latest]
    for earlier in deltas_of(base_meta)[: MAX_CHAIN - 1]:
        deltas.append(_chained(earlier, latest))
    kept = [delta.as_json() for delta in deltas if len(delta.nodes) <= limit]
    conn.execute("DELETE FROM meta WHERE key = ?", (META_KEY,))
    if kept:
        conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (META_KEY, json.dumps(kept)))
    _store_edge_rows(conn, latest.base if len(latest.nodes) <= limit else None)


def _store_edge_rows(conn: sqlite3.Connection, base: str | None) -> None:
    """Keep the latest update's edge rows (``track_touched``) for the index being
    written, as derived from ``base``'s graph; nothing when there is no delta worth
    keeping, or an edge changed in place."""
    derived.ensure(conn)
    derived.drop(conn, (EDGE_ROWS,))
    if base is None:
        return
    (first_added,) = conn.execute(f"SELECT MIN(id) FROM temp.{_EDGES_ADDED}").fetchone()
    (gone_count,) = conn.execute(f"SELECT COUNT(*) FROM temp.{_EDGES_GONE}").fetchone()
    if (first_added is not None and first_added < 0) or gone_count > MAX_EDGE_ROWS:
        return
    kinds = sorted(kind for (kind,) in conn.execute(f"SELECT DISTINCT kind FROM {_EDGES_GONE}"))
    if len(kinds) > 127:
        return
    code = {kind: number for number, kind in enumerate(kinds)}
    columns = {name: array(typecode) for name, typecode in EDGE_ROW_ARRAYS.items()}
    for src, dst, kind, file_id, line, ref in conn.execute(
        f"SELECT src_id, dst_id, kind, file_id, line, COALESCE(ref_id, -1)"
        f" FROM temp.{_EDGES_GONE} ORDER BY id"
    ):
        for name, value in zip(columns, (src, dst, code[kind], file_id, line, ref), strict=True):
            columns[name].append(value)
    head = {"base": base, "kinds": kinds, "first_added": first_added}
    key = derived.index_key(read_meta(conn))
    derived.write(conn, EDGE_ROWS, key, head, {0: columns})


# The rows that went, column by column (kinds as indexes into the header's list).
EDGE_ROW_ARRAYS = {"src": "i", "dst": "i", "kind": "b", "file": "i", "line": "i", "ref": "i"}


@dataclass(frozen=True)
class EdgeRows:
    """The edge rows the update that made an index changed, against ``base``: those
    that went (as stored), and the first id of those that came (every row from that id
    on is new; None: none came)."""

    base: str
    gone: list[tuple[int, int, str, int, int, int]]  # src, dst, kind, file, line, ref
    first_added: int | None


def edge_rows(conn: sqlite3.Connection, meta: dict[str, str]) -> EdgeRows | None:
    """What :func:`_store_edge_rows` kept for the index ``conn`` reads, if it did."""
    head = derived.header(conn, EDGE_ROWS, derived.index_key(meta))
    if head is None:
        return None
    found = derived.arrays(conn, EDGE_ROWS, EDGE_ROW_ARRAYS)
    try:
        kinds = [str(kind) for kind in head["kinds"]]
        first = head.get("first_added")
        columns = [found[name] for name in EDGE_ROW_ARRAYS] if found is not None else None
        if columns is None or len({len(values) for values in columns}) > 1:
            return None
        gone = [
            (src, dst, kinds[kind], file_id, line, ref)
            for src, dst, kind, file_id, line, ref in zip(*columns, strict=True)
        ]
        return EdgeRows(str(head["base"]), gone, None if first is None else int(first))
    except (KeyError, TypeError, IndexError, ValueError):
        return None


def _chained(earlier: Delta, latest: Delta) -> Delta:
    """What ``earlier`` and then ``latest`` changed together, against ``earlier.base``."""

    def union(a: list[int] | None, b: list[int] | None) -> list[int] | None:
        return None if a is None or b is None else sorted(set(a) | set(b))

    lines = None
    if earlier.lines is not None and latest.lines is not None:
        lines = dict(earlier.lines)
        for file_id, second in latest.lines.items():
            first = earlier.lines.get(file_id)
            if first is None:
                lines[file_id] = second
            else:  # every line of the middle index's facts of the file is in ``second``
                lines[file_id] = {o: second[str(m)] for o, m in first.items() if str(m) in second}
    return Delta(
        earlier.base,
        sorted(set(earlier.nodes) | set(latest.nodes)),
        sorted(set(earlier.rows) | set(latest.rows)),
        union(earlier.changed, latest.changed),
        union(earlier.changed_rows, latest.changed_rows),
        lines,
    )


def deltas_of(meta: dict[str, str]) -> list[Delta]:
    """What the updates that made this index changed, against each index whose derived
    data it may hold: the nearest first; [] when it was built whole."""
    try:
        found = json.loads(meta.get(META_KEY) or "[]")
        return [
            Delta(
                str(delta["base"]),
                [int(node) for node in delta["nodes"]],
                [int(node) for node in delta["rows"]],
                _ids(delta.get("changed")),
                _ids(delta.get("changed_rows")),
                _lines(delta.get("lines")),
            )
            for delta in found
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _ids(values) -> list[int] | None:
    return None if values is None else [int(value) for value in values]


def _lines(values) -> dict[str, dict[str, int]] | None:
    if values is None:
        return None
    return {str(f): {str(o): int(n) for o, n in m.items()} for f, m in values.items()}
