"""What an update changed beyond moving lines: the rows it rewrote, old against new.

Re-extracting a file rewrites every row of it, but a typical edit (a statement added to
a function body) leaves its facts as they were, only lower down the file: the same
nodes (an update keeps their ids: ``indexer.store.db.ReusedIds``), the same edges between
them, the same refs, at other lines. What is derived into the index from walking the graph
(the hub's walk, ``indexer.select.hub``) is still true then, but for its line numbers.
So the update notes the rows it deletes and inserts (temporary triggers) and compares
them with their lines left out: a node is *changed* when a row naming it differs
otherwise, and for every file whose facts only moved, each old line maps to its new one.

A file whose text a walk reads (Python: whether a line calls what it names) counts as
changed whole, whatever its rows say.
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass

_OLD = "torchtalk_old_facts"
_NEW = "torchtalk_new_facts"
# Past this many rewritten rows, comparing costs more than walking again would.
MAX_ROWS = 400_000
# Languages whose facts are all a walk reads of a file.
_FACTS_ONLY = ("cpp", "cuda")

# Per table: the row's ends (the nodes it names), its evidence file, the key that
# must stay equal (everything a walk reads but the lines), and its lines.
_ROWS = {
    "edges": (
        "{r}.src_id",
        "{r}.dst_id",
        "{r}.file_id",
        "{r}.src_id || ' ' || {r}.dst_id || ' ' || {r}.kind || ' ' || {r}.file_id || ' ' ||"
        " COALESCE({r}.attrs, '') || ' ' ||"
        " COALESCE((SELECT target FROM refs WHERE id = {r}.ref_id), '')",
        "{r}.line",
        "NULL",
    ),
    "refs": (
        "{r}.src_id",
        "{r}.target_id",
        "{r}.file_id",
        "{r}.src_id || ' ' || {r}.kind || ' ' || {r}.scheme || ' ' || {r}.file_id || ' ' ||"
        " COALESCE({r}.target, '') || ' ' || COALESCE({r}.target_id, '') || ' ' ||"
        " COALESCE({r}.attrs, '')",
        "{r}.line",
        "NULL",
    ),
    "nodes": (
        "{r}.id",
        "{r}.id",
        "{r}.file_id",
        "{r}.id || ' ' || {r}.file_id || ' ' || {r}.kind || ' ' || {r}.name || ' ' ||"
        " {r}.qualname || ' ' || COALESCE({r}.parent_id, '') || ' ' || COALESCE({r}.attrs, '')",
        "{r}.line",
        "{r}.end_line",
    ),
}


@dataclass(frozen=True)
class Moves:
    """What an update changed, lines aside."""

    changed: list[int]  # nodes a changed row names (its ends), or in a file read as text
    changed_rows: list[int]  # nodes whose own row changed
    lines: dict[int, dict[int, int]]  # file id -> old line -> new line, files that moved


def track_facts(conn: sqlite3.Connection) -> None:
    """From now on, keep every row of ``edges``, ``refs`` and ``nodes`` that ``conn``
    deletes (as old) or inserts (as new), an update as both."""
    for table in (_OLD, _NEW):
        conn.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {table}(tab TEXT, a INTEGER, b INTEGER,"
            " file INTEGER, key TEXT, line INTEGER, end_line INTEGER)"
        )
    for table, columns in _ROWS.items():
        for event, sides in (
            ("INSERT", (("new", _NEW),)),
            ("DELETE", (("old", _OLD),)),
            ("UPDATE", (("old", _OLD), ("new", _NEW))),
        ):
            body = " ".join(
                f"INSERT INTO {into}(tab, a, b, file, key, line, end_line) VALUES"
                f" ('{table}', {', '.join(c.format(r=row) for c in columns)});"
                for row, into in sides
            )
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS torchtalk_facts_{table}_{event.lower()}"
                f" AFTER {event} ON {table} BEGIN {body} END"
            )


def compare(conn: sqlite3.Connection) -> Moves | None:
    """What the rows kept since ``track_facts`` changed; None when there are too many to
    be worth comparing."""
    counts = [conn.execute(f"SELECT COUNT(*) FROM temp.{t}").fetchone()[0] for t in (_OLD, _NEW)]
    if sum(counts) > MAX_ROWS:
        return None
    old = conn.execute(f"SELECT tab, a, b, file, key, line, end_line FROM temp.{_OLD}").fetchall()
    new = conn.execute(f"SELECT tab, a, b, file, key, line, end_line FROM temp.{_NEW}").fetchall()
    differing = Counter((row[0], row[4]) for row in old)
    differing.subtract(Counter((row[0], row[4]) for row in new))
    changed: set[int] = set()
    changed_rows: set[int] = set()
    same: dict[tuple[str, str], list[list[tuple]]] = defaultdict(lambda: [[], []])
    for side, rows in enumerate((old, new)):
        for row in rows:
            tab, a, b, _, key, _, _ = row
            if differing[(tab, key)]:
                changed.update(end for end in (a, b) if end is not None)
                if tab == "nodes":
                    changed_rows.add(a)
            else:
                same[(tab, key)][side].append(row)
    # The files re-extracted (their node rows rewritten), not those whose refs were only
    # linked again: their text is what it was.
    rewritten = {row[3] for row in (*old, *new) if row[0] == "nodes"}
    changed |= _nodes_read_as_text(conn, rewritten)
    lines, unmappable = _line_maps(same.values())
    # A file whose lines cannot be mapped one to one keeps nothing of what names it.
    for file_id in unmappable:
        lines.pop(file_id, None)
        changed.update(
            end for row in (*old, *new) if row[3] == file_id for end in (row[1], row[2]) if end
        )
    return Moves(sorted(changed), sorted(changed_rows), lines)


def _nodes_read_as_text(conn: sqlite3.Connection, files: set[int]) -> set[int]:
    found: set[int] = set()
    ids = sorted(files)
    marks = ",".join("?" * len(_FACTS_ONLY))
    for start in range(0, len(ids), 900):
        batch = ids[start : start + 900]
        rows = conn.execute(
            f"SELECT n.id FROM nodes n JOIN files f ON f.id = n.file_id WHERE f.id IN"
            f" ({','.join('?' * len(batch))}) AND f.language NOT IN ({marks})",
            [*batch, *_FACTS_ONLY],
        )
        found.update(node for (node,) in rows)
        old = conn.execute(
            f"SELECT a FROM temp.{_OLD} WHERE tab = 'nodes' AND file IN"
            f" ({','.join('?' * len(batch))}) AND file NOT IN"
            f" (SELECT id FROM files WHERE language IN ({marks}))",
            [*batch, *_FACTS_ONLY],
        )
        found.update(node for (node,) in old)
    return found


def _line_maps(pairs) -> tuple[dict[int, dict[int, int]], set[int]]:
    """Per file, each old line to its new one, from rows equal but for their lines (the
    n-th of a key by line to the n-th); the files where one old line would map to two."""
    maps: dict[int, dict[int, int]] = defaultdict(dict)
    unmappable: set[int] = set()
    for old_rows, new_rows in pairs:
        old_rows.sort(key=lambda row: (row[5], row[6] or 0))
        new_rows.sort(key=lambda row: (row[5], row[6] or 0))
        for before, after in zip(old_rows, new_rows, strict=True):
            file_id = before[3]
            for old_line, new_line in ((before[5], after[5]), (before[6], after[6])):
                if old_line is None:
                    continue
                if maps[file_id].setdefault(old_line, new_line) != new_line:
                    unmappable.add(file_id)
    moved = {
        f: m for f, m in maps.items() if f not in unmappable and any(o != n for o, n in m.items())
    }
    return moved, unmappable
