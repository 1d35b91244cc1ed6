"""A selection's index against its diff: fresh, brought up to date, or stale.

The comparison is :mod:`indexer.query.freshness`; the paths the diff changed are known
to differ from HEAD, so they are compared whatever their times say. A stale index is
brought up to date incrementally when that is possible; otherwise the selection runs
everything, saying why.
"""

from __future__ import annotations

import sqlite3

from indexer.errors import TorchTalkError
from indexer.query.freshness import Freshness
from indexer.query.freshness import check_freshness as check_tree
from indexer.query.index import Index
from indexer.select.diff import Diff
from indexer.wording import plural
from indexer.workspace import Workspace

__all__ = ["Freshness", "check_freshness", "try_update"]


def check_freshness(workspace: Workspace, index: Index, diff: Diff) -> Freshness:
    return check_tree(workspace, index, diff.paths, diff.base.head)


def try_update(workspace: Workspace) -> tuple[bool, str]:
    """Update the index incrementally when an updater exists and needs no full build."""
    try:
        from indexer.update import full_build_reason, update_index
    except ImportError:
        return False, "no incremental update is available"
    reason = full_build_reason(workspace, workspace.db_path)
    if reason is not None:
        return False, f"an update would need a full rebuild ({reason})"
    try:
        result = update_index(workspace, show_progress=False)
    except (TorchTalkError, OSError, sqlite3.Error) as exc:
        return False, f"updating it failed ({exc})"
    return True, f"updated incrementally ({plural(result.reextracted, 'file')} re-extracted)"
