"""One selection engine behind ``pytest --torchtalk-affected``, ``torchtalk select`` and
the MCP ``affected`` tool: diff -> placement -> impact -> granularity -> Selection."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

from indexer.errors import IndexMissingError, TorchTalkError, UsageError
from indexer.extract.discover import is_test_file
from indexer.graph.vocabulary import Extractor
from indexer.paths import printable
from indexer.query.index import Index
from indexer.select.diff import Diff, read_diff
from indexer.select.fallback import apply_fallbacks
from indexer.select.granularity import narrow
from indexer.select.hub import find_hub as hub_node
from indexer.select.impact import ImpactWalker
from indexer.select.indirect_uses import READS_PATH
from indexer.select.model import ChangedFile, Entity, Hop, Reason, SelectedFile, Selection
from indexer.select.placement import Placer, categorize
from indexer.select.reach import Reach
from indexer.select.record_join import RecordAnswer, consult_record
from indexer.select.staleness import check_freshness, try_update
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


def _open(workspace: Workspace) -> tuple[Index | None, str | None]:
    """The index, or None and why there is none usable. A damaged index is no index: the
    selection runs everything saying so, as without one (docs/reliability.md)."""
    rebuild = f"run 'torchtalk index build --source {workspace.source}'"
    try:
        return Index(workspace.db_path), None
    except IndexMissingError:
        return None, (
            f"no index of {workspace.source} ({workspace.harness}) at {workspace.db_path}: "
            f"{rebuild}"
        )
    except TorchTalkError as exc:
        return None, f"the index cannot be used ({exc}): {rebuild}"


def select_tests(
    workspace: Workspace,
    base: str | None = None,
    *,
    update: bool = True,
    record: Path | Literal[False] | None = None,
) -> Selection:
    """The tests that the changes of ``workspace.source`` since ``base`` can break.

    ``record``: the recorded run to decide recorded tests by (None: the one beside the
    index, if any; False: none, the static walk alone).

    Raises a UsageError for a tree that is not a git repository or an unknown base.
    """
    started = time.perf_counter()
    diff = read_diff(workspace.source, base)
    timings = {"diff_s": time.perf_counter() - started}
    index, unusable = _open(workspace)
    selection = Selection(
        str(workspace.source), workspace.harness, _base_info(diff), _index_info(workspace, index)
    )
    selection.timings = timings
    if index is None:
        _without_index(workspace, diff, selection, str(unusable))
        return selection
    try:
        index = _ensure_fresh(workspace, index, diff, selection, update)
        tests = test_files(index, workspace.manifest)
        selection.test_files_total = len(tests)
        if not selection.everything:
            _select(workspace, index, diff, selection, tests, record)
    except (sqlite3.DatabaseError, TorchTalkError) as exc:  # damaged past its header
        if isinstance(exc, UsageError):
            raise
        selection = Selection(
            str(workspace.source), workspace.harness, _base_info(diff), _index_info(workspace, None)
        )
        selection.timings = timings
        _without_index(workspace, diff, selection, f"the index cannot be used ({exc})")
        return selection
    finally:
        index.close()
    timings["total_s"] = time.perf_counter() - started
    return selection


def _without_index(workspace: Workspace, diff: Diff, selection: Selection, why: str) -> None:
    """Everything runs, for ``why``; the changed files are still listed."""
    _list_changes(workspace, diff, selection)
    selection.index["problem"] = why
    selection.everything.append(why)


def _list_changes(workspace: Workspace, diff: Diff, selection: Selection) -> None:
    """The changed files, by category, for a selection that runs everything unplaced."""
    for change in diff.files:
        category, _ = categorize(change.path, workspace.manifest)
        old = printable(change.old_path) if change.old_path else None
        selection.changed_files.append(
            ChangedFile(printable(change.path), old, change.status, category)
        )


def _ensure_fresh(
    workspace: Workspace, index: Index, diff: Diff, selection: Selection, update: bool
) -> Index:
    phase = time.perf_counter()
    freshness = check_freshness(workspace, index, diff)
    selection.index["stale"] = not freshness.fresh
    if not freshness.fresh:
        stale = freshness.describe()
        if update:
            index.close()
            updated, how = try_update(workspace)
            index = Index(workspace.db_path)
        else:
            updated, how = False, "updating it was turned off"
        selection.index["update"] = how
        after = check_freshness(workspace, index, diff) if updated else freshness
        selection.index["updated"] = updated
        selection.index.update(_index_info(workspace, index))
        if after.fresh:
            selection.notes.append(f"the index was stale ({stale}); {how}")
        else:
            selection.everything.append(
                f"the index is stale ({after.describe()}) and {how}: running everything"
            )
            _list_changes(workspace, diff, selection)  # the header counts them, not "0 files"
    selection.timings["freshness_s"] = time.perf_counter() - phase
    return index


def test_files(index: Index, manifest) -> dict[int, str]:
    """file id -> path of every indexed test file (the manifest's dirs and patterns)."""
    return {
        file_id: path
        for file_id, path in index.conn.execute("SELECT id, path FROM files")
        if is_test_file(path, manifest)
    }


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
    # The index describes the tree (``_ensure_fresh``): the hub's kept walk may be used.
    # With a record, this walk answers for the tests the record does not decide.
    walker = ImpactWalker(index, workspace.source, splice_hub=True)
    reach = walker.walk(_starts(selection.entities))
    recorded = frozenset(answer.answered) if answer is not None and answer.used else frozenset()
    widened = apply_fallbacks(
        index, walker, reach, placer, selection, set(tests), recorded, tests.values()
    )
    if answer is not None:
        answer.answered |= widened
    if walker.hub_use:
        selection.index["hub_walk"] = walker.hub_use
    selection.timings["impact_s"] = time.perf_counter() - phase
    if selection.everything:
        return
    phase = time.perf_counter()
    _collect(index, reach, selection, direct, tests)
    if answer is not None and answer.used:
        _apply_record(walker, selection, answer, direct, tests)
    selection.timings["granularity_s"] = time.perf_counter() - phase


def _apply_record(
    walker: ImpactWalker,
    selection: Selection,
    answer: RecordAnswer,
    direct: dict[str, str],
    tests: dict[int, str],
) -> None:
    """Lay the record's decisions over the static selection: the static evidence of an
    entity the record answers applies only to the tests the record does not decide."""
    others = [i for i in range(len(selection.entities)) if i not in answer.answered]
    if not answer.answered:
        return  # every entity is the static walk's, for every test
    static_all: set[str] = set(direct)
    if others:
        starts = _starts(selection.entities, others)
        reached = walker.walk(starts)
        static_all |= {tests[f] for f in reached.file_id.values() if f in tests}
    for path, selected in selection.files.items():
        selected.static_for = "all" if path in static_all else "unrecorded"
        selected.decided = answer.decided.get(path, set())
        selected.undecided = answer.undecided.get(path, 0)
    for path, chosen in answer.selected.items():
        selected = selection.files.get(path)
        if selected is None:
            selected = selection.files[path] = SelectedFile(path, static_for=None)
            selected.decided = answer.decided.get(path, set())
            selected.undecided = answer.undecided.get(path, 0)
        selected.recorded = dict(sorted(chosen.items()))
    selection.files = dict(sorted(selection.files.items()))


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


def _label(nodes: dict[int, object], node_id: int) -> str:
    node = nodes.get(node_id)
    return getattr(node, "qualname", str(node_id))


def _kind(nodes: dict[int, object], node_id: int) -> str:
    return getattr(nodes.get(node_id), "kind", "")


def _collect(
    index: Index,
    reach: Reach,
    selection: Selection,
    direct: dict[str, str],
    tests: dict[int, str],
) -> None:
    paths = dict(index.conn.execute("SELECT id, path FROM files"))
    by_file: dict[str, list[int]] = {}
    for node_id, file_id in reach.file_id.items():
        if file_id in tests:
            by_file.setdefault(tests[file_id], []).append(node_id)
    cuda_only = bool(selection.entities) and all(e.cuda for e in selection.entities)
    for raw, reason in direct.items():
        path = printable(raw)  # a name that is not UTF-8 is keyed as reports show it
        selected = selection.files.setdefault(path, SelectedFile(path))
        selected.reasons.append(Reason(path, f"{path}:1", note=reason))
    # Each file's nearest reached node, and the nodes of all their chains read at once
    # (a central change selects ~900 files, each chain ~15 hops).
    firsts = {
        path: min(node_ids, key=lambda n: reach.depth.get(n, 0))
        for path, node_ids in by_file.items()
    }
    chains = {path: reach.chain(first) for path, first in firsts.items()}
    ids = set(firsts.values())
    for steps in chains.values():
        ids.update(step.src for step in steps)
        ids.update(step.dst for step in steps)
    nodes = {node.id: node for node in index.nodes(ids)}
    precise = index.precise_edges()
    for path, node_ids in sorted(by_file.items()):
        selected = selection.files.setdefault(path, SelectedFile(path))
        reason = _reason(
            reach, firsts[path], chains[path], selection.entities, paths, nodes, precise
        )
        selected.reasons.append(reason)
        narrow(index, reach, selected, node_ids, cuda_only)
    selection.files = dict(sorted(selection.files.items()))


def reasons_for(
    index: Index,
    reach: Reach,
    node_ids: list[int],
    entities: list[Entity],
    paths: dict[int, str],
) -> list[Reason]:
    """The chain of steps from a changed entity out to each of ``node_ids``, with
    evidence; the nodes of all the chains read in one query (``affected`` gives each of
    its 50 files a chain)."""
    chains = [reach.chain(node_id) for node_id in node_ids]
    ids = set(node_ids)
    for steps in chains:
        ids.update(step.src for step in steps)
        ids.update(step.dst for step in steps)
    nodes = {node.id: node for node in index.nodes(ids)}
    precise = index.precise_edges()
    return [
        _reason(reach, node_id, steps, entities, paths, nodes, precise)
        for node_id, steps in zip(node_ids, chains, strict=True)
    ]


def _reason(
    reach: Reach,
    node_id: int,
    steps: list,
    entities: list[Entity],
    paths: dict[int, str],
    nodes: dict[int, object],
    precise: frozenset[tuple[int, int, int]] = frozenset(),
) -> Reason:
    entity = entities[reach.origin[node_id]]
    hops = [
        Hop(
            step.kind,
            _label(nodes, step.src),
            _label(nodes, step.dst),
            f"{paths.get(step.file_id, '?')}:{step.line}",
            _kind(nodes, step.src),
            _kind(nodes, step.dst),
            PRECISE if (step.src, step.dst, step.line) in precise else FAST,
        )
        for step in steps
    ]
    if not hops:
        node = nodes.get(node_id)
        note = f"{node.qualname} changed" if node is not None else ""
        if entity.kind == READS_PATH:
            note = entity.reason  # the test itself is unchanged: it reads a changed file
        return Reason(entity.label, entity.evidence, note=note)
    return Reason(entity.label, entity.evidence, hops)


# Ops from which ``keep_hub_walk`` keeps chains to the hub, the most used first: a
# central change's walk meets one within a few hops and follows it (indexer.select.witness).
SEEDED_OPS = 400
SEEDING_S = 30.0  # and no longer than this


def keep_hub_walk(workspace: Workspace) -> str | None:
    """Walk from the hub of the workspace's index and keep that walk next to it, as the
    first selection reaching the hub would, and keep chains to the hub from the most used
    ops: after ``torchtalk index build`` a central change is answered at once. The index
    was just built from the tree, so the text the walks read is what it describes. None
    when no test file imports a package."""
    index = Index(workspace.db_path)
    try:
        walker = ImpactWalker(index, workspace.source, splice_hub=True)
        hub = hub_node(index)
        if hub is None:
            return None
        walker.walk({hub: 0})
        started = time.perf_counter()
        tried = reached = 0
        for op in _most_used_ops(index, SEEDED_OPS):
            if time.perf_counter() - started > SEEDING_S:
                break
            tried += 1
            reached += walker.chain_to_hub(op)
        walker.save()
        return f"{walker.hub_use}; chains to it kept from {reached} of the {tried} most used ops"
    finally:
        index.close()


def _most_used_ops(index: Index, count: int) -> list[int]:
    """Ops by how many edges lead into them (calls, references, dispatches), most first."""
    return [
        op
        for (op,) in index.conn.execute(
            "SELECT e.dst_id FROM edges e JOIN nodes d ON d.id = e.dst_id"
            " WHERE d.kind = 'op' AND e.kind IN ('calls', 'references', 'dispatches')"
            " GROUP BY e.dst_id ORDER BY COUNT(*) DESC, e.dst_id LIMIT ?",
            (count,),
        )
    ]


def select_for_source(
    source: str | Path | None, harness: str | None = None, base: str | None = None
) -> Selection:
    return select_tests(Workspace.resolve(source, harness), base)
