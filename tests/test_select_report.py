"""The JSON report (schema torchtalk.selection/2), `torchtalk select`, and the stale-index
case."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest

from pytest_torchtalk.cli import main
from pytest_torchtalk.report import SCHEMA, selection_from_dict, selection_to_dict
from tests.select_support import IndexedTree, tree_fixtures

ADD_CU = "aten/src/ATen/native/cuda/BinaryAddKernel.cu"

# The documented schema (docs/selection.md): key -> type, recursively for objects.
HOP = {
    "kind": str,
    "src": str,
    "dst": str,
    "evidence": str,
    "src_kind": str,
    "dst_kind": str,
    "extractor": str,
}
REASON = {"entity": str, "evidence": str, "chain": [HOP], "note": str, "decided_by": str}
# A reason the record's tests of a file share: how many, and (where listed) which.
RECORD_REASON = {**REASON, "tests": int, "test_ids": ([str], type(None))}
SCOPE = {
    "cls": (str, type(None)),
    "function": (str, type(None)),
    "opinfos": (list, type(None)),
    "why": str,
}
SELECTED_FILE = {
    "path": str,
    "reasons": [REASON],
    "tests": ([SCOPE], type(None)),
    "devices": (list, type(None)),
    "device_classes": [str],
    "static_for": (str, type(None)),
    "record_reasons": [RECORD_REASON],
    "decided_by_record": int,
    "undecided_by_record": int,
    "tests_run": {"by_record": int, "by_static": (int, type(None))},
    "runs": bool,
}
REPORT = {
    "schema": str,
    "per_test_lists": bool,
    "source": str,
    "harness": str,
    "base": {"rev": str, "commit": str, "merge_base": str, "head": str, "chosen_by": str},
    "index": dict,
    "run_everything": bool,
    "run_everything_reasons": [str],
    "empty_reason": (str, type(None)),
    "changed_files": [
        {
            "path": str,
            "old_path": (str, type(None)),
            "status": str,
            "category": str,
            "code_hunks": int,
            "skipped_hunks": int,
            "note": str,
        }
    ],
    "changed_entities": [
        {
            "label": str,
            "kind": str,
            "evidence": str,
            "reason": str,
            "cuda": bool,
            "members": [str],
            "nodes": int,
        }
    ],
    "selected": [SELECTED_FILE],
    "decided_nothing_to_run": [SELECTED_FILE],
    "counts": {
        "changed_files": int,
        "changed_entities": int,
        "test_files_total": int,
        "test_files_selected": int,
        "test_files_decided_nothing_to_run": int,
        "test_files_narrowed": int,
        "tests_selected_by_record": int,
    },
    "notes": [str],
    "timings": dict,
    "record": dict,  # the record used, or why not ({} without one)
}
# With every recorded test named (torchtalk select --json --tests; xdist workers' input).
LISTED_FILE = {**SELECTED_FILE, "decided_by_record_tests": [str]}
REPORT_LISTED = {**REPORT, "selected": [LISTED_FILE], "decided_nothing_to_run": [LISTED_FILE]}


def conforms(value, spec, where="report") -> None:
    if isinstance(spec, dict):
        assert isinstance(value, dict), where
        assert set(value) == set(spec), f"{where}: {sorted(set(value) ^ set(spec))}"
        for key, sub in spec.items():
            conforms(value[key], sub, f"{where}.{key}")
    elif isinstance(spec, list):
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            conforms(item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, tuple) and any(isinstance(s, (list, dict)) for s in spec):
        if value is not None:
            conforms(value, next(s for s in spec if isinstance(s, (list, dict))), where)
    else:
        assert isinstance(value, spec), f"{where}: {type(value).__name__}"


shared, tree = tree_fixtures("minitorch")


def test_json_report_schema_and_round_trip(tree: IndexedTree, capsys) -> None:
    tree.replace(ADD_CU, "  if (idx < n) {", "  if (idx < n && n > 0) {")
    tree.path("docs/index.md").write_text("# docs\n")
    assert main(["select", "--source", str(tree.root), "--json"]) == 0
    compact = json.loads(capsys.readouterr().out)
    conforms(compact, REPORT)
    assert compact["per_test_lists"] is False
    with pytest.raises(ValueError, match="without per-test lists"):
        selection_from_dict(compact)
    assert main(["select", "--source", str(tree.root), "--json", "--tests"]) == 0
    data = json.loads(capsys.readouterr().out)
    conforms(data, REPORT_LISTED)
    assert data["schema"] == SCHEMA == "torchtalk.selection/2"
    assert data["counts"]["test_files_selected"] == len(data["selected"]) > 0
    assert data["counts"]["test_files_narrowed"] >= 1
    ops = next(s for s in data["selected"] if s["path"] == "test/test_ops.py")
    assert ops["devices"] == ["cuda"] and ops["tests"][0]["opinfos"] == ["add"]
    categories = {c["path"]: c["category"] for c in data["changed_files"]}
    assert categories == {ADD_CU: "cuda", "docs/index.md": "never-affects"}
    again = selection_to_dict(selection_from_dict(data), tests=True)
    assert {k: v for k, v in again.items() if k != "timings"} == {
        k: v for k, v in data.items() if k != "timings"
    }
    # The report's selected files are their dataclasses, field for field (a record's
    # decisions under the names the report gives them).
    rebuilt = selection_from_dict(data)
    renamed = {
        "decided": "decided_by_record_tests",
        "recorded_groups": "record_reasons",
        "undecided": "undecided_by_record",
    }
    derived = {"tests_run", "runs", "decided_by_record"}  # counts, and what runs
    for selected, raw in zip(rebuilt.files.values(), data["selected"], strict=True):
        fields = {renamed.get(k, k): v for k, v in asdict(selected).items()}
        assert set(fields) == set(raw) - derived
        assert fields["path"] == raw["path"] and fields["tests"] == raw["tests"]
        assert [r["source"] for r in fields["reasons"]] == [r["decided_by"] for r in raw["reasons"]]
        assert sorted(fields["decided_by_record_tests"]) == raw["decided_by_record_tests"]


def test_select_text_lists_files_reasons_and_narrowing(tree: IndexedTree, capsys) -> None:
    tree.replace(ADD_CU, "  if (idx < n) {", "  if (idx < n && n > 0) {")
    assert main(["select", "--source", str(tree.root)]) == 0
    out = capsys.readouterr().out
    assert "changed: at::native::add_kernel_cuda_impl @ " in out
    assert "  test/test_ops.py\n" in out
    assert "    only TestCommon::test_compare_cpu [add]" in out
    assert "    only cuda variants of TestCommon" in out
    assert "    because at::native::add_kernel_cuda_impl changed @ " in out


def test_select_from_a_subdirectory_without_source_lists_each_file_once(
    tree: IndexedTree, capsys, monkeypatch
) -> None:
    tree.replace(ADD_CU, "  if (idx < n) {", "  if (idx < n && n > 0) {")
    monkeypatch.chdir(tree.path("aten/src/ATen"))
    assert main(["select"]) == 0
    out = capsys.readouterr().out
    assert "changed: at::native::add_kernel_cuda_impl @ " in out
    files = [line for line in out.splitlines() if line.startswith("  test/")]
    assert "  test/test_ops.py" in files and len(files) == len(set(files))  # each file once
    assert "1 file, 1 changed entity\n" in out


def test_select_errors_are_one_line(tree: IndexedTree, tmp_path, capsys) -> None:
    assert main(["select", "--source", str(tree.root), "--base", "nope"]) == 2
    assert capsys.readouterr().err == (
        f"torchtalk: error: unknown base revision 'nope' in {tree.root.resolve()}\n"
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.py").write_text("x = 1\n")
    assert main(["select", "--source", str(plain), "--harness", "torch-extension"]) == 2
    assert (
        capsys.readouterr().err
        == f"torchtalk: error: {plain.resolve()} is not inside a git repository\n"
    )


def test_stale_index_is_updated_first_and_says_so(tree: IndexedTree) -> None:
    kernel = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
    tree.replace(kernel, "      return a + alpha * b;", "      return alpha * b + a;")
    selection = tree.select()
    assert selection.index["stale"] is True and selection.index["updated"] is True
    assert any(note.startswith("the index was stale") for note in selection.notes)
    assert not selection.run_everything
    assert selection.entities[0].label == "at::native::(anonymous)::add_kernel"


def test_stale_index_without_update_runs_everything(tree: IndexedTree) -> None:
    kernel = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
    tree.replace(kernel, "      return a + alpha * b;", "      return a + b * alpha;")
    tree.commit("kernel edit")  # the index is now older than HEAD, too
    selection = tree.select(update=False)
    assert selection.run_everything
    assert selection.everything[0].startswith("the index is stale (")
    assert kernel in selection.everything[0]
    assert selection.test_files_total > 0 and selection.files == {}


def test_select_loads_no_other_commands_modules() -> None:
    """CI runs ``torchtalk select`` on every change: it does not import the build
    pipeline or snapshots, which only other commands use."""
    code = (
        "import sys\n"
        "from pytest_torchtalk.cli import main\n"
        "try:\n"
        "    main(['select', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('indexer.build', 'indexer.snapshot') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
