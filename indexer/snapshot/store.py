"""The snapshot store: ``<cache>/snapshots/<name>/{index.sqlite,snapshot.json}``.

A snapshot is a frozen copy of an index plus what it was built from. Every change to the
store happens in a hidden temporary directory renamed into place, under a store lock, so
a reader sees a whole snapshot or none; installing one as a workspace's index copies it
beside the index and renames it over, under that index's build lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from indexer import durable
from indexer.build import build_lock
from indexer.changes import detect_changes
from indexer.errors import IndexMissingError, TorchTalkError, UsageError
from indexer.locations import cache_dir
from indexer.query.recorded import RECORD_FILE as RECORD_NAME
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.record.storage import RecordError
from indexer.snapshot.fingerprint import (
    content_fingerprint,
    full_commit,
    short_commit,
    source_fingerprint,
)
from indexer.snapshot.names import validate_name
from indexer.store.db import SCHEMA_VERSION, connect_readonly, connect_writable, read_meta
from indexer.workspace import Workspace

DB_FILE = "index.sqlite"
META_FILE = "snapshot.json"
RECORD_FILE = RECORD_NAME  # the recorded run beside the index, when there is one
# Files of snapshots made before derived data moved into the index (docs/architecture.md,
# "Derived data"): an archive may still hold them; they are dropped, never installed.
LEGACY_FILES = tuple(
    DB_FILE + suffix for suffix in (".adjacency", ".hub", ".witnesses", ".judgments")
)
FORMAT = 1  # of snapshot.json


class SnapshotError(TorchTalkError):
    """A snapshot that is missing, damaged, or does not fit the workspace."""


@dataclass
class SnapshotInfo:
    name: str
    harness: str
    schema_version: int
    source_fingerprint: str
    content_fingerprint: str | None
    git_commit: str | None  # short
    git_commit_full: str | None
    created_at: str
    source_path: str  # where it was built; informational (paths inside are repo-relative)
    index_built_at: str = ""
    manifest: str = ""  # hash of the harness manifest the index was built with
    counts: dict[str, Any] = field(default_factory=dict)
    db_bytes: int = 0
    record: dict[str, Any] = field(default_factory=dict)  # its commit, age, tests; {} if none
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> SnapshotInfo:
        """Parse and check a description: every field of its type and range, so that a
        crafted one is refused at import rather than breaking ``list`` and ``load``."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SnapshotError(f"{where}: not a valid snapshot description ({exc})") from None
        if not isinstance(data, dict):
            raise SnapshotError(
                f"{where}: not a valid snapshot description (a JSON object is expected, "
                f"not {type(data).__name__})"
            )
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        missing = sorted(set(_REQUIRED) - set(known))
        if missing:
            raise SnapshotError(
                f"{where}: not a valid snapshot description (missing {', '.join(missing)})"
            )
        for key, value in known.items():
            problem = _field_problem(key, value)
            if problem:
                raise SnapshotError(f"{where}: not a valid snapshot description ({key} {problem})")
        return cls(**known)


# The description's fields: (types allowed, whether required). Ranges in _field_problem.
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "harness": ((str,), True),
    "schema_version": ((int,), True),
    "source_fingerprint": ((str,), True),
    "content_fingerprint": ((str, type(None)), True),
    "git_commit": ((str, type(None)), True),
    "git_commit_full": ((str, type(None)), True),
    "created_at": ((str,), True),
    "source_path": ((str,), True),
    "index_built_at": ((str,), False),
    "manifest": ((str,), False),
    "counts": ((dict,), False),
    "db_bytes": ((int,), False),
    "record": ((dict,), False),
    "format": ((int,), False),
}
_REQUIRED = tuple(key for key, (_, required) in _FIELDS.items() if required)
_MAX_TEXT = 4096  # no field of a description is longer (paths, hashes, names)


def _field_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the description's ``key``, or None."""
    types, _ = _FIELDS[key]
    if isinstance(value, bool) or not isinstance(value, types):
        wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        return f"must be {wanted}, not {type(value).__name__}"
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return f"is longer than {_MAX_TEXT} characters"
    if key in ("schema_version", "format") and value < 1:
        return "must be at least 1"
    if key == "db_bytes" and value < 0:
        return "must not be negative"
    if key == "created_at" or (key == "index_built_at" and value):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return "must be an ISO 8601 time"
    if key == "counts":
        return _counts_problem(value)
    return None


def _counts_problem(counts: dict) -> str | None:
    for section, value in counts.items():
        if section in ("nodes", "edges"):
            if not isinstance(value, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value.values()
            ):
                return f"[{section!r}] must map kinds to counts"
        elif section == "files" and (isinstance(value, bool) or not isinstance(value, int)):
            return "['files'] must be a count"
    return None


def store_root() -> Path:
    return cache_dir() / "snapshots"


def snapshot_dir(name: str) -> Path:
    return store_root().joinpath(*validate_name(name).split("/"))


@contextlib.contextmanager
def store_lock() -> Iterator[None]:
    """Serialises changes to the store (save, import, delete) across processes."""
    root = store_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _is_snapshot(path: Path) -> bool:
    return (path / META_FILE).is_file()


def read_info(name: str) -> SnapshotInfo:
    directory = snapshot_dir(name)
    if not _is_snapshot(directory):
        known = [info.name for info in list_snapshots()]
        hint = f" (have: {', '.join(known[:10])})" if known else " (the store is empty)"
        raise SnapshotError(f"no snapshot named {name!r}{hint}")
    info = SnapshotInfo.from_json((directory / META_FILE).read_text(encoding="utf-8"), name)
    info.name = name
    return info


def db_of(name: str) -> Path:
    return snapshot_dir(name) / DB_FILE


def list_snapshots() -> list[SnapshotInfo]:
    """Every snapshot in the store, newest first. Damaged entries are skipped."""
    root = store_root()
    found: list[SnapshotInfo] = []
    if not root.is_dir():
        return found
    clean_leftovers()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(root).as_posix()
        if META_FILE in filenames and rel != ".":
            try:
                info = read_info(rel)
            except (TorchTalkError, OSError):
                continue
            found.append(info)
            dirnames[:] = []
    found.sort(key=lambda info: (info.created_at, info.name), reverse=True)
    return found


def check_name_free(name: str) -> None:
    """A name must not nest inside, or contain, another snapshot (deleting one would delete
    the other)."""
    parts = name.split("/")
    root = store_root()
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        if _is_snapshot(root.joinpath(*parts[:depth])):
            raise UsageError(f"snapshot name {name!r} would nest inside snapshot {prefix!r}")
    directory = root.joinpath(*parts)
    if directory.is_dir() and not _is_snapshot(directory) and any(directory.iterdir()):
        raise UsageError(f"snapshot name {name!r} is a group of snapshots, not a snapshot")


# Hidden work directories of the store, named with their process's id: one whose
# process is gone was left by a kill (-9, a full disk's OOM) and is removed by the next
# command that stages or lists (docs/reliability.md).
LEFTOVER_PREFIXES = (".staging-", ".trash-")
OLD_LEFTOVER_S = 3600  # names without a process id (older versions): removed after this


def _work_dir(prefix: str) -> Path:
    root = store_root()
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def clean_leftovers() -> list[str]:
    """Remove the work directories whose process is gone; the names removed."""
    root = store_root()
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        prefix = next((p for p in LEFTOVER_PREFIXES if entry.name.startswith(p)), None)
        if prefix is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and "-" in entry.name[len(prefix) :]:
            if _process_alive(int(pid)):
                continue
        else:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age < OLD_LEFTOVER_S:
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed


def staging_dir() -> Path:
    clean_leftovers()
    return _work_dir(".staging-")


def trash_dir() -> Path:
    return _work_dir(".trash-")


def install_dir(staged: Path, name: str, replace: bool) -> bool:
    """Rename a complete staged directory to ``name``; returns whether one was replaced.
    The caller holds :func:`store_lock`."""
    check_name_free(name)
    final = snapshot_dir(name)
    replaced = False
    if _is_snapshot(final):
        if not replace:
            raise UsageError(f"snapshot {name!r} exists; delete it first or pass --force")
        trash = trash_dir()
        os.replace(final, trash / "old")
        replaced = True
        try:
            durable.replace(staged, final)
        finally:
            shutil.rmtree(trash, ignore_errors=True)
    else:
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.is_dir():
            final.rmdir()  # an empty leftover directory
        durable.replace(staged, final)
    return replaced


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def save_snapshot(workspace: Workspace, name: str, *, force: bool = False) -> SnapshotInfo:
    """Freeze the workspace's index under ``name`` (replacing a snapshot of that name).

    The index must match the tree (HEAD and file contents); ``force`` saves a stale one,
    recording no content fingerprint so that it never passes for the tree's exact state.
    """
    validate_name(name)
    db_path = workspace.db_path
    conn = connect_readonly(db_path)  # raises IndexMissingError, or for a wrong schema
    try:
        meta = read_meta(conn)
        head = full_commit(workspace.source)
        stale = []
        if (meta.get("git_commit") or None) != head:
            stale.append(
                f"it was built at commit {short_commit(meta.get('git_commit')) or '-'}, "
                f"HEAD is {short_commit(head) or '-'}"
            )
        changes = detect_changes(workspace.source, workspace.manifest, conn)
        if changes:
            stale.append(
                f"{changes.count} files differ from the tree (e.g. "
                f"{(changes.modified + changes.added + changes.removed)[0]})"
            )
        if stale and not force:
            raise SnapshotError(
                f"the index of {workspace.source} is stale: {'; '.join(stale)}; run "
                "'torchtalk index update' first, or pass --force to snapshot it as it is"
            )
        counts = {
            "files": int(meta.get("files", 0) or 0),
            "nodes": json.loads(meta.get("counts", "{}")).get("nodes", {}),
            "edges": json.loads(meta.get("counts", "{}")).get("edges", {}),
        }
        with store_lock():
            check_name_free(name)
            staged = staging_dir()
            try:
                shutil.copyfile(db_path, staged / DB_FILE)
                _fsync(staged / DB_FILE)
                info = SnapshotInfo(
                    name=name,
                    harness=workspace.harness,
                    schema_version=SCHEMA_VERSION,
                    source_fingerprint=source_fingerprint(workspace.source),
                    content_fingerprint=None if stale else content_fingerprint(workspace.source),
                    git_commit=short_commit(meta.get("git_commit") or None),
                    git_commit_full=meta.get("git_commit") or None,
                    created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    source_path=str(workspace.source),
                    index_built_at=meta.get("built_at", ""),
                    manifest=hashlib.blake2b(
                        meta.get("manifest", "").encode(), digest_size=16
                    ).hexdigest(),
                    counts=counts,
                    db_bytes=(staged / DB_FILE).stat().st_size,
                )
                info.record = _stage_record(record_path_for(db_path), staged / RECORD_FILE)
                (staged / META_FILE).write_text(info.to_json(), encoding="utf-8")
                install_dir(staged, name, replace=True)
            finally:
                shutil.rmtree(staged, ignore_errors=True)
        return info
    finally:
        conn.close()


def record_summary(path: Path) -> dict[str, Any]:
    """What a snapshot says of its record: SnapshotError when the record is unusable."""
    try:
        summary = RecordedRuns.open(path).summary()
    except RecordError as exc:
        raise SnapshotError(str(exc)) from None
    keys = ("commit", "created_at", "tests", "test_files", "ops", "torch")
    return {key: summary[key] for key in keys}


def _stage_record(record: Path, staged: Path) -> dict[str, Any]:
    """Copy the workspace's record (checked first) into a snapshot being made."""
    if not record.is_file():
        return {}
    summary = record_summary(record)
    shutil.copyfile(record, staged)
    _fsync(staged)
    return summary


def delete_snapshot(name: str) -> None:
    with store_lock():
        read_info(name)
        final = snapshot_dir(name)
        trash = trash_dir()
        os.replace(final, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
        parent = final.parent
        while parent != store_root() and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def check_fits(workspace: Workspace, info: SnapshotInfo) -> None:
    """A snapshot of another harness or schema cannot become this workspace's index."""
    if info.schema_version != SCHEMA_VERSION:
        raise SnapshotError(
            f"snapshot {info.name!r} has schema version {info.schema_version}, this torchtalk "
            f"reads {SCHEMA_VERSION}; rebuild with 'torchtalk index build'"
        )
    if info.harness != workspace.harness:
        raise SnapshotError(
            f"snapshot {info.name!r} is of harness {info.harness!r}, the workspace uses "
            f"{workspace.harness!r} (pass --harness {info.harness} to load it there)"
        )


def _check_db(path: Path, name: str) -> dict[str, str]:
    try:
        conn = connect_readonly(path)
    except IndexMissingError:
        raise SnapshotError(f"snapshot {name!r} has no {DB_FILE}") from None
    try:
        return read_meta(conn)
    finally:
        conn.close()


def match_reason(workspace: Workspace, info: SnapshotInfo) -> str | None:
    """Why ``info`` fits the workspace's tree (content, else path), or None."""
    if info.content_fingerprint and info.content_fingerprint == content_fingerprint(
        workspace.source
    ):
        return "same content"
    if info.source_fingerprint == source_fingerprint(workspace.source):
        return "same checkout path"
    return None


def install_snapshot(workspace: Workspace, info: SnapshotInfo, *, wait: bool = True) -> Path:
    """Make a copy of the snapshot the workspace's index, atomically, with this tree's path."""
    check_fits(workspace, info)
    source_db = db_of(info.name)
    _check_db(source_db, info.name)
    db_path = workspace.db_path
    with (
        build_lock(db_path.parent, wait=wait),
        durable.Replacement(db_path, copy_of=source_db, tag="building") as new,
    ):
        conn = connect_writable(new.path)
        try:
            values = [
                ("source_path", str(workspace.source)),
                ("harness_chosen_by", workspace.chosen_by),
                ("loaded_snapshot", info.name),
            ]
            conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values)
        finally:
            conn.close()
        _install_record(snapshot_dir(info.name) / RECORD_FILE, record_path_for(db_path))
        new.install()
    return db_path


def _install_record(record: Path, target: Path) -> None:
    """The snapshot's record becomes the workspace's (checked, then renamed into place);
    a snapshot without one leaves the workspace's own record as it is."""
    if not record.is_file():
        return
    record_summary(record)
    with record.open("rb") as source, durable.atomic_output(target) as out:
        shutil.copyfileobj(source, out)


def snapshot_for_update(workspace: Workspace, name: str) -> Path:
    """The database of snapshot ``name``, checked to fit the workspace, as an update base."""
    info = read_info(name)
    check_fits(workspace, info)
    path = db_of(name)
    _check_db(path, name)
    return path
