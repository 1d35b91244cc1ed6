"""Incremental update: re-extract what changed, re-link what could have changed, nothing else.

The result must equal a full rebuild of the same tree. The steps, on a private copy of the
database (renamed over the index under the build lock, so readers never see a half-update):

1. Changes by content: every discovered file is hashed and compared with ``files.sha``
   (0.3 s on PyTorch). That covers committed, staged, unstaged and untracked edits, and an
   index that was built from a dirty tree; files that appeared or vanished come from
   discovery.
2. Every file whose include closure contains a changed file (reverse ``includes`` edges)
   is re-extracted too, and so is every file naming a shared header macro
   (indexer/cpp/shared_macros.py) whose expansion the change altered.
3. The old rows of those files are evicted; the new facts are inserted.
4. Re-link the refs of re-extracted files, and of other files those whose resolution
   the change can affect (:mod:`indexer.relink`: edges that touched evicted nodes, refs
   naming a changed name, whole schemes whose resolvers read more than names).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from indexer import durable
from indexer.build import (
    build_index,
    build_lock,
    files_fingerprint,
    lost_files,
    problems_meta,
    refuse_incomplete,
    scan_header_macros,
)
from indexer.changes import Changes, detect_changes
from indexer.cpp import symbol_rows
from indexer.cpp.shared_macros import SharedMacros, changed_names
from indexer.extract.context import TreeContext, context_meta, stored_context
from indexer.extract.pipeline import extract_all
from indexer.gitinfo import head_commit
from indexer.link import link
from indexer.paths import is_header, language_of
from indexer.precise.layer import CACHE_DIR as PRECISE_CACHE
from indexer.precise.layer import precise_layer
from indexer.precise.merge import restore_fast
from indexer.progress import Progress
from indexer.query.adjacency_delta import store_delta, track_touched
from indexer.query.moved_facts import track_facts
from indexer.rebuild import built_with_compile_commands, full_build_reason
from indexer.relink import Changed, batches, refs_to_relink, refs_touching
from indexer.store import tree_stats
from indexer.store.db import (
    ReusedIds,
    connect_writable,
    evict_file,
    insert_file_facts,
    read_meta,
    write_meta,
)
from indexer.store.writer import Derive
from indexer.update_counts import Ledger
from indexer.workspace import Workspace

INCLUDE_EDGE = "includes"
SAMPLE_PATHS = 5


@dataclass
class UpdateResult:
    db_path: Path
    base: str  # "index" or "snapshot NAME"
    base_commit: str | None
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    dependents: list[str] = field(default_factory=list)  # re-extracted for an included change
    relinked_refs: int = 0
    full_relink_schemes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    full_build: bool = False
    reason: str = ""  # why a full build was done instead
    up_to_date: bool = False
    precise: dict[str, Any] | None = None  # meta.precise of the result (indexer/precise)

    @property
    def reextracted(self) -> int:
        return len(self.added) + len(self.modified) + len(self.dependents)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["db_path"] = str(self.db_path)
        return data


def _file_ids(conn: sqlite3.Connection, paths: Iterable[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for batch in batches(sorted(set(paths))):
        found.update(
            conn.execute(
                f"SELECT path, id FROM files WHERE path IN ({','.join('?' * len(batch))})", batch
            )
        )
    return found


def include_dependents(conn: sqlite3.Connection, paths: Iterable[str]) -> tuple[set[str], set[str]]:
    """(files whose include closure contains one of ``paths``, those of ``paths`` no file
    includes), following ``includes`` edges backwards."""
    start = _file_ids(conn, paths)
    seen = set(start.values())
    frontier = list(seen)
    included: set[int] = set()
    while frontier:
        found: list[int] = []
        for batch in batches(frontier):
            for src_file, dst_file in conn.execute(
                "SELECT DISTINCT s.file_id, d.file_id FROM nodes d"
                " JOIN edges e ON e.dst_id = d.id AND e.kind = ?"
                " JOIN nodes s ON s.id = e.src_id"
                f" WHERE d.file_id IN ({','.join('?' * len(batch))})",
                [INCLUDE_EDGE, *batch],
            ):
                if src_file == dst_file:
                    continue
                included.add(dst_file)
                if src_file not in seen:
                    seen.add(src_file)
                    found.append(src_file)
        frontier = found
    names = dict(conn.execute("SELECT id, path FROM files")) if seen else {}
    dependents = {names[file_id] for file_id in seen - set(start.values())}
    orphans = {path for path, file_id in start.items() if file_id not in included}
    return dependents, orphans


def _ids(conn: sqlite3.Connection, sql: str, values: list) -> set[int]:
    found: set[int] = set()
    for batch in batches(values):
        found.update(row[0] for row in conn.execute(sql.format(",".join("?" * len(batch))), batch))
    return found


def _updated_context(workspace: Workspace, meta: dict[str, str], changes: Changes) -> TreeContext:
    """The stored context with the changed headers scanned again."""
    old = stored_context(meta) or TreeContext()
    headers = dict(old.cpp_header_macros)
    for path in changes.removed:
        headers.pop(path, None)
    changed = [
        path for path in (*changes.modified, *changes.added) if language_of(path) in ("cpp", "cuda")
    ]
    for path in changed:
        headers.pop(path, None)
    headers.update(scan_header_macros(workspace.source, workspace.manifest, changed))
    return TreeContext(cpp_header_macros=headers)


def macro_users(
    workspace: Workspace, meta: dict[str, str], changes: Changes, context: TreeContext
) -> set[str]:
    """C++ files naming a shared macro whose expansion changed (rare: a header edit to a
    function-defining macro). Their text is searched, not the index: a file may name a
    macro that only now becomes shared."""
    old = stored_context(meta) or TreeContext()
    names = changed_names(
        SharedMacros(old.cpp_header_macros), SharedMacros(context.cpp_header_macros)
    )
    if not names:
        return set()
    wanted = [name.encode() for name in names]
    users = set()
    for path, entry in changes.entries.items():
        if entry.language not in ("cpp", "cuda"):
            continue
        try:
            data = (workspace.source / path).read_bytes()
        except OSError:
            continue
        if any(name in data for name in wanted):
            users.add(path)
    return users


def _orphan_warning(orphans: set[str]) -> str:
    sample = sorted(orphans)[:SAMPLE_PATHS]
    more = f" (and {len(orphans) - len(sample)} more)" if len(orphans) > len(sample) else ""
    return (
        f"{len(orphans)} changed header(s) are included by no indexed file, so no code can be "
        f"attributed through them: {', '.join(sample)}{more}"
    )


def update_index(
    workspace: Workspace,
    since: str | None = None,
    *,
    jobs: int | None = None,
    wait: bool = True,
    show_progress: bool | None = None,
    force: bool = False,
    compile_commands: Path | None = None,
    derive: Derive | None = None,
) -> UpdateResult:
    """Bring the workspace's index up to date with its tree; ``since`` starts from a snapshot.

    Falls back to a full build (``result.full_build``, with the reason) when there is no
    index, or it was built with another schema, manifest or compile database. Files the
    index holds that can no longer be read (an unreadable directory) keep the index as it
    is (:class:`IncompleteBuildError`) unless ``force``. Precise mode's merge is undone
    first and done again after (TUs whose include closure holds a changed file are parsed
    again, the others come from the cache); ``compile_commands`` defaults to the one the
    index was built with. ``derive`` writes what is derived from the graph into the new
    file before it is renamed into place (``indexer.refresh``).
    """
    started = time.perf_counter()
    base_label = "index"
    base_path = workspace.db_path
    if since is not None:
        from indexer.snapshot.store import snapshot_for_update

        base_path = snapshot_for_update(workspace, since)
        base_label = f"snapshot {since}"
    reason = full_build_reason(workspace, base_path, compile_commands)
    if reason is not None:
        built = build_index(
            workspace,
            jobs=jobs,
            wait=wait,
            show_progress=show_progress,
            force=force,
            compile_commands=compile_commands,
            derive=derive,
        )
        return UpdateResult(
            built.db_path,
            base_label,
            None,
            timings={"total_s": time.perf_counter() - started},
            full_build=True,
            reason=reason,
        )
    db_path = workspace.db_path
    timings: dict[str, float] = {}
    phase = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal phase
        now = time.perf_counter()
        timings[name] = round(now - phase, 3)
        phase = now

    with build_lock(db_path.parent, wait=wait):
        for stale in db_path.parent.glob(f"{db_path.name}.building-*"):
            stale.unlink(missing_ok=True)
        base = sqlite3.connect(f"file:{base_path}?mode=ro&immutable=1", uri=True)
        try:
            meta = read_meta(base)
            known = tree_stats.read(base, meta)
            changes = detect_changes(workspace.source, workspace.manifest, base, known)
            had = dict(base.execute("SELECT path, sha FROM files"))
        finally:
            base.close()
        lost = lost_files(had, changes.problems, changes.unreadable)
        refuse_incomplete(db_path, lost, changes.problems, force)
        head = head_commit(workspace.source) or ""
        lap("detect_s")
        result = UpdateResult(
            db_path,
            base_label,
            meta.get("git_commit") or None,
            added=changes.added,
            modified=changes.modified,
            removed=changes.removed,
            timings=timings,
        )
        same_meta = (
            meta.get("git_commit", "") == head
            and meta.get("source_path") == str(workspace.source)
            and json.loads(meta.get("tree_problems") or "[]") == problems_meta(changes.problems)
        )
        if not changes and same_meta and since is None:
            result.up_to_date = True
        else:
            # Readers keep the old file; the new one appears whole, by rename.
            with durable.Replacement(db_path, copy_of=base_path, tag="building") as new:
                tmp = new.path
                lap("copy_s")
                conn = connect_writable(tmp)
                try:
                    conn.execute("BEGIN")
                    track_touched(conn)
                    track_facts(conn)
                    ledger = Ledger(meta)
                    context = _updated_context(workspace, meta, changes)
                    if changes:
                        if _precise_on(meta):
                            restore_fast(conn)
                        _apply(
                            conn,
                            workspace,
                            meta,
                            ledger,
                            changes,
                            context,
                            result,
                            jobs,
                            show_progress,
                            lap,
                        )
                        result.precise = precise_layer(
                            conn,
                            workspace,
                            compile_commands=compile_commands or built_with_compile_commands(meta),
                            jobs=jobs,
                            cache_dir=db_path.parent / PRECISE_CACHE,
                            changed_headers=[
                                path
                                for path in (*changes.modified, *changes.added)
                                if is_header(path)
                            ],
                        )
                        if result.precise.get("headers_in_no_tu_count"):
                            result.warnings.append(_no_tu_warning(result.precise))
                        lap("precise_s")
                    _refresh_meta(conn, workspace, meta, head, result, ledger, context)
                    write_meta(conn, {"tree_problems": problems_meta(changes.problems)})
                    store_delta(conn, meta)
                    tree_stats.write(conn, changes.looks)
                    conn.execute("COMMIT")
                    if derive is not None:
                        derive(tmp, conn)
                finally:
                    conn.close()
                new.install()
                lap("meta_s")
    result.timings["total_s"] = round(time.perf_counter() - started, 3)
    return result


def _apply(
    conn: sqlite3.Connection,
    workspace: Workspace,
    meta: dict[str, str],
    ledger: Ledger,
    changes: Changes,
    context: TreeContext,
    result: UpdateResult,
    jobs: int | None,
    show_progress: bool | None,
    lap,
) -> None:
    paths = [*changes.modified, *changes.removed, *changes.added]
    code = [path for path in paths if language_of(path) in ("cpp", "cuda")]
    dependents = include_dependents(conn, code)[0] | macro_users(workspace, meta, changes, context)
    dependents -= set(paths)
    result.dependents = sorted(path for path in dependents if path in changes.entries)
    lap("includes_s")

    evict = sorted({*changes.modified, *changes.removed, *dependents})
    changed = Changed()
    old_ids = list(_file_ids(conn, evict).values())
    changed.collect(conn, old_ids, after=False)
    touching = refs_touching(conn, old_ids)
    ledger.before_evict(conn, old_ids, touching)
    reuse = ReusedIds(conn, evict)
    for path in evict:
        evict_file(conn, path)
    if not symbol_rows.kept(conn):  # an index written before they were kept
        symbol_rows.write(conn)
    symbol_rows.forget(conn, old_ids)
    lap("evict_s")

    extract = [changes.entries[path] for path in [*changes.modified, *changes.added]]
    extract += [changes.entries[path] for path in result.dependents]
    progress = Progress("updating", len(extract), enabled=show_progress)
    new_ids: list[int] = []
    for facts in extract_all(workspace.source, workspace.manifest, extract, jobs, context):
        new_ids.append(insert_file_facts(conn, facts, reuse))
        progress.advance()
    progress.close(f"re-extracted {len(extract)} files")
    changed.collect(conn, new_ids, after=True)
    changed.finish()
    symbol_rows.write(conn, new_ids)
    lap("extract_s")

    relink = _ids(conn, "SELECT id FROM refs WHERE file_id IN ({})", new_ids)
    stats = json.loads(meta.get("link_stats") or "null")
    redo, whole = refs_to_relink(conn, changed, sorted(stats) if stats else None)
    redo |= _ids(
        conn, "SELECT id FROM refs WHERE target_id IS NULL AND id IN ({})", sorted(touching)
    )
    redo -= relink
    ledger.before_unlink(conn, redo, touching)
    for batch in batches(sorted(redo)):
        conn.execute(f"DELETE FROM edges WHERE ref_id IN ({','.join('?' * len(batch))})", batch)
    relink |= redo
    lap("unlink_s")
    link(conn, sorted(relink))
    ledger.after_link(conn, new_ids, relink)
    result.relinked_refs = len(relink)
    result.full_relink_schemes = whole
    lap("link_s")

    # A removed header leaves its includers re-extracted; a present one nobody includes
    # cannot carry a change anywhere, which the user must hear about.
    present = {path for path in (*changes.modified, *changes.added) if is_header(path)}
    orphans = include_dependents(conn, present)[1] if present else set()
    if orphans:
        result.warnings.append(_orphan_warning(orphans))


def _no_tu_warning(precise: dict[str, Any]) -> str:
    count = precise["headers_in_no_tu_count"]
    sample = precise["headers_in_no_tu"]
    more = f" (and {count - len(sample)} more)" if count > len(sample) else ""
    return (
        f"{count} changed header(s) are in the include closure of no TU of the compile "
        f"database, so precise mode sees no compiled code using them: {', '.join(sample)}{more}"
    )


def _precise_on(meta: dict[str, str]) -> bool:
    return (json.loads(meta.get("precise") or "null") or {}).get("mode") == "on"


def _refresh_meta(
    conn: sqlite3.Connection,
    workspace: Workspace,
    old: dict[str, str],
    head: str,
    result: UpdateResult,
    ledger: Ledger,
    context: TreeContext,
) -> None:
    shas = list(conn.execute("SELECT path, sha FROM files"))
    counts, link_stats = ledger.result(conn)
    precise = result.precise or json.loads(old.get("precise") or "null")
    if _precise_on(old) or (precise or {}).get("mode") == "on":
        # The merge moved edges the ledger did not see: count them again.
        counts["edges"] = dict(
            conn.execute("SELECT kind, COUNT(*) FROM edges GROUP BY kind ORDER BY kind")
        )
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_meta(
        conn,
        {
            "harness": workspace.harness,
            "harness_chosen_by": workspace.chosen_by,
            "source_path": str(workspace.source),
            "git_commit": head,
            "files_fingerprint": files_fingerprint(shas),
            "built_at": now,
            "generation": secrets.token_hex(8),
            "counts": counts,
            "link_stats": link_stats,
            "files": len(shas),
            "file_errors": conn.execute(
                "SELECT COUNT(*) FROM files WHERE error IS NOT NULL"
            ).fetchone()[0],
            **context_meta(context),
            **({"precise": precise} if precise is not None else {}),
            "updated_from": {
                "base": result.base,
                "base_commit": old.get("git_commit", ""),
                "base_built_at": old.get("built_at", ""),
                "added": len(result.added),
                "modified": len(result.modified),
                "removed": len(result.removed),
                "dependents": len(result.dependents),
                "at": now,
            },
        },
    )
