"""Precise mode, start to end: find the compile database, parse its TUs (cached, in worker
processes), merge them over the fast graph, and say what happened.

The summary (``meta.precise``) is what ``torchtalk status`` shows: which compile database
or why precise mode is off, TUs parsed, cached, failed (each failed one named with its
first fatal error; its files keep the fast graph), CUDA TUs left to the fast graph, and the
merge's counts.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from indexer.extract.pipeline import default_jobs
from indexer.precise.cache import TuCache
from indexer.precise.compdb import CompileDatabase, discover_database
from indexer.precise.merge import merge, restore_fast
from indexer.precise.toolchain import find_resource_dir, is_cuda
from indexer.precise.tu import TuFacts, TuJob, parse_tu
from indexer.workspace import Workspace

CACHE_DIR = "precise-tus"
SWITCH = "TORCHTALK_PRECISE"  # "off": no precise layer even where a compile database is found
SAMPLE = 20
DEFAULT_AUTOGRAD_TEMPLATES = ("torch::autograd::Function",)

Report = Callable[[str, int, int], None]


def precise_layer(
    conn: sqlite3.Connection,
    workspace: Workspace,
    *,
    compile_commands: Path | None = None,
    jobs: int | None = None,
    cache_dir: Path | None = None,
    report: Report | None = None,
    changed_headers: list[str] | None = None,
) -> dict[str, Any]:
    """Merge the compiler's view of the TUs of ``workspace`` into the graph in ``conn``
    (linked, fast graph restored); returns the summary for ``meta.precise``.

    ``changed_headers`` (an update's): those no parsed TU includes are listed in
    ``headers_in_no_tu`` (a sample; ``headers_in_no_tu_count``), since a change there
    reaches no compiled code."""
    started = time.perf_counter()
    if os.environ.get(SWITCH) == "off":  # to compare with the fast graph on the same tree
        return {"mode": "off", "reason": f"turned off ({SWITCH}=off)"}
    discovery = discover_database(workspace.source, workspace.manifest, compile_commands)
    if discovery.database is None:
        return {"mode": "off", "reason": discovery.reason}
    database = discovery.database
    resource = find_resource_dir()
    summary: dict[str, Any] = {
        "mode": "on",
        "database": database.origin,
        "compile_commands": str(compile_commands.resolve()) if compile_commands else None,
        "resource_dir": resource.path,
        "resource_dir_from": resource.how,
        "missing_files": len(database.missing),
        "missing_sample": database.missing[:5],
        "outside_tree": database.outside,
        "database_note": database.note,
    }
    tu_jobs, cuda = _jobs(workspace, database)
    summary["cuda_left_to_fast"] = len(cuda)
    if cuda:
        summary["cuda_reason"] = (
            "CUDA TUs are left to the fast graph: clang's CUDA mode needs the CUDA toolkit's "
            "headers, and the command is nvcc's"
        )
        summary["cuda_sample"] = cuda[:5]
    cache = TuCache(cache_dir or workspace.db_path.parent / CACHE_DIR)
    tus, parsed = _parse_all(tu_jobs, cache, jobs, report or (lambda step, done, total: None))
    failed = [tu for tu in tus if not tu.ok]
    ok = [tu for tu in tus if tu.ok]
    summary.update(
        {
            "tus": len(tus),
            "parsed": len(parsed),
            "cached": len(tus) - len(parsed),
            "reparsed_sample": sorted(parsed)[:SAMPLE],
            "failed": len(failed),
            "failed_tus": [{"file": tu.file, "reason": tu.reason} for tu in failed[:SAMPLE]],
            "errors_in_tree": sum(tu.errors_in_tree for tu in ok),
            "errors_outside_tree": sum(tu.errors_outside for tu in ok),
            "error_sample": [text for tu in ok for text in tu.first_errors][:5],
            "parse_seconds": round(sum(tu.seconds for tu in tus if tu.file in parsed), 1),
            "workers": jobs or default_jobs(),
        }
    )
    if changed_headers:
        included = {path for tu in ok for path in tu.includes}
        orphans = sorted(set(changed_headers) - included)
        summary["headers_in_no_tu_count"] = len(orphans)
        summary["headers_in_no_tu"] = orphans[:5]
    restore_fast(conn)
    summary["merge"] = merge(conn, ok).as_dict()
    summary["seconds"] = round(time.perf_counter() - started, 1)
    return summary


def _jobs(workspace: Workspace, database: CompileDatabase) -> tuple[list[TuJob], list[str]]:
    root = str(workspace.source.resolve())
    templates = tuple(
        workspace.manifest.list("precise", "autograd_function_templates")
        or DEFAULT_AUTOGRAD_TEMPLATES
    )
    jobs: list[TuJob] = []
    cuda: list[str] = []
    for command in database.commands:
        if is_cuda(command.file, command.arguments):
            cuda.append(str(Path(command.file).resolve().relative_to(root)))
            continue
        jobs.append(
            TuJob(
                command.file,
                command.directory,
                command.arguments,
                root,
                templates,
                workspace.manifest,
            )
        )
    return jobs, cuda


def _parse_all(
    jobs: list[TuJob], cache: TuCache, workers: int | None, report: Report
) -> tuple[list[TuFacts], set[str]]:
    """Every TU's facts, from the cache or parsed; and the files of those parsed."""
    results: list[TuFacts] = []
    todo: list[TuJob] = []
    for job in jobs:
        cached = cache.get(job)
        if cached is None:
            todo.append(job)
        else:
            results.append(cached)
    total = len(jobs)
    report("precise", len(results), total)
    parsed: set[str] = set()
    for job, facts in _run(todo, workers or default_jobs()):
        cache.put(job, facts)
        results.append(facts)
        parsed.add(facts.file)
        report("precise", len(results), total)
    results.sort(key=lambda tu: tu.file)
    return results, parsed


def _run(jobs: list[TuJob], workers: int):
    if not jobs:
        return
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            yield job, parse_tu(job)
        return
    # forkserver: safe when the caller has threads (the MCP server builds in the background).
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ordered = sorted(jobs, key=lambda job: -_size(job.file))  # big TUs first: a short tail
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context(method)
    )
    try:
        futures = [(job, pool.submit(parse_tu, job)) for job in ordered]
        for job, future in futures:
            try:
                facts = future.result()
            except BrokenProcessPool:
                # libclang crashed a worker: this TU (and those queued with it) fail, named.
                facts = _crashed(job)
            yield job, facts
    finally:
        # A cancelled build (the MCP server's) does not wait for the TUs not started.
        pool.shutdown(wait=True, cancel_futures=True)


def _crashed(job: TuJob) -> TuFacts:
    rel = str(Path(job.file).resolve().relative_to(job.root))
    return TuFacts(rel, False, "the libclang worker parsing it crashed")


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
