"""A hash of the code that walks the graph: what the walk derives and the index keeps
(the hub's walk, its chains) was made by one version of it, and a changed rule starts
afresh."""

from __future__ import annotations

import hashlib
from pathlib import Path

# The walking code and what it imports (indexer.python's facts, ...): whole packages, so
# a helper added or changed anywhere in them can never leave old results standing.
_WALKING_PACKAGES = ("select", "python")


def _code_version() -> str:
    """A hash of the walking code ('' when it cannot be read: nothing is kept)."""
    digest = hashlib.blake2b(digest_size=8)
    indexer = Path(__file__).resolve().parent.parent
    try:
        for package in _WALKING_PACKAGES:
            for path in sorted((indexer / package).glob("*.py")):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()


CODE_VERSION = _code_version()
