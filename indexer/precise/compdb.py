"""Finding a tree's compile database, and reading its commands.

Where a compile database comes from, in order:

1. ``--compile-commands PATH``: a ``compile_commands.json``, or a build directory holding
   one or a ``build.ninja``;
2. ``compile_commands.json`` at the tree's root (CMake's ``CMAKE_EXPORT_COMPILE_COMMANDS``,
   PyTorch's ``setup.py``);
3. each build directory the harness names (``[precise] build_dirs``, globs relative to the
   root): its ``compile_commands.json``, else ``ninja -t compdb`` over its ``build.ninja``
   (a torch extension built with ``BuildExtension`` leaves one in ``build/temp.*``).

Nothing found is not an error: precise mode is off, and the reason says where we looked.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from indexer.errors import UsageError
from indexer.harness import Manifest

DATABASE_FILE = "compile_commands.json"
NINJA_FILE = "build.ninja"
NINJA_TIMEOUT_S = 60


@dataclass(frozen=True)
class CompileCommand:
    """One translation unit: its file (absolute), working directory and arguments, the
    compiler's own name first."""

    file: str
    directory: str
    arguments: tuple[str, ...]


@dataclass
class CompileDatabase:
    origin: str  # what was read: a path, or "ninja -t compdb in DIR"
    commands: list[CompileCommand] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # files it names that do not exist
    outside: int = 0  # commands for files outside the source tree
    note: str = ""  # what the user should know about its coverage


@dataclass
class Discovery:
    database: CompileDatabase | None
    reason: str = ""  # why there is none


def discover_database(source: Path, manifest: Manifest, explicit: Path | None = None) -> Discovery:
    """The compile database of ``source``, or why there is none.

    An explicit path that holds no database is the user's error (UsageError); a tree
    without one just leaves precise mode off.
    """
    if explicit is not None:
        found = _from_location(explicit, source)
        if found is None:
            raise UsageError(
                f"--compile-commands {explicit}: neither a {DATABASE_FILE} nor a build "
                f"directory with one or a {NINJA_FILE}"
            )
        return Discovery(found)
    root_db = source / DATABASE_FILE
    if root_db.is_file():
        return Discovery(read_database(root_db, source))
    looked = [DATABASE_FILE]
    for pattern in manifest.list("precise", "build_dirs"):
        looked.append(f"{pattern}/")
        for directory in sorted(source.glob(pattern)):
            found = _from_location(directory, source) if directory.is_dir() else None
            if found is not None:
                return Discovery(found)
    return Discovery(
        None,
        "no compile database found (looked for "
        + ", ".join(looked)
        + f" with a {DATABASE_FILE} or {NINJA_FILE}; pass --compile-commands PATH)",
    )


def _from_location(path: Path, source: Path) -> CompileDatabase | None:
    path = path.expanduser()
    if path.is_file():
        return read_database(path, source)
    if (path / DATABASE_FILE).is_file():
        return read_database(path / DATABASE_FILE, source)
    if (path / NINJA_FILE).is_file():
        return ninja_database(path, source)
    return None


def read_database(path: Path, source: Path) -> CompileDatabase:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable compile database ({exc})") from None
    return _database(str(path), entries, source)


def ninja_database(build_dir: Path, source: Path) -> CompileDatabase:
    """``ninja -t compdb`` in ``build_dir``: the commands of every rule of its build.ninja."""
    ninja = shutil.which("ninja")
    origin = f"ninja -t compdb in {build_dir}"
    if ninja is None:
        raise UsageError(f"{build_dir} has a {NINJA_FILE} but no 'ninja' is on PATH to read it")
    try:
        done = subprocess.run(
            [ninja, "-t", "compdb"],
            cwd=build_dir,
            capture_output=True,
            text=True,
            timeout=NINJA_TIMEOUT_S,
            check=True,
        )
        entries = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
        raise UsageError(f"{origin} failed: {exc}") from None
    database = _database(origin, entries, source)
    objects = sum(1 for _ in build_dir.rglob("*.o"))
    if objects > len(entries):
        # torch's BuildExtension writes build.ninja anew for each extension of a setup.py.
        database.note = (
            f"{build_dir}/{NINJA_FILE} names {len(entries)} TUs but {objects} objects were "
            "built there: a setup.py with several extensions rewrites it for each, so only "
            "the last one's TUs are precise (the others keep the fast graph); a "
            f"{DATABASE_FILE} of the whole build covers them all"
        )
    return database


def _database(origin: str, entries: object, source: Path) -> CompileDatabase:
    if not isinstance(entries, list):
        raise UsageError(f"{origin}: a compile database is a JSON list of commands")
    database = CompileDatabase(origin)
    seen: set[str] = set()
    root = source.resolve()
    for entry in entries:
        command = _command(entry)
        if command is None:
            raise UsageError(f"{origin}: an entry without directory, file and command: {entry!r}")
        path = Path(command.file)
        if not path.is_file():
            database.missing.append(command.file)
            continue
        resolved = path.resolve()
        if not resolved.is_relative_to(root):
            database.outside += 1
            continue
        if str(resolved) in seen:  # one command per file: the first, as clangd does
            continue
        seen.add(str(resolved))
        database.commands.append(command)
    return database


def _command(entry: object) -> CompileCommand | None:
    if not isinstance(entry, dict):
        return None
    directory, file = entry.get("directory"), entry.get("file")
    if not isinstance(directory, str) or not isinstance(file, str):
        return None
    arguments = entry.get("arguments")
    if arguments is None and isinstance(entry.get("command"), str):
        arguments = shlex.split(entry["command"])
    if not isinstance(arguments, list) or not arguments:
        return None
    full = Path(directory, file)  # an absolute file stays itself
    return CompileCommand(str(full), directory, tuple(str(arg) for arg in arguments))
