"""From a git diff to the tests it can break: refresh the index, then select.

The entry of the pytest plugin, ``torchtalk select``, the audit and the benchmarks. The
refresh (``indexer.refresh.current_index``: the one rebuild-or-update policy, shared
with ``torchtalk index build``) is the only step that writes; the selection itself
(``indexer.select.engine.select_tests``) reads a current index and writes nothing
(docs/selection.md, "A current index").
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

from indexer.diff import read_diff
from indexer.errors import TorchTalkError, UsageError
from indexer.refresh import current_index
from indexer.select.engine import run_everything, select_tests
from indexer.select.model import Selection
from indexer.workspace import Workspace


def select_changes(
    workspace: Workspace,
    base: str | None = None,
    *,
    update: bool = True,
    record: Path | Literal[False] | None = None,
) -> Selection:
    """The tests that the changes of ``workspace.source`` since ``base`` can break.

    ``update``: refresh a stale index first (False: a stale index runs everything).
    ``record``: as :func:`indexer.select.engine.select_tests` takes it.

    Raises a UsageError for a tree that is not a git repository or an unknown base.
    """
    started = time.perf_counter()
    diff = read_diff(workspace.source, base)
    timings = {"diff_s": time.perf_counter() - started}
    phase = time.perf_counter()
    current = current_index(workspace, diff.paths, diff.base.head, update=update)
    try:
        if current.index is not None:
            timings["freshness_s"] = time.perf_counter() - phase
        if current.everything is None:
            selection = select_tests(workspace, current.index, diff, record)
        else:
            try:
                selection = run_everything(workspace, diff, current.everything, current.index)
            except (sqlite3.DatabaseError, TorchTalkError) as exc:  # damaged past its header
                if isinstance(exc, UsageError):
                    raise
                selection = run_everything(workspace, diff, f"the index cannot be used ({exc})")
    finally:
        current.close()
    selection.index.update(current.info)
    selection.notes[:0] = current.notes
    own = {key: value for key, value in selection.timings.items() if key != "total_s"}
    selection.timings = {**timings, **own, "total_s": time.perf_counter() - started}
    return selection
