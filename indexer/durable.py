"""Files written whole, over nothing but what we write: temp file, sync, rename, sync.

``os.replace`` is atomic for readers, but the new directory entry lives in the page cache
until the directory itself is synced: after a power loss the old file (or none) may be
back. Every index, snapshot, archive, report and record is written to a private file,
synced, renamed into place, and then its directory is synced.

A rename replaces whatever the path names: a symlink (which becomes a regular file, its
target untouched), a FIFO another program reads, ``/dev/full`` as root. So an output path
must be absent or a regular file; anything else is refused with the reason
(docs/reliability.md, "Outputs").
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class UnsafeTarget(OSError):
    """A path an output may not replace: a symlink, FIFO, device, socket or directory."""


def fsync_directory(directory: Path) -> None:
    """Flush ``directory``'s entries to disk (a no-op where directories cannot be opened)."""
    try:
        handle = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename stands
    finally:
        os.close(handle)


def replace(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target`` (same directory or file system) and sync the
    directories whose entries changed."""
    os.replace(source, target)
    fsync_directory(target.parent)
    if Path(source).parent != target.parent:
        fsync_directory(Path(source).parent)


def target_problem(path: Path) -> str | None:
    """Why ``path`` may not be replaced by an output (it is not absent or a regular
    file), or None."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # reported by write_problem as the parent that is a file
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "is a symbolic link (name its target instead)"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a regular file"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


def _install(tmp: Path, path: Path, before: tuple[int, int] | None) -> None:
    """Put ``tmp`` at ``path`` when ``path`` is still what it was when we checked it
    (absent, or the same regular file): never over what appeared meanwhile."""
    if before is None:
        # link() fails if anything took the name: no replacing what we did not check.
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UnsafeTarget(f"{path}: appeared while it was being written") from None
        except OSError:  # a file system without hard links: rename after a last look
            if _identity(path) is not None:
                raise UnsafeTarget(f"{path}: appeared while it was being written") from None
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
    else:
        if _identity(path) != before or target_problem(path):
            raise UnsafeTarget(f"{path}: was replaced while it was being written")
        os.replace(tmp, path)
    fsync_directory(path.parent)


class Replacement:
    """A private file beside ``target`` to fill (empty, or a copy of ``copy_of``), then
    :meth:`install`: synced and renamed over ``target``, which must still be what it was
    when this began (absent, or the same regular file: only over what we created). Left
    without installing, or by an exception as a context manager, it is removed. The one
    temp-file-sync-rename sequence: index builds, updates, refreshes, snapshot loads and
    every output (:func:`atomic_output`) go through it."""

    def __init__(self, target: Path, *, copy_of: Path | None = None, tag: str = "") -> None:
        self.target = Path(target)
        problem = target_problem(self.target)
        if problem:
            raise UnsafeTarget(f"{self.target}: {problem}; not replaced")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._before = _identity(self.target)
        # ``tag`` keeps a writer's leftovers findable (``index.sqlite.building-*``).
        name = f"{self.target.name}.{tag}-" if tag else f".{self.target.name}."
        self.path = self.target.parent / f"{name}{os.getpid()}.{os.urandom(4).hex()}"
        handle = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.close(handle)
        self.installed = False
        if copy_of is not None:
            import shutil  # here: most readers of this module never copy

            try:
                shutil.copyfile(copy_of, self.path)  # into our file (sendfile where it can)
            except BaseException:
                self.discard()
                raise

    def install(self, *, keep_mode: bool = False) -> Path:
        """Sync the private file and rename it over the target (``keep_mode``: with the
        permission bits the target had)."""
        with open(self.path, "rb+") as handle:
            os.fsync(handle.fileno())
        if keep_mode and self._before is not None:
            os.chmod(self.path, os.lstat(self.target).st_mode & 0o7777)
        _install(self.path, self.target, self._before)
        self.installed = True
        return self.target

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)  # ours (O_EXCL): gone already after an install

    def __enter__(self) -> Replacement:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self.installed:
            self.discard()


@contextlib.contextmanager
def atomic_output(path: Path, *, follow_symlinks: bool = False) -> Iterator[BinaryIO]:
    """A private file to write ``path``'s new content to; on a clean exit it is synced
    and renamed over ``path``, on an exception removed. ``path`` must be absent or a
    regular file (a symlink only with ``follow_symlinks``: its target is written). An
    existing file keeps its permission bits; a new one gets the umask's, as ``open``
    would give it (a report is read by whoever reads the CI's artifacts)."""
    path = Path(path)
    if follow_symlinks and path.is_symlink():
        path = path.resolve()
    with Replacement(path) as replacement:
        with open(replacement.path, "wb") as out:
            yield out
        replacement.install(keep_mode=True)


def write_atomic(path: Path, data: bytes, *, follow_symlinks: bool = False) -> None:
    """Replace ``path`` with ``data`` whole (see :func:`atomic_output`)."""
    with atomic_output(path, follow_symlinks=follow_symlinks) as out:
        out.write(data)


def write_problem(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (checked before the work that produces
    it), or None: a directory, symlink, FIFO or device there, a file where a directory
    must be, no permission."""
    problem = target_problem(path)
    if problem:
        return problem
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None
    return None
