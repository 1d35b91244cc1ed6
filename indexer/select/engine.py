"""The selection: a pure function of a current index, a diff and the record.

diff -> placement -> record -> static walk (impact, fallbacks, granularity) -> merge
(``indexer.select.merge``: the record decides the tests it trusts, for the changes it
answers; the static walk decides the rest) -> Selection. The index
is brought up to date before (``indexer.refresh``, by ``indexer.select_changes``, the
entry of the plugin, ``torchtalk select`` and the audit); nothing here writes
(docs/selection.md)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

from indexer.errors import TorchTalkError, UsageError
from indexer.extract.discover import is_test_file
from indexer.graph.vocabulary import Extractor
from indexer.paths import printable
from indexer.query.index import Index
from indexer.select.chains import reasons_for
from indexer.select.diff import Diff
from indexer.select.fallback import apply_fallbacks
from indexer.select.granularity import narrow
from indexer.select.impact import ImpactWalker
from indexer.select.merge import (
    DIRECT,
    StaticEvidence,
    answered_by_record,
    merge,
    settle_unreached,
    walk_order,
)
from indexer.select.model import ChangedFile, Entity, Reason, SelectedFile, Selection
from indexer.select.placement import Placer, categorize
from indexer.select.reach import Reach
from indexer.select.record_join import consult_record
from indexer.workspace import Workspace

FAST, PRECISE = Extractor.FAST.value, Extractor.PRECISE.value


def _base_info(diff: Diff) -> dict:
    base = diff.base
    return {
        "rev": base.rev,
        "commit": base.commit,
        "merge_base": base.merge_base,
        "head": base.head,
        "chosen_by": base.chosen_by,
    }


def _index_info(workspace: Workspace, index: Index | None) -> dict:
    info = {"db_path": str(workspace.db_path), "exists": index is not None}
    if index is not None:
        info.update(
            git_commit=index.meta.get("git_commit") or None,
            built_at=index.meta.get("built_at"),
        )
    return info


def select_tests(
    workspace: Workspace,
    index: Index,
    diff: Diff,
    record: Path | Literal[False] | None = None,
) -> Selection:
    """The tests that ``diff`` can break, by an index that describes the tree (brought
    up to date first: ``indexer.refresh.current_index``). Reads the index, the tree and
    the record; writes nothing.

    ``record``: the recorded run to decide recorded tests by (None: the one beside the
    index, if any; False: none, the static walk alone).
    """
    started = time.perf_counter()
    selection = Selection(
        str(workspace.source), workspace.harness, _base_info(diff), _index_info(workspace, index)
    )
    try:
        tests = index.test_file_paths()
        selection.test_files_total = len(tests)
        _select(workspace, index, diff, selection, tests, record)
    except (sqlite3.DatabaseError, TorchTalkError) as exc:  # damaged past its header
        if isinstance(exc, UsageError):
            raise
        return run_everything(workspace, diff, f"the index cannot be used ({exc})")
    selection.timings["total_s"] = time.perf_counter() - started
    return selection


def run_everything(
    workspace: Workspace, diff: Diff, why: str, index: Index | None = None
) -> Selection:
    """Every test runs, for ``why``: no index, a damaged one, or (``index``) one that does
    not describe the tree. The changed files are still listed, so the header counts them
    rather than "0 files"."""
    selection = Selection(
        str(workspace.source), workspace.harness, _base_info(diff), _index_info(workspace, index)
    )
    for change in diff.files:
        category, _ = categorize(change.path, workspace.manifest)
        old = printable(change.old_path) if change.old_path else None
        selection.changed_files.append(
            ChangedFile(printable(change.path), old, change.status, category)
        )
    if index is None:
        selection.index["problem"] = why
    else:
        selection.test_files_total = len(index.test_file_paths())
    selection.everything.append(why)
    return selection


def _select(
    workspace: Workspace,
    index: Index,
    diff: Diff,
    selection: Selection,
    tests: dict[int, str],
    record: Path | Literal[False] | None = None,
) -> None:
    manifest = workspace.manifest
    phase = time.perf_counter()
    placer = Placer(diff, index, manifest)
    direct: dict[str, str] = {}
    for change in diff.files:
        placed = placer.place(change)
        selection.changed_files.append(placed.changed)
        selection.entities += placed.entities
        selection.notes += placed.notes
        if placed.everything:
            selection.everything.append(placed.everything)
        for path, why in placed.test_files.items():
            direct.setdefault(path, why)
    if diff.files:
        for path, problem in unindexed_tests(index, manifest):
            direct.setdefault(
                path, f"{path} could not be indexed ({problem}): what it tests is unknown"
            )
    selection.timings["placement_s"] = time.perf_counter() - phase
    if selection.everything:
        return
    phase = time.perf_counter()
    answer = None
    if record is not False:
        answer = consult_record(workspace, index, diff, selection.entities, record)
    if answer is not None:
        selection.record = answer.summary
        selection.notes += answer.notes
    selection.timings["record_s"] = time.perf_counter() - phase
    phase = time.perf_counter()
    # The index describes the tree (``indexer.refresh``): the hub's kept walk may be used.
    walker = ImpactWalker(index, splice_hub=True)
    static = StaticEvidence()
    reach: Reach | None = None
    for group in walk_order(len(selection.entities), answered_by_record(answer)):
        part = walker.walk(_starts(selection.entities, group))
        found = apply_fallbacks(index, walker, part, placer, selection, set(tests), group)
        static.covers.update(found.covers)
        static.unreached += found.unreached
        if reach is None:
            reach = part
        else:
            reach.merge(part)
    settle_unreached(selection, static, answer, tests.values())
    if walker.hub_use:
        selection.index["hub_walk"] = walker.hub_use
    selection.timings["impact_s"] = time.perf_counter() - phase
    if selection.everything:
        return
    phase = time.perf_counter()
    _collect(index, reach or Reach(), selection, direct, tests, static)
    merge(selection, static, answer)
    selection.timings["granularity_s"] = time.perf_counter() - phase


def unindexed_tests(index: Index, manifest) -> list[tuple[str, str]]:
    """(path, problem) of the test files the build found but could not index (a name
    that is not UTF-8): what they reach is unknown, so a selection keeps them."""
    return [
        (problem["path"], problem["problem"])
        for problem in index.meta_json("tree_problems", [])
        if isinstance(problem, dict)
        and problem.get("kind") == "file"
        and is_test_file(str(problem.get("path", "")), manifest)
    ]


def _starts(entities: list[Entity], positions: list[int] | None = None) -> dict[int, int]:
    """node id -> position of the first entity holding it (of ``positions``, else all)."""
    starts: dict[int, int] = {}
    for position in range(len(entities)) if positions is None else positions:
        for node_id in entities[position].node_ids:
            starts.setdefault(node_id, position)
    return starts


def _collect(
    index: Index,
    reach: Reach,
    selection: Selection,
    direct: dict[str, str],
    tests: dict[int, str],
    static: StaticEvidence,
) -> None:
    paths = index.file_paths()  # read once per index (the test files were made from it)
    by_file: dict[str, list[int]] = {}
    test_path = tests.get
    for node_id, file_id in reach.file_id.items():  # a central change's ~80,000
        path = test_path(file_id)
        if path is not None:
            by_file.setdefault(path, []).append(node_id)
    cuda_only = bool(selection.entities) and all(e.cuda for e in selection.entities)
    for raw, reason in direct.items():
        path = printable(raw)  # a name that is not UTF-8 is keyed as reports show it
        selected = selection.files.setdefault(path, SelectedFile(path))
        selected.reasons.append(Reason(path, f"{path}:1", note=reason))
        static.sources.setdefault(path, set()).add(DIRECT)
    # Each file's reason: the chain to its nearest reached node.
    ordered = sorted(by_file.items())
    depth = reach.depth.get
    firsts = [
        node_ids[0] if len(node_ids) == 1 else min(node_ids, key=lambda n: depth(n, 0))
        for _, node_ids in ordered
    ]
    reasons = reasons_for(index, reach, firsts, selection.entities, paths)
    origin = reach.origin.__getitem__
    for (path, node_ids), reason in zip(ordered, reasons, strict=True):
        selected = selection.files.setdefault(path, SelectedFile(path))
        selected.reasons.append(reason)
        static.sources.setdefault(path, set()).update(map(origin, node_ids))
        narrow(index, reach, selected, node_ids, cuda_only)
    selection.files = dict(sorted(selection.files.items()))
