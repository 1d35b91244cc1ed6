"""Run the extractors over many files in a process pool, streaming results back.

Workers read and parse; the caller (the single writer) stores each result as it arrives,
so memory holds a bounded number of files' facts, never a whole tree's ASTs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from indexer.errors import UsageError
from indexer.extract.context import TreeContext
from indexer.extract.discover import SourceEntry
from indexer.extract.extractor import Extractor, load_extractors
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts
from indexer.graph.vocabulary import NodeKind
from indexer.harness import Manifest

# Below this many files a pool costs more to start (a forkserver, tree-sitter loaded in
# every worker: about 2 s) than it saves.
POOL_THRESHOLD = 200
UNREADABLE = "unreadable: "  # how a file's error begins when it could not be read
CHUNK_FILES = 32

_worker_state: dict[str, object] = {}  # per worker process: its root and extractors


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def extract_file(
    root: Path,
    entry: SourceEntry,
    extractors: list[Extractor],
    max_bytes: int,
    context: TreeContext | None = None,
) -> FileFacts:
    """All facts of one file. Never raises for a bad file: the problem is recorded on it."""
    facts = FileFacts(entry.path, entry.language, sha="", size=entry.size)
    if entry.size > max_bytes:
        facts.error = f"over the size limit ({entry.size} > {max_bytes} bytes); not indexed"
        facts.add_node(NodeKind.FILE.value, entry.path.rsplit("/", 1)[-1], entry.path, 1, 1, None)
        return facts
    try:
        data = (root / entry.path).read_bytes()
    except OSError as exc:
        facts.error = f"{UNREADABLE}{exc.strerror or exc}"
        facts.add_node(NodeKind.FILE.value, entry.path.rsplit("/", 1)[-1], entry.path, 1, 1, None)
        return facts
    facts.sha = content_hash(data)
    facts.size = len(data)
    line_count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    facts.add_node(
        NodeKind.FILE.value, entry.path.rsplit("/", 1)[-1], entry.path, 1, max(line_count, 1), None
    )
    if b"\0" in data[:8192]:
        facts.error = "binary content (NUL bytes); not indexed"
        return facts
    src = SourceFile(entry.path, data, entry.language, context)
    problems = []
    for extractor in extractors:
        if not extractor.wants(src):
            continue
        try:
            extractor.extract(src, facts)
        except Exception as exc:  # one bad file must not stop a tree; it is reported instead
            problems.append(f"{extractor.name} failed: {type(exc).__name__}: {exc}")
    if src.decode_error:
        problems.insert(0, src.decode_error)
    if problems:
        facts.error = "; ".join(problems)
    return facts


def _init_worker(root: str, manifest: Manifest, context: TreeContext | None) -> None:
    _worker_state["root"] = Path(root)
    _worker_state["extractors"] = load_extractors(manifest)
    _worker_state["context"] = context
    _worker_state["max_bytes"] = manifest.get("sources", "max_file_bytes", 4_000_000)


def _extract_chunk(entries: list[SourceEntry]) -> list[FileFacts]:
    root = _worker_state["root"]
    extractors = _worker_state["extractors"]
    max_bytes = _worker_state["max_bytes"]
    context = _worker_state["context"]
    return [
        extract_file(root, entry, extractors, max_bytes, context)  # type: ignore[arg-type]
        for entry in entries
    ]


def _chunks(entries: list[SourceEntry], size: int) -> Iterable[list[SourceEntry]]:
    for start in range(0, len(entries), size):
        yield entries[start : start + size]


def default_jobs() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def extract_all(
    root: Path,
    manifest: Manifest,
    entries: list[SourceEntry],
    jobs: int | None = None,
    context: TreeContext | None = None,
) -> Iterator[FileFacts]:
    """Facts for every entry, in no particular order; ``jobs`` None: one per core."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs must be a number of processes, at least 1 (got {jobs!r})")
    jobs = jobs or default_jobs()
    if jobs == 1 or len(entries) < POOL_THRESHOLD:
        _init_worker(str(root), manifest, context)
        for chunk in _chunks(entries, CHUNK_FILES):
            yield from _extract_chunk(chunk)
        return
    # Imported here: a selection imports this module for content_hash alone.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # forkserver: safe when the caller has threads (the MCP server builds in the background).
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    processes = multiprocessing.get_context(method)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=processes,
        initializer=_init_worker,
        initargs=(str(root), manifest, context),
    ) as pool:
        # Big files first keeps the tail of the run short.
        ordered = sorted(entries, key=lambda entry: -entry.size)
        for facts_list in pool.map(_extract_chunk, _chunks(ordered, CHUNK_FILES)):
            yield from facts_list
