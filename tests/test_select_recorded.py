"""Selection from a recorded run, on the recext extension: compiled, recorded, indexed.

The record decides the tests it speaks for, test by test; what it cannot speak for (tests
that failed or were skipped when recorded, new or changed test files, module-level
changes, a record of another history or too old) is left to the static walk, and the
selection says which. Every run here is real: the op library is compiled, the tests run
under the recorder, the index is built from the sources.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from indexer.query.recorded import record_path_for
from indexer.record import storage
from indexer.select.matching import ItemMatcher
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from tests.helpers import commit_all, git
from tests.record_support import (
    build_recext_library,
    index_and_record,
    libraries,
    make_recext_repo,
    on_recorded_repo,
    recext_env,
    run_pytest,
)

pytestmark = pytest.mark.xdist_group("recorded-runs")
TESTS = {
    "tests/test_scale.py": [
        "test_scale", "test_scale_by_name", "test_reuses_module_fixture", "test_scale_then_fail",
        "test_table",
    ],
    "tests/test_shift.py": [
        "test_shift", "test_twice_backward", "test_sorted", "test_code_holding_a_dict_constant",
    ],
    "tests/test_square.py": ["test_square_forward", "test_square_backward"],
    "tests/test_outcomes.py": [
        "test_failing", "test_skipped", "test_expected_failure",
        "test_replaces_the_profile_function",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    """(repo, env): the recext repo with an index and a record beside it."""
    base = tmp_path_factory.mktemp("recorded")
    library = build_recext_library(libraries(tmp_path_factory))
    repo = make_recext_repo(base / "recext")
    env = recext_env(base, library, repo)
    index_and_record(repo, env)
    return repo, env


@pytest.fixture
def repo(recorded, monkeypatch: pytest.MonkeyPatch):
    """The recorded repo, its cache in the environment; put back as it was after."""
    yield from on_recorded_repo(recorded, monkeypatch, "main_recorded")


@pytest.fixture(scope="module", autouse=True)
def _mark_recorded(recorded):
    git(recorded[0], "tag", "main_recorded")


def kept(repo: Path) -> dict[str, str]:
    """node id -> 'record'/'static' for every fixture test the selection keeps."""
    selection = select_changes(Workspace.resolve(repo))
    assert not selection.run_everything, selection.everything
    matcher = ItemMatcher(selection)
    out = {}
    for path, names in TESTS.items():
        for name in names:
            verdict = matcher.verdict(path, [name])
            if verdict.keep:
                out[f"{path}::{name}"] = verdict.decided_by
    return out


def edit(repo: Path, path: str, old: str, new: str) -> None:
    target = repo / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))


def test_a_kernel_change_selects_exactly_the_tests_that_ran_its_op(repo: Path) -> None:
    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    # test_scale_by_name reaches the op only through getattr: no static chain finds it;
    # test_scale_then_fail ran scale before it failed; test_reuses_module_fixture ran no
    # scale.
    assert kept(repo) == {
        "tests/test_scale.py::test_scale": "record",
        "tests/test_scale.py::test_scale_by_name": "record",
        "tests/test_scale.py::test_scale_then_fail": "record",
    }


def test_a_test_that_failed_when_recorded_is_decided_where_it_would_fail_the_same_way(
    repo: Path,
) -> None:
    # test_failing ran cumsum, then failed; test_scale_then_fail ran scale, then failed.
    # A scale change reaches what test_scale_then_fail ran: it runs. test_failing ran
    # nothing of it: it would fail as recorded, so it is not run, and the report says so.
    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    selection = select_changes(Workspace.resolve(repo))
    selected = kept(repo)
    assert selected["tests/test_scale.py::test_scale_then_fail"] == "record"
    assert "tests/test_outcomes.py::test_failing" not in selected
    not_run = selection.record["failed_when_recorded_not_run"]
    assert not_run == {"tests": 1, "first": ["tests/test_outcomes.py::test_failing"]}
    from pytest_torchtalk.report import record_lines

    assert any("not run, 1 test that failed when recorded" in line
               for line in record_lines(selection))  # fmt: skip
    # Recorded on another environment, a failure may stop elsewhere: the static walk's.
    path = record_path_for(Workspace.resolve(repo).db_path)
    saved = path.read_bytes()
    record = storage.read(path)
    record.meta["environment"]["python"] = "3.0.0 cpython"
    try:
        storage.write(record, path)
        selection = select_changes(Workspace.resolve(repo))
        assert kept(repo)["tests/test_scale.py::test_scale_then_fail"] == "static"
        assert "failed_when_recorded_not_run" not in selection.record
        assert any(why.startswith("failed when recorded: recorded on another environment")
                   for why in selection.record["untrusted_tests"])  # fmt: skip
    finally:
        path.write_bytes(saved)


SQUARE_BACKWARD = ("csrc/ops.cpp", "return {grads[0] * x * square_grad_factor()};",
                   "return {grads[0] * x * square_grad_factor() * 1.0};")  # fmt: skip


def test_a_cpp_autograd_backward_change_selects_the_tests_whose_backward_ran_it(
    repo: Path,
) -> None:
    # Square::apply reaches Square::backward, but only a backward pass runs it: the
    # record's node torch::autograd::CppNode<recext::Square> says whose did.
    edit(repo, *SQUARE_BACKWARD)
    selection = select_changes(Workspace.resolve(repo))
    assert kept(repo) == {"tests/test_square.py::test_square_backward": "record"}
    from pytest_torchtalk.report import chain_text

    text = chain_text(selection.files["tests/test_square.py"].recorded["test_square_backward"])
    assert "executed by tests/test_square.py::test_square_backward" in text
    assert "CppNode<recext::Square>" in text


def test_a_helper_of_the_backward_only_and_the_forward_select_as_they_run(repo: Path) -> None:
    edit(repo, "csrc/ops.cpp", "  return 2.0;", "  return 2.0 + 0.0;")  # square_grad_factor
    assert kept(repo) == {"tests/test_square.py::test_square_backward": "record"}
    edit(repo, "csrc/ops.cpp", "return x * x;", "return x * x * 1.0;")  # Square::forward
    assert kept(repo) == {
        "tests/test_square.py::test_square_forward": "record",
        "tests/test_square.py::test_square_backward": "record",
    }


def test_a_helper_reached_through_a_kernel_selects_that_ops_tests(repo: Path) -> None:
    edit(repo, "csrc/ops.cpp", "  return offset;", "  return offset + 0.0;")
    selected = kept(repo)
    assert selected.get("tests/test_shift.py::test_shift") == "record"
    assert "tests/test_scale.py::test_scale" not in selected
    assert "tests/test_shift.py::test_sorted" not in selected


def test_the_chain_ends_with_the_test_that_executed_the_op(repo: Path) -> None:
    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    selection = select_changes(Workspace.resolve(repo))
    reason = selection.files["tests/test_scale.py"].recorded["test_scale"]
    from pytest_torchtalk.report import chain_text

    text = chain_text(reason)
    assert text.startswith("recext::scale_cpu changed @ csrc/ops.cpp:")
    assert "op recext::scale @ csrc/ops.cpp:" in text
    assert "executed by tests/test_scale.py::test_scale (record of " in text
    # 10 passed, and test_skipped, test_expected_failure, test_failing and
    # test_scale_then_fail: recorded here, in this environment, they stop the same way
    # (docs/selection.md, skipped and failed tests)
    assert selection.record["used"] and selection.record["trusted_tests"] == 14


def test_an_op_run_only_at_import_selects_one_importer_standing_for_all(repo: Path) -> None:
    # recext.probes runs recext::probe once at import, as torch._dynamo probes operators,
    # and every test file imports it (through recext): no test runs it itself.
    edit(repo, "csrc/ops.cpp", "return x.clone();", "return x.clone().contiguous();")
    selection = select_changes(Workspace.resolve(repo))
    by_record = {n for n, by in kept(repo).items() if by == "record"}
    assert len(by_record) == 1, by_record
    (nodeid,) = by_record
    path, name = nodeid.split("::")
    from pytest_torchtalk.report import chain_text

    text = chain_text(selection.files[path].recorded[name])
    assert "op recext::probe @ csrc/ops.cpp:" in text
    assert "run by the import of recext/probes.py" in text
    assert f"imported by {nodeid}, one importer standing for all (record of " in text


def test_an_op_whose_import_time_result_is_kept_selects_its_users(repo: Path) -> None:
    # recext.table keeps recext.shift(...) computed at import, read by table.offsets():
    # test_table depends on it though it never runs shift; test_shift runs it itself.
    edit(repo, "csrc/ops.cpp", "return at::add(x, shift_amount(offset));",
         "return at::add(x, shift_amount(offset) * 1.0);")  # fmt: skip
    selection = select_changes(Workspace.resolve(repo))
    by_record = {n for n, by in kept(repo).items() if by == "record"}
    assert by_record == {"tests/test_shift.py::test_shift", "tests/test_scale.py::test_table"}
    from pytest_torchtalk.report import chain_text

    text = chain_text(selection.files["tests/test_scale.py"].recorded["test_table"])
    assert "run by the import of recext/table.py" in text
    assert "used by tests/test_scale.py::test_table, which entered recext/table.py:offsets" in text


def test_an_op_no_recorded_test_ran_keeps_only_what_the_record_does_not_decide(
    repo: Path,
) -> None:
    # recext::unused is called by recext.negate, which no test calls: statically its users
    # are a guess (the importers of recext); the record shows no trusted test runs it.
    edit(repo, "csrc/ops.cpp", "return x.neg();", "return x.neg().contiguous();")
    selection = select_changes(Workspace.resolve(repo))
    assert not selection.run_everything
    selected = kept(repo)
    assert "record" not in selected.values(), selected
    assert "tests/test_shift.py::test_shift" not in selected


def test_an_op_the_recorder_cannot_observe_is_left_to_the_static_walk(repo: Path) -> None:
    path = record_path_for(Workspace.resolve(repo).db_path)
    saved = path.read_bytes()
    record = storage.read(path)
    assert "aten::size" in record.meta["unobserved_ops"]  # as this torch reports them
    try:
        # As if recext::scale were one RecordFunction never reports: that no test was
        # seen running it proves nothing.
        record.meta["unobserved_ops"] = [*record.meta["unobserved_ops"], "recext::scale"]
        storage.write(record, path)
        edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);",
             "return at::mul(x, factor * 1.0);")  # fmt: skip
        selected = kept(repo)
        assert selected.get("tests/test_scale.py::test_scale") == "static"
        assert "record" not in selected.values()
    finally:
        path.write_bytes(saved)


def test_a_python_function_change_selects_the_tests_that_entered_it(repo: Path) -> None:
    edit(repo, "recext/__init__.py", "return torch.ops.recext.scale(x, factor)",
         "return torch.ops.recext.scale(x, factor * 1)")  # fmt: skip
    selected = kept(repo)
    assert selected["tests/test_scale.py::test_scale"] == "record"
    assert selected["tests/test_scale.py::test_scale_by_name"] == "record"
    assert "tests/test_shift.py::test_shift" not in selected
    assert "tests/test_scale.py::test_reuses_module_fixture" not in selected


def test_a_module_level_change_selects_the_importers(repo: Path) -> None:
    edit(repo, "recext/__init__.py", "import torch\n", "import torch\n\nLIMIT = 3\n")
    selected = kept(repo)
    for nodeid in (
        "tests/test_scale.py::test_reuses_module_fixture",
        "tests/test_shift.py::test_sorted",
    ):
        assert selected.get(nodeid) == "static"


def test_a_change_the_record_answers_beside_one_it_does_not_walks_each_entity_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel change is the record's to answer; the module-level one the static walk's,
    # for every test of the files importing recext, the record's trusted ones included.
    from indexer.select.impact import ImpactWalker

    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    edit(repo, "recext/__init__.py", "import torch\n", "import torch\n\nLIMIT = 3\n")
    select_changes(Workspace.resolve(repo))  # the index brought up to date (its upkeep walks)
    starts: list[int] = []
    walk = ImpactWalker.walk

    def counted(self, begin, quota=None, max_depth=None, known=None):
        if quota is None and max_depth is None:  # a selection's walk, not a bounded probe
            starts.extend(begin)
        return walk(self, begin, quota, max_depth, known)

    monkeypatch.setattr(ImpactWalker, "walk", counted)
    selected = kept(repo)
    assert selected["tests/test_scale.py::test_scale"] == "record"
    # Ran no scale, so the record alone would not run it: the module change does.
    assert selected["tests/test_scale.py::test_reuses_module_fixture"] == "static"
    assert selected["tests/test_shift.py::test_shift"] == "static"
    assert starts and len(starts) == len(set(starts)), "an entity was walked twice"


def test_the_audit_counts_a_file_as_run_only_when_one_of_its_tests_is_kept(repo: Path) -> None:
    from indexer.audit.compare import compare
    from indexer.audit.outcomes import Outcomes

    # recext::probe runs at import of recext.probes, which every file importing recext
    # imports: the static walk names each such file, the record keeps one importer.
    edit(repo, "csrc/ops.cpp", "return x.clone();", "return x.clone().contiguous();")
    selection = select_changes(Workspace.resolve(repo))
    assert {"tests/test_scale.py", "tests/test_shift.py"} <= set(selection.files)
    matcher = ItemMatcher(selection)
    running = sorted(
        path for path, names in TESTS.items()
        if any(matcher.verdict(path, [name]).keep for name in names)
    )  # fmt: skip
    suite = {f"{path}::{name}": "passed" for path, names in TESTS.items() for name in names}
    result = compare(selection, Outcomes(suite), Outcomes(suite), set())
    assert result.selected_files == running
    # The witness is one test: one file runs anything.
    assert len(running) == 1, running
    # A listed file none of whose tests runs is still collected (imported) by the
    # plugin: its collection error fails the run, so the audit counts it as selected.
    listed_only = sorted(set(selection.files) - set(running))
    assert listed_only
    broken = {**suite, f"{listed_only[0]}::<collection>": "error"}
    result = compare(selection, Outcomes(broken), Outcomes(suite), set())
    assert listed_only[0] in result.selected_files
    assert result.missed_files == [] and result.missed_tests == []


def test_a_new_test_file_and_a_changed_test_file_fall_back_to_static(repo: Path) -> None:
    (repo / "tests" / "test_new.py").write_text(
        "import recext\n\n\ndef test_new():\n    assert recext.scale\n"
    )
    edit(repo, "tests/test_shift.py", "def test_sorted():", "def test_sorted():  # changed")
    selection = select_changes(Workspace.resolve(repo))
    matcher = ItemMatcher(selection)
    assert matcher.verdict("tests/test_new.py", ["test_new"]).keep
    verdict = matcher.verdict("tests/test_shift.py", ["test_sorted"])
    assert verdict.keep and verdict.decided_by == "static"


def test_a_module_changed_since_the_record_distrusts_every_test_importing_it(
    repo: Path,
) -> None:
    # recext/probes.py is imported through recext/__init__.py, first while test_scale.py
    # was collected: test_shift.py's tests import it too, only transitively.
    edit(repo, "recext/probes.py", "import torch\n", "import torch\n\nPROBED = True\n")
    commit_all(repo, "probes keep a flag")
    edit(repo, "csrc/ops.cpp", "return at::add(x, shift_amount(offset));",
         "return at::add(x, shift_amount(offset) * 1.0);")  # fmt: skip
    selection = select_changes(Workspace.resolve(repo))
    # Only test_outcomes.py's failed, skipped and xfailed tests stay trusted: they import
    # nothing of recext (and stop the same way in this environment).
    assert selection.record["used"] and selection.record["trusted_tests"] == 3
    assert kept(repo)["tests/test_shift.py::test_shift"] == "static"


CUDA_SCALE = ("csrc/cuda/ops_cuda.cu", "if (i < n) out[i]", "if (i <= n) out[i]")


def test_a_cuda_only_change_with_a_cpu_record_selects_every_test_that_ran_the_op(
    repo: Path,
) -> None:
    # Recorded here, without CUDA: which tests would use CUDA on a GPU machine is unknown.
    edit(repo, *CUDA_SCALE)
    assert kept(repo) == {
        "tests/test_scale.py::test_scale": "record",
        "tests/test_scale.py::test_scale_by_name": "record",
        "tests/test_scale.py::test_scale_then_fail": "record",
    }


def test_a_cuda_kernel_change_with_a_gpu_record_selects_the_tests_that_used_cuda(
    repo: Path,
) -> None:
    # The record a GPU machine would make, where test_scale put its tensors on CUDA: its
    # run here (devices per test) with the machine's CUDA and that test's use of it added.
    path = record_path_for(Workspace.resolve(repo).db_path)
    saved = path.read_bytes()
    record = storage.read(path)
    assert record.meta["mechanisms"]["devices"].startswith("allocations")
    record.meta["devices"] = ["cpu", "cuda"]
    own = next(s for s in record.segments if s.label == "tests/test_scale.py::test_scale")
    own.names = own.names | {record.name_id("device", "cuda")}  # shared by its work set
    try:
        storage.write(record, path)
        edit(repo, *CUDA_SCALE)
        selection = select_changes(Workspace.resolve(repo))
        assert kept(repo) == {"tests/test_scale.py::test_scale": "record"}
        # test_scale_by_name and test_scale_then_fail: on the CPU
        assert selection.record["used_no_cuda"] == 2
        # Host code of a .cu file runs for zero-element CUDA tensors too, which allocate
        # and launch nothing: not narrowed.
        edit(repo, "csrc/cuda/ops_cuda.cu", "int64_t n = x.numel();", "int64_t n = x.numel() + 0;")
        assert "tests/test_scale.py::test_scale_by_name" in kept(repo)
    finally:
        path.write_bytes(saved)


def test_a_record_of_another_history_is_not_used_and_says_why(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "elsewhere")
    commit_all(repo, "another history")
    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    selection = select_changes(Workspace.resolve(repo), "elsewhere")
    assert selection.record["used"] is False
    assert "not in the history of the base" in selection.record["why_not"]
    assert all(not f.recorded for f in selection.files.values())


def test_a_record_older_than_the_age_limit_is_not_used(repo: Path) -> None:
    path = record_path_for(Workspace.resolve(repo).db_path)
    saved = path.read_bytes()
    record = storage.read(path)
    record.meta["created_at"] = (datetime.now(timezone.utc) - timedelta(days=40)).isoformat()
    try:
        storage.write(record, path)
        edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
        selection = select_changes(Workspace.resolve(repo))
        assert selection.record["used"] is False
        assert "40d old, over the 30 days of [record] max_age_days" in selection.record["why_not"]
    finally:
        path.write_bytes(saved)


def test_a_damaged_record_is_refused_not_read_as_running_nothing(repo: Path) -> None:
    path = record_path_for(Workspace.resolve(repo).db_path)
    saved = path.read_bytes()
    try:
        path.write_bytes(saved[: len(saved) // 2])
        edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
        selection = select_changes(Workspace.resolve(repo))
        assert selection.record["used"] is False and "cannot be used" in selection.record["why_not"]
        assert "tests/test_scale.py" in selection.files  # the static walk answers
    finally:
        path.write_bytes(saved)


def test_the_plugin_deselects_by_record_and_counts_right_under_xdist(repo: Path, recorded) -> None:
    _, env = recorded
    edit(repo, "csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
    report = repo.parent / "report.json"
    done = run_pytest(
        repo, "--torchtalk-affected", "-n", "2", f"--torchtalk-report={report}", "-rA", env=env
    )
    counts = json.loads(report.read_text())["counts"]
    assert "PASSED tests/test_scale.py::test_scale_by_name" in done.stdout
    assert "test_reuses_module_fixture" not in done.stdout.split("short test summary")[-1]
    # the other test files are ruled out whole: not collected at all
    assert counts["collected"] == 5 and counts["selected"] == 3 and counts["deselected"] == 2
    assert counts["test_files_not_collected"] == 3
    assert counts["decided_by_record"] == 5  # 3 selected and 2 deselected in test_scale.py
    assert counts["tests_selected_by_record"] == 3


def test_mcp_answers_name_the_tests_that_really_ran_it(repo: Path) -> None:
    from indexer.answers.affected import affected
    from indexer.query.index import Index
    from indexer.query.tests import tests

    index = Index(Workspace.resolve(repo).db_path)
    try:
        text = affected(index, "recext::scale_cpu").to_text()
        assert (
            "tests that really run recext::scale_cpu (through 1 op: recext::scale): 3 in 1 file"
            in text
        )
        assert "tests/test_scale.py::test_scale_by_name" in text  # only the record knows it
        answer = tests(index, "recext::scale")
        assert answer.items[0].label.startswith("tests that really run recext::scale: 3 in 1 file")
        assert answer.items[0].data["record"]["tests"] == [
            "tests/test_scale.py::test_scale", "tests/test_scale.py::test_scale_by_name",
            "tests/test_scale.py::test_scale_then_fail",
        ]  # fmt: skip
        # run only while recext.probes is imported: said so, not "run by no test"
        probe = tests(index, "recext::probe")
        assert probe.items[0].data["record"]["run_at_import_of"] == ["recext/probes.py"]
        assert "while 1 module of the tree is imported (recext/probes.py)" in probe.to_text()
    finally:
        index.close()


def test_affected_walks_native_code_once_for_the_record_and_the_ranking(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's evidence and the ranking's nearest ops come from one walk (it was run
    twice: a sixth of a GEMM's answer), and the evidence is what a walk of its own gives."""
    from indexer.answers.affected import affected
    from indexer.query import native_reach, recorded_answers
    from indexer.query.index import Index

    index = Index(Workspace.resolve(repo).db_path)
    try:
        named = index.find("recext::scale_cpu")
        alone = recorded_answers.record_evidence(index, named, "recext::scale_cpu")
        assert alone is not None and alone.tests
        walked = []
        walk = native_reach.walk_native
        for module in list(sys.modules.values()):  # every module that imported it
            if getattr(module, "walk_native", None) is walk:
                monkeypatch.setattr(
                    module,
                    "walk_native",
                    lambda *args, **kwargs: walked.append(args) or walk(*args, **kwargs),
                )
        answer = affected(index, "recext::scale_cpu")
        assert len(walked) == 1
        shown = [(item.label, item.data) for item in answer.items[: len(alone.items)]]
        assert shown == [(item.label, item.data) for item in alone.items]
    finally:
        index.close()


def test_the_native_walk_over_the_edges_in_memory_sees_autograd_backwards_as_sqlite_does(
    repo: Path,
) -> None:
    """The arrays hold no attrs: the edges into what ``F::apply`` reaches come from SQLite,
    so the walk in memory finds Square::backward (and stops there for a record) as the
    walk over SQLite does, from every native node, with and without stopping."""
    from indexer.query import adjacency
    from indexer.query.index import Index
    from indexer.query.native_reach import NATIVE, walk_native

    index = Index(Workspace.resolve(repo).db_path)
    try:
        graph = adjacency.shared(index.db_path, index.conn, index.meta)
        starts = [
            row[0]
            for row in index.conn.execute(
                f"SELECT id FROM nodes WHERE kind IN ({','.join('?' * len(NATIVE))})",
                sorted(NATIVE),
            )
        ]
        found_backward = 0
        for stop in (False, True):
            for start in starts:
                walks = [
                    walk_native(index, [start], frozenset(), stop_at_backward=stop, graph=g)
                    for g in (None, graph)
                ]
                steps = [
                    [(n, e and (e.src, e.dst, e.kind, e.evidence)) for n, e in w.steps.items()]
                    for w in walks
                ]
                assert steps[0] == steps[1], index.node(start).qualname
                assert walks[0].ops == walks[1].ops
                assert walks[0].bindings == walks[1].bindings
                assert walks[0].backwards == walks[1].backwards
                found_backward += bool(walks[0].backwards)
        assert found_backward  # the fixture's Square::backward is reached
    finally:
        index.close()
