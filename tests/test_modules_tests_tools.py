"""The `modules` and `tests` tools on the minitorch fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.modules import modules
from indexer.query.tests import tests as find_tests
from tests.helpers import line_of
from tests.pyindex import build_fixture


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


def labels(answer) -> list[str]:
    return [item.label for item in answer.items]


def test_modules_trace_a_reexported_class(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    answer = modules(index, "minitorch.nn.Linear")
    assert answer.found
    source = repo / "minitorch/nn/modules/linear.py"
    forward = next(item for item in answer.items if item.label.startswith("forward("))
    assert forward.label == "forward(self, input)"
    assert forward.evidence == f"minitorch/nn/modules/linear.py:{line_of(source, 'def forward')}"
    assert answer.data["qualname"] == "minitorch.nn.modules.linear.Linear"
    assert answer.data["bases"][0]["name"] == "minitorch.nn.modules.module.Module"
    assert answer.data["bases"][0]["evidence"].startswith("minitorch/nn/modules/module.py:")
    assert any("re-export" in note for note in answer.notes)
    assert "forward(self, input)" in answer.to_text()


def test_modules_full_focus_adds_docstrings(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    brief = modules(index, "minitorch.nn.modules.module.Module", focus="methods")
    full = modules(index, "minitorch.nn.modules.module.Module", focus="full")
    assert not any(item.detail == "doc" for item in brief.items)
    assert any(
        item.detail == "doc" and "Base class for all neural network modules" in item.label
        for item in full.items
    )
    methods = modules(index, "minitorch.tensor.Tensor", focus="full")
    assert "add_(self, other, alpha=1)" in labels(methods)


def test_modules_trace_a_function_and_a_module(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    answer = modules(index, "minitorch.add")
    assert answer.data["qualname"] == "minitorch.functional.add"
    assert any(label.startswith("-> aten::add") for label in labels(answer))
    module = modules(index, "minitorch.nn.functional")
    assert {"linear(input, weight, bias=None)", "relu(input, inplace=False)"} <= set(labels(module))


def test_modules_list_categories(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    nn = modules(index, "nn", mode="list")
    assert {"minitorch.nn.Linear", "minitorch.nn.ReLU", "minitorch.nn.Module"} <= set(labels(nn))
    linear = next(item for item in nn.items if item.label == "minitorch.nn.Linear")
    assert linear.evidence.startswith("minitorch/nn/modules/linear.py:")
    everything = modules(index, "all", mode="list")
    assert "minitorch.nn.modules.linear" in labels(everything)
    assert not any(label.split(".")[-1].startswith("_") for label in labels(everything))


def test_modules_unknown_names_are_not_found_with_suggestions(
    minitorch: tuple[Path, Index],
) -> None:
    _, index = minitorch
    answer = modules(index, "minitorch.nn.Lienar")
    assert not answer.found and "Lienar" in answer.title
    assert any("Linear" in name for name in answer.suggestions)
    assert not modules(index, "optim", mode="list").found
    with pytest.raises(ValueError):
        modules(index, "Linear", mode="browse")


def test_tests_find_for_an_op(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    answer = find_tests(index, "matmul", limit=100)
    assert answer.found
    found = labels(answer)
    assert "test/test_linalg.py::TestLinalg::test_matmul_2d" in found
    assert "test/test_ops.py::TestCommon::test_compare_cpu" in found  # OpInfo-driven
    assert "test/test_tensor.py::test_matmul_operator" in found  # `t @ t`
    assert "test/test_unrelated.py::test_slugify" not in found
    opinfo_driven = next(i for i in answer.items if i.label.endswith("test_compare_cpu"))
    assert "OpInfo op_db:matmul" in opinfo_driven.detail
    assert {"test/test_linalg.py", "test/test_ops.py", "test/test_tensor.py"} <= set(
        answer.data["files"]
    )
    files = find_tests(index, "matmul", focus="files")
    assert set(labels(files)) == set(answer.data["files"])
    classes = find_tests(index, "torch.matmul", focus="classes")
    assert all("::" in label and label.count("::") == 1 for label in labels(classes))


def test_tests_find_for_a_python_api_and_limit(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    answer = find_tests(index, "minitorch.nn.Linear", focus="functions")
    assert "test/test_nn.py::test_linear_shape" in labels(answer)
    limited = find_tests(index, "matmul", limit=2)
    assert len(limited.items) == 2 and limited.total and limited.total > 2


def test_tests_utils_and_file_info(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    utils = find_tests(index, mode="utils", limit=500)
    assert "test.conftest.small_tensor" in labels(utils)
    assert "minitorch.testing._internal.common_utils.TestCase" in labels(utils)
    fixtures = find_tests(index, "small", mode="utils")
    assert labels(fixtures) == ["test.conftest.small_tensor"]
    only_fixtures = find_tests(index, mode="utils", focus="fixtures")
    assert labels(only_fixtures) == ["test.conftest.small_tensor"]
    info = find_tests(index, "test_linalg.py", mode="file_info")
    cls = info.items[0]
    assert cls.label == "test/test_linalg.py::TestLinalg"
    assert "TestLinalgCPU" in cls.detail and "TestLinalgCUDA" in cls.detail
    reference = next(i for i in info.items if i.label.endswith("test_linalg_reference"))
    assert "@ops(linalg_op_db)" in reference.detail and reference.depth == 1
    parametrized = find_tests(index, "test/test_nn.py", mode="file_info")
    relu = next(i for i in parametrized.items if i.label.endswith("test_functional_relu"))
    assert "parametrized (3 ids)" in relu.detail


def test_tests_unknown_queries_are_not_found(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    for answer in (
        find_tests(index, "no_such_op_anywhere"),
        find_tests(index, "test_nothing.py", mode="file_info"),
        find_tests(index, "zzzz", mode="utils"),
    ):
        assert not answer.found and answer.title
    suggested = find_tests(index, "matmull")
    assert not suggested.found and suggested.suggestions
    with pytest.raises(ValueError):
        find_tests(index, None, mode="find")
    with pytest.raises(ValueError):
        find_tests(index, "matmul", mode="nope")


def test_tests_find_reads_the_same_edges_from_memory_as_from_sqlite(
    minitorch: tuple[Path, Index], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server holds the edges in memory once idle; its answers are the ones SQLite gives,
    item for item (the same nearest tests, reached by the same hop)."""
    from indexer.query import adjacency

    _, index = minitorch
    queries = [("matmul", None), ("torch.matmul", "functions"), ("minitorch.nn.Linear", None)]
    queries += [("add", "files"), ("relu", "functions")]
    with monkeypatch.context() as without:
        without.setattr(adjacency, "held", lambda *_: None)
        from_sql = [find_tests(index, q, limit=100, focus=f).to_dict() for q, f in queries]
    graph = adjacency.shared(index.db_path, index.conn, index.meta)
    assert adjacency.held(index.db_path, index.meta) is graph
    from_memory = [find_tests(index, q, limit=100, focus=f).to_dict() for q, f in queries]
    assert from_memory == from_sql
    assert all(answer["items"] for answer in from_sql)
