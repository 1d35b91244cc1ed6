"""`torchtalk audit` end to end on the auditext fixture, which each test builds (a CPython
extension of one C++ file: no torch, a second to compile), and its parts on real files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from indexer.audit.journal import Journal, digest
from indexer.audit.mutation import (
    SEMANTIC,
    Site,
    compiles,
    mutation_sites,
    path_filter,
    plan,
    rewrite,
)
from indexer.audit.outcomes import run_suite
from indexer.audit.run import STATE_DIR, mutable
from indexer.build import build_index
from indexer.errors import UsageError
from indexer.query.index import Index
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main
from tests.helpers import git, make_fixture_repo

PYTHON_H = Path(sysconfig.get_paths()["include"]) / "Python.h"
COMPILER = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
needs_compiler = pytest.mark.skipif(
    COMPILER is None or not PYTHON_H.exists(),
    reason="the audit fixture is a C++ extension: needs a C++ compiler and Python.h "
    f"(compiler: {COMPILER}, {PYTHON_H} exists: {PYTHON_H.exists()})",
)
BUILD = f"{sys.executable} setup.py -q build_ext --inplace"
TEST = f"{sys.executable} -m pytest tests -q"


@pytest.fixture
def auditext(tmp_path: Path) -> Path:
    return make_fixture_repo("auditext", tmp_path / "auditext")


def tracked_bytes(repo: Path) -> dict[str, str]:
    return {path: digest((repo / path).read_bytes()) for path in git(repo, "ls-files").split()}


def indexed(repo: Path) -> Workspace:
    workspace = Workspace.resolve(repo)
    build_index(workspace, show_progress=False)
    return workspace


def audit_args(repo: Path, *extra: str) -> list[str]:
    return ["audit", "--source", str(repo), "--build", BUILD, "--test", TEST, *extra]


# --- mutations, on the fixture's real code ------------------------------------------------


def test_plan_places_one_line_mutations_in_function_bodies_and_headers(auditext: Path) -> None:
    workspace = indexed(auditext)
    index = Index(workspace.db_path)
    try:
        sites = mutation_sites(auditext, index, [], lambda p: not mutable(p, workspace.manifest))
    finally:
        index.close()
    paths = {site.path for site in sites}
    assert paths == {"csrc/ops.cpp", "csrc/limits.h", "auditext/__init__.py", "auditext/text.py"}
    scopes = {site.scope for site in sites}
    assert {"clamp_value", "auditext.text.shout", "macro CLAMP_LIMIT", "header constant"} <= scopes
    ops = (auditext / "csrc/ops.cpp").read_text().splitlines()
    for site in sites:
        if site.path == "csrc/ops.cpp":
            assert "PyMethodDef" not in site.text and not site.text.startswith("#")
            assert site.text == ops[site.line - 1]
    first = plan(sites, 12, seed=5)
    assert first == plan(sites, 12, seed=5)
    assert first != plan(sites, 12, seed=6)
    assert {m.kind for m in first if m.control} == {"comment", "whitespace"}
    for mutation in first:
        before = (auditext / mutation.path).read_bytes()
        after = rewrite(before, mutation)
        changed = [
            (a, b) for a, b in zip(before.split(b"\n"), after.split(b"\n"), strict=True) if a != b
        ]
        assert len(changed) == 1, mutation


def test_paths_with_a_line_range_place_mutations_on_those_lines_only(auditext: Path) -> None:
    workspace = indexed(auditext)
    index = Index(workspace.db_path)
    editable = lambda path: not mutable(path, workspace.manifest)  # noqa: E731
    try:
        # scaled_difference's body, and one line of auditext/text.py
        ranged = mutation_sites(
            auditext, index, ["csrc/ops.c*:12-16", "auditext/text.py:3"], editable
        )
        whole_file = mutation_sites(auditext, index, ["csrc/ops.cpp"], editable)
    finally:
        index.close()
    in_range = {(s.path, s.line) for s in whole_file if 12 <= s.line <= 16}
    assert in_range and {(s.path, s.line) for s in ranged if s.path == "csrc/ops.cpp"} == in_range
    assert {s.scope for s in ranged if s.path == "csrc/ops.cpp"} == {"scaled_difference"}
    assert [s.line for s in ranged if s.path == "auditext/text.py"] == [3]
    assert {s.path for s in ranged} == {"csrc/ops.cpp", "auditext/text.py"}
    with pytest.raises(UsageError, match="ends before it starts"):
        path_filter(["csrc/ops.cpp:16-12"])


def test_a_malformed_line_range_is_refused_before_the_suite_runs(
    auditext: Path, capsys: pytest.CaptureFixture
) -> None:
    # The build would fail if it ran: the range is checked first.
    args = ["audit", "--source", str(auditext), "--build", "false", "--test", "false"]
    assert main([*args, "--paths", "csrc/ops.cpp:16-12"]) == 2
    assert "ends before it starts" in capsys.readouterr().err


def test_operators_rewrite_code_not_templates_or_declarations() -> None:
    assert SEMANTIC["flip_comparison"]("  if (i < n) {", "cpp") == "  if (i >= n) {"
    assert SEMANTIC["flip_comparison"]("  std::vector<float> v;", "cpp") is None
    assert SEMANTIC["off_by_one"]("  for (i = 0; i < n; i++) {", "cpp") == (
        "  for (i = 0; i <= n; i++) {"
    )
    assert SEMANTIC["swap_operands"]("  long d = a - b;", "cpp") == "  long d = b - a;"
    assert SEMANTIC["negate_condition"]("    if times > 1:", "python") == (
        "    if not (times > 1):"
    )
    assert SEMANTIC["remove_statement"]("  long a = 0;", "cpp") is None
    assert SEMANTIC["remove_statement"]("  out[i] = v;", "cpp") == "  ;"
    assert SEMANTIC["change_constant"]("  x = y * 2.5;", "cpp") == "  x = y * 3.5;"
    # An argument line looks like an assignment; removing it would be a syntax error.
    text = "def f(a):\n    return g(\n        a=1,\n    )\n"
    argument = Site("m.py", 3, "        a=1,", "        a=1,", "python", "f", file_text=text)
    assert SEMANTIC["remove_statement"](argument.code, "python") == "        pass"
    assert not compiles(argument, "        pass") and compiles(argument, "        a=2,")


def test_controls_go_on_lines_without_a_comment() -> None:
    # A trailing space after `# type: ignore[x]` makes it a type line to TorchScript
    # (torch.jit.annotations.get_type_line), so the selection rightly calls it code; a
    # control there would not be neutral. Found by the audit of PyTorch's Python.
    from indexer.audit.mutation import _body_sites

    text = (
        "def f(x):\n    y = g(x)  # type: ignore[attr-defined]\n"
        "    z = y + 1  # a note\n    return z\n"
    )
    sites = _body_sites("m.py", text, [(1, 4, "f")])
    assert {site.line for site in sites} >= {2, 3, 4}
    controls = plan(sites, 3, seed=0, controls=3)
    assert controls and {m.line for m in controls} == {4}
    assert all(m.control for m in controls)


def test_figures_of_an_audit_that_caught_nothing_read_n_a() -> None:
    from indexer.audit.report import markdown, totals

    uncaught = {
        "id": "m001", "kind": "remove_statement", "path": "csrc/ops.cpp", "line": 3,
        "status": "uncaught", "control": False, "failing_files": [], "failing_tests": [],
        "missed_files": [], "missed_tests": [], "selected_files": ["tests/test_native.py"],
        "run_everything": [], "tests_selected": 2, "suite_seconds": 1.0, "seconds_saved": 0.5,
    }  # fmt: skip
    report = {
        "source": "/tree", "head": "0" * 40, "harness": "torch-extension",
        "config": {"seed": 1, "mutations": 1, "build": "b", "test": "t"},
        "baseline": {"results": {}}, "plan": [uncaught], "results": [uncaught],
        "totals": totals([uncaught]),
    }  # fmt: skip
    text = markdown(report)
    assert "| precision, selected / failing test files | n/a |" in text
    assert "| median selected / failing test files | n/a |" in text
    assert "| tests kept, caught / uncaught mutations | 0 / 2 |" in text


def test_journal_restores_what_a_killed_run_left(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    source.mkdir()
    (source / "a.cpp").write_bytes(b"int f() {\r\n  return 1;\r\n}\n")
    original = (source / "a.cpp").read_bytes()
    Journal(tmp_path / "state", source).change("a.cpp", b"broken", "m001")
    assert (source / "a.cpp").read_bytes() == b"broken"
    # A new journal (the next run) sees the entry and restores the bytes exactly.
    repaired = Journal(tmp_path / "state", source).restore_all()
    assert [entry.path for entry in repaired] == ["a.cpp"]
    assert (source / "a.cpp").read_bytes() == original
    assert Journal(tmp_path / "state", source).pending() == []
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["journal.json"]


def test_outcomes_name_each_test_as_pytest_does_and_keep_collection_errors(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_broken.py").write_text("import no_such_module\n")
    (tmp_path / "test" / "test_mixed.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    pass\n\n"
        "class TestGroup:\n"
        "    @pytest.mark.parametrize('n', [1, 2])\n"
        "    def test_even(self, n):\n        assert n % 2 == 0\n"
    )
    tests = ["test/test_broken.py", "test/test_mixed.py"]
    outcomes = run_suite(f"{sys.executable} -m pytest test -q", tmp_path, tests)
    assert outcomes.results == {
        "test/test_broken.py::<collection>": "error",
        "test/test_mixed.py::test_ok": "passed",
        "test/test_mixed.py::TestGroup::test_even[1]": "failed",
        "test/test_mixed.py::TestGroup::test_even[2]": "passed",
    }


def test_a_crash_is_attributed_to_the_file_that_crashed_though_the_command_names_all(
    tmp_path: Path,
) -> None:
    # A suite naming its files on the command line: pytest collects an explicit argument
    # even when it is --ignore'd, so a per-file rerun must keep one file's tests another way
    # (on torchvision the crash of test_ops.py was charged to all 32 test files).
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_crash.py").write_text(
        "import os\n\ndef test_dies():\n    os.abort()\n"
    )
    (tmp_path / "test" / "test_other.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "test" / "test_unrun.py").write_text("def test_never():\n    pass\n")
    tests = ["test/test_crash.py", "test/test_other.py", "test/test_unrun.py"]
    suite = f"{sys.executable} -m pytest test/test_crash.py test/test_other.py -q"
    outcomes = run_suite(suite, tmp_path, tests)
    assert outcomes.per_file
    assert outcomes.results == {
        "test/test_crash.py::<crash>": "failed",
        "test/test_other.py::test_ok": "passed",
    }


# --- end to end ------------------------------------------------------------------------------


@needs_compiler
def test_audit_measures_the_selection_and_restores_the_tree(
    auditext: Path, capsys: pytest.CaptureFixture
) -> None:
    before = tracked_bytes(auditext)
    report_path = auditext.parent / "report.json"
    assert (
        main(audit_args(auditext, "--mutations", "6", "--seed", "3", "--report", str(report_path)))
        == 0
    )
    assert "safety, failing test files selected | 100.0%" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert tracked_bytes(auditext) == before
    assert git(auditext, "status", "--porcelain") == ""
    totals = report["totals"]
    assert report["baseline"]["tests"] == 6 and report["baseline"]["excluded"] == []
    assert totals["measured"] >= 3
    assert totals["safety_files"] == 1.0 and totals["unsafe_mutations"] == []
    assert totals["controls"] == 2 and totals["controls_failing_or_selecting"] == []
    caught = [r for r in report["results"] if r["status"] == "caught"]
    # A change to the native code is caught by its test file, and only that file is run.
    native = [r for r in caught if r["path"] == "csrc/ops.cpp"]
    assert native and all(r["selected_files"] == ["tests/test_native.py"] for r in native)
    # So is a change to a constant of the header ops.cpp includes.
    header = [r for r in caught if r["path"] == "csrc/limits.h"]
    assert header and all(r["selected_files"] == ["tests/test_native.py"] for r in header)
    assert all(not r["missed_files"] for r in caught)
    assert report_path.with_suffix(".md").read_text().startswith("# torchtalk audit of")


@needs_compiler
def test_a_plan_short_of_the_mutations_asked_says_why(
    auditext: Path, capsys: pytest.CaptureFixture
) -> None:
    report_path = auditext.parent / "report.json"
    args = ["--paths", "auditext/text.py:3", "--mutations", "4", "--baseline-runs", "1"]
    assert main(audit_args(auditext, *args, "--report", str(report_path))) == 0
    report = json.loads(report_path.read_text())
    assert len(report["plan"]) == 1 and report["plan"][0]["line"] == 3
    said = "1 of 1 planned mutations run (4 asked: no more lines under --paths take a mutation)"
    assert said in capsys.readouterr().out
    assert said in report_path.with_suffix(".md").read_text()


@needs_compiler
def test_a_killed_audit_is_repaired_and_resumed(auditext: Path) -> None:
    before = tracked_bytes(auditext)
    journal = auditext / ".git" / STATE_DIR / "journal.json"
    args = ["--mutations", "3", "--seed", "3", "--baseline-runs", "1"]
    command = [sys.executable, "-m", "pytest_torchtalk", *audit_args(auditext, *args)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    # Kill it while a mutation is applied: after the baseline, once the journal names a
    # file and the file is rewritten (the journal is written first).
    while time.monotonic() < deadline:
        pending = journal.exists() and json.loads(journal.read_text() or "[]")
        if pending and tracked_bytes(auditext) != before:
            break
        assert process.poll() is None, process.stderr.read().decode()
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert tracked_bytes(auditext) != before  # the mutation is still in the tree
    assert main(audit_args(auditext, *args, "--resume")) == 0
    assert tracked_bytes(auditext) == before
    assert git(auditext, "status", "--porcelain") == ""
    report = json.loads((auditext / ".git" / STATE_DIR / "report.json").read_text())
    assert [r["id"] for r in report["results"]] == [m["id"] for m in report["plan"]]
    assert report["repaired"] and json.loads(journal.read_text()) == []


@needs_compiler
def test_the_audit_refuses_a_dirty_tree(auditext: Path, capsys: pytest.CaptureFixture) -> None:
    (auditext / "auditext" / "text.py").write_text("x = 1\n")
    assert main(audit_args(auditext)) == 2
    assert "needs a clean git tree" in capsys.readouterr().err


def test_the_audit_refuses_a_record_it_cannot_read(
    auditext: Path, capsys: pytest.CaptureFixture
) -> None:
    # Without its record the selection would fall back to the static index: the audit
    # would measure that under the record's name.
    (auditext.parent / "junk.ttr").write_bytes(b"not a record")
    for record in ("gone.ttr", "junk.ttr"):
        assert main(audit_args(auditext, "--record", str(auditext.parent / record))) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"torchtalk: error: the record {auditext.parent / record}")
        assert len(error.splitlines()) == 1
    assert git(auditext, "status", "--porcelain") == ""


def test_the_audit_rebuilds_an_index_that_needs_a_full_build(auditext: Path) -> None:
    # An index of another manifest cannot be updated in place, so every selection would
    # run everything and every figure of the audit would be void: it is rebuilt first.
    from indexer.audit.run import Audit, AuditOptions
    from indexer.update import full_build_reason

    indexed(auditext)
    (auditext / ".torchtalk.toml").write_text(
        '[harness]\nextends = "torch-extension"\n\n[tests]\nutility_dirs = ["tests/helpers"]\n'
    )
    git(auditext, "add", ".torchtalk.toml")
    git(auditext, "commit", "-qm", "manifest")
    workspace = Workspace.resolve(auditext)
    assert full_build_reason(workspace, workspace.db_path) is not None
    lines: list[str] = []
    audit = Audit(workspace, AuditOptions(build=BUILD, test=TEST), progress=lines.append)
    audit._index().close()
    assert full_build_reason(workspace, workspace.db_path) is None
    assert lines == [
        f"building the index of {auditext}: the harness manifest changed since the index was built"
    ]


@needs_compiler
def test_a_suite_of_some_test_files_judges_only_the_files_it_runs(auditext: Path) -> None:
    # The test command runs tests/test_native.py alone. A change to the import-time code
    # of the package's __init__ reaches both test files (each imports auditext);
    # test_text.py is not run, so it can be neither selected nor missed: counted apart.
    from indexer.audit.compare import compare, run_selection
    from indexer.audit.outcomes import run_command
    from indexer.audit.report import markdown, totals

    assert run_command(BUILD, auditext).ok
    workspace = indexed(auditext)
    suite = f"{sys.executable} -m pytest tests/test_native.py -q"
    files = ["tests/test_native.py", "tests/test_text.py"]
    baseline = run_suite(suite, auditext, files)
    assert {test.split("::")[0] for test in baseline.results} == {"tests/test_native.py"}
    init = auditext / "auditext" / "__init__.py"
    init.write_text(init.read_text() + "\nclamp_add = scale_diff\n")
    selection = run_selection(workspace)
    assert set(files) <= set(selection.files)
    outcomes = run_suite(suite, auditext, files)
    comparison = compare(selection, outcomes, baseline, set())
    assert comparison.failing_files == ["tests/test_native.py"]
    assert comparison.selected_files == ["tests/test_native.py"]
    assert comparison.outside_suite == ["tests/test_text.py"]
    assert comparison.missed_files == [] and comparison.missed_tests == []
    result = {**comparison.to_dict(), "id": "m001", "status": "caught", "control": False}
    result.update(suite_seconds=0.0, seconds_saved=0.0)
    figures = totals([result])
    assert figures["precision_files"] == 1.0 and figures["naming_files_outside_suite"] == ["m001"]
    report = {
        "source": str(auditext), "head": "0" * 40, "harness": "torch-extension",
        "config": {"seed": 0, "mutations": 1, "build": BUILD, "test": suite},
        "baseline": {"results": baseline.results}, "totals": figures, "results": [],
    }  # fmt: skip
    assert "suite: 3 tests in 1 files" in markdown(report)
    assert "1 selections also name test files it does not run" in markdown(report)


@needs_compiler
def test_a_build_the_budget_cuts_is_not_a_mutation_that_does_not_build(auditext: Path) -> None:
    # The unmutated tree builds at once; a mutated one outlasts the budget, as a slow
    # incremental build does when --budget runs out during it.
    flag = auditext.parent / "slow"
    flag.touch()
    slow = f"{{ test -e {flag} && ! git diff --quiet && sleep 600; }}; {BUILD}"
    args = ["--mutations", "2", "--seed", "3", "--baseline-runs", "1"]
    cut = ["audit", "--source", str(auditext), "--build", slow, "--test", TEST, *args]
    assert main([*cut, "--budget", "0.75"]) == 0
    report = json.loads((auditext / ".git" / STATE_DIR / "report.json").read_text())
    assert report["stopped"] == "budget of 0.75 minutes"
    assert all(r["status"] != "not building" for r in report["results"])
    assert git(auditext, "status", "--porcelain") == ""
    flag.unlink()  # the same command, quick again
    assert main([*cut, "--resume"]) == 0
    report = json.loads((auditext / ".git" / STATE_DIR / "report.json").read_text())
    assert [r["id"] for r in report["results"]] == [m["id"] for m in report["plan"]]
    assert all(r["status"] != "not building" for r in report["results"])


@needs_compiler
def test_a_test_run_the_budget_cuts_is_resumed_not_rerun_per_file(auditext: Path) -> None:
    # The mutated tree's suite hangs (as a slow suite does when --budget runs out in it):
    # the cut run is no result, and the audit stops at its budget instead of running
    # every test file on its own, each past the budget, and saving that as a result.
    flag = auditext.parent / "slow"
    flag.touch()
    slow = f"{{ test -e {flag} && ! git diff --quiet && sleep 600; }}; {TEST}"
    args = ["--mutations", "2", "--seed", "3", "--baseline-runs", "1"]
    cut = ["audit", "--source", str(auditext), "--build", BUILD, "--test", slow, *args]
    assert main([*cut, "--budget", "0.75"]) == 0
    report = json.loads((auditext / ".git" / STATE_DIR / "report.json").read_text())
    assert report["stopped"] == "budget of 0.75 minutes"
    assert report["results"] == []
    assert git(auditext, "status", "--porcelain") == ""
    flag.unlink()
    assert main([*cut, "--resume"]) == 0
    report = json.loads((auditext / ".git" / STATE_DIR / "report.json").read_text())
    assert [r["id"] for r in report["results"]] == [m["id"] for m in report["plan"]]
    assert not any(r["per_file_rerun"] for r in report["results"])
