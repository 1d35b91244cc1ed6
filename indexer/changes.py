"""Which of the tree's files differ from what an index holds, by content.

An incremental update re-extracts them (``indexer.update``); a snapshot is saved only
for an index that none differ from (``indexer.snapshot.store``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from indexer.extract.discover import SourceEntry, TreeProblem, discover
from indexer.extract.pipeline import content_hash
from indexer.harness import Manifest
from indexer.store import tree_stats


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    entries: dict[str, SourceEntry] = field(default_factory=dict)  # every discovered file
    problems: list[TreeProblem] = field(default_factory=list)  # what discovery could not read
    unreadable: list[str] = field(default_factory=list)  # indexed files that cannot be read now
    # How each file looked when its content was found (or read to be extracted): what an
    # index of this tree keeps (indexer.store.tree_stats).
    looks: dict[str, tree_stats.Look] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed)

    @property
    def count(self) -> int:
        return len(self.added) + len(self.modified) + len(self.removed)


def detect_changes(
    source: Path,
    manifest: Manifest,
    conn: sqlite3.Connection,
    known: dict[str, tree_stats.Look] | None = None,
) -> Changes:
    """Which discovered files differ from what the index holds, by content; a file that
    looks as ``known`` says it did when it matched the index is not read again."""
    indexed = {
        path: (sha, size)
        for path, sha, size in conn.execute("SELECT path, sha, size FROM files ORDER BY path")
    }
    known = known or {}
    max_bytes = manifest.get("sources", "max_file_bytes", 4_000_000)
    changes = Changes()
    now = time.time_ns()
    root = os.path.join(source, "")  # strings, not a Path per file: ~8,000 of them
    for entry in discover(source, manifest, changes.problems):
        changes.entries[entry.path] = entry
        full = root + entry.path
        try:
            stat = os.lstat(full)
        except OSError:
            stat = None
        seen = tree_stats.look(stat) if stat is not None else None
        if seen is not None and tree_stats.settled(stat, now):
            changes.looks[entry.path] = seen  # read below (or extracted) as it looks now
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
        if seen is not None and known.get(entry.path) == seen:
            continue  # as it looked when it matched the index: unwritten since
        try:
            with open(full, "rb") as handle:
                data = handle.read()
        except OSError:
            changes.modified.append(entry.path)
            changes.unreadable.append(entry.path)
            continue
        if content_hash(data) != old_sha:
            changes.modified.append(entry.path)
    changes.removed = sorted(set(indexed) - set(changes.entries))
    return changes
