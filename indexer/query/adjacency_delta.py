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
from dataclasses import dataclass

from indexer.query import moved_facts
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
    """From now on, note every node whose row or edges change on ``conn``."""
    for table in (_TOUCHED, _ROWS):
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}(id INTEGER PRIMARY KEY)")
    for table, ends in (("nodes", ("id",)), ("edges", ("src_id", "dst_id"))):
        for event, rows in (("INSERT", ("new",)), ("DELETE", ("old",)), ("UPDATE", ("old", "new"))):
            values = ", ".join(f"({row}.{end})" for row in rows for end in ends)
            body = f"INSERT OR IGNORE INTO {_TOUCHED}(id) VALUES {values};"
            if table == "nodes":
                body += f" INSERT OR IGNORE INTO {_ROWS}(id) VALUES {values};"
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
