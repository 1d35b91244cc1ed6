"""Matching pytest items to a selection: file first, then PyTorch's generated names
(device-instantiated classes, @ops tests over OpInfos, dtypes, parametrization)."""

from __future__ import annotations

import pytest

from indexer.select.matching import ItemMatcher, split_device_class, split_item
from indexer.select.model import SelectedFile, Selection, TestScope


def _selection(*files: SelectedFile, everything: list[str] | None = None) -> Selection:
    selection = Selection("/src", "pytorch", {}, {})
    selection.files = {f.path: f for f in files}
    selection.everything = everything or []
    return selection


def keeps(selection: Selection, nodeid: str) -> bool:
    path, *parts = nodeid.split("::")
    return ItemMatcher(selection).verdict(path, parts).keep


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("TestCommonCPU", ("TestCommon", "cpu")),
        ("TestCommonCUDA", ("TestCommon", "cuda")),
        ("TestLinalgMPS", ("TestLinalg", "mps")),
        ("TestFooPRIVATEUSE1", ("TestFoo", "privateuse1")),
        ("TestReluModule", ("TestReluModule", None)),
        ("CPU", ("CPU", None)),
    ],
)
def test_device_class_names(name: str, split: tuple) -> None:
    assert split_device_class(name) == split


def test_item_parts_drop_parametrization() -> None:
    assert split_item(["TestX", "test_a[1-2]"]) == ("TestX", "test_a")
    assert split_item(["test_b[cpu]"]) == (None, "test_b")


def test_whole_file_and_unselected_file() -> None:
    selection = _selection(SelectedFile("test/test_linalg.py"))
    assert keeps(selection, "test/test_linalg.py::TestLinalgCPU::test_matmul_2d_cpu")
    assert not keeps(selection, "test/test_unrelated.py::test_slugify")
    assert keeps(_selection(everything=["CMakeLists.txt"]), "test/test_unrelated.py::test_slugify")


def test_opinfo_narrowing_tells_sum_from_sum_dim() -> None:
    ops = SelectedFile(
        "test/test_ops.py",
        tests=[TestScope("TestCommon", "test_compare_cpu", ["sum"])],
    )
    selection = _selection(ops)
    assert keeps(selection, "test/test_ops.py::TestCommonCPU::test_compare_cpu_sum_cpu_float32")
    assert keeps(selection, "test/test_ops.py::TestCommonCUDA::test_compare_cpu_sum_cuda_float64")
    assert not keeps(
        selection, "test/test_ops.py::TestCommonCPU::test_compare_cpu_sum_dim_cpu_float32"
    )
    assert not keeps(selection, "test/test_ops.py::TestCommonCPU::test_aten_name_sum_cpu_float32")
    assert not keeps(selection, "test/test_ops.py::TestCommonCPU::test_compare_cpu_add_cpu_float32")


def test_opinfo_with_dots_and_variants() -> None:
    ops = SelectedFile(
        "test/test_ops.py",
        tests=[TestScope("TestCommon", "test_compare_cpu", ["nn_functional_linear", "sum_dim"])],
    )
    selection = _selection(ops)
    item = "test/test_ops.py::TestCommonCPU::test_compare_cpu_nn_functional_linear_cpu_float32"
    assert keeps(selection, item)
    assert keeps(selection, "test/test_ops.py::TestCommonCPU::test_compare_cpu_sum_dim_cpu_float32")
    assert not keeps(selection, "test/test_ops.py::TestCommonCPU::test_compare_cpu_sum_cpu_float32")


def test_cuda_narrowing_applies_to_device_generic_classes_only() -> None:
    selected = SelectedFile(
        "test/test_binary_ufuncs.py", devices=["cuda"], device_classes=["TestBinaryUfuncs"]
    )
    selection = _selection(selected)
    base = "test/test_binary_ufuncs.py::"
    assert keeps(selection, base + "TestBinaryUfuncsCUDA::test_add_alpha_cuda_float32")
    assert not keeps(selection, base + "TestBinaryUfuncsCPU::test_add_alpha_cpu_float32")
    assert keeps(selection, base + "TestPlainCPU::test_x")  # not a device-generic class
    assert keeps(selection, base + "test_module_level_function")
