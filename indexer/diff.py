"""What changed since the merge-base with BASE: committed, staged, unstaged and untracked.

Both sides of every hunk are kept, so a deletion (old lines only) or a rename (old path)
is placed as surely as an addition. Paths are relative to the source tree; changes
outside it belong to another project and are not ours to select for.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from indexer.errors import UsageError
from indexer.gitinfo import GIT_MISSING

DEFAULT_BASES = ("origin/HEAD", "main", "master")

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True, slots=True)
class Hunk:
    """Old lines [old_start, old_start + old_count) became new lines [new_start, ...).

    A count of 0 means that side is empty; its start is then the line *after which* the
    other side's lines sit (git's convention), which may be 0.
    """

    old_start: int
    old_count: int
    new_start: int
    new_count: int

    @property
    def old_lines(self) -> range:
        return range(self.old_start, self.old_start + self.old_count)

    @property
    def new_lines(self) -> range:
        return range(self.new_start, self.new_start + self.new_count)


@dataclass
class FileChange:
    path: str  # new path; the old path for a deletion
    old_path: str | None  # None for an added or untracked file
    status: str  # added, untracked, deleted, modified, renamed, copied, type-changed
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False

    @property
    def exists_after(self) -> bool:
        return self.status != "deleted"

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for p in (self.path, self.old_path) if p))


def run_git(source: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """``git -C source args...``; a UsageError naming the command when it fails (unless
    ``check`` is off)."""
    try:
        result = subprocess.run(
            ["git", "-c", "core.quotepath=off", "-C", str(source), *args],
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        raise UsageError(GIT_MISSING) from None
    if check and result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {args[0]} failed in {source}: {message[-1] if message else '?'}")
    return result


def _verify(source: Path, rev: str) -> str | None:
    result = run_git(source, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", check=False)
    if result.returncode != 0:
        return None
    return result.stdout.decode().strip() or None


@dataclass(frozen=True)
class Base:
    rev: str  # as given, or the default branch found
    commit: str  # the rev's commit
    merge_base: str  # what the diff is taken against
    head: str
    chosen_by: str  # "--base" or "default branch"


def resolve_base(source: Path, rev: str | None = None) -> Base:
    """The merge-base of ``rev`` (default: origin/HEAD, then main, then master) with HEAD."""
    top = run_git(source, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise UsageError(f"{source} is not inside a git repository")
    head = _verify(source, "HEAD")
    if head is None:
        raise UsageError(f"{source} has no commit yet: nothing to diff against")
    if rev:
        commit = _verify(source, rev)
        if commit is None:
            raise UsageError(f"unknown base revision {rev!r} in {source}")
        chosen_by = "--base"
    else:
        for candidate in DEFAULT_BASES:
            commit = _verify(source, candidate)
            if commit is not None:
                rev = candidate
                break
        else:
            raise UsageError(
                f"no default base in {source}: none of {', '.join(DEFAULT_BASES)} exists; "
                "pass a base revision"
            )
        chosen_by = "default branch"
    merged = run_git(source, "merge-base", commit, head, check=False)
    if merged.returncode != 0:
        raise UsageError(f"{rev!r} and HEAD have no common ancestor in {source}")
    return Base(rev, commit, merged.stdout.decode().strip(), head, chosen_by)


def _unquote(raw: bytes) -> str:
    """A path as git prints it: C-quoted ("a\\tb", octal escapes) when it needs to be."""
    if not raw.startswith(b'"'):
        return raw.decode("utf-8", errors="surrogateescape")
    body = raw[1:-1]
    out = bytearray()
    i = 0
    simple = {
        b"n": 10,
        b"t": 9,
        b'"': 34,
        b"\\": 92,
        b"a": 7,
        b"b": 8,
        b"f": 12,
        b"r": 13,
        b"v": 11,
    }
    while i < len(body):
        char = body[i : i + 1]
        if char == b"\\":
            nxt = body[i + 1 : i + 2]
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
            if nxt.isdigit():
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out += char
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _strip_prefix(raw: bytes, prefix: bytes) -> str | None:
    if raw == b"/dev/null":
        return None
    path = _unquote(raw)
    return path[len(prefix) :] if path.startswith(prefix.decode()) else path


def _header_paths(rest: bytes) -> tuple[str, str]:
    """Paths of a ``diff --git a/X b/Y`` header; X == Y unless renamed (rename lines say so)."""
    if rest.startswith(b'"'):
        end = rest.index(b'" ', 1) + 1 if b'" ' in rest else len(rest)
        return _strip_prefix(rest[:end], b"a/") or "", _strip_prefix(rest[end + 1 :], b"b/") or ""
    half = (len(rest) - 1) // 2
    if rest[half : half + 3] == b" b/":
        return _strip_prefix(rest[:half], b"a/") or "", _strip_prefix(rest[half + 1 :], b"b/") or ""
    first, _, second = rest.partition(b" b/")
    return _strip_prefix(first, b"a/") or "", _strip_prefix(b"b/" + second, b"b/") or ""


def parse_patch(patch: bytes) -> list[FileChange]:
    """Files and hunks of ``git diff -U0`` output (a/ and b/ prefixes, renames detected)."""
    changes: list[FileChange] = []
    current: FileChange | None = None
    old: str | None = None
    for line in patch.split(b"\n"):
        if line.startswith(b"diff --git "):
            current = FileChange(path="", old_path="", status="modified")
            changes.append(current)
            old = None
            # Paths also come from ---/+++ or rename lines; this header is the fallback
            # for changes with no content lines (mode-only, empty files, binaries).
            current.old_path, current.path = _header_paths(line[len(b"diff --git ") :])
            continue
        if current is None:
            continue
        if line.startswith(b"@@"):
            match = _HUNK.match(line)
            if match:
                a, b, c, d = match.groups()
                current.hunks.append(
                    Hunk(int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d))
                )
        elif current.hunks:
            continue  # content lines
        elif line.startswith(b"new file mode"):
            current.status = "added"
        elif line.startswith(b"deleted file mode"):
            current.status = "deleted"
        elif line.startswith(b"rename from "):
            current.status = "renamed"
            current.old_path = _unquote(line[len(b"rename from ") :])
        elif line.startswith(b"rename to "):
            current.path = _unquote(line[len(b"rename to ") :])
        elif line.startswith(b"copy from "):
            current.status = "copied"
            current.old_path = _unquote(line[len(b"copy from ") :])
        elif line.startswith(b"copy to "):
            current.path = _unquote(line[len(b"copy to ") :])
        elif line.startswith(b"new mode") and current.status == "modified":
            current.status = "mode-changed"
        elif line.startswith(b"Binary files ") or line.startswith(b"GIT binary patch"):
            current.binary = True
        elif line.startswith(b"--- "):
            old = _strip_prefix(line[4:].rstrip(b"\t"), b"a/")
        elif line.startswith(b"+++ "):
            new = _strip_prefix(line[4:].rstrip(b"\t"), b"b/")
            if old is not None:
                current.old_path = old
            if new is not None:
                current.path = new
    for change in changes:
        if change.status == "added":
            change.old_path = None
        elif change.status == "deleted":
            change.path = change.old_path or change.path
        elif change.status == "mode-changed" and change.hunks:
            change.status = "modified"
    return changes


@dataclass
class Diff:
    """The change set of a source tree against a base, with access to both sides' text."""

    source: Path
    base: Base
    files: list[FileChange]

    @cached_property
    def _old_cache(self) -> dict[str, bytes | None]:
        return {}

    def old_bytes(self, path: str) -> bytes | None:
        """The file at the merge-base (``git show``), or None if it did not exist there."""
        if path not in self._old_cache:
            result = run_git(self.source, "show", f"{self.base.merge_base}:./{path}", check=False)
            self._old_cache[path] = result.stdout if result.returncode == 0 else None
        return self._old_cache[path]

    def new_bytes(self, path: str) -> bytes | None:
        """The file in the working tree, or None if it is gone (or not a regular file)."""
        full = self.source / path
        try:
            return full.read_bytes() if full.is_file() else None
        except OSError:
            return None

    def old_side(self, change: FileChange) -> bytes | None:
        return self.old_bytes(change.old_path) if change.old_path else None

    def new_side(self, change: FileChange) -> bytes | None:
        return None if change.status == "deleted" else self.new_bytes(change.path)

    @property
    def paths(self) -> list[str]:
        return sorted({path for change in self.files for path in change.paths})


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def read_diff(source: Path, base: str | None = None) -> Diff:
    """Every change of ``source`` (committed since the merge-base, staged, unstaged, and
    untracked files) against ``base``'s merge-base with HEAD."""
    resolved = resolve_base(source, base)
    patch = run_git(
        source,
        "diff",
        "--relative",
        "-M",
        "-U0",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        resolved.merge_base,
        "--",
    ).stdout
    changes = parse_patch(patch)
    untracked = run_git(source, "ls-files", "-z", "--others", "--exclude-standard").stdout
    diff = Diff(source, resolved, changes)
    for raw in untracked.split(b"\0"):
        if not raw:
            continue
        path = raw.decode("utf-8", errors="surrogateescape")
        data = diff.new_bytes(path)
        change = FileChange(path=path, old_path=None, status="untracked")
        if data is None or b"\0" in data[:8192]:
            change.binary = True
        elif data:
            change.hunks.append(Hunk(0, 0, 1, _line_count(data)))
        changes.append(change)
    changes.sort(key=lambda change: change.path)
    return diff
