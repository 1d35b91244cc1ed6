"""What a recorded run adds to the MCP answers: the tests that really executed a thing.

`affected` and `tests` answer from the static graph; where a record lies beside the
index, they also say which recorded tests executed the op (or ran the function, or an op
whose kernel reaches the C++ function): "tests that really run aten::mm: 31 in 4 files
(record of abc123, 2d old)". The same join as selection (``indexer.query.native_reach``
up to the ops, then the record), without a diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.query import adjacency
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.native_reach import NATIVE, NativeReach, walk_native
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.record.storage import RecordError
from indexer.snapshot.fingerprint import short_commit
from indexer.wording import age, plural

SHOWN = 5  # node ids listed per answer; the structured data has them all


def recorded_names(
    index: Index, runs: RecordedRuns, nodes: list[Node], native: NativeReach | None = None
) -> list[tuple[str, str]]:
    """The record's names standing for ``nodes``: the ops (any overload), bindings and C++
    autograd functions' nodes their native code reaches, or the Python functions themselves. ``native``: the
    caller's own :func:`native_walk` of ``nodes``, when it has one (walked once)."""
    names: list[tuple[str, str]] = []
    reach = native if native is not None else native_walk(index, nodes)
    if reach is not None:
        for node in index.nodes(reach.ops):
            names += runs.matching_names("op", node.qualname.split(".", 1)[0])
        for node in index.nodes(reach.bindings):
            names += runs.binding_names(node.qualname)
        for function in reach.backwards.values():
            names += runs.autograd_node_names(function)
    for node in nodes:
        if node.kind.startswith("python") or node.kind == "test_utility":
            short = node.qualname.rsplit(".", 1)[-1]
            names += [
                n for n in runs.matching_names("function", short)
                if n[1].startswith(node.path + ":")
            ]  # fmt: skip
    return names


@dataclass
class RecordEvidence:
    """What a usable record says about some nodes: the recorded tests that executed them,
    and the lines an answer shows for it (:meth:`add_to`)."""

    tests: list[str] = field(default_factory=list)  # node ids of the tests that ran them
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_to(self, answer: Answer) -> None:
        answer.items[0:0] = self.items
        answer.notes.extend(self.notes)


def native_walk(index: Index, nodes: list[Node]) -> NativeReach | None:
    """The ops and bindings whose execution reaches the native ones of ``nodes`` (None:
    no native node). ``affected`` walks once and hands the walk to :func:`record_evidence`."""
    native = [node.id for node in nodes if node.kind in NATIVE]
    if not native:
        return None
    # The edges in memory when this process holds them (a server, once idle): the same
    # walk without a query per node.
    return walk_native(index, native, frozenset(), graph=adjacency.held(index.db_path, index.meta))


def add_record_evidence(index: Index, answer: Answer, nodes: list[Node], what: str) -> None:
    """Add to ``answer`` the recorded tests that executed ``nodes`` (named ``what``), when a
    usable record lies beside the index; say why not when one is there but unusable."""
    evidence = record_evidence(index, nodes, what)
    if evidence is not None:
        evidence.add_to(answer)


def record_evidence(
    index: Index, nodes: list[Node], what: str, native: NativeReach | None = None
) -> RecordEvidence | None:
    """The record's evidence on ``nodes`` (named ``what``); None when no record lies
    beside the index, a note saying why when one is there but unusable. ``native``: the
    caller's :func:`native_walk` of ``nodes``, if it made one."""
    path = record_path_for(index.db_path)
    try:
        runs = RecordedRuns.cached(path)
    except FileNotFoundError:
        return None
    except (RecordError, OSError) as exc:
        return RecordEvidence(notes=[f"the record beside the index cannot be used: {exc}"])
    try:  # the record is read as it is asked: damage found on the way refuses it whole
        return _evidence(index, runs, nodes, what, native)
    except RecordError as exc:
        return RecordEvidence(notes=[f"the record beside the index cannot be used: {exc}"])


def _evidence(
    index: Index, runs: RecordedRuns, nodes: list[Node], what: str, native: NativeReach | None
) -> RecordEvidence:
    names = recorded_names(index, runs, nodes, native)
    hits = runs.tests_executing(names)
    tests = sorted(runs.nodeid(i) for i in hits)
    files = sorted({runs.file_of(i) for i in hits})
    label = (
        f"record of {short_commit(runs.record.meta.get('commit')) or '?'}, "
        f"{age(runs.age_seconds())} old, {len(runs.record.tests)} tests"
    )
    ops = sorted({text for kind, text in names if kind == "op"})
    through = ""
    if ops and what not in ops:
        through = f" (through {plural(len(ops), 'op')}: {', '.join(ops[:3])}"
        through += ", ...)" if len(ops) > 3 else ")"
    head = (
        f"tests that really run {what}{through}: {len(tests)} in "
        f"{plural(len(files), 'file')} ({label})"
    )
    modules = sorted(runs.import_work(names))
    if not names:
        head = f"no recorded test ran {what} ({label})"
    elif not tests and not modules:
        head = f"no recorded test ran {what}, though the record holds it ({label})"
    data = {"tests": tests, "ops": ops, "run_at_import_of": modules}
    evidence = RecordEvidence(tests, [Item(head, data={"record": data})])
    if modules:
        importers = runs.importers(modules)
        shown = ", ".join(modules[:3]) + (", ..." if len(modules) > 3 else "")
        evidence.notes.append(
            f"{what} also runs while {plural(len(modules), 'module')} of the tree "
            f"{'is' if len(modules) == 1 else 'are'} imported ({shown}): "
            f"{plural(len(importers), 'recorded test')} import {'it' if len(modules) == 1 else 'them'}"
        )
    evidence.items += [Item(nodeid, depth=1) for nodeid in tests[:SHOWN]]
    if len(tests) > SHOWN:
        evidence.items.append(Item(f"{len(tests) - SHOWN} more recorded tests", depth=1))
    return evidence
