"""The vocabulary of a selection: changed entities, evidence hops, selected test files.

Plain data, so a selection can travel (JSON report, pytest-xdist workers) and be rebuilt
with :func:`pytest_torchtalk.report.selection_from_dict`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property


@dataclass
class Entity:
    """Something a change touched, where the walk to tests starts.

    One entity may stand for many nodes ("everything in the 12 files including X.h").
    """

    label: str  # 'at::native::matmul', or a description of a group
    kind: str  # node kind, or 'group'
    evidence: str  # path:line of the changed line that placed it
    reason: str  # 'changed line 2010 is in its body'
    node_ids: list[int] = field(default_factory=list)
    cuda: bool = False  # placed from CUDA-only code (.cu/.cuh, cuda/ directories)
    members: list[str] = field(default_factory=list)  # qualnames of a group (the first few)
    node_count: int = 0  # len(node_ids) of an entity rebuilt from a report (no ids there)

    @property
    def nodes(self) -> int:
        return len(self.node_ids) or self.node_count


READS_PATH = "reads-path"  # kind of an entity placed by naming a changed file's path
# The kinds of a record reason's last hops: how the test depends on what changed.
EXECUTED = "executed"  # the test ran it itself (its setup, call, teardown, fixtures)
IMPORT_WORK = "import work"  # a module's body ran it while the module was imported
IMPORTED = "imported"  # the test's own file is that module
USES = "uses"  # the test entered a function of that module (it uses what the body left)
WITNESS = "witness"  # the test imports that module: one importer standing for all


@dataclass
class Hop:
    """One edge of an evidence chain, from the user (``src``) to the used (``dst``)."""

    kind: str  # edge kind: calls, dispatches, references, covers, ...
    src: str
    dst: str
    evidence: str  # path:line of the text that makes the edge
    src_kind: str = ""  # node kinds, so 'derivative aten::mm' and 'op aten::mm' differ
    dst_kind: str = ""
    extractor: str = "fast"  # which extractor made the edge (indexer.graph.vocabulary)


@dataclass
class Reason:
    entity: str  # the changed entity's label
    evidence: str  # where it changed
    chain: list[Hop] = field(default_factory=list)  # from the changed entity out to the test
    note: str = ""  # for reasons that are not a walk: 'the test file itself changed'
    source: str = "static"  # what decided it: the static graph, or a recorded run ('record')


@dataclass
class RecordedGroup:
    """Tests of one file that the record selected for one reason: the chain they share,
    whose hop naming the test (``src`` of its last hop) is each of ``tests`` in turn. One
    chain per file and reason, not per test (docs/selection.md, "Report")."""

    reason: Reason
    tests: Sequence[str]  # node-id parts after the file, sorted

    def reason_of(self, path: str, parts: str) -> Reason:
        """The reason of one of the group's tests, its chain ending at that test."""
        *hops, last = self.reason.chain
        chain = [*hops, replace(last, src=f"{path}::{parts}" if parts else path)]
        return replace(self.reason, chain=chain)


@dataclass
class TestScope:
    """The tests kept in a narrowed file: a generic test and, for @ops tests, its OpInfos.

    ``function`` and ``cls`` are as written in source (before device instantiation);
    ``opinfos`` are the formatted OpInfo names PyTorch appends (``nn_functional_linear``),
    or None for every variant.
    """

    __test__ = False  # not a pytest test class, despite its name

    cls: str | None
    function: str | None
    opinfos: list[str] | None = None
    why: str = ""


@dataclass
class SelectedFile:
    path: str
    reasons: list[Reason] = field(default_factory=list)
    # None: every test of the file; else only these tests (precise evidence only).
    tests: list[TestScope] | None = None
    # Device-generic classes limited to these device types ('cuda'), when only CUDA code
    # changed; None for every device.
    devices: list[str] | None = None
    device_classes: list[str] = field(default_factory=list)  # generic names they apply to
    # The static part (reasons, tests, devices) applies to every test of the file ('all'),
    # only to tests a record does not decide ('unrecorded'), or to none (None: the file is
    # selected by the record alone).
    static_for: str | None = "all"
    # Node-id parts after the file ('TestFoo::test_bar[x]') of the tests a record decides
    # (their count known, their names made when asked), and the groups of those it
    # selects, each with the reason its tests share.
    decided: Collection[str] = field(default_factory=set)
    recorded_groups: list[RecordedGroup] = field(default_factory=list)
    # How many tests of the file the record holds without deciding them (they failed when
    # recorded, ran changed code...): the static evidence decides those.
    undecided: int = 0

    @property
    def recorded_count(self) -> int:
        """How many of the file's tests the record selects."""
        return sum(len(group.tests) for group in self.recorded_groups)

    @property
    def recorded(self) -> dict[str, Reason]:
        """Node-id parts -> reason, of each test the record selects (each named: for
        pytest's verdicts and per-test reports, not for counting)."""
        return {
            parts: group.reason_of(self.path, parts)
            for group in self.recorded_groups
            for parts in group.tests
        }

    @cached_property
    def recorded_names(self) -> frozenset[str]:
        """The node-id parts of the tests the record selects (asked once its groups are
        complete: pytest's verdict for each item)."""
        return frozenset(parts for group in self.recorded_groups for parts in group.tests)

    @property
    def narrowed_by_record(self) -> bool:
        """Whether the record selects some, not all, of the file's tests it decides."""
        return self.recorded_count < len(self.decided)

    @property
    def tests_run_by_static(self) -> int | None:
        """How many of the file's recorded tests run on static evidence; None where the
        record holds none of its tests (then every test the static evidence keeps)."""
        if self.static_for is None:
            return 0
        held = len(self.decided) + self.undecided
        if not held:
            return None
        if self.static_for == "all":
            return held - self.recorded_count
        return self.undecided

    @property
    def runs(self) -> bool:
        """Whether any test of the file runs: not when the record decides every test of it
        that it holds and selects none (tests it does not hold run as the static walk
        says: under pytest, collected and run)."""
        static = self.tests_run_by_static
        return bool(self.recorded_groups) or static is None or static > 0


@dataclass
class ChangedFile:
    path: str
    old_path: str | None
    status: str
    category: str  # cpp, cuda, python, yaml, test, run-everything, never-affects, other
    code_hunks: int = 0
    skipped_hunks: int = 0  # comment- or whitespace-only
    note: str = ""


@dataclass
class Selection:
    source: str
    harness: str
    base: dict  # rev, commit, merge_base, head, chosen_by
    index: dict  # db_path, git_commit, built_at, stale, updated, action
    changed_files: list[ChangedFile] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    everything: list[str] = field(default_factory=list)  # run-everything reasons; [] = selective
    files: dict[str, SelectedFile] = field(default_factory=dict)
    test_files_total: int = 0
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    record: dict = field(default_factory=dict)  # the record used (or why not); {} without one

    @property
    def run_everything(self) -> bool:
        return bool(self.everything)

    @property
    def running(self) -> list[SelectedFile]:
        """The selected files: those with a test to run."""
        return [f for f in self.files.values() if f.runs]

    @property
    def nothing_to_run(self) -> list[SelectedFile]:
        """Files the static evidence reaches whose every recorded test the record decides
        and none of which it selects: decided by the record, nothing to run."""
        return [f for f in self.files.values() if not f.runs]

    @property
    def empty_reason(self) -> str | None:
        """Why nothing is selected, when nothing is; None otherwise."""
        if self.everything or self.running:
            return None
        if self.files:
            return (
                "the record shows that no test it holds of the files reached runs the changed code"
            )
        if not self.changed_files:
            return "no change since the base"
        if all(
            change.category == "never-affects"
            or (change.category in CODE and not change.code_hunks)
            for change in self.changed_files
        ):
            return "the changes touch no code that tests run (comments, docs, whitespace)"
        return (
            "nothing that changed is used by a test (deleted tests, code nothing names; see notes)"
        )


CODE = frozenset({"cpp", "cuda", "python", "yaml"})
