"""Snapshots as files: export to a .tar.gz, import one back after checking everything.

An archive holds exactly three regular files: ``SHA256SUMS`` and ``snapshot.json`` first
(so a bad archive is refused before the big member is read), then ``index.sqlite``. It is
compressed as block gzip (:mod:`indexer.snapshot.blockgzip`): a plain .tar.gz whose blocks
compress and inflate on every core. Import streams the archive once, hashing as it writes
into a hidden staging directory of the store, and renames that into place only when every
check passed: member names and types, sizes, the checksums, the description and the
schema version. Anything else leaves the store as it was and is reported in one line.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import re
import shutil
import tarfile
import threading
import time
import zlib
from pathlib import Path

from indexer import durable
from indexer.errors import UsageError
from indexer.snapshot.blockgzip import BlockGzipError, BlockGzipReader, BlockGzipWriter
from indexer.snapshot.names import validate_name
from indexer.snapshot.store import (
    DB_FILE,
    LEGACY_FILES,
    META_FILE,
    RECORD_FILE,
    SnapshotError,
    SnapshotInfo,
    check_name_free,
    db_of,
    install_dir,
    read_info,
    record_summary,
    snapshot_dir,
    staging_dir,
    store_lock,
)
from indexer.store.db import SCHEMA_VERSION, connect_readonly, read_meta

SUMS_FILE = "SHA256SUMS"
MEMBERS = (SUMS_FILE, META_FILE, DB_FILE, RECORD_FILE, *LEGACY_FILES)
REQUIRED = (SUMS_FILE, META_FILE, DB_FILE)  # a record only where there is one
OPTIONAL = (RECORD_FILE, *LEGACY_FILES)
# Upper bounds per member: a description or checksum list is tiny; the index and the
# record are bounded by what their archive can hold (``member_limits``).
MAX_BYTES = {
    SUMS_FILE: 64 * 1024, META_FILE: 1024 * 1024, DB_FILE: 64 * 1024**3,
    RECORD_FILE: 16 * 1024**3,
}  # fmt: skip
# An index compresses about 4:1 with zlib (252 MB to 62 MB for PyTorch); an archive whose
# index would inflate more than this many times its size is a bomb (zeros inflate
# ~1000:1), refused before a byte is written. Small archives may inflate to the floor.
MAX_INFLATION = 20
MIN_DB_LIMIT = 256 * 1024**2
MAX_BYTES_ENV = "TORCHTALK_SNAPSHOT_MAX_BYTES"  # a configured maximum for the index member


def member_limits(archive_bytes: int) -> dict[str, int]:
    """Each member's size limit for an archive of ``archive_bytes``: the index (and the
    record) at most MAX_INFLATION times the archive (at least MIN_DB_LIMIT), or
    $TORCHTALK_SNAPSHOT_MAX_BYTES."""
    configured = os.environ.get(MAX_BYTES_ENV, "").strip()
    if configured:
        try:
            db_limit = int(configured)
        except ValueError:
            raise UsageError(f"{MAX_BYTES_ENV}={configured!r} is not a number of bytes") from None
        if db_limit < 1:
            raise UsageError(f"{MAX_BYTES_ENV} must be at least 1 (got {db_limit})")
    else:
        db_limit = min(max(MIN_DB_LIMIT, archive_bytes * MAX_INFLATION), MAX_BYTES[DB_FILE])
    limits = {**MAX_BYTES, DB_FILE: db_limit, RECORD_FILE: min(db_limit, MAX_BYTES[RECORD_FILE])}
    limits.update({name: db_limit for name in LEGACY_FILES})  # each smaller than its index
    return limits


COMPRESS_LEVEL = 6
_CHUNK = 1 << 20
_SYNC_EVERY = 64 << 20
_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S+)\Z")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _member(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.uname = info.gname = ""
    return info


def default_archive_name(name: str) -> str:
    return f"torchtalk-snapshot-{name.replace('/', '_')}.tar.gz"


def export_snapshot(name: str, output: Path | None = None, *, level: int = COMPRESS_LEVEL) -> Path:
    """Write snapshot ``name`` to a .tar.gz (temp file, then renamed); returns its path.
    ``level`` is zlib's (1 fastest to 9 smallest); import speed hardly depends on it."""
    info = read_info(name)
    directory = snapshot_dir(name)
    db_path = db_of(name)
    optional = [directory / member for member in OPTIONAL if (directory / member).is_file()]
    meta_bytes = (directory / META_FILE).read_bytes()
    sums = (
        f"{hashlib.sha256(meta_bytes).hexdigest()}  {META_FILE}\n"
        f"{_sha256_file(db_path)}  {DB_FILE}\n"
        + "".join(f"{_sha256_file(path)}  {path.name}\n" for path in optional)
    ).encode()
    output = Path(output) if output else Path.cwd() / default_archive_name(info.name)
    if output.is_dir():
        output = output / default_archive_name(info.name)
    problem = durable.write_problem(output)
    if problem:
        raise SnapshotError(f"cannot write {output}: {problem}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        return _write_archive(output, sums, meta_bytes, db_path, optional, level)
    except OSError as exc:
        raise SnapshotError(f"cannot write {output}: {exc.strerror or exc}") from None


def _write_archive(
    output: Path, sums: bytes, meta_bytes: bytes, db_path: Path, optional: list[Path],
    level: int,
) -> Path:  # fmt: skip
    now = time.time()
    with (
        durable.atomic_output(output) as raw,
        BlockGzipWriter(raw, level=level) as gz,
        tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT, bufsize=_CHUNK) as tar,
    ):
        tar.addfile(_member(SUMS_FILE, len(sums), now), io.BytesIO(sums))
        tar.addfile(_member(META_FILE, len(meta_bytes), now), io.BytesIO(meta_bytes))
        with open(db_path, "rb") as db:
            tar.addfile(_member(DB_FILE, db_path.stat().st_size, now), db)
        for path in optional:
            with open(path, "rb") as member:
                tar.addfile(_member(path.name, path.stat().st_size, now), member)
    return output


def _check_member(member: tarfile.TarInfo, seen: set[str], limits: dict[str, int]) -> str:
    name = member.name
    if name.startswith("/") or re.match(r"[A-Za-z]:[\\/]", name):
        raise SnapshotError(f"archive member {name!r} has an absolute path")
    if ".." in re.split(r"[\\/]", name):
        raise SnapshotError(f"archive member {name!r} leads out of the archive ('..')")
    if member.issym() or member.islnk():
        raise SnapshotError(f"archive member {name!r} is a link")
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise SnapshotError(f"archive member {name!r} is a device or pipe")
    clean = name[2:] if name.startswith("./") else name
    if clean not in MEMBERS:
        raise SnapshotError(
            f"archive member {name!r} is unexpected (a snapshot archive holds only "
            f"{', '.join(MEMBERS)})"
        )
    if not member.isreg() or member.issparse():
        raise SnapshotError(f"archive member {name!r} is not a regular file")
    if member.size > limits[clean]:
        raise SnapshotError(
            f"archive member {name!r} is oversized ({member.size} bytes > {limits[clean]}"
            + (
                f", {MAX_INFLATION} times the archive; ${MAX_BYTES_ENV} allows more)"
                if clean == DB_FILE
                else ")"
            )
        )
    if clean in seen:
        raise SnapshotError(f"archive member {name!r} appears twice")
    seen.add(clean)
    return clean


def _copy_hashed(source: BlockGzipReader, target: Path, size: int) -> str:
    """Copy the next ``size`` bytes of ``source`` to ``target``, returning their SHA-256.
    Inflating (``source``'s threads), hashing (here) and writing (a thread of its own)
    overlap: zlib, hashlib and file writes all release the GIL on large buffers, and the
    inflated blocks pass through without being copied."""
    digest = hashlib.sha256()
    chunks: queue.Queue[memoryview | None] = queue.Queue(maxsize=8)
    failure: list[BaseException] = []

    ended = threading.Event()  # the reader's None was taken: nothing more will come

    def sink() -> None:
        try:
            with open(target, "wb") as out:
                unsynced = 0
                while (chunk := chunks.get()) is not None:
                    out.write(chunk)
                    unsynced += len(chunk)
                    if unsynced >= _SYNC_EVERY:  # the disk writes while we inflate
                        out.flush()
                        os.fdatasync(out.fileno())
                        unsynced = 0
                ended.set()
                out.flush()  # a full disk may fail here or on close, after the None
                os.fsync(out.fileno())
        except BaseException as exc:  # reported by the reading thread
            failure.append(exc)
            # Drain so the reader never blocks on a full queue, unless its None was
            # already taken (waiting for another deadlocked the import on a full disk).
            while not ended.is_set() and chunks.get() is not None:
                pass

    writer = threading.Thread(target=sink, name="snapshot-import-writer", daemon=True)
    writer.start()
    left = size
    try:
        while left and not failure and (chunk := source.read_view(left)):
            left -= len(chunk)
            chunks.put(chunk)
            digest.update(chunk)
    finally:
        chunks.put(None)
        writer.join()
    if failure:
        raise failure[0]
    if left:
        raise SnapshotError(f"archive member {target.name!r} is truncated")
    return digest.hexdigest()


class _Headers:
    """What :meth:`tarfile.TarInfo.fromtarfile` reads of a TarFile, over the inflated
    stream: tarfile parses and checks each header (ustar, pax, GNU long names) while the
    member contents are read here, straight from the inflated blocks."""

    encoding = tarfile.ENCODING
    errors = "surrogateescape"
    MAX_HEADER_BYTES = 1 << 20  # a pax or long-name header of a few paths, not gigabytes

    def __init__(self, stream: BlockGzipReader) -> None:
        self.fileobj = self
        self.stream = stream
        self.pax_headers: dict[str, str] = {}
        self.offset = 0

    def read(self, size: int) -> bytes:
        if size > self.MAX_HEADER_BYTES:
            raise SnapshotError(f"archive has an oversized header ({size} bytes)")
        return self.stream.read(size)

    def tell(self) -> int:
        return self.stream.tell()

    def next(self) -> tarfile.TarInfo | None:
        """The next member's header, or None at the end of the archive."""
        try:
            return tarfile.TarInfo.fromtarfile(self)  # type: ignore[arg-type]
        except (tarfile.EOFHeaderError, tarfile.EmptyHeaderError):
            return None


def _parse_sums(path: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _SUM_LINE.match(line.strip())
        if not match or match.group(2) not in MEMBERS[1:] or match.group(2) in sums:
            raise SnapshotError(f"{SUMS_FILE} has a malformed line: {line[:80]!r}")
        sums[match.group(2)] = match.group(1)
    if not {META_FILE, DB_FILE} <= set(sums):
        raise SnapshotError(f"{SUMS_FILE} must list {META_FILE} and {DB_FILE}")
    return sums


def _unpack(archive: Path, staged: Path) -> None:
    seen: set[str] = set()
    hashes: dict[str, str] = {}
    limits = member_limits(archive.stat().st_size)
    with open(archive, "rb") as raw, BlockGzipReader(raw) as stream:
        headers = _Headers(stream)
        while (member := headers.next()) is not None:
            name = _check_member(member, seen, limits)
            hashes[name] = _copy_hashed(stream, staged / name, member.size)
            padding = -member.size % tarfile.BLOCKSIZE
            if len(stream.read(padding)) != padding:
                raise SnapshotError(f"archive member {member.name!r} is truncated")
    missing = [name for name in REQUIRED if name not in seen]
    if missing:
        raise SnapshotError(f"archive lacks {', '.join(missing)}")
    sums = _parse_sums(staged / SUMS_FILE)
    if set(sums) != seen - {SUMS_FILE}:
        raise SnapshotError(f"{SUMS_FILE} does not list exactly the archive's members")
    for name, expected in sums.items():
        if hashes[name] != expected:
            raise SnapshotError(f"checksum mismatch for {name}: the archive is corrupt")
    if RECORD_FILE in seen:
        record_summary(staged / RECORD_FILE)
    for name in seen & set(LEGACY_FILES):  # an older snapshot's: derived data is in the index
        (staged / name).unlink()
    (staged / SUMS_FILE).unlink()


def import_snapshot(archive: Path, name: str | None = None, *, force: bool = False) -> SnapshotInfo:
    """Install the snapshot in ``archive`` (as ``name``, else its own name), atomically."""
    archive = Path(archive)
    if not archive.is_file():
        raise SnapshotError(f"{archive}: no such archive")
    staged = staging_dir()
    try:
        try:
            _unpack(archive, staged)
        except (tarfile.TarError, EOFError, zlib.error, BlockGzipError) as exc:
            reason = str(exc) or type(exc).__name__
            raise SnapshotError(
                f"{archive}: not a readable snapshot archive (corrupt or truncated: {reason})"
            ) from None
        except SnapshotError as exc:
            raise SnapshotError(f"{archive}: {exc}") from None
        except OSError as exc:  # a full disk, a read-only store: nothing is installed
            raise SnapshotError(
                f"{archive}: cannot unpack into the snapshot store {staged.parent}: "
                f"{exc.strerror or exc}"
            ) from None
        info = SnapshotInfo.from_json(
            (staged / META_FILE).read_text(encoding="utf-8", errors="replace"),
            f"{archive}: {META_FILE}",
        )
        if info.schema_version != SCHEMA_VERSION:
            raise SnapshotError(
                f"{archive}: snapshot has schema version {info.schema_version}, this torchtalk "
                f"reads {SCHEMA_VERSION}"
            )
        try:
            conn = connect_readonly(staged / DB_FILE)
        except Exception as exc:
            raise SnapshotError(f"{archive}: {DB_FILE} is not a usable index ({exc})") from None
        try:
            db_version = read_meta(conn).get("schema_version")
        finally:
            conn.close()
        if db_version != str(info.schema_version):
            raise SnapshotError(f"{archive}: {DB_FILE} schema version disagrees with {META_FILE}")
        info.name = validate_name(name or info.name)
        (staged / META_FILE).write_text(info.to_json(), encoding="utf-8")
        with store_lock():
            check_name_free(info.name)
            install_dir(staged, info.name, replace=force)
        return info
    finally:
        shutil.rmtree(staged, ignore_errors=True)
