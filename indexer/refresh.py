"""Make the index describe the tree, doing no more than needed: the one refresh policy.

``torchtalk index build``, and the step before every selection (``torchtalk select``,
the pytest plugin, the audit: :func:`current_index`), use it. An index that already
describes the tree is left alone; one an incremental update can bring up to date is
updated; anything else (no index, another schema, manifest or extraction code: see
``indexer.rebuild.full_build_reason``, the one place that decides) is built again.
``force`` always builds again. What selections read is derived here too, into the new
index before it is renamed into place (``indexer.select.derived``, kept in the index:
docs/architecture.md, "Derived data"): selections write nothing (docs/selection.md,
"A current index").
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import durable
from indexer.errors import TorchTalkError
from indexer.query import adjacency
from indexer.query.freshness import Freshness, check_freshness
from indexer.query.index import Index
from indexer.rebuild import full_build_reason
from indexer.select import derived
from indexer.select.hub import derived_key
from indexer.store.db import connect_writable, write_meta
from indexer.wording import plural
from indexer.workspace import Workspace

if TYPE_CHECKING:  # build and update are imported only when a refresh needs them
    from indexer.build import BuildResult
    from indexer.update import UpdateResult

# In the index's meta: the key of the index (and deriving code) that preparing failed
# for, and why; a later refresh of that same index does not copy it to fail again.
PREPARE_FAILED = "prepare_failed"


@dataclass
class Refresh:
    how: str  # "up to date", "updated" or "built"
    reason: str  # why it was built again ("" unless built)
    built: BuildResult | None = None
    updated: UpdateResult | None = None
    prepared: str | None = None  # what preparing for selections did, if it was needed
    prepare_problem: str | None = None  # why it could not be done (selections walk then)
    prepare_s: float = 0.0

    def describe(self) -> str:
        """What was done, in a few words, for a selection's report."""
        if self.how == "built":
            return f"built again ({self.reason})"
        if self.how == "updated" and self.updated is not None:
            return (
                f"updated incrementally ({plural(self.updated.reextracted, 'file')} re-extracted)"
            )
        return "it was up to date"


def rebuild_reason(workspace: Workspace, compile_commands: Path | None = None) -> str | None:
    """Why the index must be built again rather than updated, or None."""
    return full_build_reason(workspace, workspace.db_path, compile_commands)


class Preparation:
    """Derives what selections read into a new index's private file before it is
    renamed into place (given to a build or an update as ``derive``), noting what was
    done; a failure leaves the index without it (selections walk what is missing), and
    is recorded in that file so that refreshes of the same index do not try again."""

    def __init__(self, workspace: Workspace) -> None:
        self.source = workspace.source
        self.done: derived.Prepared | None = None
        self.problem: str | None = None
        self.recorded = False  # the failure is written into the file
        self.seconds = 0.0

    def __call__(self, db_path: Path, conn: sqlite3.Connection) -> None:
        started = time.perf_counter()
        try:
            self.done = derived.prepare(self.source, db_path, conn)
        except (OSError, sqlite3.Error) as exc:
            self.problem = str(exc)
            self.recorded = _record_failure(db_path, conn, self.problem)
        self.seconds += time.perf_counter() - started

    def installed(self, db_path: Path, done: Refresh) -> None:
        """The index is in place at ``db_path``: say what was prepared, and hold its
        adjacency for a selection in this process."""
        done.prepare_s, done.prepare_problem = self.seconds, self.problem
        if self.done is not None:
            done.prepared = self.done.what
            adjacency.hold(db_path, self.done.meta, self.done.adjacency)


def _record_failure(db_path: Path, conn: sqlite3.Connection, problem: str) -> bool:
    """Note in the private file at ``db_path`` that preparing it failed, and why;
    whether it could be written."""
    try:
        index = Index(db_path)
        try:
            key = derived_key(index)
        finally:
            index.close()
        write_meta(conn, {PREPARE_FAILED: {"key": key, "problem": problem}})
    except (OSError, sqlite3.Error, TorchTalkError):
        return False
    return True


def failed_before(index: Index) -> str | None:
    """Why preparing this very index (by this code) failed before, if it did."""
    try:
        found = json.loads(index.meta.get(PREPARE_FAILED) or "null")
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or found.get("key") != derived_key(index):
        return None
    return str(found.get("problem") or "unknown")


def refresh_index(
    workspace: Workspace,
    *,
    force: bool = False,
    jobs: int | None = None,
    wait: bool = True,
    show_progress: bool | None = None,
    compile_commands: Path | None = None,
) -> Refresh:
    reason = "--force" if force else rebuild_reason(workspace, compile_commands)
    preparation = Preparation(workspace)
    if reason is None:
        from indexer.update import update_index

        updated = update_index(
            workspace, jobs=jobs, wait=wait, show_progress=show_progress, force=force,
            compile_commands=compile_commands, derive=preparation,
        )  # fmt: skip
        if updated.full_build:  # changed between the two looks: built already
            done = Refresh("built", updated.reason, None, updated)
        else:
            done = Refresh("up to date" if updated.up_to_date else "updated", "", None, updated)
    else:
        from indexer.build import build_index

        built = build_index(
            workspace, jobs=jobs, wait=wait, show_progress=show_progress, force=force,
            compile_commands=compile_commands, derive=preparation,
        )  # fmt: skip
        done = Refresh("built", reason, built)
    if done.how == "up to date":
        prepare_for_selection(workspace, done, wait=wait)
    else:
        preparation.installed(workspace.db_path, done)
    return done


def prepared(workspace: Workspace) -> bool:
    """Whether the index holds what selections read, derived for it by this code."""
    index = Index(workspace.db_path)
    try:
        return derived.is_prepared(index)
    finally:
        index.close()


def _to_prepare(workspace: Workspace, done: Refresh) -> bool:
    """Whether the index is still to be prepared: not prepared, and no failure to
    prepare this same index recorded (then ``done`` says so)."""
    index = Index(workspace.db_path)
    try:
        if derived.is_prepared(index):
            return False
        failed = failed_before(index)
    finally:
        index.close()
    if failed is not None:
        done.prepare_problem = f"{failed} (recorded when this index was prepared before)"
        return False
    return True


def prepare_for_selection(workspace: Workspace, done: Refresh, *, wait: bool = True) -> None:
    """Derive what selections read into the workspace's index when it does not hold it
    (an index made by code that did not, or by another version of the deriving code):
    into a copy, renamed over it under the build lock, as an update would. Asked again
    under the lock: another process may have prepared it meanwhile."""
    if not _to_prepare(workspace, done):
        return
    from indexer.build import build_lock

    db_path = workspace.db_path
    preparation = Preparation(workspace)
    with build_lock(db_path.parent, wait=wait):
        if not _to_prepare(workspace, done):
            return
        with durable.Replacement(db_path, copy_of=db_path, tag="building") as new:
            conn = connect_writable(new.path)
            try:
                preparation(new.path, conn)
            finally:
                conn.close()
            if preparation.done is not None or preparation.recorded:
                new.install()
    preparation.installed(db_path, done)


@dataclass
class Current:
    """The index a selection may read, or why there is none (then every test runs)."""

    index: Index | None
    info: dict = field(default_factory=dict)  # for the report's "index" section
    notes: list[str] = field(default_factory=list)
    everything: str | None = None  # why no current index can be read

    def close(self) -> None:
        if self.index is not None:
            self.index.close()


def current_index(
    workspace: Workspace, changed: Iterable[str], head: str | None, *, update: bool = True
) -> Current:
    """The workspace's index once it describes the tree: compared with the tree (the
    ``changed`` paths, known to differ from ``head``, compared whatever their times say)
    and refreshed by :func:`refresh_index` when it does not, or was made by other code
    (``update`` False: never refreshed, and every test runs). Missing or damaged: no
    index, and why (docs/reliability.md)."""
    changed = list(changed)
    index, problem = _open(workspace)
    if index is None:
        return Current(None, {"exists": False, "problem": problem}, everything=problem)
    try:
        freshness = check_freshness(workspace, index, changed, head)
        rebuild = rebuild_reason(workspace)
    except (sqlite3.DatabaseError, TorchTalkError) as exc:  # damaged past its header
        index.close()
        why = f"the index cannot be used ({exc})"
        return Current(None, {"exists": False, "problem": why}, everything=why)
    if freshness.fresh and rebuild is None:
        return Current(index, {"stale": False})
    stale = freshness.describe() if not freshness.fresh else f"it needs a full build: {rebuild}"
    info: dict = {"stale": True}
    if not update:
        how, after = "updating it was turned off", freshness if not freshness.fresh else None
    else:
        index.close()
        how, after = _refresh(workspace, changed, head)
        index, problem = _open(workspace)
        if index is None:
            return Current(None, {**info, "update": how, "exists": False, "problem": problem},
                           everything=problem)  # fmt: skip
    info.update(update=how, updated=update and after is not None and after.fresh)
    if after is not None and after.fresh:
        return Current(index, info, [f"the index was stale ({stale}); {how}"])
    still = after.describe() if after is not None else stale
    return Current(
        index, info, everything=f"the index is stale ({still}) and {how}: running everything"
    )


def _refresh(
    workspace: Workspace, changed: list[str], head: str | None
) -> tuple[str, Freshness | None]:
    """Refresh the index; how, and its comparison with the tree after (None: failed)."""
    try:
        done = refresh_index(workspace, show_progress=False)
    except (TorchTalkError, OSError, sqlite3.Error) as exc:
        return f"updating it failed ({exc})", None
    how = done.describe()
    if done.prepare_problem:
        how += f"; not prepared for selections ({done.prepare_problem})"
    index, problem = _open(workspace)
    if index is None:
        return f"{how}, but {problem}", None
    try:
        return how, check_freshness(workspace, index, changed, head)
    finally:
        index.close()


def _open(workspace: Workspace) -> tuple[Index | None, str | None]:
    """The index, or None and why there is none usable. A damaged index is no index: the
    selection runs everything saying so, as without one (docs/reliability.md)."""
    from indexer.errors import IndexMissingError

    rebuild = f"run 'torchtalk index build --source {workspace.source}'"
    try:
        return Index(workspace.db_path), None
    except IndexMissingError:
        return None, (
            f"no index of {workspace.source} ({workspace.harness}) at {workspace.db_path}: "
            f"{rebuild}"
        )
    except TorchTalkError as exc:
        return None, f"the index cannot be used ({exc}): {rebuild}"
