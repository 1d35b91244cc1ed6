"""`torchtalk audit --replay`: the selection of an audit's report run again on the same
tree, without the build or the suite, on the auditext fixture (built by the audit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.precise.toolchain import find_resource_dir
from pytest_torchtalk.cli import main
from tests.helpers import git, make_fixture_repo
from tests.test_audit import PYTHON_H, audit_args, needs_compiler, tracked_bytes

SELECTION_FIGURES = (
    "measured",
    "by_status",
    "safety_files",
    "safety_tests",
    "failing_files",
    "failing_tests",
    "precision_files",
    "median_selected_per_failing_files",
    "run_everything",
    "controls_failing_or_selecting",
)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fixture tree and the report of a real audit of it (six mutations, built and
    run)."""
    if needs_compiler.args[0]:
        pytest.skip(needs_compiler.kwargs["reason"])
    root = tmp_path_factory.mktemp("replay")
    repo = make_fixture_repo("auditext", root / "auditext")
    report = root / "report.json"
    args = ["--mutations", "6", "--seed", "3", "--baseline-runs", "1", "--report", str(report)]
    assert main(audit_args(repo, *args)) == 0
    return repo, report


def variant(report_path: Path, name: str, **fields: object) -> Path:
    """A copy of the report beside it, with ``fields`` in place of its own."""
    copy = report_path.parent / name
    copy.write_text(json.dumps({**json.loads(report_path.read_text()), **fields}))
    return copy


def test_a_replay_gives_the_audits_selection_figures_and_restores_the_tree(
    audited: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    repo, original_path = audited
    original = json.loads(original_path.read_text())
    # The copy replayed has its selection blanked: the replay must select again.
    blanked_results = [
        {**r, "selected_files": [], "missed_tests": [], "tests_selected": 0}
        for r in original["results"]
    ]
    blanked = variant(original_path, "blanked.json", results=blanked_results)
    before = tracked_bytes(repo)
    replay_path = original_path.parent / "replay.json"
    args = ["audit", "--source", str(repo), "--replay", str(blanked)]
    assert main([*args, "--report", str(replay_path)]) == 0
    assert f"Replay of {blanked}" in capsys.readouterr().out
    assert tracked_bytes(repo) == before
    assert git(repo, "status", "--porcelain") == ""
    replay = json.loads(replay_path.read_text())
    assert replay["replay_of"] == str(blanked)
    assert replay["precise"]["mode"] == "off"  # no compile database in the fixture
    assert original["totals"]["measured"] >= 3
    for figure in SELECTION_FIGURES:
        assert replay["totals"][figure] == original["totals"][figure], figure
    for then, now in zip(original["results"], replay["results"], strict=True):
        assert (now["id"], now["status"]) == (then["id"], then["status"])
        assert now["selected_files"] == then["selected_files"]
        assert now["missed_tests"] == then["missed_tests"]
        assert now["tests_selected"] == then["tests_selected"]
    assert replay_path.with_suffix(".md").read_text().startswith("# torchtalk audit of")


def test_a_replay_of_another_head_is_refused(
    audited: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    repo, original_path = audited
    other = variant(original_path, "other-head.json", head="0" * 40)
    before = tracked_bytes(repo)
    assert main(["audit", "--source", str(repo), "--replay", str(other)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "audited HEAD 000000000000, not this tree's" in error
    assert tracked_bytes(repo) == before


def test_a_replay_refuses_what_is_not_a_report(tmp_path: Path, capsys) -> None:
    repo = make_fixture_repo("auditext", tmp_path / "auditext")
    junk = tmp_path / "junk.json"
    junk.write_text('{"schema": "something else"}')
    assert main(["audit", "--source", str(repo), "--replay", str(junk)]) == 2
    assert "is not a torchtalk.audit/1 report" in capsys.readouterr().err


def test_a_replay_switches_precise_mode_on_and_off(
    audited: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    if find_resource_dir().path is None:
        pytest.skip("no compiler headers for libclang (no clang or gcc)")
    repo, original_path = audited
    database = original_path.parent / "compile_commands.json"  # outside the tree: it stays clean
    command = ["c++", f"-I{PYTHON_H.parent}", "-Icsrc", "-c", "csrc/ops.cpp", "-o", "ops.o"]
    database.write_text(
        json.dumps([{"directory": str(repo), "file": "csrc/ops.cpp", "arguments": command}])
    )
    before = tracked_bytes(repo)
    original = json.loads(original_path.read_text())
    args = ["audit", "--source", str(repo), "--replay", str(original_path), "--report"]
    on, off = original_path.parent / "precise-on.json", original_path.parent / "precise-off.json"
    assert main([*args, str(on), "--precise", "--compile-commands", str(database)]) == 0
    assert main([*args, str(off), "--no-precise"]) == 0
    assert tracked_bytes(repo) == before
    on_report, off_report = json.loads(on.read_text()), json.loads(off.read_text())
    assert on_report["precise"]["mode"] == "on" and on_report["precise"]["tus"] == 1
    assert on_report["precise"]["failed"] == 0
    assert off_report["precise"] == {"mode": "off", "reason": "turned off (TORCHTALK_PRECISE=off)"}
    for report in (on_report, off_report):
        assert report["totals"]["measured"] == original["totals"]["measured"]
        assert report["totals"]["safety_files"] == 1.0
    assert "precise mode on" in on.with_suffix(".md").read_text()


def test_a_replay_without_the_record_selects_with_the_static_index_alone(
    audited: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    repo, original_path = audited
    original = json.loads(original_path.read_text())
    # The same report as if its audit had selected with a record, one no longer on disk:
    # the replay reads the report's record unless told not to.
    missing = original_path.parent / "gone.ttr"
    config = {**original["config"], "record": str(missing)}
    with_record = variant(original_path, "with-record.json", config=config)
    args = ["audit", "--source", str(repo), "--replay", str(with_record), "--report"]
    assert main([*args, str(original_path.parent / "r1.json")]) != 0
    assert str(missing) in capsys.readouterr().err
    static = original_path.parent / "static.json"
    assert main([*args, str(static), "--no-record"]) == 0
    replay = json.loads(static.read_text())
    assert replay["config"]["record"] is None
    for figure in SELECTION_FIGURES:
        assert replay["totals"][figure] == original["totals"][figure], figure
    assert "no record: the static index alone" in static.with_suffix(".md").read_text()
    assert git(repo, "status", "--porcelain") == ""
