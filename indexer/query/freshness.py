"""Whether an index still describes the tree it was built from.

The index records each file's content hash, the commit it was built at and when. The
files that can disagree are those changed since the index's commit (committed, staged,
unstaged, untracked), those a caller already knows changed (a selection's diff), and
those written after the index was built (an index built from a dirty tree, then
reverted); each is hashed and compared, so the check costs a stat per indexed file and a
hash per candidate, not a hash per file. Selection (``indexer.select.staleness``) and the
MCP server (``get_status``, a note on stale answers) ask it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from indexer.code_key import OTHER_CODE, extraction_code_key
from indexer.extract.discover import wanted_language
from indexer.extract.pipeline import content_hash
from indexer.paths import is_utf8, printable
from indexer.query.index import Index
from indexer.wording import plural
from indexer.workspace import Workspace

SHOWN = 5
MTIME_SLACK_S = 2.0  # built_at has whole seconds; file systems round mtimes too


@dataclass
class Freshness:
    stale: list[str] = field(default_factory=list)  # paths the index disagrees on
    problem: str | None = None  # a reason the comparison itself cannot be trusted
    checked_at: float = 0.0  # wall time the comparison started

    @property
    def fresh(self) -> bool:
        return not self.stale and self.problem is None

    def describe(self) -> str:
        if self.problem:
            return self.problem
        shown = ", ".join(printable(path) for path in self.stale[:SHOWN]) + (
            " ..." if len(self.stale) > SHOWN else ""
        )
        differ = "differs" if len(self.stale) == 1 else "differ"
        return f"{plural(len(self.stale), 'changed file')} {differ} from the index ({shown})"


def _git_paths(source: Path, *args: str) -> list[str] | None:
    """The NUL-separated paths a git command prints (``-z``), or None when it fails."""
    result = subprocess.run(
        ["git", "-c", "core.quotepath=off", "-C", str(source), *args],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        return None
    return [p.decode("utf-8", "surrogateescape") for p in result.stdout.split(b"\0") if p]


def _changed_since(source: Path, commit: str) -> list[str] | None:
    return _git_paths(
        source, "diff", "--relative", "--name-only", "-z", "--no-renames", commit, "--"
    )


def _untracked(source: Path) -> list[str] | None:
    return _git_paths(source, "ls-files", "-z", "--others", "--exclude-standard")


def _written_since(
    source: Path, built_at: str | None, rows: list[tuple], since: float | None = None
) -> list[str]:
    """Indexed files modified after (or within a moment before) the index was built, or
    the previous check (``since``), whichever is later."""
    if not built_at:
        return [row[0] for row in rows]
    try:
        cutoff = datetime.fromisoformat(built_at).timestamp() - MTIME_SLACK_S
    except ValueError:
        return [row[0] for row in rows]
    if since is not None:
        cutoff = max(cutoff, since - MTIME_SLACK_S)
    recent = []
    root = str(source) + os.sep
    for path, _, _ in rows:
        try:
            if os.stat(root + path).st_mtime >= cutoff:
                recent.append(path)
        except OSError:
            recent.append(path)  # gone: the comparison below says so
    return recent


def check_freshness(
    workspace: Workspace,
    index: Index,
    changed: Iterable[str] = (),
    head: str | None = None,
    previous: Freshness | None = None,
) -> Freshness:
    """Whether the index describes the tree's files. ``changed`` are paths known to differ
    from ``head`` (a diff against HEAD); without them (``head`` None) the tree is asked
    what differs from the index's commit, untracked files included. ``previous``, a check
    of this same index: files written before it and found matching then are not hashed
    again (a fresh clone's files are all newer than its index: each check would hash
    every one)."""
    freshness = Freshness(checked_at=time.time())
    if index.meta.get("manifest") not in (None, workspace.manifest.fingerprint()):
        freshness.problem = "the index was built with a different harness manifest"
        return freshness
    if index.meta.get("extraction_code") not in (None, extraction_code_key()):
        freshness.problem = OTHER_CODE  # its facts are not what this code reads the tree as
        return freshness
    paths = set(changed)
    commit = index.meta.get("git_commit") or ""
    if commit and (head is None or commit != head):
        differing = _changed_since(workspace.source, commit)
        if differing is None:
            freshness.problem = f"the index's commit {commit[:12]} is not in this repository"
            return freshness
        paths.update(differing)
    if head is None:
        untracked = _untracked(workspace.source)
        if untracked is None:
            freshness.problem = f"git cannot list the untracked files of {workspace.source}"
            return freshness
        paths.update(untracked)
    all_rows = index.conn.execute("SELECT path, sha, error FROM files").fetchall()
    last_check = None
    if previous is not None and previous.problem is None and previous.checked_at:
        last_check = previous.checked_at
        paths.update(previous.stale)
    built_at = index.meta.get("built_at")
    paths.update(_written_since(workspace.source, built_at, all_rows, last_check))
    rows = {path: (sha, error) for path, sha, error in all_rows if path in paths}
    for path in sorted(paths):
        if not is_utf8(path):
            continue  # never indexed: the build lists it among the tree's problems
        full = workspace.source / path
        indexed = wanted_language(path, workspace.manifest) is not None
        try:
            exists = stat.S_ISREG(os.lstat(full).st_mode)  # a file, not a link to one
        except (FileNotFoundError, NotADirectoryError):
            exists = False
        except OSError:  # cannot even be looked at (an unreadable directory)
            freshness.stale.append(path)
            continue
        if path in rows and not (exists and indexed):
            freshness.stale.append(path)  # gone from the tree, still in the index
        elif exists and indexed:
            if path not in rows:
                freshness.stale.append(path)
                continue
            sha, error = rows[path]
            if not sha and error:
                continue  # recorded as too large or unreadable: no hash to compare
            try:
                data = full.read_bytes()
            except OSError:
                continue
            if content_hash(data) != sha:
                freshness.stale.append(path)
    return freshness
