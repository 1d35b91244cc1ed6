"""Edges from C++/CUDA code in the minitorch fixture: calls resolved by scope rules,
launches, dispatch stubs and includes, each with its evidence line."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Edge, Index, Node
from tests.helpers import line_of
from tests.pyindex import build_fixture

NATIVE = "aten/src/ATen/native"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


def one(index: Index, qualname: str, kind: str = "cpp_function") -> Node:
    found = [node for node in index.find(qualname, [kind]) if node.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def out(index: Index, node: Node, kind: str = "calls") -> list[tuple[Node, Edge]]:
    return [(index.node(edge.dst), edge) for edge in index.out_edges(node.id, [kind])]


def called(index: Index, node: Node, kind: str = "calls") -> set[str]:
    return {target.qualname for target, _ in out(index, node, kind)}


def test_call_inside_at_dispatch_lambda_belongs_to_the_function(built: tuple[Path, Index]) -> None:
    repo, index = built
    caller = one(index, "at::native::addmm_impl_cpu_")
    gemm_edges = [
        (t, e) for t, e in out(index, caller) if t.qualname == "at::native::cpublas::gemm"
    ]
    assert gemm_edges, called(index, caller)
    line = line_of(repo / NATIVE / "LinearAlgebra.cpp", "cpublas::gemm(")
    assert {edge.line for _, edge in gemm_edges} == {line}
    assert all(edge.path == f"{NATIVE}/LinearAlgebra.cpp" for _, edge in gemm_edges)
    # Three overloads, eleven arguments each: all kept, marked ambiguous, none guessed.
    assert len(gemm_edges) == 3 and all(edge.ambiguous for _, edge in gemm_edges)


def test_anonymous_namespace_helper_and_qualified_calls(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "LinearAlgebra.cpp"
    matmul = one(index, "at::native::matmul")
    assert called(index, matmul) == {"at::native::(anonymous)::_matmul_impl"}
    impl = one(index, "at::native::(anonymous)::_matmul_impl")
    edges = {t.qualname: e for t, e in out(index, impl)}
    assert edges["at::native::mm_cpu"].line == line_of(path, "at::native::mm_cpu(")
    structured = one(index, "at::native::structured_add_out::impl")
    assert "at::native::(anonymous)::check_add_alpha" in called(index, structured)
    meta = one(index, "at::meta::structured_add_Tensor::meta")
    # `native::alpha_check` from at::meta is found in the enclosing namespace at.
    assert "at::native::alpha_check" in called(index, meta)


def test_calls_into_the_generated_aten_api_reach_the_op(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "LinearAlgebra.cpp"
    impl = one(index, "at::native::(anonymous)::_matmul_impl")
    to_ops = {
        (index.node(e.dst).qualname, e.line)
        for e in index.out_edges(impl.id, ["calls"])
        if index.node(e.dst).kind == "op"
    }
    # at::mm(...) (function variant) and tensor1.mm(...) (method variant): not C++ in
    # the tree, but the op aten::mm is.
    assert to_ops == {
        ("aten::mm", line_of(path, "return at::mm(tensor1, tensor2);")),
        ("aten::mm", line_of(path, "return tensor1.mm(tensor2);")),
    }
    # A name with a definition in the tree stays a call to that definition.
    assert "aten::mm" not in {
        index.node(e.dst).qualname
        for e in index.out_edges(impl.id, ["calls"])
        if e.line == line_of(path, "at::native::mm_cpu(")
    }


def test_overloads_are_narrowed_by_argument_count(built: tuple[Path, Index]) -> None:
    _, index = built
    caller = one(index, "at::native::addmm_impl_cpu_")
    dims = [e for t, e in out(index, caller) if t.qualname == "at::native::check_dim_size"]
    # Both overloads take two arguments: the text cannot tell them apart.
    assert dims and all(edge.ambiguous for edge in dims)
    template = one(index, "at::native::linalg_vector_norm")
    assert called(index, template) >= {"at::native::vector_norm_accumulate"}


def test_using_namespace_then_unqualified_call(built: tuple[Path, Index]) -> None:
    repo, index = built
    caller = one(index, "at::native::(anonymous)::scaled_relu_inplace")
    edges = {t.qualname: (t, e) for t, e in out(index, caller)}
    target, edge = edges["at::native::cpublas::scale_"]
    assert target.path == f"{NATIVE}/CPUBlas.cpp"
    assert edge.line == line_of(repo / NATIVE / "Activation.cpp", "scale_(self.numel()")
    assert not edge.ambiguous


def test_member_calls_with_known_receiver_class(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "Activation.cpp"
    relu = one(index, "at::native::relu")
    edges = {t.qualname: e for t, e in out(index, relu)}
    assert edges["at::native::ReluHelper::apply"].line == line_of(path, "return h.apply(self);")
    quantized = one(index, "at::native::relu_quantized_cpu")
    edges = {t.qualname: e for t, e in out(index, quantized)}
    # `helper(...)` calls ReluHelper::operator() on a local object.
    assert edges["at::native::ReluHelper::operator()"].line == line_of(
        path, "helper(qx.dequantize())"
    )
    # Inside a method, an unqualified call finds the class's own member.
    operator = one(index, "at::native::ReluHelper::operator()")
    assert called(index, operator) == {"at::native::ReluHelper::apply"}


def test_ambiguous_unqualified_call_keeps_both_candidates(built: tuple[Path, Index]) -> None:
    repo, index = built
    caller = one(index, "at::functorch::special_erfcx_twice")
    edges = out(index, caller)
    assert {t.qualname for t, _ in edges} == {
        "at::native::special_erfcx",
        "at::native::legacy::special_erfcx",
    }
    line = line_of(repo / NATIVE / "Special.cpp", "return special_erfcx(special_erfcx(self))")
    assert all(edge.ambiguous and edge.line == line for _, edge in edges)


def test_stub_call_and_registered_kernels(built: tuple[Path, Index]) -> None:
    repo, index = built
    stub = one(index, "at::native::add_stub", "dispatch_stub")
    impl = one(index, "at::native::structured_add_out::impl")
    edges = {t.qualname: e for t, e in out(index, impl)}
    assert edges["at::native::add_stub"].line == line_of(
        repo / NATIVE / "BinaryOps.cpp", "add_stub(device_type(), *this, alpha)"
    )
    kernels = {t.qualname: e for t, e in out(index, stub, "dispatches")}
    assert kernels["at::native::(anonymous)::add_kernel"].evidence == (
        f"{NATIVE}/cpu/BinaryOpsKernel.cpp:"
        f"{line_of(repo / NATIVE / 'cpu/BinaryOpsKernel.cpp', 'REGISTER_DISPATCH(add_stub')}"
    )
    assert kernels["at::native::add_kernel_cuda"].path == f"{NATIVE}/cuda/BinaryAddKernel.cu"
    mul = one(index, "at::native::mul_stub", "dispatch_stub")
    lines = sorted(e.line for t, e in out(index, mul, "dispatches"))
    path = repo / NATIVE / "cpu/BinaryOpsKernel.cpp"
    assert lines == sorted(
        [
            line_of(path, "ALSO_REGISTER_AVX512_DISPATCH(mul_stub"),
            line_of(path, "REGISTER_ARCH_DISPATCH(mul_stub"),
        ]
    )
    # One logical kernel, whatever the capability it is registered for.
    assert {t.qualname for t, _ in out(index, mul, "dispatches")} == {
        "at::native::(anonymous)::mul_kernel"
    }
    # mul_out hands mul_stub to the helper that calls it: that is mul_out calling it.
    mul_out = one(index, "at::native::structured_mul_out::impl")
    calls = {t.qualname: e for t, e in out(index, mul_out)}
    assert calls["at::native::mul_stub"].line == line_of(
        repo / NATIVE / "BinaryOps.cpp", "binary_op_impl(*this, mul_stub)"
    )


def test_kernel_launches(built: tuple[Path, Index]) -> None:
    repo, index = built
    host = one(index, "at::native::add_kernel_cuda")
    launches = {t.qualname: e for t, e in out(index, host, "launches")}
    assert launches["at::native::add_kernel_cuda_impl"].line == line_of(
        repo / NATIVE / "cuda/BinaryAddKernel.cu", "add_kernel_cuda_impl<scalar_t><<<"
    )
    relu = one(index, "at::native::relu_cuda_launch")
    assert called(index, relu, "launches") == {"at::native::relu_kernel"}
    kernel = one(index, "at::native::relu_kernel", "cuda_kernel")
    assert called(index, kernel) == {"at::native::relu_scalar"}  # a __device__ helper in a .cuh


def test_kernels_passed_to_launch_helpers(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / NATIVE / "cuda/Blas.cu"
    host = one(index, "at::native::(anonymous)::gemm_cuda_launch")
    launches = {t.qualname: e for t, e in out(index, host, "launches")}
    assert launches["at::native::(anonymous)::gemm_kernel_tiled"].line == line_of(
        path, "cudaLaunchKernel((void*)gemm_kernel_tiled"
    )
    assert launches["at::native::(anonymous)::gemm_kernel"].line == line_of(
        path, "launch_kernel(gemm_kernel<float>"
    )
    assert set(launches) == {
        "at::native::(anonymous)::gemm_kernel_tiled",
        "at::native::(anonymous)::gemm_kernel",
    }
    # Only kernels: the helper itself stays a call.
    assert "at::native::(anonymous)::launch_kernel" in called(index, host)


def test_extension_kernel_launch_from_global_host_function(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    repo, index = build_fixture(tmp_path_factory, "miniext")
    host = one(index, "rms_norm")
    launches = {t.qualname: e for t, e in out(index, host, "launches")}
    assert launches["vllm::rms_norm_kernel"].line == line_of(
        repo / "csrc/layernorm_kernels.cu", "vllm::rms_norm_kernel<scalar_t><<<"
    )


def test_includes_resolve_to_files(built: tuple[Path, Index]) -> None:
    repo, index = built

    def included(path: str) -> dict[str, Edge]:
        node = one(index, path, "file")
        return {index.node(e.dst).qualname: e for e in index.out_edges(node.id, ["includes"])}

    quoted = included(f"{NATIVE}/BinaryOps.cpp")  # "BinaryOps.h", relative to the file
    assert quoted[f"{NATIVE}/BinaryOps.h"].line == line_of(
        repo / NATIVE / "BinaryOps.cpp", '#include "BinaryOps.h"'
    )
    rooted = included(f"{NATIVE}/LinearAlgebra.cpp")  # <ATen/native/CPUBlas.h> under aten/src
    assert f"{NATIVE}/CPUBlas.h" in rooted
    assert f"{NATIVE}/cuda/Relu.cuh" in included(f"{NATIVE}/cuda/Relu.cu")
    # System and generated headers stay unresolved: no edge, no guess.
    assert all(target.startswith(("aten/", "minitorch/")) for target in rooted)
