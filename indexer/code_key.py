"""A hash of the code that shapes an index, so an index made by other code is known as such.

An incremental update re-extracts only changed files; after an upgrade of TorchTalk (or an
edit to its extractors) the unchanged files' facts would still be the old code's. The
layers that only read an index (queries, selection, the audit, the refresh that decides
when to build), the snapshot store and the record (its own file beside the index) do not
shape it.
"""

from __future__ import annotations

import hashlib
import os
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
    try:
        for relative in _shaping_files():
            digest.update(relative.encode())
            digest.update((_ROOT / relative).read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()


def _shaping_files() -> list[str]:
    """The repo paths of the files the key hashes, in path order (by component). Walked
    with os.walk and compared as strings, the readers' folders never entered: every
    selection asks for the key (docs/performance.md, "Select's start-up")."""
    root = str(_ROOT)
    readers = frozenset(_READERS)
    found = []
    for folder in ("indexer", "manifests"):
        for directory, folders, files in os.walk(os.path.join(root, folder)):
            relative = os.path.relpath(directory, root).replace(os.sep, "/")
            folders[:] = [f for f in folders if f"{relative}/{f}" not in readers]
            for name in files:
                path = f"{relative}/{name}"
                if (
                    path not in readers
                    and os.path.splitext(name)[1] in (".py", ".sql", ".toml")
                    and os.path.isfile(os.path.join(directory, name))
                ):
                    found.append(path)
    return sorted(found, key=lambda path: path.split("/"))
