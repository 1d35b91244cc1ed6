"""What git says about a source tree: its commit, and whether it is a repository at all."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from indexer.errors import UsageError

if TYPE_CHECKING:
    import git

# gitpython is imported on first use: it costs ~0.1 s, which every CLI command (and the MCP
# server's first answer) would otherwise pay at start-up.


def open_repo(source: Path) -> git.Repo:
    import git

    try:
        return git.Repo(source, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(f"{source} is not inside a git repository") from None


def head_commit(source: Path) -> str | None:
    """HEAD's full hash, or None when ``source`` is not a repository or has no commit."""
    import git

    try:
        repo = git.Repo(source, search_parent_directories=True)
        return repo.head.commit.hexsha
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return None
