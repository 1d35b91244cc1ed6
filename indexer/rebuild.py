"""Whether an index must be built again rather than updated: the one rebuild policy.

``index build``, ``index update`` and the refresh before a selection all ask it; it reads
the index's meta alone, so a selection whose index is current loads no build or update
code (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from indexer.code_key import OTHER_CODE, extraction_code_key
from indexer.extract.context import stored_context
from indexer.store.db import SCHEMA_VERSION, read_meta
from indexer.workspace import Workspace


def full_build_reason(
    workspace: Workspace, base_path: Path, compile_commands: Path | None = None
) -> str | None:
    """Why ``base_path`` cannot be updated in place and needs a full build, if it cannot.
    An index made by other extraction code is one: an update would re-extract only the
    changed files. A ``compile_commands`` the index was not built with is one: the whole
    precise layer changes (its TUs come from the cache where they can)."""
    if not base_path.is_file():
        return "no index yet"
    try:
        conn = sqlite3.connect(f"file:{base_path}?mode=ro&immutable=1", uri=True)
        try:
            meta = read_meta(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"the index is unreadable ({exc})"
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        return f"schema version {meta.get('schema_version')} != {SCHEMA_VERSION}"
    if meta.get("harness") != workspace.harness:
        return f"harness {meta.get('harness')} != {workspace.harness}"
    if meta.get("manifest") != workspace.manifest.fingerprint():
        return "the harness manifest changed since the index was built"
    if stored_context(meta) is None:
        return "the index was built without the extraction context (shared header macros)"
    if meta.get("extraction_code") != extraction_code_key():
        return OTHER_CODE  # an update would mix its facts with this code's (issue 38)
    if compile_commands is not None:
        from indexer.precise.layer import SWITCH  # the precise layer only when asked for

        if os.environ.get(SWITCH) != "off":
            built_with = built_with_compile_commands(meta)
            if built_with is None or built_with.resolve() != compile_commands.resolve():
                return f"it was not built with --compile-commands {compile_commands}"
    return None


def built_with_compile_commands(meta: dict[str, str]) -> Path | None:
    """The --compile-commands the index was built with, if one was given."""
    precise = json.loads(meta.get("precise") or "null") or {}
    named = precise.get("compile_commands")
    return Path(named) if named else None
