"""Possible users of a changed C++ definition in the files a compiler saw.

When no test reaches a changed C++ function, the fallback (``fallback.py``) widens it to
the definitions of its file and of the files including it: callers the fast graph cannot
see (internal linkage, macro-built names, calls it could not type) live there. Where
precise mode compiled such a file (``precise_files``), the compiler resolved every call
written in it, and the graph holds those calls. A definition of that file can then use
the changed one only through a mention no resolved call explains: an address taken, a
call the compiler could not resolve (a dependent name in a template), a line its
preprocessor skipped, a macro body. So the possible users there are the definitions
holding such a mention, found by the name as a word, line by line; a mention outside every
definition (a macro, a declaration, a global initializer) gives up on the file and keeps
all of its definitions, as the fast graph's fallback does.

What explains a mention: a direct call the compiler resolved, on its line, to a callee of
that name (as many mentions as the edge has call sites there; calls it reached only
through a virtual dispatch or a declaration explain nothing), or the name line of a
definition of that name (an overload's own name). Only free functions are asked (the caller sees to
it): a method may override one that code outside the tree calls, and constructors,
destructors, operators and classes are used without their name being written.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from indexer.graph.vocabulary import NodeKind
from indexer.query.index import Index
from indexer.select.placement import FUNCTION_KINDS
from indexer.store.db import has_table

_PRECISE = '"extractor":"precise"'
# The C++ definitions a mention can sit in (and what the fallback widens).
CPP_KINDS = FUNCTION_KINDS | {NodeKind.CPP_CLASS.value, NodeKind.DISPATCH_STUB.value}


def compiled_files(index: Index) -> frozenset[str]:
    """The tree's files some TU of precise mode compiled (none without precise mode)."""
    if not has_table(index.conn, "precise_files"):
        return frozenset()
    return frozenset(row[0] for row in index.conn.execute("SELECT path FROM precise_files"))


def users_in_compiled_file(
    index: Index, source: Path, path: str, names: set[str], own: set[int]
) -> set[int] | None:
    """The definitions of ``path`` (a compiled file) holding a mention of ``names`` that no
    resolved call explains, ``own`` left out; None when some mention is outside every
    definition, or the file cannot be read: then every definition may be a user."""
    try:
        lines = (source / path).read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return None
    word = re.compile(r"\b(" + "|".join(re.escape(name) for name in sorted(names)) + r")\b")
    mentions: dict[int, Counter[str]] = {}
    for number, text in enumerate(lines, 1):
        found = Counter(word.findall(text))
        if found:
            mentions[number] = found
    if not mentions:
        return set()
    row = index.conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    file_id = row[0]
    definitions = index.conn.execute(
        f"SELECT id, name, line, end_line FROM nodes WHERE file_id = ?"
        f" AND kind IN ({','.join('?' * len(CPP_KINDS))})",
        (file_id, *sorted(CPP_KINDS)),
    ).fetchall()
    explained = _explained(index, file_id, names, definitions)
    users: set[int] = set()
    for number, found in mentions.items():
        accounted = explained.get(number, Counter())
        if all(count <= accounted[name] for name, count in found.items()):
            continue
        holders = [d for d in definitions if d[2] <= number <= d[3]]
        if not holders:
            return None
        innermost = max(holders, key=lambda d: d[2])
        if innermost[0] not in own:
            users.add(innermost[0])
    return users


def _explained(
    index: Index, file_id: int, names: set[str], definitions: list[tuple]
) -> dict[int, Counter[str]]:
    """Per line, how many mentions of each name resolved calls and definitions account for."""
    explained: dict[int, Counter[str]] = {}
    marks = ",".join("?" * len(names))
    for line, name, attrs in index.conn.execute(
        "SELECT e.line, d.name, e.attrs FROM edges e JOIN nodes d ON d.id = e.dst_id"
        f" WHERE e.file_id = ? AND e.kind = 'calls' AND instr(e.attrs, ?) > 0"
        f" AND d.name IN ({marks})",
        (file_id, _PRECISE, *sorted(names)),
    ):
        values = json.loads(attrs)
        if values.get("via"):
            continue
        explained.setdefault(line, Counter())[name] += int(values.get("sites", 1))
    for _, name, line, _ in definitions:
        if name in names:
            explained.setdefault(line, Counter())[name] += 1
    return explained
