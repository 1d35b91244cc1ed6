"""``snapshot load --nearest``: the snapshot closest to the tree, and which tier found it.

Tiers, first hit wins: the same content (tree plus uncommitted changes), the same commit,
then the nearest ancestor commit (fewest commits between it and HEAD). A snapshot of
another harness or schema version is never a candidate. A shallow clone may not have the
ancestor commits; those snapshots simply do not match.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.snapshot.fingerprint import (
    commit_distance,
    content_fingerprint,
    full_commit,
    is_ancestor,
    short_commit,
)
from indexer.snapshot.store import SnapshotError, SnapshotInfo, list_snapshots
from indexer.store.db import SCHEMA_VERSION
from indexer.workspace import Workspace

TIER_CONTENT = "exact content match"
TIER_COMMIT = "exact commit match"
TIER_ANCESTOR = "nearest ancestor commit"


@dataclass
class Nearest:
    info: SnapshotInfo
    tier: str
    detail: str


def find_nearest(workspace: Workspace) -> Nearest:
    """The best snapshot for the workspace, or a SnapshotError saying what was tried."""
    candidates = [
        info
        for info in list_snapshots()  # newest first: ties go to the most recent snapshot
        if info.harness == workspace.harness and info.schema_version == SCHEMA_VERSION
    ]
    content = content_fingerprint(workspace.source)
    for info in candidates:
        if content and info.content_fingerprint == content:
            return Nearest(info, TIER_CONTENT, f"content {content[:12]}")
    head = full_commit(workspace.source)
    if head:
        for info in candidates:
            if info.git_commit_full == head:
                return Nearest(info, TIER_COMMIT, f"commit {short_commit(head)}")
        best: tuple[int, SnapshotInfo] | None = None
        distances: dict[str, int | None] = {}
        for info in candidates:
            commit = info.git_commit_full
            if not commit:
                continue
            if commit not in distances:
                ancestor = is_ancestor(workspace.source, commit, head)
                distances[commit] = (
                    commit_distance(workspace.source, commit, head) if ancestor else None
                )
            distance = distances[commit]
            if distance is not None and (best is None or distance < best[0]):
                best = (distance, info)
        if best is not None:
            distance, info = best
            return Nearest(
                info,
                TIER_ANCESTOR,
                f"commit {info.git_commit}, {distance} commit(s) behind HEAD {short_commit(head)}",
            )
    raise SnapshotError(
        f"no snapshot fits {workspace.source}: none of the {len(candidates)} snapshot(s) of "
        f"harness {workspace.harness!r} has the same content, the same commit "
        f"({short_commit(head) or 'no commit'}) or an ancestor commit"
    )
