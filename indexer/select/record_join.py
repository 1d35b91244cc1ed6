"""Selection from a recorded run: which tests the record can speak for (trusted), which
ops and functions reach the change (the static C++ graph, an op by its family), and
which trusted tests executed them, or depend on what a module's import ran
(docs/selection.md, "Selection from a record")."""

from __future__ import annotations

import ast
import bisect
import json
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from indexer.diff import Diff
from indexer.graph.vocabulary import EdgeKind, NodeKind, edge_extractor
from indexer.paths import language_of
from indexer.query.index import Index, Node
from indexer.query.native_reach import NATIVE, NativeReach, walk_native
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.record.environment import current_environment, mismatch
from indexer.record.files import content_hash, path_of_name
from indexer.record.model import COMPLETE_OUTCOMES, Record
from indexer.record.storage import RecordError
from indexer.select.model import (
    EXECUTED,
    IMPORT_WORK,
    IMPORTED,
    USES,
    WITNESS,
    Entity,
    Hop,
    Reason,
    RecordedGroup,
)
from indexer.snapshot.fingerprint import git, is_ancestor, short_commit
from indexer.wording import age
from indexer.workspace import Workspace

OP = NodeKind.OP.value
DISPATCHES = EdgeKind.DISPATCHES.value
OVERLOAD = "overload of"  # a family hop between two overloads of one name
WRAPPER_KEYS = ("CompositeExplicitAutograd",)  # and ...NonFunctional: a prefix
API_PREFIXES = ("at::", "::at::", "torch::")
DEFAULT_MAX_AGE_DAYS = 30
PY_FUNCTION = NodeKind.PYTHON_FUNCTION.value
TEST_UTILITY = NodeKind.TEST_UTILITY.value
CUDA_KERNEL = NodeKind.CUDA_KERNEL.value
MODULE_KINDS = frozenset({NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value})
# Outcomes that repeat where the environment and the code they ran are the same: a test
# that stopped early ran the same code up to the same stop (docs/selection.md).
FAILURES = frozenset({"failed", "error"})
REPEATABLE = frozenset({"skipped", "xfailed"}) | FAILURES
Chains = dict[tuple[str, str], tuple[list[Hop], tuple[str, str, str]]]


def base_name(qualname: str) -> str:
    """``aten::sort.stable`` -> ``aten::sort``."""
    return qualname.split(".", 1)[0]


@dataclass
class Family:
    """Op names without overloads -> the hops from a reached op out to that name (user ->
    used, as every chain runs), in the order found."""

    hops: dict[str, list[Hop]] = field(default_factory=dict)
    reached_from: dict[str, int] = field(default_factory=dict)  # name -> the reached op id
    members: dict[str, Node] = field(default_factory=dict)  # name -> the op that brought it
    # each op of the family, by its full name, with the hops out to it
    by_qualname: dict[str, tuple[Node, list[Hop]]] = field(default_factory=dict)

    def path_to(self, recorded: str) -> tuple[Node, list[Hop]]:
        """The family's op a recorded name (any overload spelling) is, and the hops to it:
        that overload where the index holds it, else the first op of its name."""
        if recorded in self.by_qualname:
            return self.by_qualname[recorded]
        base = base_name(recorded)
        return self.members[base], self.hops[base]

    @property
    def names(self) -> list[str]:
        return list(self.hops)


def op_family(index: Index, op_ids: list[int]) -> Family:
    """The family of the ops ``op_ids`` (the ops a change reaches), closed over
    overloads and op-to-op dispatch; wrappers one hop from that closure."""
    family = Family()
    cache: dict[str, list[Node]] = {}
    queue: deque[tuple[Node, int, list[Hop], bool]] = deque()
    for node in index.nodes(op_ids):
        if node.kind == OP:
            queue.append((node, node.id, [], True))
    seen_nodes: set[int] = set()
    while queue:
        node, origin, hops, may_wrap = queue.popleft()
        if node.id in seen_nodes:
            continue
        seen_nodes.add(node.id)
        family.by_qualname.setdefault(node.qualname, (node, hops))
        base = base_name(node.qualname)
        if base not in family.hops:
            family.hops[base] = hops
            family.reached_from[base] = origin
            family.members[base] = node
        for other in _overloads(index, base, cache):
            if other.id not in seen_nodes:
                step = Hop(OVERLOAD, other.qualname, node.qualname, other.evidence, OP, OP)
                queue.append((other, origin, [*hops, step], may_wrap))
        for edge in index.in_edges(node.id, (DISPATCHES,)):
            if edge.src in seen_nodes:
                continue
            users = index.nodes([edge.src])
            if not users or users[0].kind != OP:
                continue
            user = users[0]
            step = Hop(DISPATCHES, user.qualname, node.qualname, edge.evidence, OP, OP)
            queue.append((user, origin, [*hops, step], may_wrap))
        if may_wrap:
            for wrapper, kernel, where in _wrappers(index, node):
                if wrapper.id in seen_nodes:
                    continue
                step = [
                    Hop(DISPATCHES, wrapper.qualname, kernel.qualname, where[0], OP,
                        kernel.kind),
                    Hop(EdgeKind.CALLS.value, kernel.qualname, node.qualname, where[1],
                        kernel.kind, OP),
                ]  # fmt: skip
                queue.append((wrapper, origin, [*hops, *step], False))
    return family


def _overloads(index: Index, base: str, cache: dict[str, list[Node]]) -> list[Node]:
    if base not in cache:
        short = base.rsplit("::", 1)[-1]
        rows = index.conn.execute(
            "SELECT n.id FROM nodes n WHERE n.kind = ? AND n.name = ?", (OP, short)
        ).fetchall()
        cache[base] = [
            n for n in index.nodes([r[0] for r in rows]) if base_name(n.qualname) == base
        ]
    return cache[base]


def _wrappers(index: Index, op: Node) -> list[tuple[Node, Node, tuple[str, str]]]:
    """(wrapper op, its kernel, (dispatch evidence, call evidence)) of the
    CompositeExplicitAutograd kernels calling ``op`` through its generated C++ API: a
    ``calls`` edge to the op (``at::sort(...)``, resolved by name), or a call the index
    left unresolved that names it (``at::cpu::sort_out``)."""
    if not op.qualname.startswith("aten::"):
        return []
    rows = index.conn.execute(
        "SELECT c.src_id, cf.path, c.line, d.src_id, df.path, d.line, d.attrs"
        " FROM edges c JOIN files cf ON cf.id = c.file_id"
        " JOIN edges d ON d.dst_id = c.src_id AND d.kind = ?"
        " JOIN files df ON df.id = d.file_id"
        " JOIN nodes w ON w.id = d.src_id AND w.kind = ?"
        " WHERE c.dst_id = ? AND c.kind = ?",
        (DISPATCHES, OP, op.id, EdgeKind.CALLS.value),
    ).fetchall()
    keys = [op.name, f"{op.name}_out", f"{op.name}_outf"]
    for row in index.conn.execute(
        "SELECT r.src_id, rf.path, r.line, e.src_id, ef.path, e.line, e.attrs, r.target"
        " FROM refs r JOIN files rf ON rf.id = r.file_id"
        " JOIN edges e ON e.dst_id = r.src_id AND e.kind = ?"
        " JOIN files ef ON ef.id = e.file_id"
        " JOIN nodes w ON w.id = e.src_id AND w.kind = ?"
        f" WHERE r.target_key IN ({','.join('?' * len(keys))}) AND r.scheme = 'cpp'"
        " AND NOT EXISTS (SELECT 1 FROM edges x WHERE x.ref_id = r.id)",
        (DISPATCHES, OP, *keys),
    ):
        if _names_api(row[7], keys):
            rows.append(row[:7])
    found = []
    for kernel_id, call_path, call_line, wrapper_id, disp_path, disp_line, attrs in rows:
        key = str((json.loads(attrs) if attrs else {}).get("key", ""))
        if not key.startswith(WRAPPER_KEYS):
            continue
        nodes = {n.id: n for n in index.nodes([wrapper_id, kernel_id])}
        if wrapper_id in nodes and kernel_id in nodes:
            where = (f"{disp_path}:{disp_line}", f"{call_path}:{call_line}")
            found.append((nodes[wrapper_id], nodes[kernel_id], where))
    return found


def _names_api(target: str, keys: list[str]) -> bool:
    """``at::sort``, ``at::cpu::sort_out``, ``self.sort`` (a method): the op's API."""
    head, _, last = target.rpartition("::")
    if last.split("<", 1)[0] not in keys:
        return False
    return not head or (head + "::").startswith(API_PREFIXES)


@dataclass(frozen=True)
class ImportUse:
    """One test selected because a module's import work ran a changed name."""

    module: str  # the module's path
    test: int  # index into the record's tests
    role: str  # IMPORTED, USES or WITNESS (indexer.select.model)
    name: int  # the id of a changed name the import work ran
    entered: str = ""  # for USES: the function of the module the test entered


def import_uses(
    runs: RecordedRuns,
    work: dict[str, set[int]],
    trusted: set[int],
    selected: set[int],
) -> list[ImportUse]:
    """The tests to select for ``work`` (module path -> ids of changed names its import
    ran), among the ``trusted`` test indexes; ``selected`` (test indexes already chosen,
    by any change) is where an importer to stand for all is looked for first, and grows
    with what this chooses."""
    test_files = runs.test_files()
    uses: list[ImportUse] = []
    for module, hits in sorted(work.items()):
        name = min(hits)
        if module in test_files:
            chosen = [ImportUse(module, i, IMPORTED, name)
                      for i in sorted(runs.tests_of_file(module)) if i in trusted]  # fmt: skip
        else:
            chosen = _users(runs, module, trusted, name)
            if not chosen:
                chosen = _witness(runs, module, trusted, selected, name)
        uses.extend(chosen)
        selected.update(use.test for use in chosen)
    return uses


def _users(runs: RecordedRuns, module: str, trusted: set[int], name: int) -> list[ImportUse]:
    functions = runs.functions_of(module)
    if not functions:
        return []
    out = []
    for index, entered in sorted(runs.tests_executing(functions).items()):
        if index in trusted:
            function = runs.record.names[min(entered)][1]
            out.append(ImportUse(module, index, USES, name, function))
    return out


def _witness(
    runs: RecordedRuns, module: str, trusted: set[int], selected: set[int], name: int
) -> list[ImportUse]:
    importers = runs.importers([module]) & trusted
    if not importers or importers & selected:
        # None recorded whole (the static walk decides those), or one already runs.
        return []
    tests = runs.record.tests
    quickest = min(importers, key=lambda i: (tests[i].duration, tests[i].nodeid))
    return [ImportUse(module, quickest, WITNESS, name)]


@dataclass
class RecordAnswer:
    """What the record decides for one selection."""

    summary: dict  # path, commit, age, used, why not, trusted / untrusted counts
    # test file -> node-id parts after the file ('TestFoo::test_bar[x]') of the tests the
    # record decides: each runs only if `selected` holds it (or static evidence for an
    # entity the record does not answer selects it)
    decided: Mapping[str, Collection[str]] = field(default_factory=dict)
    undecided: dict[str, int] = field(default_factory=dict)  # file -> tests held, not decided
    # test file -> the tests selected, grouped by the reason they share (a test keeps the
    # first reason that selected it); named only when asked (docs/selection.md, "Report")
    selected: dict[str, list[RecordedGroup]] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)  # positions of the entities it answers
    notes: list[str] = field(default_factory=list)

    @property
    def used(self) -> bool:
        return bool(self.summary.get("used"))


def consult_record(
    workspace: Workspace,
    index: Index,
    diff: Diff,
    entities: list[Entity],
    path: Path | None = None,
) -> RecordAnswer | None:
    """The record's answer for ``entities``; None when there is no record (``path``, else
    the one beside the index)."""
    if path is None:
        path = record_path_for(workspace.db_path)
    elif not path.is_file():
        return _unused({"path": str(path)}, f"the record cannot be used: no record at {path}")
    try:
        runs = RecordedRuns.cached(path)
    except FileNotFoundError:
        return None
    except (RecordError, OSError) as exc:
        return _unused({"path": str(path)}, f"the record cannot be used: {exc}")
    record = runs.record
    summary = {
        "path": str(path),
        "commit": record.meta.get("commit"),
        "created_at": record.meta.get("created_at"),
        "age_seconds": runs.age_seconds(),
        "tests": len(record.tests),
    }
    try:  # the record is read as it is asked: damage found on the way refuses it whole
        return _consult(workspace, index, diff, entities, runs, summary)
    except RecordError as exc:
        return _unused(summary, f"the record cannot be used: {exc}")


def _consult(
    workspace: Workspace,
    index: Index,
    diff: Diff,
    entities: list[Entity],
    runs: RecordedRuns,
    summary: dict,
) -> RecordAnswer:
    record = runs.record
    why_not = _unusable(workspace, diff, runs)
    if why_not:
        return _unused(summary, why_not)
    drift = _drift(workspace.source, record.meta["commit"], diff, record)
    if drift is None:
        return _unused(summary, "git cannot tell what changed since the record's commit")
    if drift.dirty:
        summary["differs_from_its_commit"] = sorted(drift.dirty)[:20]
    skips = skip_environment(runs)
    trust = _trust(runs, drift.to_base, skips)
    trusted_indexes, untrusted = trust.indexes, trust.untrusted
    answer = RecordAnswer(summary={**summary, "used": True})
    failing: list[int] = []  # trusted tests that failed or errored when recorded
    decided_counts: Counter = Counter()
    for (file, outcome, unrecorded), tests in runs.test_groups().items():
        trusted = trust.counts[(file, outcome, unrecorded)]
        decided_counts[file] += trusted
        if len(tests) - trusted:
            answer.undecided[file] = answer.undecided.get(file, 0) + len(tests) - trusted
        if outcome in FAILURES and trusted:
            failing.extend(i for i in tests if i in trusted_indexes)
    # Each file's decided tests are counted here, named only when something asks for them.
    answer.decided = _Decided(runs, trusted_indexes, +decided_counts)
    answer.summary["trusted_tests"] = len(trusted_indexes)
    answer.summary["untrusted_tests"] = dict(sorted(untrusted.items()))
    label = f"record of {short_commit(record.meta['commit'])}, {age(runs.age_seconds())} old"
    answer.summary["label"] = label
    chosen: set[int] = set()  # test indexes selected so far
    imported: list[tuple[int, Entity, Chains, dict[str, set[int]]]] = []
    # What a chain is made of -> (entity, how to make the chain, the tests it selected):
    # one chain per file and reason, not one per test (a broad change selects most of a
    # suite: docs/performance.md); each test keeps the first reason that selected it.
    pending: dict[tuple, tuple[Entity, Callable[[], list[Hop]], list[int]]] = {}
    grouped: set[int] = set()  # tests given a reason (import_uses adds to `chosen` itself)

    def group(entity: Entity, key: tuple, chain: Callable[..., list[Hop]], *of) -> list[int]:
        """The tests selected for ``entity`` by the reason ``key``, whose chain
        ``chain(*of)`` makes (once per reason)."""
        found = pending.get(key)
        if found is None:
            found = pending[key] = (entity, partial(chain, *of), [])
        return found[2]

    cuda_users = runs.tests_using_device("cuda")
    used_no_cuda: set[int] = set()  # ran an op whose changed CUDA kernel they never launched
    for position, entity in enumerate(entities):
        names, chains = _recorded_names(index, entity, drift, runs, diff)
        if names is None:
            continue  # the static walk answers it
        answer.answered.add(position)
        # Device code runs only in tests that launched kernels, where the record can tell.
        users = cuda_users if cuda_users is not None and _device_code(index, entity) else None
        # A test's reason is the first name it ran: tests that ran the same names share
        # one set of them (``tests_executing``), so it is found once per set.
        groups: dict[int, list[int]] = {}  # id of a set of names -> its reason's tests
        for test_index, hits in runs.tests_executing(names).items():
            if test_index not in trusted_indexes:
                continue
            if users is not None and test_index not in users:
                used_no_cuda.add(test_index)
                continue
            chosen.add(test_index)
            if test_index in grouped:
                continue
            grouped.add(test_index)
            tests = groups.get(id(hits))
            if tests is None:
                name = record.names[min(hits)]
                tests = groups[id(hits)] = group(entity, (position, name), _executed, chains, name)
            tests.append(test_index)
        work = runs.import_work(names)
        if work:
            imported.append((position, entity, chains, work))
    if used_no_cuda:
        answer.summary["used_no_cuda"] = len(used_no_cuda - chosen)
    not_run = [runs.nodeid(i) for i in failing if i not in chosen]
    if not_run:
        # Not run, and said: they fail as on the base (docs/selection.md, "Failed tests").
        answer.summary["failed_when_recorded_not_run"] = {
            "tests": len(not_run), "first": sorted(not_run)[:20]
        }  # fmt: skip
    # After every change's own executors: an importer already chosen stands for the rest.
    for position, entity, chains, work in imported:
        for use in import_uses(runs, work, trusted_indexes, chosen):
            name = record.names[use.name]
            key = (position, name, use.module, use.role, use.entered)
            chosen.add(use.test)
            if use.test not in grouped:
                grouped.add(use.test)
                group(entity, key, _imported, chains, name, use).append(use.test)
    for entity, chain, tests in pending.values():
        reason = Reason(entity.label, entity.evidence, chain(), label, "record")
        for file, named in _by_file(runs, tests):
            answer.selected.setdefault(file, []).append(RecordedGroup(reason, named))
    return answer


def _by_file(runs: RecordedRuns, tests: list[int]) -> Iterator[tuple[str, _Named]]:
    """``tests`` split by their file: one lookup per file where a file's tests are
    consecutive in the record (as a stored record keeps them), else one per test."""
    tests = sorted(tests)
    at = 0
    while at < len(tests):
        file = runs.file_of(tests[at])
        members = runs.tests_of_file(file)
        named = _Named(runs, file)
        if members and members[-1] - members[0] + 1 == len(members):
            end = bisect.bisect_right(tests, members[-1], at)
            named.extend(tests[at:end])
            at = end
        else:
            named.add(tests[at])
            at += 1
            while at < len(tests) and runs.file_of(tests[at]) == file:
                named.add(tests[at])
                at += 1
        yield file, named


def _executed(chains: Chains, name: tuple[str, str]) -> list[Hop]:
    """The chain of a test that ran ``name``: to the op, then the test ran it (its ``src``,
    the test, is each of the group's: ``RecordedGroup``)."""
    hops, (kind, text, where) = _chain_to(chains, name)
    return [*hops, Hop(EXECUTED, "", text, where or "record", "test", kind, "record")]


def _imported(chains: Chains, name: tuple[str, str], use) -> list[Hop]:
    """The chain of a test that depends on a module whose import ran ``name``."""
    hops, (kind, text, where) = _chain_to(chains, name)
    ran = Hop(IMPORT_WORK, use.module, text, where or "record", "module", kind, "record")
    how = Hop(use.role, "", use.module, use.entered or "record", "test", "module", "record")
    return [*hops, ran, how]


class _Named(Sequence[str]):
    """The node-id parts of tests of one file, by their indexes in the record: named (a
    lookup for the file, not one per test) only when something reads them."""

    def __init__(self, runs: RecordedRuns, file: str) -> None:
        self._runs, self._file = runs, file
        self._indexes: list[int] = []
        self._names: list[str] | None = None

    def add(self, test: int) -> None:
        self._indexes.append(test)
        self._names = None

    def extend(self, tests: list[int]) -> None:
        self._indexes += tests
        self._names = None

    def __len__(self) -> int:
        return len(self._indexes)

    def _named(self) -> list[str]:
        if self._names is None:
            named = self._runs.parts_of_tests(self._file, sorted(self._indexes))
            if named is None:  # a record in memory, or node ids not all FILE::name
                parts = dict(
                    zip(self._runs.tests_of_file(self._file),
                        self._runs.parts_of_file(self._file), strict=True)
                )  # fmt: skip
                named = [parts[i] for i in self._indexes]
            self._names = sorted(named)
        return self._names

    def __getitem__(self, at):  # type: ignore[override]
        return self._named()[at]

    def __iter__(self) -> Iterator[str]:
        return iter(self._named())


class _Decided(Mapping[str, Collection[str]]):
    """Test file -> the node-id parts of its tests the record decides: counted for every
    file, named for a file only when a test is looked up in it (pytest's verdicts, a
    report with per-test lists), not for each of the files a selection reaches."""

    def __init__(self, runs: RecordedRuns, trusted: set[int], counts: Counter) -> None:
        self._runs, self._trusted, self._counts = runs, trusted, counts
        self._files: dict[str, _FileDecided] = {}

    def __getitem__(self, file: str) -> Collection[str]:
        if file not in self._files:
            if not self._counts.get(file):
                raise KeyError(file)
            self._files[file] = _FileDecided(self._runs, self._trusted, file, self._counts[file])
        return self._files[file]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._counts))

    def __len__(self) -> int:
        return len(self._counts)


class _FileDecided(Collection[str]):
    """One file's decided tests: their count known, their names made on first use."""

    def __init__(self, runs: RecordedRuns, trusted: set[int], file: str, count: int) -> None:
        self._runs, self._trusted, self._file, self._count = runs, trusted, file, count
        self._names: frozenset[str] | None = None

    def _named(self) -> frozenset[str]:
        if self._names is None:
            tests = self._runs.tests_of_file(self._file)
            parts = self._runs.parts_of_file(self._file)
            if self._count == len(tests):
                self._names = frozenset(parts)  # the common case: every test decided
            else:
                self._names = frozenset(
                    part for i, part in zip(tests, parts, strict=True) if i in self._trusted
                )
        return self._names

    def __len__(self) -> int:
        return self._count

    def __contains__(self, parts: object) -> bool:
        return parts in self._named()

    def __iter__(self) -> Iterator[str]:
        return iter(self._named())


def _device_code(index: Index, entity: Entity) -> bool:
    """Whether ``entity`` is only ``__global__`` kernels: code that runs on the GPU, in
    a launch, never for a test that used no CUDA. Host code in a .cu file is not: it runs
    for zero-element CUDA tensors, which allocate nothing and launch nothing."""
    nodes = index.nodes(entity.node_ids)
    return entity.cuda and bool(nodes) and all(n.kind == CUDA_KERNEL for n in nodes)


def _chain_to(chains: Chains, name: tuple[str, str]) -> tuple[list[Hop], tuple[str, str, str]]:
    return chains.get(name, ([], (name[0], name[1], "")))


def _unused(summary: dict, why: str) -> RecordAnswer:
    return RecordAnswer(summary={**summary, "used": False, "why_not": why}, notes=[why])


def _unusable(workspace: Workspace, diff: Diff, runs: RecordedRuns) -> str:
    meta = runs.record.meta
    commit = meta.get("commit")
    if not commit:
        return "the record names no single commit (merged from several): not used"
    if meta.get("harness") not in (None, workspace.harness):
        return (
            f"the record was made with harness {meta.get('harness')!r}, not {workspace.harness!r}"
        )
    base = diff.base.merge_base
    if commit != base and not is_ancestor(workspace.source, commit, base):
        return (
            f"the record's commit {short_commit(commit)} is not in the history of the base "
            f"{short_commit(base)} (another tree or branch): not used"
        )
    limit = workspace.manifest.get("record", "max_age_days", DEFAULT_MAX_AGE_DAYS)
    seconds = runs.age_seconds()
    if seconds is None:
        return "the record says not when it was made: not used"
    if seconds > limit * 86400:
        return f"the record is {age(seconds)} old, over the {limit} days of [record] max_age_days"
    return ""


@dataclass(frozen=True)
class Drift:
    """What differs between what the record ran and the base."""

    # paths changed from the record's commit to the base, and those whose content the
    # record carries (or lists as dirty) that differ from the base's (``dirty``)
    to_base: frozenset[str]
    changed_lines: dict[str, set[int]]  # path -> lines (new side) the change touches
    dirty: frozenset[str] = frozenset()


def _drift(source: Path, commit: str, diff: Diff, record: Record) -> Drift | None:
    if commit == diff.base.merge_base:  # recorded at the base: nothing between them
        out: bytes | None = b""
    else:
        out = git(source, "diff", "--name-only", "--no-renames", "--relative", "-z", commit,
                  diff.base.merge_base, "--")  # fmt: skip
    if out is None:
        return None
    to_base = frozenset(n.decode("utf-8", "surrogateescape") for n in out.split(b"\0") if n)
    changed_lines: dict[str, set[int]] = {}
    for change in diff.files:
        lines = changed_lines.setdefault(change.path, set())
        for hunk in change.hunks:
            lines.update(range(hunk.new_start, hunk.new_start + max(hunk.new_count, 1)))
    dirty = _content_drift(source, commit, diff, record, to_base)
    return Drift(to_base | dirty, changed_lines, dirty)


def _content_drift(
    source: Path, commit: str, diff: Diff, record: Record, known: frozenset[str]
) -> frozenset[str]:
    """The paths whose content when recorded is not the base's (a record made with
    uncommitted edits); only files ``meta.dirty`` lists, or git does not vouch for, are
    hashed (docs/recording.md, "Whose record it is")."""
    expected = dict(record.files)
    dirty = record.meta.get("dirty")
    listed: set[str] = set()
    if isinstance(dirty, dict):
        for path, digest in dirty.items():
            if isinstance(path, str):
                expected[path] = digest if isinstance(digest, str) else ""  # "": deleted
                listed.add(path)
    # Asked of git only when there is a file to compare (a record without hashes has none).
    tracked = _tracked_at(source, commit) if isinstance(dirty, dict) and expected else None
    changed = {p for change in diff.files for p in (change.path, change.old_path) if p}
    differs = set()
    for path, digest in expected.items():
        if path in known:
            continue
        if (
            tracked is not None
            and path in tracked
            and path not in listed
            and language_of(path) != "other"  # meta.dirty lists the indexed languages only
        ):
            continue  # the commit's content then and at the base: git says so
        # The base's copy: the working tree's where the change leaves the file alone.
        data = diff.old_bytes(path) if path in changed else diff.new_bytes(path)
        if (content_hash(data) if data is not None else "") != digest:
            differs.add(path)
    return frozenset(differs)


def _tracked_at(source: Path, commit: str) -> frozenset[str] | None:
    """The paths git tracks at ``commit`` (relative to ``source``); None where git
    cannot say."""
    out = git(source, "ls-tree", "-r", "-z", "--name-only", commit)
    if out is None:
        return None
    return frozenset(n.decode("utf-8", "surrogateescape") for n in out.split(b"\0") if n)


def skip_environment(runs: RecordedRuns) -> str | None:
    """Why the record's skipped, xfailed, failed and errored tests cannot be decided here
    ('' when they can: the environment their outcomes read is this one's); None when it
    holds none."""
    if not any(outcome in REPEATABLE for _, outcome, _ in runs.test_groups()):
        return None
    return mismatch(runs.record.meta.get("environment"), current_environment())


def trusted_tests(
    runs: RecordedRuns, drifted: frozenset[str], skips: str | None = None
) -> tuple[list, Counter]:
    """(the tests the record can speak for, why the others cannot: reason -> count).
    ``skips``: '' when the tests that stopped early when recorded (skipped, xfailed,
    failed, errored) would stop the same way here (:func:`skip_environment`), else why
    not."""
    indexes, untrusted = trusted_test_indexes(runs, drifted, skips)
    tests = runs.record.tests
    return [tests[i] for i in sorted(indexes)], untrusted


def trusted_test_indexes(
    runs: RecordedRuns, drifted: frozenset[str], skips: str | None = None
) -> tuple[set[int], Counter]:
    """:func:`trusted_tests` as test indexes, decided for each group of tests that share
    a file, an outcome and a reason (``RecordedRuns.test_groups``), not test by test."""
    trust = _trust(runs, drifted, skips)
    return trust.indexes, trust.untrusted


@dataclass
class _Trust:
    indexes: set[int]  # the tests the record can speak for
    untrusted: Counter  # why the others cannot: reason -> count
    counts: Counter  # group of ``RecordedRuns.test_groups`` -> how many of it are trusted


def _trust(runs: RecordedRuns, drifted: frozenset[str], skips: str | None) -> _Trust:
    record = runs.record
    ran_stale: set[int] = set()
    if drifted:  # nothing changed since the record: no name of it is stale
        stale_names = [
            name for name in record.names
            if (path := path_of_name(*name)) is not None and path in drifted
        ]  # fmt: skip
        ran_stale.update(runs.tests_executing(stale_names))
        # A stale module, or one whose import ran stale code, changes what its importers see.
        stale_imports = set(runs.import_work(stale_names))
        stale_imports.update(text for kind, text in stale_names if kind == "module")
        ran_stale |= runs.importers(stale_imports)
    trust = _Trust(set(), Counter(), Counter())
    trusted, untrusted = trust.indexes, trust.untrusted
    for group, tests in runs.test_groups().items():
        file, outcome, unrecorded = group
        complete = not unrecorded and outcome in COMPLETE_OUTCOMES
        if unrecorded:
            untrusted["not recorded whole (the recorder was disturbed)"] += len(tests)
        elif outcome in REPEATABLE and skips != "":
            untrusted[f"{outcome} when recorded" + (f": {skips}" if skips else "")] += len(tests)
        elif not complete and outcome not in REPEATABLE:
            untrusted[f"{outcome} when recorded"] += len(tests)
        elif file in drifted:
            untrusted["its test file changed since the record"] += len(tests)
        else:
            stale = ran_stale.intersection(tests) if ran_stale else ()
            if stale:
                untrusted["it ran code changed since the record"] += len(stale)
            trusted.update(tests)
            trusted.difference_update(stale)
            trust.counts[group] = len(tests) - len(stale)
    return trust


def _recorded_names(
    index: Index, entity: Entity, drift: Drift, runs: RecordedRuns, diff: Diff
) -> tuple[list[tuple[str, str]] | None, Chains]:
    """The record names whose execution means the test ran ``entity``'s changed code,
    with the chain to each; (None, {}) when the record cannot answer for it."""
    nodes = index.nodes(entity.node_ids)
    if not nodes:
        return None, {}
    if all(node.kind in NATIVE for node in nodes):
        starts = [node.id for node in nodes]
        reach = walk_native(
            index, starts, drift.to_base, drift.changed_lines, stop_at_backward=True
        )
        if any(not runs.autograd_node_names(f) for f in reach.backwards.values()):
            # No test's backward ran F's node under a name we know: whether none ran it
            # or the name differs, the tests of the op calling F::apply stand for it.
            reach = walk_native(index, starts, drift.to_base, drift.changed_lines)
            reach.backwards.clear()
        if not reach.ops and not reach.bindings and not reach.backwards:
            # No op or binding reaches it through native code: the record cannot say who
            # runs it (the static walk, and its fallbacks, decide).
            return None, {}
        family = op_family(index, reach.ops)
        if _unobservable(index.nodes(reach.ops), family, runs):
            return None, {}  # nobody seen running it would prove nothing
        return _native_names(index, reach, family, runs)
    # A function whose file changed since the record may be new, or called from new code.
    if len(nodes) == 1 and nodes[0].path not in drift.to_base and _in_function_body(nodes[0], diff):
        name = _function_name(index, nodes[0])
        if name is not None:
            return [name], {name: ([], ("function", name[1], f"{nodes[0].path}:{nodes[0].line}"))}
    return None, {}


def _native_names(
    index: Index, reach: NativeReach, family: Family, runs: RecordedRuns
) -> tuple[list[tuple[str, str]], Chains]:
    """The recorded names of the ops and bindings ``reach`` found: each with the hops
    from the change out to it, and (kind, name, where it is defined)."""
    names: list[tuple[str, str]] = []
    chains: Chains = {}
    labels: dict[int, Node] = {}
    # An op's kernel runs under every name of its family (overloads, structured
    # delegates, wrappers): the record's names are matched against all of them.
    for base in family.names:
        to_op = _hops(index, reach.chain(family.reached_from[base])[::-1], labels)
        for name in runs.op_names(base):
            member, extra = family.path_to(name[1])
            names.append(name)
            chains.setdefault(name, (to_op + extra, ("op", name[1], member.evidence)))
    for node in index.nodes(reach.bindings):
        hops = _hops(index, reach.chain(node.id)[::-1], labels)
        for name in runs.binding_names(node.qualname):
            names.append(name)
            chains.setdefault(name, (hops, ("binding", name[1], f"{node.path}:{node.line}")))
    for node in index.nodes(list(reach.backwards)):
        # The engine runs F::backward for F's node: torch::autograd::CppNode<ns::F>.
        function = reach.backwards[node.id]
        hops = _hops(index, reach.chain(node.id)[::-1], labels)
        for name in runs.autograd_node_names(function):
            names.append(name)
            chains.setdefault(name, (hops, ("backward", name[1], f"{node.path}:{node.line}")))
    return names, chains


def _unobservable(ops: list[Node], family: Family, runs: RecordedRuns) -> bool:
    """Whether one of ``ops`` (or of their family) is one RecordFunction never reports
    (``aten::size``): the record lists those of the torch it was made with; a record
    that does not cannot vouch for an op it never saw."""
    unobserved = runs.record.meta.get("unobserved_ops")
    if unobserved is not None and any(name in unobserved for name in family.names):
        return True
    for node in ops:
        name = base_name(node.qualname)
        if unobserved is None:
            if not runs.op_names(name):
                return True
        elif name in unobserved:
            return True
    return False


def _hops(index: Index, edges: list, labels: dict[int, Node]) -> list[Hop]:
    wanted = {e.src for e in edges} | {e.dst for e in edges}
    missing = [n for n in wanted if n not in labels]
    for node in index.nodes(missing):
        labels[node.id] = node
    hops = []
    for edge in edges:
        src, dst = labels.get(edge.src), labels.get(edge.dst)
        hops.append(
            Hop(
                edge.kind,
                src.qualname if src else str(edge.src),
                dst.qualname if dst else str(edge.dst),
                edge.evidence,
                src.kind if src else "",
                dst.kind if dst else "",
                edge_extractor(edge.attrs),
            )
        )
    return hops


def _in_function_body(node: Node, diff: Diff) -> bool:
    """Whether every change to ``node`` is inside its body, not on its header (defaults
    and decorators run when the module is imported: the static walk answers for those)."""
    is_function = node.kind == PY_FUNCTION or (
        node.kind == TEST_UTILITY and node.attrs.get("py_kind") in ("function", "method")
    )
    change = next((c for c in diff.files if c.path == node.path), None)
    if not is_function or change is None or not change.exists_after:
        return False
    text = diff.new_side(change)
    try:
        tree = ast.parse(text or b"")
    except (SyntaxError, ValueError):
        return False
    body_start = next(
        (
            definition.body[0].lineno
            for definition in ast.walk(tree)
            if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.line in (definition.lineno, *(d.lineno for d in definition.decorator_list))
        ),
        None,
    )
    if body_start is None:
        return False
    for hunk in change.hunks:
        first = hunk.new_start
        last = hunk.new_start + max(hunk.new_count, 1) - 1
        if last < node.line or first > node.end_line:
            continue  # another definition's change
        if first < body_start:
            return False
    return True


def _function_name(index: Index, node: Node) -> tuple[str, str] | None:
    """The record's name of a Python function node: ('function', 'path:Class.method')."""
    modules = [n for n in index.nodes_in_file(node.path) if n.kind in MODULE_KINDS]
    qualname = node.attrs.get("pyname") or node.qualname
    for module in modules:
        prefix = (module.attrs.get("module") or module.qualname) + "."
        if qualname.startswith(prefix):
            return ("function", f"{node.path}:{qualname[len(prefix) :]}")
    return None
