"""Selection from a record of real aten ops: every spelling of an op's family, honest
file counts, skipped tests decided where the environment is the same, dirty trees.

The recaten fixture declares real aten entries in its native_functions.yaml (cumsum and
its structured delegates, sort's overloads, sigmoid); its tests run them through the
installed torch, recorded for real. Which recorded tests a change must select is also
computed apart from the join (bench/join_check.py: native_functions.yaml parsed there,
names compared there) and checked against the selection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.join_check import needed_tests
from indexer.query.recorded import record_path_for
from indexer.record import storage
from indexer.select.matching import ItemMatcher
from indexer.select.record_join import trusted_tests
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from pytest_torchtalk.report import selection_to_dict, summary_lines
from tests.helpers import FIXTURES, commit_all, git
from tests.record_support import index_and_record, on_recorded_repo, require_torch, run_pytest

pytestmark = pytest.mark.xdist_group("recorded-runs")
YAML = "aten/src/ATen/native/native_functions.yaml"
CUMSUM_KERNEL = ("aten/src/ATen/native/cpu/ReduceOpsKernel.cpp",
                 "cpu_cum_base_kernel(result, self, wrap_dim, self_dim_size);",
                 "cpu_cum_base_kernel(result, self, wrap_dim, self_dim_size + 0);")  # fmt: skip
SORT_KERNEL = ("aten/src/ATen/native/cpu/SortingKernel.cpp", "_fill_indices(indices, dim);",
               "_fill_indices(indices, dim + 0);")  # fmt: skip
SORT_BARE = ("aten/src/ATen/native/Sorting.cpp", "return at::sort(self, false, dim, descending);",
             "return at::sort(self, /*stable=*/false, dim, descending && true);")  # fmt: skip
CUMSUM_DIMNAME = ("aten/src/ATen/native/ReduceOps.cpp",
                  "return at::cumsum(self, dimname_to_position(self, dim), dtype);",
                  "return at::cumsum(self, dimname_to_position(self, dim) + 0, dtype);")  # fmt: skip
SIGMOID_KERNEL = ("aten/src/ATen/native/cpu/UnaryOpsKernel.cpp",
                  "const auto dtype = iter.common_dtype();",
                  "const auto dtype = iter.common_dtype(); (void)dtype;")  # fmt: skip


def _environment(base: Path, repo: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": str(repo),
        "TORCHTALK_CACHE_DIR": str(base / "cache"),
        "TORCHTALK_CONFIG_DIR": str(base / "config"),
    }


def _make_repo(base: Path) -> tuple[Path, dict[str, str]]:
    import shutil

    repo = base / "recaten"
    shutil.copytree(FIXTURES / "recaten", repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "recaten fixture")
    env = _environment(base, repo)
    return repo, env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    require_torch()
    repo, env = _make_repo(tmp_path_factory.mktemp("families"))
    index_and_record(repo, env)
    git(repo, "tag", "recorded")
    return repo, env


@pytest.fixture
def repo(recorded, monkeypatch: pytest.MonkeyPatch):
    yield from on_recorded_repo(recorded, monkeypatch, "recorded")


def edit(repo: Path, path: str, old: str, new: str) -> None:
    target = repo / path
    text = target.read_text()
    assert old in text, (path, old)
    target.write_text(text.replace(old, new, 1))


def _record_path(repo: Path) -> Path:
    return record_path_for(Workspace.resolve(repo).db_path)


def kept(repo: Path, selection=None) -> dict[str, str]:
    """node id -> 'record'/'static' for every recorded test the selection keeps."""
    selection = selection or select_changes(Workspace.resolve(repo))
    assert not selection.run_everything, selection.everything
    matcher = ItemMatcher(selection)
    out = {}
    for test in storage.read(_record_path(repo)).tests:
        verdict = matcher.verdict(test.file, test.nodeid.split("::")[1:])
        if verdict.keep:
            out[test.nodeid] = verdict.decided_by
    return out


def test_a_structured_kernel_change_selects_the_tests_of_its_in_place_and_out_variants(
    repo: Path,
) -> None:
    # cumsum's CPU kernel runs for aten::cumsum and aten::cumsum_ (structured delegates
    # of cumsum.out: they never dispatch cumsum.out) and for aten::cumsum.out.
    edit(repo, *CUMSUM_KERNEL)
    selection = select_changes(Workspace.resolve(repo))
    assert kept(repo, selection) == {
        "test/test_cumsum.py::test_cumsum": "record",
        "test/test_cumsum.py::test_cumsum_inplace": "record",
        "test/test_cumsum.py::test_cumsum_out": "record",
        "test/test_skips.py::test_cumsum_here": "record",
    }
    from pytest_torchtalk.report import chain_text

    text = chain_text(selection.files["test/test_cumsum.py"].recorded["test_cumsum_inplace"])
    assert f"aten::cumsum_ dispatches aten::cumsum.out @ {YAML}:" in text
    assert "executed by test/test_cumsum.py::test_cumsum_inplace" in text
    git(repo, "checkout", "-q", "--", ".")
    edit(repo, *SIGMOID_KERNEL)
    assert kept(repo) == {"test/test_sigmoid.py::test_sigmoid_inplace": "record"}


def test_every_overload_spelling_matches_whichever_the_record_holds(repo: Path) -> None:
    # sort.values_stable's kernel: test_sort recorded aten::sort (and aten::sort.stable
    # inside it), test_sort_stable_only only aten::sort.stable, test_argsort_stable
    # aten::argsort.stable and aten::sort.stable.
    edit(repo, *SORT_KERNEL)
    selected = kept(repo)
    expected = {
        "test/test_sort.py::test_sort": "record",
        "test/test_sort.py::test_sort_stable_only": "record",
        "test/test_sort.py::test_argsort_stable": "record",
        "test/test_skips.py::test_sort_expected_failure": "record",  # xfailed: it ran sort
    }
    assert selected == expected
    # The other way: a change to the bare name's kernel (sort's CompositeExplicitAutograd
    # kernel) matches a test whose record holds only an overload of it.
    git(repo, "checkout", "-q", "--", ".")
    edit(repo, *SORT_BARE)
    assert kept(repo) == expected
    # And a change to an overload's kernel (cumsum.dimname) matches a record holding only
    # the bare name (test_cumsum: aten::cumsum).
    git(repo, "checkout", "-q", "--", ".")
    edit(repo, *CUMSUM_DIMNAME)
    assert kept(repo).get("test/test_cumsum.py::test_cumsum") == "record"


@pytest.mark.parametrize("change", [CUMSUM_KERNEL, SORT_KERNEL, SORT_BARE, CUMSUM_DIMNAME,
                                    SIGMOID_KERNEL])  # fmt: skip
def test_the_independent_check_finds_no_test_the_selection_misses(
    repo: Path, change: tuple[str, str, str]
) -> None:
    edit(repo, *change)
    workspace = Workspace.resolve(repo)
    selection = select_changes(workspace)
    record = storage.read(_record_path(repo))
    from indexer.query.recorded import RecordedRuns

    trusted, _ = trusted_tests(RecordedRuns(record), frozenset(), "")
    needed = needed_tests(
        record,
        trusted,
        repo / YAML,
        workspace.db_path,
        _function_at(repo, change[0], change[2]),
        False,
    )
    assert needed.tests, "the check must find the tests that ran the kernel"
    assert needed.tests - set(kept(repo, selection)) == set()


def _function_at(repo: Path, path: str, text: str) -> list[int]:
    """The innermost C++ function holding ``text`` in ``path``, read from the index."""
    import sqlite3

    lines = (repo / path).read_text().splitlines()
    line = next(number for number, each in enumerate(lines, 1) if text in each)
    conn = sqlite3.connect(Workspace.resolve(repo).db_path)
    try:
        row = conn.execute(
            "SELECT n.id FROM nodes n JOIN files f ON f.id = n.file_id WHERE f.path = ?"
            " AND n.kind = 'cpp_function' AND n.line <= ? AND n.end_line >= ?"
            " ORDER BY n.end_line - n.line LIMIT 1",
            (path, line, line),
        ).fetchone()
    finally:
        conn.close()
    return [row[0]]


def test_a_file_whose_recorded_tests_all_run_nothing_changed_is_not_selected(
    repo: Path, recorded
) -> None:
    # test_nothing_to_run.py names torch.cumsum (the static walk reaches it), but its
    # test calls it only for long inputs: recorded, it never did.
    edit(repo, *CUMSUM_KERNEL)
    selection = select_changes(Workspace.resolve(repo))
    assert "test/test_nothing_to_run.py" in selection.files  # kept for unrecorded tests
    report = selection_to_dict(selection)
    selected = {f["path"]: f for f in report["selected"]}
    assert set(selected) == {"test/test_cumsum.py", "test/test_skips.py"}
    assert report["counts"]["test_files_selected"] == 2
    assert report["counts"]["test_files_decided_nothing_to_run"] == 1
    (apart,) = report["decided_nothing_to_run"]
    assert apart["path"] == "test/test_nothing_to_run.py" and apart["runs"] is False
    assert apart["tests_run"] == {"by_record": 0, "by_static": 0}
    assert selected["test/test_cumsum.py"]["tests_run"] == {"by_record": 3, "by_static": 0}
    text = "\n".join(summary_lines(selection))
    assert "selected 2 of 6 test files" in text
    assert "decided by the record: nothing to run in 1 test file" in text
    # pytest agrees: the file is collected (tests the record does not hold would run) and
    # every test of it deselected.
    _, env = recorded
    done = run_pytest(repo, "--torchtalk-affected", "--torchtalk-report=report.json", env=env)
    assert "test files run: 2; 1 collected with nothing to run" in done.stdout, done.stdout
    counts = json.loads((repo / "report.json").read_text())["counts"]
    assert counts["test_files_run"] == 2 and counts["test_files_collected_nothing_to_run"] == 1


def test_a_skipped_test_is_decided_on_the_same_environment_and_not_on_another(
    repo: Path,
) -> None:
    # test_cumsum_on_cuda skipped here (no CUDA) before running anything; the strict
    # xfail test_sort_expected_failure ran sort, not cumsum.
    edit(repo, *CUMSUM_KERNEL)
    selection = select_changes(Workspace.resolve(repo))
    selected = kept(repo, selection)
    assert "test/test_skips.py::test_cumsum_on_cuda" not in selected
    assert "test/test_skips.py::test_sort_expected_failure" not in selected
    assert selection.record["untrusted_tests"] == {}
    # Recorded with another torch: what skips read may differ, the static walk decides.
    path = _record_path(repo)
    saved = path.read_bytes()
    record = storage.read(path)
    record.meta["environment"]["torch"]["version"] = "2.6.0"
    try:
        storage.write(record, path)
        selection = select_changes(Workspace.resolve(repo))
        selected = kept(repo, selection)
        assert selected["test/test_skips.py::test_cumsum_on_cuda"] == "static"
        assert selected["test/test_skips.py::test_sort_expected_failure"] == "static"
        reasons = selection.record["untrusted_tests"]
        assert reasons == {
            "skipped when recorded: recorded on another environment (torch version: "
            "'2.6.0' there, '" + record_torch_version() + "' here)": 1,
            "xfailed when recorded: recorded on another environment (torch version: "
            "'2.6.0' there, '" + record_torch_version() + "' here)": 1,
        }
    finally:
        path.write_bytes(saved)


def record_torch_version() -> str:
    import torch

    return torch.__version__


def test_a_record_made_with_uncommitted_edits_is_not_the_clean_commits_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_torch()
    repo, env = _make_repo(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # Recorded while total() did not call scaled(): its tests ran no scaled.
    edit(repo, "recaten/helpers.py", "return scaled(x).sum()", "return (x * 2).sum()")
    index_and_record(repo, env)
    git(repo, "checkout", "-q", "--", ".")  # the edit reverted: the record's commit again
    # A change that breaks both tests of total() through scaled().
    edit(repo, "recaten/helpers.py", "return x * 2", "return x * 3")
    selection = select_changes(Workspace.resolve(repo))
    selected = kept(repo, selection)
    assert selected["test/test_helpers.py::test_total"] == "static"
    assert selected["test/test_helpers.py::test_total_of_three"] == "static"
    assert selection.record["differs_from_its_commit"] == ["recaten/helpers.py"]
    # The two that ran it, and test_unrelated: its file imports the module.
    assert selection.record["untrusted_tests"]["it ran code changed since the record"] == 3
