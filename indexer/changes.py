"""Which of the tree's files differ from what an index holds, by content.

An incremental update re-extracts them (``indexer.update``); a snapshot is saved only
for an index that none differ from (``indexer.snapshot.store``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from indexer.extract.discover import SourceEntry, TreeProblem, discover
from indexer.extract.pipeline import content_hash
from indexer.harness import Manifest


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    entries: dict[str, SourceEntry] = field(default_factory=dict)  # every discovered file
    problems: list[TreeProblem] = field(default_factory=list)  # what discovery could not read
    unreadable: list[str] = field(default_factory=list)  # indexed files that cannot be read now

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed)

    @property
    def count(self) -> int:
        return len(self.added) + len(self.modified) + len(self.removed)


def detect_changes(source: Path, manifest: Manifest, conn: sqlite3.Connection) -> Changes:
    """Which discovered files differ from what the index holds, by content."""
    indexed = {
        path: (sha, size)
        for path, sha, size in conn.execute("SELECT path, sha, size FROM files ORDER BY path")
    }
    max_bytes = manifest.get("sources", "max_file_bytes", 4_000_000)
    changes = Changes()
    for entry in discover(source, manifest, changes.problems):
        changes.entries[entry.path] = entry
        old = indexed.get(entry.path)
        if old is None:
            changes.added.append(entry.path)
            continue
        old_sha, old_size = old
        if not old_sha:
            # Not read at build time (over the size limit, unreadable): cheap to redo, and
            # the only way to notice it became readable.
            if entry.size != old_size or entry.size <= max_bytes:
                changes.modified.append(entry.path)
            continue
        if entry.size > max_bytes:
            changes.modified.append(entry.path)
            continue
        try:
            data = (source / entry.path).read_bytes()
        except OSError:
            changes.modified.append(entry.path)
            changes.unreadable.append(entry.path)
            continue
        if content_hash(data) != old_sha:
            changes.modified.append(entry.path)
    changes.removed = sorted(set(indexed) - set(changes.entries))
    return changes
