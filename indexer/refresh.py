"""Make the index describe the tree, doing no more than needed: the one refresh policy.

``torchtalk index build``, and the step before every selection (``torchtalk select``,
the pytest plugin, the audit: :func:`current_index`), use it. An index that already
describes the tree is left alone; one an incremental update can bring up to date is
updated; anything else (no index, another schema, manifest or extraction code: see
``indexer.update.full_build_reason``, the one place that decides) is built again.
``force`` always builds again. What selections read beside the index is made here too,
after the build or update (``indexer.select.derived``): selections write nothing
(docs/selection.md, "A current index").
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from indexer.build import BuildResult, build_index
from indexer.errors import TorchTalkError
from indexer.query.freshness import Freshness, check_freshness
from indexer.query.index import Index
from indexer.select import derived
from indexer.update import UpdateResult, full_build_reason, update_index
from indexer.wording import plural
from indexer.workspace import Workspace


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
    if reason is None:
        updated = update_index(
            workspace, jobs=jobs, wait=wait, show_progress=show_progress, force=force,
            compile_commands=compile_commands,
        )  # fmt: skip
        if updated.full_build:  # changed between the two looks: built already
            done = Refresh("built", updated.reason, None, updated)
        else:
            done = Refresh("up to date" if updated.up_to_date else "updated", "", None, updated)
    else:
        built = build_index(
            workspace, jobs=jobs, wait=wait, show_progress=show_progress, force=force,
            compile_commands=compile_commands,
        )  # fmt: skip
        done = Refresh("built", reason, built)
    if done.how != "up to date" or not prepared(workspace):
        prepare_for_selection(workspace, done)
    return done


def prepared(workspace: Workspace) -> bool:
    """Whether the walk past the hub kept for selections is this index's."""
    from indexer.select.hub import load

    index = Index(workspace.db_path)
    try:
        return load(index) is not None
    finally:
        index.close()


def prepare_for_selection(workspace: Workspace, done: Refresh) -> None:
    """Make what selections read beside the index (chains seeded after a build and an
    update alike); a failure leaves the index standing and selections to walk what is missing."""
    started = time.perf_counter()
    try:
        done.prepared = derived.prepare(workspace)
    except (OSError, sqlite3.Error) as exc:
        done.prepare_problem = str(exc)
    done.prepare_s = time.perf_counter() - started


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
