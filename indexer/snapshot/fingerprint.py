"""What identifies the code an index was built from: its path, its commit, its content.

``content_fingerprint`` is BLAKE2b over the commit's tree id, the uncommitted diff and the
untracked files' contents: two checkouts of the same code at different paths agree on it,
which is what lets a snapshot built in one checkout be loaded into another.
Git is called as a subprocess (plumbing output is stable and cheaper than GitPython here).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

SHORT_COMMIT = 12  # fixed, so the same commit is always spelled the same way


def git(source: Path, *args: str) -> bytes | None:
    """``git -C source args`` stdout, or None when git fails (not a repository, bad rev)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(source), *args], capture_output=True, check=False, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def source_fingerprint(source: Path) -> str:
    """Hash of the indexed tree's resolved path: equal only for the very same checkout."""
    return hashlib.blake2b(str(Path(source).resolve()).encode(), digest_size=16).hexdigest()


def full_commit(source: Path, rev: str = "HEAD") -> str | None:
    out = git(source, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return out.decode().strip() if out else None


def short_commit(commit: str | None) -> str | None:
    return commit[:SHORT_COMMIT] if commit else None


def content_fingerprint(source: Path) -> str | None:
    """BLAKE2b of HEAD^{tree}, ``git diff HEAD`` and untracked files; None outside git."""
    tree = git(source, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
    top = git(source, "rev-parse", "--show-toplevel")
    if tree is None or top is None:
        return None
    root = Path(top.decode().strip())
    diff = git(
        root, "diff", "HEAD", "--binary", "--full-index", "--no-color", "--no-ext-diff",
        "--no-textconv", "--no-renames",
    )  # fmt: skip
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or untracked is None:
        return None
    digest = hashlib.blake2b(digest_size=20)
    digest.update(b"tree\0" + tree.strip() + b"\0diff\0")
    digest.update(diff)
    for rel in sorted(p for p in untracked.split(b"\0") if p):
        path = root / rel.decode("utf-8", "surrogateescape")
        try:
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        except OSError:
            data = b""
        digest.update(b"\0untracked\0" + rel + b"\0")
        digest.update(hashlib.blake2b(data, digest_size=16).digest())
    return digest.hexdigest()


def is_ancestor(source: Path, ancestor: str, descendant: str = "HEAD") -> bool:
    """Whether ``ancestor`` is reachable from ``descendant``; False if either is unknown."""
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "merge-base", "--is-ancestor", ancestor, descendant],
            capture_output=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def commit_distance(source: Path, ancestor: str, descendant: str = "HEAD") -> int | None:
    """Commits between ``ancestor`` and ``descendant`` (``git rev-list --count A..D``)."""
    out = git(source, "rev-list", "--count", f"{ancestor}..{descendant}")
    return int(out) if out and out.strip().isdigit() else None


def changed_since(source: Path, commit: str) -> set[str] | None:
    """Paths (relative to ``source``) that differ between ``commit`` and the working tree:
    committed since, staged, unstaged, and untracked. None when git cannot tell."""
    diff = git(source, "diff", "--name-only", "--no-renames", "--relative", "-z", commit, "--")
    untracked = git(source, "ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or untracked is None:
        return None
    names = diff.split(b"\0") + untracked.split(b"\0")
    return {name.decode("utf-8", "surrogateescape") for name in names if name}
