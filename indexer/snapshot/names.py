"""Snapshot names: up to three '/'-separated components of [A-Za-z0-9._-], e.g. main/abc1234/v1.

A name becomes a directory path under the snapshot store, so anything that could escape
it (``..``, an absolute path, an empty component) is refused before it touches the disk.
"""

from __future__ import annotations

import re

from indexer.errors import UsageError

MAX_COMPONENTS = 3
MAX_COMPONENT_LENGTH = 100
_COMPONENT = re.compile(r"[A-Za-z0-9._-]+\Z")


def validate_name(name: str) -> str:
    """``name`` unchanged if it is a valid snapshot name; else a UsageError saying why."""
    if not isinstance(name, str) or not name:
        raise UsageError("snapshot name is empty")
    parts = name.split("/")
    if len(parts) > MAX_COMPONENTS:
        raise UsageError(
            f"snapshot name {name!r} has {len(parts)} components; at most {MAX_COMPONENTS} "
            "('/'-separated) are allowed"
        )
    for part in parts:
        if not part:
            raise UsageError(f"snapshot name {name!r} has an empty component")
        if part in (".", "..") or ".." in part:
            raise UsageError(f"snapshot name {name!r}: '..' and '.' components are not allowed")
        if len(part) > MAX_COMPONENT_LENGTH:
            raise UsageError(f"snapshot name {name!r}: a component is over 100 characters")
        if not _COMPONENT.match(part):
            raise UsageError(
                f"snapshot name {name!r}: only letters, digits, '.', '_', '-' and '/' are allowed"
            )
        if part.startswith("."):
            # Hidden names are the store's own temporary directories.
            raise UsageError(f"snapshot name {name!r}: a component may not start with '.'")
    return name
