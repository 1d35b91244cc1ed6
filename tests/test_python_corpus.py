"""The Python and test index on the real trees: PyTorch 2.6 and vLLM.

Expected values are read from the source files themselves (line numbers, counts of
``def test_`` lines), never hard-coded.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.modules import modules
from indexer.query.tests import tests as find_tests
from tests.helpers import corpus_db, line_of

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def pytorch(pytorch_index: tuple[Path, Path]) -> tuple[Path, Index]:
    return pytorch_index[0], Index(corpus_db(pytorch_index))


@pytest.fixture(scope="module")
def vllm(vllm_index: tuple[Path, Path]) -> tuple[Path, Index]:
    return vllm_index[0], Index(corpus_db(vllm_index))


def count(index: Index, kind: str) -> int:
    return index.conn.execute("SELECT COUNT(*) FROM nodes WHERE kind = ?", (kind,)).fetchone()[0]


def test_pytorch_test_files_and_functions(pytorch: tuple[Path, Index]) -> None:
    source, index = pytorch
    test_files = sorted((source / "test").rglob("test_*.py"))
    assert count(index, "test_file") >= 800 and len(test_files) >= 800
    def_lines = sum(
        len(re.findall(r"^\s*(?:async\s+)?def test_", path.read_text(errors="replace"), re.M))
        for path in test_files
    )
    functions = count(index, "test_function")
    assert functions >= 20_000
    # Nested and helper-class `def test_` lines are not tests; most lines are.
    assert functions >= 0.85 * def_lines, (functions, def_lines)


def test_pytorch_opinfo_entries(pytorch: tuple[Path, Index]) -> None:
    source, index = pytorch
    assert count(index, "opinfo") >= 500
    cmi = "torch/testing/_internal/common_methods_invocations.py"
    entry = next(n for n in index.find("op_db:matmul", ["opinfo"]) if n.path == cmi)
    assert entry.line == line_of(source / cmi, "OpInfo('matmul',")
    ops = {index.node(e.dst).qualname for e in index.out_edges(entry.id, ["references"])}
    assert "aten::matmul" in ops
    # Entries from the opinfo/definitions modules, included into op_db by `+=`.
    linalg = [n for n in index.nodes_of_kind("opinfo") if "definitions/linalg.py" in n.path]
    assert len(linalg) >= 50


def _opinfo_edges(index: Index, test_id: int) -> list:
    return [e for e in index.out_edges(test_id, ["covers"]) if index.node(e.dst).kind == "opinfo"]


def test_pytorch_ops_tests_and_device_generic_classes(pytorch: tuple[Path, Index]) -> None:
    _, index = pytorch
    in_test_ops = index.nodes_in_file("test/test_ops.py", ["test_function"])
    over_op_db = [n for n in in_test_ops if n.attrs.get("opinfo_list") == "op_db"]
    assert over_op_db, "test/test_ops.py has @ops(op_db) tests"
    for test in over_op_db:
        edges = _opinfo_edges(index, test.id)
        assert len(edges) >= 500 and not any(e.attrs.get("all_opinfos") for e in edges)
    # `_ops_and_refs_with_no_numpy_ref = [op for op in ops_and_refs if op.ref is None]`,
    # defined in test_ops.py itself: a superset (the filter is not evaluated) of op_db.
    compare = next(n for n in in_test_ops if n.name == "test_compare_cpu")
    assert compare.attrs["opinfo_list"] == "_ops_and_refs_with_no_numpy_ref"
    assert len(_opinfo_edges(index, compare.id)) >= len(_opinfo_edges(index, over_op_db[0].id))
    linalg = next(
        n
        for n in index.find("TestLinalg", ["test_class"])
        if n.qualname == "test/test_linalg.py::TestLinalg"
    )
    assert {"TestLinalgCPU", "TestLinalgCUDA"} <= set(linalg.attrs["variants"])


def test_pytorch_tests_for_matmul(pytorch: tuple[Path, Index]) -> None:
    _, index = pytorch
    answer = find_tests(index, "matmul", limit=100_000, focus="functions")
    assert answer.found
    assert "test/test_linalg.py" in answer.data["files"]
    opinfo_driven = [
        item
        for item in answer.items
        if item.label.startswith("test/test_ops.py::") and "OpInfo" in item.detail
    ]
    assert opinfo_driven, "the OpInfo-driven tests of test/test_ops.py"
    assert any(item.label.startswith("test/test_linalg.py::") for item in answer.items)


def test_pytorch_modules_linear(pytorch: tuple[Path, Index]) -> None:
    source, index = pytorch
    answer = modules(index, "torch.nn.Linear")
    assert answer.found and answer.data["qualname"] == "torch.nn.modules.linear.Linear"
    path = source / "torch/nn/modules/linear.py"
    lines = path.read_text().splitlines()
    start = line_of(path, "class Linear(Module):")
    forward_line = next(
        number
        for number, text in enumerate(lines[start:], start + 1)
        if text.strip().startswith("def forward(")
    )
    forward = next(m for m in answer.data["methods"] if m["name"] == "forward")
    assert forward["evidence"] == f"torch/nn/modules/linear.py:{forward_line}"


def test_vllm_external_refs_into_torch(vllm: tuple[Path, Index]) -> None:
    _, index = vllm
    edges = index.conn.execute(
        "SELECT COUNT(*), COUNT(DISTINCT src_id) FROM edges WHERE kind = 'external_ref'"
    ).fetchone()
    # vLLM 0.33's vllm/ and tests/ import torch in well over a thousand files
    # (docs/performance.md has the figure this build gives).
    assert edges[0] >= 1_500 and edges[1] >= 900, edges
    targets = {
        row[0]
        for row in index.conn.execute(
            "SELECT DISTINCT n.qualname FROM edges e JOIN nodes n ON n.id = e.dst_id"
            " WHERE e.kind = 'external_ref'"
        )
    }
    assert {"torch", "torch.nn"} <= targets
    assert all(target.split(".")[0] == "torch" for target in targets)


def test_vllm_custom_ops_reach_their_ops(vllm: tuple[Path, Index]) -> None:
    _, index = vllm
    wrapper = next(
        n
        for n in index.find("rms_norm", ["python_function"])
        if n.qualname == "vllm._custom_ops.rms_norm"
    )
    ops = {index.node(e.dst).qualname for e in index.out_edges(wrapper.id, ["references"])}
    assert "_C::rms_norm" in ops
