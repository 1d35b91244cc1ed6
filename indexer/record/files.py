"""Which files a record's evidence rests on, and their content when it was made.

A selection later trusts a test's record only while the files it depends on are as they
were: its own test file, and every file of the tree whose functions or module body it was
recorded running. The hash is of the tree's copy (also when the tests ran against an
installed wheel of it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from indexer.paths import language_of
from indexer.record.model import Record
from indexer.snapshot.fingerprint import git


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def path_of_name(kind: str, text: str) -> str | None:
    """The repo path a recorded name lives in (functions and modules), else None."""
    if kind == "module":
        return text
    if kind == "function":
        return text.rsplit(":", 1)[0]
    return None


def recorded_paths(record: Record) -> set[str]:
    paths = {test.file for test in record.tests}
    for kind, text in record.names:
        path = path_of_name(kind, text)
        if path is not None:
            paths.add(path)
    return paths


def content_hashes(root: Path, record: Record) -> dict[str, str]:
    """Repo path -> content hash, for the record's paths that exist in the tree."""
    hashes: dict[str, str] = {}
    for path in sorted(recorded_paths(record)):
        try:
            hashes[path] = content_hash((root / path).read_bytes())
        except OSError:
            continue  # generated into the wheel only, or outside the tree: nothing to compare
    return hashes


def dirty_files(root: Path) -> dict[str, str | None] | None:
    """The tree's uncommitted state: repo path -> content hash of each file of an indexed
    language that differs from HEAD (modified, added, untracked), None for one deleted;
    {} for a clean tree, None where git cannot say (not a repository, no commit)."""
    changed = git(root, "diff", "--name-only", "-z", "--relative", "--no-renames", "HEAD")
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "-z")
    if changed is None or untracked is None:
        return None
    paths = {
        p.decode("utf-8", "surrogateescape") for p in (changed + b"\0" + untracked).split(b"\0")
    }
    dirty: dict[str, str | None] = {}
    for path in sorted(p for p in paths if p and language_of(p) != "other"):
        try:
            dirty[path] = content_hash((root / path).read_bytes())
        except FileNotFoundError:
            dirty[path] = None  # deleted
        except OSError:
            dirty[path] = "unreadable"  # matches no content: never taken for the commit's
    return dirty
