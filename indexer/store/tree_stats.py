"""How the tree's files looked (``lstat``) when their content was last found to be what
the index holds, kept inside the index: an update hashes only the files whose look
changed since (docs/architecture.md, "Incremental update").

A file is taken as unchanged when its size, modification and change times, inode and
device are all what was kept. The change time (``st_ctime``) is set by the kernel on
every write, rename or ``touch``, and cannot be set back by a program: a file written
since has another one. A checkout elsewhere (another machine, a fresh clone, a snapshot
loaded on a CI runner) has other inodes and times, so all of its files are hashed, as
before. A file changed less than ``RACY_S`` before it was looked at is not kept: a write
within the same clock tick would leave its times as they were (git's "racily clean").
"""

from __future__ import annotations

import os
import sqlite3
from array import array

from indexer.store import derived

NAME = "tree_stats"  # its item in the index's derived data
RACY_S = 2.0
_ARRAYS = {"file": "q", "size": "q", "mtime": "q", "ctime": "q", "ino": "q", "dev": "q"}

Look = tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, inode, device


def look(stat: os.stat_result) -> Look:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def settled(stat: os.stat_result, now_ns: int) -> bool:
    """Whether ``stat`` was taken long enough after the file's last change to be kept."""
    return stat.st_ctime_ns < now_ns - int(RACY_S * 1e9)


def read(conn: sqlite3.Connection, meta: dict[str, str]) -> dict[str, Look]:
    """Path -> look, as kept for the index ``conn`` reads (empty when none was)."""
    if derived.header(conn, NAME, derived.index_key(meta)) is None:
        return {}
    found = derived.arrays(conn, NAME, _ARRAYS)
    if found is None or len({len(values) for values in found.values()}) != 1:
        return {}
    paths = dict(conn.execute("SELECT id, path FROM files"))
    files, rest = found["file"], [found[name] for name in list(_ARRAYS)[1:]]
    return {
        paths[file_id]: tuple(values)  # type: ignore[misc]
        for file_id, *values in zip(files, *rest, strict=True)
        if file_id in paths
    }


def write(conn: sqlite3.Connection, looks: dict[str, Look]) -> None:
    """Keep ``looks`` (path -> look) of the files of the index being written through
    ``conn`` (in its transaction, after its meta is final): under its key."""
    derived.ensure(conn)
    ids = dict(conn.execute("SELECT path, id FROM files"))
    columns = {name: array(typecode) for name, typecode in _ARRAYS.items()}
    for path, values in sorted(looks.items()):
        file_id = ids.get(path)
        if file_id is None:
            continue
        columns["file"].append(file_id)
        for name, value in zip(list(_ARRAYS)[1:], values, strict=True):
            columns[name].append(value)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    derived.write(conn, NAME, derived.index_key(meta), {}, {0: columns})
