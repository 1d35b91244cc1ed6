"""The report of a selection the record decides: per file, counts and the reasons the
record's tests share (a chain per reason, not per test); tests named where the record
narrows a file, or when asked (docs/selection.md, "Report"). On the recext extension:
compiled, recorded and indexed for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.select.model import EXECUTED
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from pytest_torchtalk.report import selection_to_dict, summary_lines
from tests.helpers import git
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
SCALE = ("csrc/ops.cpp", "return at::mul(x, factor);", "return at::mul(x, factor * 1.0);")
SQUARE = ("csrc/ops.cpp", "return Square::apply(x);", "return Square::apply(x * 1.0);")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    """(repo, env): the recext repo with an index and a record beside it."""
    base = tmp_path_factory.mktemp("report-record")
    library = build_recext_library(libraries(tmp_path_factory))
    repo = make_recext_repo(base / "recext")
    env = recext_env(base, library, repo)
    index_and_record(repo, env)
    git(repo, "tag", "recorded")
    return repo, env


@pytest.fixture
def repo(recorded, monkeypatch: pytest.MonkeyPatch):
    yield from on_recorded_repo(recorded, monkeypatch, "recorded")


def edit(repo: Path, path: str, old: str, new: str) -> None:
    target = repo / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))


def _record_hops(reason: dict) -> list[dict]:
    return [hop for hop in reason["chain"] if hop["kind"] == EXECUTED]


def test_a_file_whose_decided_tests_all_run_is_counted_with_its_shared_reason(
    repo: Path,
) -> None:
    # Both tests of test_square.py ran recext::square, whose kernel changed: the record
    # decides both and selects both. The report says so by counts and one reason with
    # its chain to the op, not by naming each test and its own copy of the chain.
    edit(repo, *SQUARE)
    report = selection_to_dict(select_changes(Workspace.resolve(repo)))
    assert report["per_test_lists"] is False
    square = next(f for f in report["selected"] if f["path"] == "tests/test_square.py")
    assert square["decided_by_record"] == 2
    assert square["tests_run"]["by_record"] == 2
    (reason,) = square["record_reasons"]
    assert reason["tests"] == 2 and reason["test_ids"] is None
    assert reason["decided_by"] == "record"
    assert reason["entity"] == "recext::square_op"
    assert reason["evidence"].startswith("csrc/ops.cpp:")
    (ran,) = _record_hops(reason)
    assert ran["dst"] == "recext::square" and ran["src"] == ""  # each of the group's tests
    # no per-test list anywhere in the file's entry
    assert "decided_by_record_tests" not in square and "selected_tests" not in square
    # asked for, every test is named, with the same reason
    listed = selection_to_dict(select_changes(Workspace.resolve(repo)), tests=True)
    square = next(f for f in listed["selected"] if f["path"] == "tests/test_square.py")
    assert square["decided_by_record_tests"] == ["test_square_backward", "test_square_forward"]
    assert square["record_reasons"][0]["test_ids"] == [
        "test_square_backward", "test_square_forward",
    ]  # fmt: skip


def test_a_file_the_record_narrows_names_its_selected_tests_each_with_its_chain(
    repo: Path,
) -> None:
    # test_scale.py: the record decides 5 tests and selects the 3 that ran recext::scale.
    edit(repo, *SCALE)
    selection = select_changes(Workspace.resolve(repo))
    report = selection_to_dict(selection)
    scale = next(f for f in report["selected"] if f["path"] == "tests/test_scale.py")
    assert scale["decided_by_record"] == 5 and scale["tests_run"]["by_record"] == 3
    named = sorted(t for reason in scale["record_reasons"] for t in reason["test_ids"])
    assert named == ["test_scale", "test_scale_by_name", "test_scale_then_fail"]
    # fewer chains than tests: the tests that ran the same op share one
    assert len(scale["record_reasons"]) < 3
    for reason in scale["record_reasons"]:
        (ran,) = _record_hops(reason)
        assert ran["dst"] == "recext::scale" and ran["evidence"]
        assert reason["entity"] == "recext::scale_cpu"
        assert reason["evidence"].startswith("csrc/ops.cpp:")
    # Each narrowed test, looked up by name, carries its own chain to the op and itself.
    reason = selection.files["tests/test_scale.py"].recorded["test_scale_by_name"]
    assert reason.source == "record"
    assert reason.chain[-1].src == "tests/test_scale.py::test_scale_by_name"
    assert reason.chain[-1].dst == "recext::scale"
    text = "\n".join(summary_lines(selection, detail=True))
    assert "3 tests (record): recext::scale_cpu changed @ csrc/ops.cpp:" in text
    assert "executed by test_scale, test_scale_by_name, test_scale_then_fail" in text


def test_the_plugin_report_names_tests_only_when_asked(repo: Path, recorded) -> None:
    _, env = recorded
    edit(repo, *SQUARE)
    compact, listed = repo.parent / "compact.json", repo.parent / "listed.json"
    done = run_pytest(repo, "--torchtalk-affected", f"--torchtalk-report={compact}", env=env)
    # the terminal summary still says why the file's tests run
    assert "tests/test_square.py: 2 tests by the record: recext::square_op changed @" in (
        done.stdout
    )
    assert "executed by 2 tests of the file" in done.stdout
    run_pytest(repo, "--torchtalk-affected", f"--torchtalk-report={listed}",
               "--torchtalk-report-tests", env=env)  # fmt: skip
    square = next(
        f for f in json.loads(compact.read_text())["selected"]
        if f["path"] == "tests/test_square.py"
    )  # fmt: skip
    assert square["record_reasons"][0]["test_ids"] is None
    square = next(
        f for f in json.loads(listed.read_text())["selected"]
        if f["path"] == "tests/test_square.py"
    )  # fmt: skip
    assert square["decided_by_record_tests"] == ["test_square_backward", "test_square_forward"]
