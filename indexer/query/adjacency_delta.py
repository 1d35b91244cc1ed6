"""The adjacency carried across an incremental update, instead of rebuilt from every edge.

An update changes the edges of a few thousand nodes (the re-extracted files' own, and
the other files' edges into them); rebuilding the arrays from all ~960,000 edges of
PyTorch costs ~5 s, most of a PR job's selection. So the update notes which nodes it
touched (temporary triggers on ``nodes`` and ``edges``: every row inserted, deleted or
updated names its ends) and stores them in the new index's meta with the key of the
index it started from. The first reader of the new index that finds the base's sidecar
(``indexer.query.adjacency``) splices the touched nodes' rows, read from SQLite in the
order a build gives, into the base arrays, and writes the result as the new sidecar.

The result equals a build from scratch (tested array for array); anything it cannot
express that way (a node or edge kind the base never had, a delta too large to be worth
it, a base sidecar written for another index) is built from scratch instead.
"""

from __future__ import annotations

import json
import sqlite3
from array import array
from dataclasses import dataclass
from pathlib import Path

from indexer.query import moved_facts
from indexer.query.adjacency import NONE, Adjacency, index_key

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


def store_delta(conn: sqlite3.Connection, base_path: Path, base_meta: dict[str, str]) -> None:
    """Write what changed into ``conn``'s meta as deltas: from the index at ``base_path``,
    and from each index that one's own deltas start from (its sidecar may still be the
    one on disk: a snapshot loaded and updated before anything read it). None are kept
    when there is none worth keeping."""
    touched = [node for (node,) in conn.execute(f"SELECT id FROM temp.{_TOUCHED} ORDER BY id")]
    rows = [node for (node,) in conn.execute(f"SELECT id FROM temp.{_ROWS} ORDER BY id")]
    nodes = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    limit = max(MAX_SHARE * nodes, MAX_NODES)
    moves = moved_facts.compare(conn)
    latest = Delta(index_key(base_path, base_meta), touched, rows)
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
    """What the updates that made this index changed, against each index it may have a
    sidecar of: the nearest first; [] when it was built whole."""
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


def splice(base: Adjacency, conn: sqlite3.Connection, touched: list[int]) -> Adjacency | None:
    """``base`` with the rows of ``touched`` nodes read again from ``conn``; None when
    the result could not equal a build (a kind ``base`` has no code for)."""
    node_codes = {kind: code for code, kind in enumerate(base.node_kinds)}
    edge_codes = {kind: code for code, kind in enumerate(base.edge_kinds)}
    max_id = max(
        conn.execute(f"SELECT COALESCE(MAX({column}), 0) FROM {table}").fetchone()[0]
        for table, column in (("nodes", "id"), ("edges", "src_id"), ("edges", "dst_id"))
    )
    if max_id + 1 < base.node_count:
        return None  # the highest ids went: the arrays would be shorter than a build's
    touched = sorted(set(touched))
    node_kind = base.node_kind[:] + array("b", [NONE]) * (max_id + 1 - base.node_count)
    node_file = base.node_file[:] + array("i", [NONE]) * (max_id + 1 - base.node_count)
    grown = list(range(base.node_count, max_id + 1))
    for node in touched + grown:
        if node <= max_id:
            node_kind[node], node_file[node] = NONE, NONE
    rows = _in_batches(
        conn, "SELECT id, kind, file_id FROM nodes WHERE id IN ({})", touched + grown
    )
    for node, kind, file in rows:
        if kind not in node_codes:
            return None
        node_kind[node], node_file[node] = node_codes[kind], file
    arrays: dict[str, array] = {"node_kind": node_kind, "node_file": node_file}
    changed = sorted({n for n in touched if n <= max_id} | set(grown))
    for side, end, other in (("in", "dst_id", "src_id"), ("out", "src_id", "dst_id")):
        fresh = _in_batches(
            conn,
            f"SELECT {end}, {other}, kind, file_id, line, COALESCE(ref_id, {NONE}) FROM edges"
            f" WHERE {end} IN ({{}}) ORDER BY {end}, kind, id",
            changed,
        )
        if any(row[2] not in edge_codes for row in fresh):
            return None
        fresh.sort(key=lambda row: (row[0], row[2]))  # batches each come sorted
        spliced = _splice_side(base, side, changed, fresh, edge_codes, max_id)
        arrays.update({f"{side}_{name}": values for name, values in spliced.items()})
    return Adjacency(base.node_kinds, base.edge_kinds, arrays)


def _splice_side(
    base: Adjacency,
    side: str,
    changed: list[int],
    fresh: list[tuple],
    edge_codes: dict[str, int],
    max_id: int,
) -> dict[str, array]:
    offsets: array = getattr(base, f"{side}_offsets")
    columns = {
        name: getattr(base, f"{side}_{name}") for name in ("other", "kind", "file", "line", "ref")
    }
    out = {name: array(values.typecode) for name, values in columns.items()}
    new_offsets = array("q")
    by_node: dict[int, list[tuple]] = {}
    for row in fresh:
        by_node.setdefault(row[0], []).append(row)
    base_nodes = base.node_count
    kept_from = 0  # the next base node whose rows are still to be copied
    for node in [*changed, max_id + 1]:
        # Base nodes kept_from .. node-1 keep their rows: one slice per column.
        stop = min(node, base_nodes)
        if kept_from < stop:
            first, last = offsets[kept_from], offsets[stop]
            shift = len(out["other"]) - first
            kept = offsets[kept_from:stop]
            new_offsets.extend(kept if shift == 0 else map(shift.__add__, kept))
            for name, values in columns.items():
                out[name].extend(values[first:last])
        untouched_new = node - max(kept_from, base_nodes)  # new ids with no row of their own
        if untouched_new > 0:
            new_offsets.extend([len(out["other"])] * untouched_new)
        if node > max_id:
            break
        new_offsets.append(len(out["other"]))
        for _, neighbour, kind, file, line, ref in by_node.get(node, ()):
            out["other"].append(neighbour)
            out["kind"].append(edge_codes[kind])
            out["file"].append(file)
            out["line"].append(line)
            out["ref"].append(ref)
        kept_from = node + 1
    new_offsets.append(len(out["other"]))
    result = {"offsets": new_offsets}
    result.update(out)
    return result


def _in_batches(conn: sqlite3.Connection, sql: str, ids: list[int], size: int = 900) -> list:
    rows: list = []
    for start in range(0, len(ids), size):
        batch = ids[start : start + size]
        rows.extend(conn.execute(sql.format(",".join("?" * len(batch))), batch))
    return rows
