"""What an update changed beyond moving lines: the rows it rewrote, old against new.

Re-extracting a file rewrites every row of it, but a typical edit (a statement added to
a function body) leaves its facts as they were, only lower down the file: the same
nodes (an update keeps their ids: ``indexer.store.db.ReusedIds``), the same edges between
them, the same refs, the same facts of its module-level statements, at other lines. What
is derived into the index from walking the graph (the hub's walk, ``indexer.select.hub``)
is still true then, but for its line numbers. So the update notes the rows it deletes and
inserts (temporary triggers) and compares them with their lines left out: a node is
*changed* when a row naming it differs otherwise, and for every file whose facts only
moved, each old line maps to its new one.

Lines are more than the rows' own: attributes that hold lines of the file (a function's
nested spans, a module's variable lines) count as lines, and a statement's facts hold for
its span. The walk compares lines of one file with each other (is this call inside a
nested function, inside that statement?), so the map must keep their order: a file whose
lines do not map one to one and in order keeps nothing of what names it. A file whose
statement facts changed counts as changed whole (the walk reads them at its module).

A file whose text a walk reads counts as changed whole, whatever its rows say; since the
walk reads Python through the facts extraction kept (``indexer.python.source_facts``),
that is a file of a language other than C++, CUDA and Python.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise

from indexer.graph.facts import ANSWER_ATTRS, LINE_ATTRS
from indexer.store.db import dump_attrs, has_table

_OLD = "torchtalk_old_facts"
_NEW = "torchtalk_new_facts"
# Past this many rewritten rows, comparing costs more than walking again would.
MAX_ROWS = 400_000
# Languages whose facts are all a walk reads of a file.
_FACTS_ONLY = ("cpp", "cuda", "python")
_STATEMENTS = "py_statements"

# Per table: the row's ends (the nodes it names), its evidence file, the key that
# must stay equal (everything a walk reads but the lines and the attributes), its lines,
# and its attributes (compared with their lines left out: ``_attrs_key``).
_ROWS = {
    "edges": (
        "{r}.src_id",
        "{r}.dst_id",
        "{r}.file_id",
        "{r}.src_id || ' ' || {r}.dst_id || ' ' || {r}.kind || ' ' || {r}.file_id || ' ' ||"
        " COALESCE((SELECT target FROM refs WHERE id = {r}.ref_id), '')",
        "{r}.line",
        "NULL",
        "{r}.attrs",
    ),
    "refs": (
        "{r}.src_id",
        "{r}.target_id",
        "{r}.file_id",
        "{r}.src_id || ' ' || {r}.kind || ' ' || {r}.scheme || ' ' || {r}.file_id || ' ' ||"
        " COALESCE({r}.target, '') || ' ' || COALESCE({r}.target_id, '')",
        "{r}.line",
        "NULL",
        "{r}.attrs",
    ),
    "nodes": (
        "{r}.id",
        "{r}.id",
        "{r}.file_id",
        "{r}.id || ' ' || {r}.file_id || ' ' || {r}.kind || ' ' || {r}.name || ' ' ||"
        " {r}.qualname || ' ' || COALESCE({r}.parent_id, '')",
        "{r}.line",
        "{r}.end_line",
        "{r}.attrs",
    ),
    # A module-level statement's facts (``indexer.python.statement_facts``), over its span.
    _STATEMENTS: (
        "NULL",
        "NULL",
        "{r}.file_id",
        "{r}.file_id || ' ' || {r}.facts",
        "{r}.line",
        "{r}.end_line",
        "NULL",
    ),
}
_COLUMNS = "tab, a, b, file, key, line, end_line, attrs"


@dataclass(frozen=True)
class Moves:
    """What an update changed, lines aside."""

    changed: list[int]  # nodes a changed row names (its ends), or in a file changed whole
    changed_rows: list[int]  # nodes whose own row changed
    lines: dict[int, dict[int, int]]  # file id -> old line -> new line, files that moved


def track_facts(conn: sqlite3.Connection) -> None:
    """From now on, keep every row of ``edges``, ``refs``, ``nodes`` and the statement
    facts that ``conn`` deletes (as old) or inserts (as new), an update as both."""
    for table in (_OLD, _NEW):
        conn.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {table}(tab TEXT, a INTEGER, b INTEGER,"
            " file INTEGER, key TEXT, line INTEGER, end_line INTEGER, attrs TEXT)"
        )
    for table, columns in _ROWS.items():
        if not has_table(conn, table):
            continue
        for event, sides in (
            ("INSERT", (("new", _NEW),)),
            ("DELETE", (("old", _OLD),)),
            ("UPDATE", (("old", _OLD), ("new", _NEW))),
        ):
            body = " ".join(
                f"INSERT INTO {into}({_COLUMNS}) VALUES"
                f" ('{table}', {', '.join(c.format(r=row) for c in columns)});"
                for row, into in sides
            )
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS torchtalk_facts_{table}_{event.lower()}"
                f" AFTER {event} ON {table} BEGIN {body} END"
            )


# A kept row as compared: (table, end, end, file, key with the attributes' lines left
# out, every line it holds).
_Row = tuple[str, int | None, int | None, int, str, tuple[int | None, ...]]


def compare(conn: sqlite3.Connection) -> Moves | None:
    """What the rows kept since ``track_facts`` changed; None when there are too many to
    be worth comparing."""
    counts = [conn.execute(f"SELECT COUNT(*) FROM temp.{t}").fetchone()[0] for t in (_OLD, _NEW)]
    if sum(counts) > MAX_ROWS:
        return None
    old = [_row(row) for row in conn.execute(f"SELECT {_COLUMNS} FROM temp.{_OLD}")]
    new = [_row(row) for row in conn.execute(f"SELECT {_COLUMNS} FROM temp.{_NEW}")]
    differing = Counter((row[0], row[4]) for row in old)
    differing.subtract(Counter((row[0], row[4]) for row in new))
    changed: set[int] = set()
    changed_rows: set[int] = set()
    whole: set[int] = set()  # files changed whole: their statement facts differ
    same: dict[tuple[str, str], list[list[_Row]]] = defaultdict(lambda: [[], []])
    for side, rows in enumerate((old, new)):
        for row in rows:
            tab, a, b, file_id, key, _ = row
            if differing[(tab, key)]:
                changed.update(end for end in (a, b) if end is not None)
                if tab == "nodes":
                    changed_rows.add(a)
                elif tab == _STATEMENTS:
                    whole.add(file_id)
            else:
                same[(tab, key)][side].append(row)
    # The files re-extracted (their node rows rewritten), not those whose refs were only
    # linked again: their text is what it was.
    rewritten = {row[3] for row in (*old, *new) if row[0] == "nodes"}
    changed |= _nodes_of(conn, rewritten, text_only=True)
    lines, unmappable = _line_maps(same.values())
    changed |= _nodes_of(conn, whole, text_only=False)
    # A file whose lines cannot be mapped one to one keeps nothing of what names it.
    for file_id in unmappable | whole:
        lines.pop(file_id, None)
        changed.update(
            end for row in (*old, *new) if row[3] == file_id for end in (row[1], row[2]) if end
        )
    return Moves(sorted(changed), sorted(changed_rows), lines)


def _row(row: tuple) -> _Row:
    tab, a, b, file_id, key, line, end_line, attrs = row
    attrs_key, attr_lines = _attrs_key(attrs) if tab == "nodes" else (attrs or "", [])
    return tab, a, b, file_id, f"{key} {attrs_key}", (line, end_line, *attr_lines)


def _attrs_key(attrs: str | None) -> tuple[str, list[int]]:
    """A node's attributes with the lines they hold left out (their shape kept: which
    variables, how many spans), and those lines in a fixed order; a docstring, which no
    walk reads, left out too."""
    if not attrs or not any(f'"{name}"' in attrs for name in (*LINE_ATTRS, *ANSWER_ATTRS)):
        return attrs or "", []
    try:
        found = json.loads(attrs)
    except (ValueError, RecursionError):
        return attrs, []
    if not isinstance(found, dict):
        return attrs, []
    lines: list = []
    shape = {key: value for key, value in found.items() if key not in ANSWER_ATTRS}
    for name in LINE_ATTRS:
        if name not in shape:
            continue
        value = shape.pop(name)
        if name == "nested" and isinstance(value, list):
            shape[name] = len(value)
            lines += [
                line for span in value for line in (span if isinstance(span, list) else [span])
            ]
        elif name == "var_lines" and isinstance(value, dict):
            shape[name] = sorted(value)
            lines += [line for var in sorted(value) for line in value[var]]
        else:
            shape[name] = None
            lines.append(value)
    if not all(isinstance(line, int) and not isinstance(line, bool) for line in lines):
        return attrs, []  # not lines as extraction writes them: compared as they are
    return dump_attrs(shape) or "", lines


def _nodes_of(conn: sqlite3.Connection, files: set[int], text_only: bool) -> set[int]:
    """The nodes of ``files``, old and new; ``text_only``: only of files whose text a
    walk reads (a language not in ``_FACTS_ONLY``)."""
    found: set[int] = set()
    ids = sorted(files)
    languages = _FACTS_ONLY if text_only else ()
    marks = ",".join("?" * len(languages))
    for start in range(0, len(ids), 900):
        batch = ids[start : start + 900]
        where = ",".join("?" * len(batch))
        rows = conn.execute(
            f"SELECT n.id FROM nodes n JOIN files f ON f.id = n.file_id WHERE f.id IN ({where})"
            + (f" AND f.language NOT IN ({marks})" if languages else ""),
            [*batch, *languages],
        )
        found.update(node for (node,) in rows)
        old = conn.execute(
            f"SELECT a FROM temp.{_OLD} WHERE tab = 'nodes' AND file IN ({where})"
            + (
                f" AND file NOT IN (SELECT id FROM files WHERE language IN ({marks}))"
                if languages
                else ""
            ),
            [*batch, *languages],
        )
        found.update(node for (node,) in old)
    return found


def _line_maps(pairs) -> tuple[dict[int, dict[int, int]], set[int]]:
    """Per file, each old line to its new one, from rows equal but for their lines (the
    n-th of a key by line to the n-th); the files where one old line would map to two, or
    two lines would change order."""
    maps: dict[int, dict[int, int]] = defaultdict(dict)
    unmappable: set[int] = set()
    for old_rows, new_rows in pairs:
        old_rows.sort(key=_by_lines)
        new_rows.sort(key=_by_lines)
        for before, after in zip(old_rows, new_rows, strict=True):
            file_id = before[3]
            if len(before[5]) != len(after[5]):
                unmappable.add(file_id)
                continue
            for old_line, new_line in zip(before[5], after[5], strict=True):
                if old_line is None:
                    continue
                if maps[file_id].setdefault(old_line, new_line) != new_line:
                    unmappable.add(file_id)
    for file_id, mapped in maps.items():
        ordered = [mapped[line] for line in sorted(mapped)]
        if any(a is None or b is None or a >= b for a, b in pairwise(ordered)):
            unmappable.add(file_id)
    moved = {
        f: m for f, m in maps.items() if f not in unmappable and any(o != n for o, n in m.items())
    }
    return moved, unmappable


def _by_lines(row: _Row) -> tuple[int, ...]:
    return tuple(line or 0 for line in row[5])
