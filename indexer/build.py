"""A full index build: discover, extract in parallel, store, link, rename into place.

Only one build per index runs at a time (a lock file beside the database); readers are
never blocked, because the new database is renamed over the old one only when complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from indexer.code_key import extraction_code_key
from indexer.cpp.shared_macros import HeaderMacros, modelled_macros, scan_headers
from indexer.errors import IncompleteBuildError, IndexBusyError
from indexer.extract.context import TreeContext, context_meta
from indexer.extract.discover import SourceEntry, TreeProblem, discover
from indexer.extract.pipeline import UNREADABLE, extract_all
from indexer.gitinfo import head_commit
from indexer.harness import Manifest
from indexer.link import link
from indexer.locations import LOCK_FILE
from indexer.paths import under_any
from indexer.precise.layer import CACHE_DIR as PRECISE_CACHE
from indexer.precise.layer import precise_layer
from indexer.progress import Progress
from indexer.store import IndexWriter
from indexer.store.db import write_meta
from indexer.store.writer import Derive
from indexer.workspace import Workspace


@dataclass
class BuildResult:
    db_path: Path
    files: int
    errors: int
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[TreeProblem] = field(default_factory=list)  # what could not be indexed
    precise: dict[str, Any] | None = None  # meta.precise (indexer/precise), if it ran


@contextmanager
def build_lock(index_dir: Path, wait: bool = True) -> Iterator[None]:
    """Hold the index's build lock; ``wait=False`` fails at once if another build has it."""
    index_dir.mkdir(parents=True, exist_ok=True)
    with open(index_dir / LOCK_FILE, "a+") as handle:
        flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(handle.fileno(), flags)
        except BlockingIOError:
            raise IndexBusyError(
                f"another build of {index_dir} is running (lock {index_dir / LOCK_FILE})"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def files_fingerprint(shas: list[tuple[str, str]]) -> str:
    """BLAKE2b over (path, content hash) of every indexed file, order-independent."""
    digest = hashlib.blake2b(digest_size=16)
    for path, sha in sorted(shas):
        digest.update(f"{path}\0{sha}\n".encode())
    return digest.hexdigest()


def tree_context(source: Path, manifest: Manifest, entries: list[SourceEntry]) -> TreeContext:
    """What every file's extraction may know of the others: the headers' shared macros."""
    headers = [entry.path for entry in entries if entry.language in ("cpp", "cuda")]
    return TreeContext(cpp_header_macros=scan_header_macros(source, manifest, headers))


def scan_header_macros(source: Path, manifest: Manifest, paths: list[str]) -> HeaderMacros:
    max_bytes = manifest.get("sources", "max_file_bytes", 4_000_000)
    return scan_headers(source, paths, max_bytes, modelled_macros(manifest))


SHOWN_LOST = 5


def problems_meta(problems: list[TreeProblem]) -> list[dict[str, str]]:
    """The tree's problems as the index meta keeps them (``tree_problems``)."""
    return [
        {
            "path": problem.path,
            "problem": problem.problem,
            "kind": "directory" if problem.directory else "file",
        }
        for problem in problems
    ]


def _read_files(db_path: Path) -> dict[str, str]:
    """path -> content hash of the files an existing index holds ({} if none or unreadable)."""
    if not db_path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
        try:
            return dict(conn.execute("SELECT path, sha FROM files"))
        finally:
            conn.close()
    except sqlite3.Error:
        return {}  # not an index worth keeping


def lost_files(
    had: dict[str, str], problems: list[TreeProblem], unreadable: list[str]
) -> list[str]:
    """Files an index holds (path -> hash) that a new build could not read: under a
    directory it could not list, or read before and unreadable now."""
    directories = [problem.path for problem in problems if problem.directory]
    lost = {path for path in had if directories and under_any(path, directories)}
    lost.update(path for path in unreadable if had.get(path))
    return sorted(lost)


def refuse_incomplete(
    db_path: Path, lost: list[str], problems: list[TreeProblem], force: bool
) -> None:
    """Raise unless ``force`` when a build would replace an index holding ``lost``."""
    if not lost or force:
        return
    shown = ", ".join(lost[:SHOWN_LOST]) + (" ..." if len(lost) > SHOWN_LOST else "")
    why = "; ".join(f"{p.path}: {p.problem}" for p in problems if p.directory)
    raise IncompleteBuildError(
        f"{len(lost)} files of the index could not be read ({shown})"
        + (f" [{why}]" if why else "")
        + f"; the index at {db_path} is kept: make them readable, or pass --force to "
        "replace it with what could be read"
    )


def count_by_kind(conn, table: str) -> dict[str, int]:
    return dict(conn.execute(f"SELECT kind, COUNT(*) FROM {table} GROUP BY kind ORDER BY kind"))


def build_index(
    workspace: Workspace,
    *,
    jobs: int | None = None,
    wait: bool = True,
    show_progress: bool | None = None,
    db_path: Path | None = None,
    select: Callable[[SourceEntry], bool] | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    extra_meta: dict[str, Any] | None = None,
    force: bool = False,
    compile_commands: Path | None = None,
    derive: Derive | None = None,
) -> BuildResult:
    """Build the index of ``workspace`` and rename it into place.

    For a phased build (the MCP server serves a quick index while the full one builds):
    ``db_path`` writes elsewhere than the workspace's index, ``select`` keeps only some of
    the discovered files, ``on_progress(step, done, total)`` hears each step ("discover",
    "extract", "link", "done") and may raise to cancel the build (the partial file is
    removed), and ``extra_meta`` is stored in the index's meta table.

    What cannot be indexed (an unreadable directory, a name that is not UTF-8) is kept
    in the meta as ``tree_problems``. A build that could not read files the old index
    holds raises :class:`IncompleteBuildError` and keeps the old index, unless ``force``.
    A build of the whole tree (no ``select``) merges precise C++ facts over the call graph
    when a compile database is found (``compile_commands`` names one; indexer/precise).
    ``derive`` writes what is derived from the graph into the file before it is renamed
    into place (``indexer.refresh``).
    """
    db_path = db_path or workspace.db_path
    report = on_progress or (lambda step, done, total: None)
    timings: dict[str, float] = {}
    with build_lock(db_path.parent, wait=wait):
        # Under the lock, any half-written database is from a build that died.
        for stale in db_path.parent.glob(f"{db_path.name}.building-*"):
            stale.unlink(missing_ok=True)
        started = time.perf_counter()
        problems: list[TreeProblem] = []
        entries = discover(workspace.source, workspace.manifest, problems)
        if select is not None:
            entries = [entry for entry in entries if select(entry)]
        timings["discover_s"] = time.perf_counter() - started
        report("discover", len(entries), len(entries))
        progress = Progress("indexing", len(entries), enabled=show_progress)
        shas: list[tuple[str, str]] = []
        errors = 0
        unreadable: list[str] = []
        with IndexWriter(db_path) as writer:
            phase = time.perf_counter()
            report("extract", 0, len(entries))
            context = tree_context(workspace.source, workspace.manifest, entries)
            timings["context_s"] = time.perf_counter() - phase
            for facts in extract_all(workspace.source, workspace.manifest, entries, jobs, context):
                writer.add(facts)
                shas.append((facts.path, facts.sha))
                errors += facts.error is not None
                if facts.error and facts.error.startswith(UNREADABLE):
                    unreadable.append(facts.path)
                progress.advance()
                report("extract", len(shas), len(entries))
            timings["extract_s"] = time.perf_counter() - phase
            lost = lost_files(_read_files(db_path), problems, unreadable)
            refuse_incomplete(db_path, lost, problems, force)
            report("link", 0, 1)
            phase = time.perf_counter()
            writer.finish_load()
            stats = link(writer.conn)
            timings["link_s"] = time.perf_counter() - phase
            precise = None
            if select is None:
                phase = time.perf_counter()
                precise = precise_layer(
                    writer.conn,
                    workspace,
                    compile_commands=compile_commands,
                    jobs=jobs,
                    cache_dir=db_path.parent / PRECISE_CACHE,
                    report=report,
                )
                timings["precise_s"] = time.perf_counter() - phase
            writer.conn.execute("COMMIT")
            counts = {
                "nodes": count_by_kind(writer.conn, "nodes"),
                "edges": count_by_kind(writer.conn, "edges"),
            }
            timings["total_s"] = time.perf_counter() - started
            writer.conn.execute("BEGIN")
            write_meta(
                writer.conn,
                {
                    "harness": workspace.harness,
                    "harness_chosen_by": workspace.chosen_by,
                    "manifest": workspace.manifest.fingerprint(),
                    "extraction_code": extraction_code_key(),
                    "source_path": str(workspace.source),
                    "git_commit": head_commit(workspace.source) or "",
                    "files_fingerprint": files_fingerprint(shas),
                    "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "generation": secrets.token_hex(8),
                    "build_pid": str(os.getpid()),
                    "timings": {k: round(v, 3) for k, v in timings.items()},
                    "counts": counts,
                    "link_stats": stats.as_dict(),
                    "files": len(entries),
                    "file_errors": errors,
                    "tree_problems": problems_meta(problems),
                    **({"replaced_unreadable": len(lost)} if lost else {}),
                    **context_meta(context),
                    **({"precise": precise} if precise is not None else {}),
                    **(extra_meta or {}),
                },
            )
            writer.commit(derive)
        report("done", len(entries), len(entries))
        progress.close(f"indexed {len(entries)} files in {timings['total_s']:.1f}s")
    return BuildResult(db_path, len(entries), errors, timings, counts, problems, precise)
