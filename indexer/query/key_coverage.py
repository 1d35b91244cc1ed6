"""What the index holds for one dispatch key, to say why an op has nothing for it.

``trace(op, focus=KEY)`` on an op with no kernel or registration for ``KEY`` must not
answer with silence: the line it writes instead says how many registrations the index
holds for the key and where, and which uses in that key's registration blocks could not
be read (an x-macro list the tree does not define, a macro use of another form:
``unread_registrations`` on the file node, indexer/bindings/library.py), any of which
may be the op's.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from indexer.query.index import Index

MAX_FILES = 2
MAX_UNREAD = 2

_KEYS_SQL = (
    "SELECT f.path, n.attrs FROM nodes n JOIN files f ON f.id = n.file_id"
    " WHERE n.kind IN ('registration', 'op') AND n.attrs LIKE '%impl_keys%'"
)
_UNREAD_SQL = (
    "SELECT f.path, n.attrs FROM nodes n JOIN files f ON f.id = n.file_id"
    " WHERE n.kind = 'file' AND n.attrs LIKE '%unread_registrations%'"
)


@dataclass
class KeyCoverage:
    registrations: Counter[str] = field(default_factory=Counter)  # path -> count
    unread: list[dict] = field(default_factory=list)  # with "path" added


def tables(index: Index) -> dict[str, KeyCoverage]:
    def load() -> dict[str, KeyCoverage]:
        table: dict[str, KeyCoverage] = {}
        for path, raw in index.conn.execute(_KEYS_SQL):
            for key in json.loads(raw or "{}").get("impl_keys") or []:
                table.setdefault(str(key).lower(), KeyCoverage()).registrations[path] += 1
        for path, raw in index.conn.execute(_UNREAD_SQL):
            for use in json.loads(raw or "{}").get("unread_registrations") or []:
                coverage = table.setdefault(str(use.get("key", "")).lower(), KeyCoverage())
                coverage.unread.append({**use, "path": path})
        return table

    return index.shared("key_coverage", load)


def unread_uses(index: Index) -> list[dict]:
    """Every use in a registration block the index could not read, with its file."""
    return [use for coverage in tables(index).values() for use in coverage.unread]


def why_none(index: Index, key: str, op: str) -> str:
    """One line: why the index shows nothing for ``op`` under dispatch key ``key``."""
    coverage = tables(index).get(key.lower(), KeyCoverage())
    total = sum(coverage.registrations.values())
    if total:
        files = ", ".join(path for path, _ in coverage.registrations.most_common(MAX_FILES))
        more = " and others" if len(coverage.registrations) > MAX_FILES else ""
        text = f"none of the index's {total} registrations for {key} ({files}{more}) is {op}'s"
    else:
        text = f"the index holds kernels for {key} but no registration of {op} for it"
    if coverage.unread:
        shown = "; ".join(
            f"{use['path']}:{use['line']} {use['use']} ({use['why']})"
            for use in coverage.unread[:MAX_UNREAD]
        )
        many = len(coverage.unread)
        text += (
            f"; {many} use{'s' if many != 1 else ''} in {key} blocks not read, may be it: {shown}"
        )
    else:
        text += "; every use in its registration blocks was read"
    return text
