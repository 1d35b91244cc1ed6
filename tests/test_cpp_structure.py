"""C++/CUDA definitions from the minitorch fixture: qualified names, lines, signatures,
macros, kernels, and files that do not parse or decode cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index, Node
from indexer.query.status import index_status
from tests.helpers import line_of
from tests.pyindex import build_fixture

NATIVE = "aten/src/ATen/native"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


def defs(index: Index, qualname: str, kinds: tuple[str, ...] = ("cpp_function",)) -> list[Node]:
    return [node for node in index.find(qualname, kinds) if node.qualname == qualname]


def one(index: Index, qualname: str, kind: str = "cpp_function") -> Node:
    found = defs(index, qualname, (kind,))
    assert len(found) == 1, (qualname, found)
    return found[0]


def test_function_has_qualified_name_file_and_line_range(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "LinearAlgebra.cpp"
    matmul = one(index, "at::native::matmul")
    assert matmul.path == f"{NATIVE}/LinearAlgebra.cpp"
    assert matmul.line == line_of(path, "Tensor matmul(const Tensor& tensor1")
    assert matmul.end_line == line_of(path, "return _matmul_impl(tensor1, tensor2);") + 1
    assert matmul.name == "matmul"
    assert matmul.attrs["signature"] == "(const Tensor&, const Tensor&)"


def test_overloads_are_distinct_nodes_with_distinct_signatures(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "LinearAlgebra.cpp"
    overloads = defs(index, "at::native::check_dim_size")
    assert {node.attrs["signature"] for node in overloads} == {
        "(const Tensor&, int64_t)",
        "(IntArrayRef, int64_t)",
    }
    assert {node.line for node in overloads} == {
        line_of(path, "check_dim_size(const Tensor& tensor"),
        line_of(path, "check_dim_size(IntArrayRef sizes"),
    }
    assert all(node.attrs.get("static") for node in overloads)
    gemms = defs(index, "at::native::cpublas::gemm")
    assert len(gemms) == 3 and len({node.attrs["signature"] for node in gemms}) == 3
    assert sum(1 for node in gemms if node.attrs.get("template")) == 1


def test_template_function(built: tuple[Path, Index]) -> None:
    repo, index = built
    node = one(index, "at::native::vector_norm_accumulate")
    assert node.attrs.get("template") is True
    assert node.line == line_of(
        repo / NATIVE / "LinearAlgebra.cpp", "static scalar_t vector_norm_accumulate("
    )


def test_out_of_line_methods_constructor_destructor_operator(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "Activation.cpp"
    helper = one(index, "at::native::ReluHelper", "cpp_class")
    expected = {
        "at::native::ReluHelper::ReluHelper": "ReluHelper::ReluHelper(",
        "at::native::ReluHelper::~ReluHelper": "ReluHelper::~ReluHelper()",
        "at::native::ReluHelper::apply": "Tensor ReluHelper::apply(",
        "at::native::ReluHelper::operator()": "Tensor ReluHelper::operator()(",
    }
    for qualname, text in expected.items():
        method = one(index, qualname)
        assert method.line == line_of(path, text), qualname
        assert method.parent_id == helper.id  # contained by its class, defined out of line
    contained = {index.node(e.dst).qualname for e in index.out_edges(helper.id, ["contains"])}
    assert set(expected) <= contained
    # A namespace written `namespace at { namespace native {` nests the same way.
    assert one(index, "at::native::relu").path == f"{NATIVE}/Activation.cpp"


def test_anonymous_namespace_in_qualname(built: tuple[Path, Index]) -> None:
    _, index = built
    assert one(index, "at::native::(anonymous)::_matmul_impl").name == "_matmul_impl"
    assert one(index, "at::native::(anonymous)::check_add_alpha").path == f"{NATIVE}/BinaryOps.cpp"


def test_structured_kernel_macros(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "BinaryOps.cpp"
    impl = one(index, "at::native::structured_add_out::impl")
    assert impl.name == "add_out"
    assert impl.attrs["macro"] == "TORCH_IMPL_FUNC"
    assert impl.line == line_of(path, "TORCH_IMPL_FUNC(add_out)")
    meta = one(index, "at::meta::structured_add_Tensor::meta")
    assert meta.name == "add"
    assert meta.attrs["macro"] == "TORCH_META_FUNC2"
    assert meta.line == line_of(path, "TORCH_META_FUNC2(add, Tensor)")


def test_declare_dispatch_makes_a_stub(built: tuple[Path, Index]) -> None:
    repo, index = built
    stub = one(index, "at::native::add_stub", "dispatch_stub")
    assert stub.path == f"{NATIVE}/BinaryOps.h"
    assert stub.line == line_of(
        repo / NATIVE / "BinaryOps.h", "DECLARE_DISPATCH(binary_fn, add_stub)"
    )
    assert stub.attrs["fn_type"] == "binary_fn"
    # DEFINE_DISPATCH does not make a second stub.
    assert len(defs(index, "at::native::add_stub", ("dispatch_stub",))) == 1


def test_cuda_kernels_and_device_functions(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "cuda" / "BinaryAddKernel.cu"
    kernel = one(index, "at::native::add_kernel_cuda_impl", "cuda_kernel")
    assert kernel.line == line_of(path, "__global__ void add_kernel_cuda_impl(") - 0
    assert kernel.attrs.get("template") is True
    device = one(index, "at::native::add_with_alpha")
    assert device.attrs.get("device") is True
    assert one(index, "at::native::add_kernel_cuda").attrs.get("device") is None
    header = one(index, "at::native::relu_scalar")
    assert header.path == f"{NATIVE}/cuda/Relu.cuh" and header.attrs.get("device") is True
    tiled = one(index, "at::native::(anonymous)::gemm_kernel_tiled", "cuda_kernel")
    assert tiled.line == line_of(
        repo / NATIVE / "cuda" / "Blas.cu", "__global__ void gemm_kernel_tiled("
    )
    # vLLM style: kernels in namespace vllm, the host function at global scope.
    assert kernel.kind == "cuda_kernel"


def test_registration_block_is_a_node_that_keeps_its_calls(built: tuple[Path, Index]) -> None:
    repo, index = built
    blocks = defs(index, "PYBIND11_MODULE(_C)")
    assert len(blocks) == 1 and blocks[0].attrs["registration"] is True
    called = {index.node(e.dst).qualname for e in index.out_edges(blocks[0].id, ["calls"])}
    assert "at::native::linear" in called  # inside a lambda bound with sub.def(...)
    impl = defs(index, "TORCH_LIBRARY_IMPL(minitorch, CPU)")
    assert len(impl) == 1
    assert impl[0].line == line_of(
        repo / "minitorch/csrc/custom_ops.cpp", "TORCH_LIBRARY_IMPL(minitorch, CPU, lib)"
    )


def test_broken_file_indexes_what_parses_and_counts_errors(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "Broken.cpp"
    still = one(index, "at::native::still_parsed")
    assert still.line == line_of(path, "int still_parsed(int x)")
    called = {index.node(e.dst).qualname for e in index.out_edges(still.id, ["calls"])}
    assert called == {"at::native::helper_in_broken"}
    status = index_status(index)
    worst = {row["path"]: row["errors"] for row in status["worst_parse_errors"]}
    assert worst.get(f"{NATIVE}/Broken.cpp", 0) > 0
    # Clean C++ files report no ERROR regions; CUDA ones neither, once qualifiers are blanked.
    assert f"{NATIVE}/LinearAlgebra.cpp" not in worst
    assert f"{NATIVE}/cuda/Blas.cu" not in worst


def test_non_utf8_file_is_reported_and_still_indexed(built: tuple[Path, Index]) -> None:
    _, index = built
    problems = {row["path"]: row["error"] for row in index_status(index)["file_problems"]}
    assert "not valid UTF-8" in problems[f"{NATIVE}/Latin1.cpp"]
    double = one(index, "at::native::latin1_double")
    called = {index.node(e.dst).qualname for e in index.out_edges(double.id, ["calls"])}
    assert "at::native::latin1_identity" in called
