"""Renames that survive a crash: the file's data and then the directory entry on disk.

``os.replace`` is atomic for readers, but the new directory entry lives in the page cache
until the directory itself is synced: after a power loss the old file (or none) may be
back. Every index, snapshot and archive is written to a private file, synced, renamed
into place, and then its directory is synced.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


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


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a private file in its directory, synced, renamed.
    An existing file keeps its permission bits; a new one gets the umask's, as ``open``
    would give it (a report is read by whoever reads the CI's artifacts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_problem(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (checked before the work that produces
    it), or None: a directory there, a file where a directory must be, no permission."""
    if path.is_dir():
        return "is a directory"
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None
    return None
