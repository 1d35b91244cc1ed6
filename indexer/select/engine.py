"""The selection: a pure function of a current index, a diff and the record; writes
nothing (the index is made current before, by ``indexer.select_changes``).

place -> record evidence -> static evidence (walk, fallbacks, granularity) -> merge, by
the one rule: for the changes it answers, the record decides the tests it trusts; the
static walk decides the rest (docs/selection.md, "Evidence: one merge rule")."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from indexer.diff import Diff
from indexer.errors import TorchTalkError, UsageError
from indexer.extract.discover import is_test_file
from indexer.paths import printable
from indexer.query.index import Index
from indexer.select.fallback import apply_fallbacks
from indexer.select.granularity import narrow
from indexer.select.impact import ImpactWalker
from indexer.select.model import ChangedFile, Entity, Reason, SelectedFile, Selection
from indexer.select.placement import Placer, categorize
from indexer.select.reach import Reach, reasons_for
from indexer.select.record_join import RecordAnswer, consult_record
from indexer.workspace import Workspace

DIRECT = -1  # the source of a test file selected for itself (changed, not indexable)


@dataclass
class StaticEvidence:
    """What the static walk found, before the record is laid over it."""

    # test file -> positions of the entities credited with reaching it (DIRECT: itself)
    sources: dict[str, set[int]] = field(default_factory=dict)
    # position of each widened entity -> the positions of the entities it stands for
    covers: dict[int, list[int]] = field(default_factory=dict)
    # (position, what names it) of the entities nothing reaches, even widened
    unreached: list[tuple[int, str]] = field(default_factory=list)


def answered_by_record(answer: RecordAnswer | None) -> frozenset[int]:
    """Positions of the changed entities the record answers for (none when unused)."""
    return frozenset(answer.answered) if answer is not None and answer.used else frozenset()


def walk_order(positions: int, answered: frozenset[int]) -> list[list[int]]:
    """The entity groups the static walk walks one after the other: first those the
    record does not answer, so a file they reach is credited to one of them (a walk
    credits each node to the first entity reaching it), then the others."""
    first = [p for p in range(positions) if p not in answered]
    second = [p for p in range(positions) if p in answered]
    return [group for group in (first, second) if group]


def _the_records(static: StaticEvidence, answered: frozenset[int], position: int) -> bool:
    """Whether the record answers for the entity at ``position`` (a widened entity: for
    every entity it stands for)."""
    covered = static.covers.get(position)
    if covered:
        return all(p in answered for p in covered)
    return position in answered


def settle_unreached(
    selection: Selection,
    static: StaticEvidence,
    answer: RecordAnswer | None,
    test_paths: Iterable[str],
) -> None:
    """An entity nothing reaches, even widened: one the record answers selects every test
    file for the tests the record does not decide; any other runs everything."""
    answered = answered_by_record(answer)
    for position, label in static.unreached:
        entity = selection.entities[position]
        if not _the_records(static, answered, position):
            selection.everything.append(
                f"nothing in the index reaches {label} (changed at {entity.evidence}): "
                "its users are invisible to the index (generated code, function pointers, "
                "dynamic lookup), so any test may reach it"
            )
            continue
        why = (
            f"nothing in the index reaches {entity.label} (changed at {entity.evidence}) but "
            "its ops: which tests run them is the record's answer; the tests it does not "
            "decide may reach it"
        )
        for path in test_paths:
            selected = selection.files.setdefault(path, SelectedFile(path))
            selected.reasons.append(Reason(entity.label, entity.evidence, note=why))
            static.sources.setdefault(path, set()).add(position)


def merge(selection: Selection, static: StaticEvidence, answer: RecordAnswer | None) -> None:
    """Lay the record's decisions over the static evidence in ``selection.files``, by
    the rule above."""
    answered = answered_by_record(answer)
    if answer is None or not answered:
        return  # the static evidence decides every test
    for path, selected in selection.files.items():
        sources = static.sources.get(path, ())
        record_only = all(_the_records(static, answered, p) for p in sources)
        selected.static_for = "unrecorded" if record_only else "all"
        selected.decided = answer.decided.get(path, set())
        selected.undecided = answer.undecided.get(path, 0)
    for path, groups in answer.selected.items():
        selected = selection.files.get(path)
        if selected is None:
            selected = selection.files[path] = SelectedFile(path, static_for=None)
            selected.decided = answer.decided.get(path, set())
            selected.undecided = answer.undecided.get(path, 0)
        selected.recorded_groups = groups
    selection.files = dict(sorted(selection.files.items()))


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
    """The tests that ``diff`` can break, by an index that describes the tree; writes
    nothing. ``record``: the recorded run (None: the one beside the index, if any; False:
    none, the static walk alone)."""
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
