"""A hash of the code that shapes an index, so an index made by other code is known as such.

An incremental update re-extracts only changed files; after an upgrade of TorchTalk (or an
edit to its extractors) the unchanged files' facts would still be the old code's. The
layers that only read an index (queries, selection, the audit, the refresh that decides
when to build), the snapshot store and the record (its own file beside the index) do not
shape it.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
# Why an index another version of the extraction code made is built again, not updated
# (its unchanged files' facts are that code's) nor read as describing the tree.
OTHER_CODE = "it was built by another version of TorchTalk's indexer"
_READERS = (
    "indexer/query",
    "indexer/select",
    "indexer/answers",
    "indexer/snapshot",
    "indexer/record",
    "indexer/audit",
    "indexer/refresh.py",
    "indexer/select_changes.py",
    "indexer/diff.py",
    "indexer/anchors",
)


@cache
def extraction_code_key() -> str:
    """BLAKE2b of the indexer's extraction code and the built-in manifests ('' when they
    cannot be read)."""
    digest = hashlib.blake2b(digest_size=8)
    readers = tuple(_ROOT / reader for reader in _READERS)
    try:
        for folder in ("indexer", "manifests"):
            for path in sorted((_ROOT / folder).rglob("*")):
                if any(path.is_relative_to(reader) for reader in readers):
                    continue
                if path.suffix in (".py", ".sql", ".toml") and path.is_file():
                    digest.update(path.relative_to(_ROOT).as_posix().encode())
                    digest.update(path.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()
