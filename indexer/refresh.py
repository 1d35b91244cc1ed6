"""``torchtalk index build``: make the index describe the tree, doing no more than needed.

An index that already describes the tree is left alone; one an incremental update can
bring up to date is updated; anything else (no index, another schema, manifest or
extraction code) is built again. ``force`` always builds again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from indexer.build import BuildResult, build_index
from indexer.update import UpdateResult, full_build_reason, update_index
from indexer.workspace import Workspace


@dataclass
class Refresh:
    how: str  # "up to date", "updated" or "built"
    reason: str  # why it was built again ("" unless built)
    built: BuildResult | None = None
    updated: UpdateResult | None = None


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
        if not updated.full_build:
            return Refresh("up to date" if updated.up_to_date else "updated", "", None, updated)
        reason = updated.reason  # changed between the two looks: built already
        return Refresh("built", reason, None, updated)
    built = build_index(
        workspace, jobs=jobs, wait=wait, show_progress=show_progress, force=force,
        compile_commands=compile_commands,
    )  # fmt: skip
    return Refresh("built", reason, built)
