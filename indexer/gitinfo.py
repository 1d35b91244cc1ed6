"""What git says about a directory: the repository it is in, and that repository's commit.

Asked of the git command line, as every other git question TorchTalk has (the diff, the
tree's freshness, snapshots' ancestry): one tool, and no library to import at start-up.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT_MISSING = "git is not installed (or not on PATH): TorchTalk reads the tree's changes with it"


def git_missing() -> bool:
    """Whether no ``git`` command can be found on PATH."""
    import shutil  # here: every command imports this module, few ask

    return shutil.which("git") is None


def _git(directory: Path, *args: str) -> str | None:
    """``git args`` run in ``directory``: its output, or None when git fails or is absent."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repo_root(directory: Path) -> Path | None:
    """The top of the git work tree ``directory`` is in, or None outside any repository."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    return Path(top).resolve() if top else None


def head_commit(source: Path) -> str | None:
    """HEAD's full hash, or None when ``source`` is not a repository or has no commit."""
    head = _git(source, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    return head if head and len(head) >= 40 else None
