"""Which files a record's evidence rests on, and their content when it was made.

A selection later trusts a test's record only while the files it depends on are as they
were: its own test file, and every file of the tree whose functions or module body it was
recorded running. The hash is of the tree's copy (also when the tests ran against an
installed wheel of it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from indexer.record.model import Record


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
