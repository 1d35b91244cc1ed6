"""``pytest --torchtalk-affected`` on the minitorch tree: deselection, explicit node ids,
the summary, exit status, xdist, JUnit properties, the JSON report, GitHub's summary."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.select_support import IndexedTree, tree_fixtures

ADD_CU = "aten/src/ATen/native/cuda/BinaryAddKernel.cu"
ADD_CPU = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"


shared, tree = tree_fixtures("minitorch")


def ran(output: str) -> set[str]:
    """Node ids pytest reported (-v) as passed, failed or skipped."""
    return set(re.findall(r"^(\S+::\S+) (?:PASSED|FAILED|SKIPPED|ERROR)", output, re.M))


def cuda_change(tree: IndexedTree) -> None:
    tree.replace(ADD_CU, "  if (idx < n) {", "  if (idx < n && n > 0) {")


def test_cuda_change_runs_only_cuda_variants_of_the_add_opinfo_tests(
    tree: IndexedTree, tmp_path: Path
) -> None:
    cuda_change(tree)
    report = tmp_path / "report.json"
    result = tree.pytest("--torchtalk-affected", "-v", f"--torchtalk-report={report}")
    assert result.returncode == 0, result.stdout + result.stderr
    names = ran(result.stdout)
    assert "test/test_ops.py::TestCommonCUDA::test_compare_cpu_add_cuda_float32" in names
    assert not any("TestCommonCPU" in name for name in names)
    ops = {name for name in names if name.startswith("test/test_ops.py")}
    assert ops == {
        "test/test_ops.py::TestCommonCUDA::test_compare_cpu_add_cuda_float32",
        "test/test_ops.py::TestCommonCUDA::test_aten_name_add_cuda_float32",
        "test/test_ops.py::TestCommonCUDA::test_has_reference_add_cuda_float32",  # an alias
    }
    # A file whose only @ops is a partial(ops, ...) alias (PyTorch's gradcheck tests).
    gradients = {name for name in names if name.startswith("test/test_ops_gradients.py")}
    assert gradients == {
        "test/test_ops_gradients.py::TestBwdGradientsCUDA::test_fn_grad_add_cuda_float32"
    }
    assert not any("test_unrelated" in name or "test_linalg" in name for name in names)
    assert "torchtalk: tests affected by changes since main" in result.stdout  # header
    assert "torchtalk selection" in result.stdout  # summary section
    assert "changed: at::native::add_kernel_cuda_impl @ " + ADD_CU in result.stdout
    data = json.loads(report.read_text())
    counts = data["counts"]
    assert counts["selected"] == len(names) and counts["deselected"] > 0
    assert counts["collected"] == counts["selected"] + counts["deselected"]
    assert f"{counts['deselected']} deselected" in result.stdout


def test_explicitly_named_tests_are_never_deselected(tree: IndexedTree) -> None:
    tree.replace(ADD_CPU, "      return a + alpha * b;", "      return alpha * b + a;")
    result = tree.pytest(
        "--torchtalk-affected",
        "-v",
        "test/test_unrelated.py::test_slugify",
        "test/nn/test_init.py",
        "test/test_ops.py::TestCommonCPU::test_compare_cpu_matmul_cpu_float32",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    names = ran(result.stdout)
    assert "test/test_unrelated.py::test_slugify" in names
    assert "test/test_ops.py::TestCommonCPU::test_compare_cpu_matmul_cpu_float32" in names
    assert {n for n in names if n.startswith("test/nn/test_init.py")}  # a named file
    assert "kept because named on the command line" in result.stdout


FAILS_AT_IMPORT = """\
import os
import pathlib

pathlib.Path(os.environ["IMPORT_MARKER"]).write_text("imported")
raise RuntimeError("a test module the selection rules out must not be imported")


def test_never_run():
    pass
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_ruled_out_test_file_is_not_collected_nor_imported(
    tree: IndexedTree, tmp_path: Path, workers: list[str]
) -> None:
    tree.write("test/test_fails_at_import.py", FAILS_AT_IMPORT)
    tree.commit("a test module that fails at import")
    tree.replace(ADD_CPU, "      return a + alpha * b;", "      return alpha * b + a;")
    marker = tmp_path / "imported"
    report = tmp_path / "report.json"
    env = {"IMPORT_MARKER": str(marker)}
    result = tree.pytest("--torchtalk-affected", f"--torchtalk-report={report}", *workers, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists()
    counts = json.loads(report.read_text())["counts"]
    assert (
        counts["selected"] > 0 and counts["collected"] == counts["selected"] + counts["deselected"]
    )
    # test_fails_at_import.py and the other files no change reaches, counted once.
    unaffected = counts["test_files_total"] - counts["test_files_selected"]
    assert counts["test_files_not_collected"] == unaffected > 0
    files = f"{unaffected} test files ruled out, so not collected"
    assert f"tests: {counts['selected']} selected, {counts['deselected']} deselected; {files}" in (
        result.stdout
    )
    # Named on the command line, it is collected: its import error stops the run.
    named = tree.pytest("--torchtalk-affected", "test/test_fails_at_import.py", *workers, env=env)
    assert named.returncode != 0 and marker.exists(), named.stdout + named.stderr
    assert "ruled out" not in named.stdout  # the one file pytest was asked for is not
    # Within a directory named on the command line, only its own files count.
    marker.unlink()
    in_dir = tree.pytest("--torchtalk-affected", f"--torchtalk-report={report}", "test/nn", env=env)
    assert in_dir.returncode == 0 and not marker.exists(), in_dir.stdout + in_dir.stderr
    nn_files = {f"test/nn/{path.name}" for path in tree.path("test/nn").glob("test_*.py")}
    unaffected = nn_files - {s["path"] for s in json.loads(report.read_text())["selected"]}
    counts = json.loads(report.read_text())["counts"]
    assert counts["test_files_not_collected"] == len(unaffected) > 0


def test_xdist_computes_once_and_counts_right(tree: IndexedTree, tmp_path: Path) -> None:
    tree.replace(ADD_CPU, "      return a + alpha * b;", "      return alpha * b + a;")
    serial = tmp_path / "serial.json"
    parallel = tmp_path / "parallel.json"
    one = tree.pytest("--torchtalk-affected", f"--torchtalk-report={serial}")
    two = tree.pytest("--torchtalk-affected", "-n", "2", f"--torchtalk-report={parallel}")
    assert one.returncode == 0 and two.returncode == 0, two.stdout + two.stderr
    serial_counts = json.loads(serial.read_text())["counts"]
    parallel_counts = json.loads(parallel.read_text())["counts"]
    # Computed once, on the controller: both workers used the selection handed to them.
    assert parallel_counts.pop("xdist_workers_given_the_selection") == 2
    assert serial_counts == parallel_counts
    assert serial_counts["deselected"] > 0 and serial_counts["test_files_not_collected"] > 0
    line = f"tests: {serial_counts['selected']} selected, {serial_counts['deselected']} deselected"
    assert line in two.stdout
    assert "2 workers" in two.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_everything_deselected_on_evidence_exits_0(tree: IndexedTree, workers: list[str]) -> None:
    tree.path("docs/index.md").write_text("# Changed docs\n")
    result = tree.pytest("--torchtalk-affected", *workers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nothing to run: the changes touch no code that tests run" in result.stdout
    assert "exit status 0, not 5" in result.stdout


def test_run_everything_keeps_every_test_and_says_why(tree: IndexedTree) -> None:
    tree.path("CMakeLists.txt").write_text(tree.path("CMakeLists.txt").read_text() + "\n")
    result = tree.pytest("--torchtalk-affected")
    assert result.returncode == 0
    assert "run everything: CMakeLists.txt matches the run-everything pattern" in result.stdout
    assert "deselected" not in result.stdout.split("torchtalk selection")[1].split("tests:")[0]
    assert re.search(r"tests: (\d+) selected, 0 deselected", result.stdout)


def test_junitxml_and_github_step_summary(tree: IndexedTree, tmp_path: Path) -> None:
    cuda_change(tree)
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = tree.pytest(
        "--torchtalk-affected", f"--junitxml={junit}", env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert properties["torchtalk_run_everything"] == "false"
    assert int(properties["torchtalk_tests_deselected"]) > 0
    assert int(properties["torchtalk_test_files_selected"]) >= 1
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, not overwritten
    assert "| `test/test_ops.py` |" in text
    assert "at::native::add_kernel_cuda_impl changed" in text


def test_no_torchtalk_overrides_addopts_and_ini_turns_it_on(tree: IndexedTree) -> None:
    tree.path("docs/index.md").write_text("# Changed docs\n")
    ini = tree.path("pytest.ini")
    ini.write_text(ini.read_text().replace("addopts = ", "addopts = --torchtalk-affected "))
    tree.commit("selection on by default")
    tree.path("docs/index.md").write_text("# Changed docs again\n")
    on = tree.pytest()
    assert "exit status 0, not 5" in on.stdout
    off = tree.pytest("--no-torchtalk")
    assert off.returncode == 0 and "torchtalk selection" not in off.stdout
    assert "deselected" not in off.stdout
    ini.write_text(
        ini.read_text().replace("--torchtalk-affected ", "") + "torchtalk_affected = true\n"
    )
    by_ini = tree.pytest()
    assert "torchtalk selection" in by_ini.stdout


def test_bad_base_is_a_one_line_usage_error(tree: IndexedTree) -> None:
    result = tree.pytest("--torchtalk-affected", "--torchtalk-base", "no-such-rev")
    assert result.returncode == 4
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [
        f"ERROR: torchtalk: unknown base revision 'no-such-rev' in {tree.root.resolve()}"
    ]


def test_missing_index_runs_everything_and_says_so(tree: IndexedTree, tmp_path: Path) -> None:
    tree.replace(ADD_CPU, "      return a + alpha * b;", "      return alpha * b + a;")
    result = tree.pytest(
        "--torchtalk-affected", env={"TORCHTALK_CACHE_DIR": str(tmp_path / "empty-cache")}
    )
    assert result.returncode == 0
    assert "running everything: no index of" in result.stdout
    assert "torchtalk index build --source" in result.stdout
    assert re.search(r"tests: \d+ selected, 0 deselected", result.stdout)
