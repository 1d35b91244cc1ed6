"""The C++ index of the real PyTorch and vLLM trees, checked against lines read from the
files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.kernel_reach import cuda_ops_reaching_kernels
from tests.helpers import corpus_db, line_of

pytestmark = pytest.mark.corpus

LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"


@pytest.fixture(scope="module")
def index(pytorch_index: tuple[Path, Path]) -> Index:
    return Index(corpus_db(pytorch_index))


def test_matmul_definition_line(index: Index, pytorch_source: Path) -> None:
    found = [n for n in index.find("at::native::matmul", ["cpp_function"]) if n.path == LINALG]
    assert len(found) == 1, found
    expected = line_of(pytorch_source / LINALG, "Tensor matmul(const Tensor & tensor1")
    assert found[0].line == expected
    assert found[0].qualname == "at::native::matmul"


def test_header_macro_accessors_are_methods_of_their_options_class(
    index: Index, pytorch_source: Path
) -> None:
    adam = "torch/csrc/api/include/torch/optim/adam.h"
    found = index.find("torch::optim::AdamOptions::lr", ["cpp_function"])
    assert {n.path for n in found} == {adam}
    # TORCH_ARG's four accessors: setters from const T& and T&&, const and mutable getters.
    assert len(found) == 4, found
    assert {n.line for n in found} == {line_of(pytorch_source / adam, "TORCH_ARG(double, lr)")}


def test_mps_kernel_of_mm_is_indexed_with_its_namespace(index: Index, pytorch_source: Path) -> None:
    path = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
    found = index.find("at::native::structured_mm_out_mps::impl", ["cpp_function"])
    assert [n.path for n in found] == [path]
    assert found[0].line == line_of(pytorch_source / path, "TORCH_IMPL_FUNC(mm_out_mps)")
    calls = {index.node(e.dst).qualname for e in index.out_edges(found[0].id, ["calls"])}
    assert "at::native::mps::mm_out_mps_impl" in calls


def test_addmm_impl_calls_cpublas_gemm(index: Index, pytorch_source: Path) -> None:
    callers = [n for n in index.find("addmm_impl_cpu_", ["cpp_function"]) if n.path == LINALG]
    assert len(callers) == 1, callers
    assert callers[0].line == line_of(pytorch_source / LINALG, "static void addmm_impl_cpu_(")
    edges = [
        (index.node(edge.dst), edge)
        for edge in index.out_edges(callers[0].id, ["calls"])
        if index.node(edge.dst).qualname.endswith("cpublas::gemm")
    ]
    assert edges, "no call edge from addmm_impl_cpu_ to cpublas::gemm"
    # The call is written inside an AT_DISPATCH lambda; its evidence is the call's line.
    call_lines = {edge.line for _, edge in edges}
    text = (pytorch_source / LINALG).read_text().splitlines()
    assert all("cpublas::gemm(" in text[line - 1] for line in call_lines)
    assert {target.path for target, _ in edges} <= {
        "aten/src/ATen/native/CPUBlas.cpp",
        "aten/src/ATen/native/CPUBlas.h",
    }


def test_cuda_kernels_have_launch_edges_from_host_functions(
    index: Index, pytorch_source: Path
) -> None:
    rows = index.conn.execute(
        "SELECT k.id FROM nodes k JOIN files f ON f.id = k.file_id"
        " WHERE k.kind = 'cuda_kernel' AND f.path LIKE 'aten/src/ATen/native/cuda/%'"
    ).fetchall()
    kernels = index.nodes(row[0] for row in rows)
    assert len(kernels) > 50
    launched = []
    for kernel in kernels:
        for edge in index.in_edges(kernel.id, ["launches"]):
            host = index.node(edge.src)
            if host.kind == "cpp_function":
                launched.append((kernel, host, edge))
    assert len(launched) > 50
    # Spot-check evidence against the file: the kernel's name is at the launch line, and
    # `__global__` precedes its definition.
    for kernel, host, edge in launched[:20]:
        text = (pytorch_source / edge.path).read_text(errors="replace")
        lines = text.splitlines()
        if kernel.name not in lines[edge.line - 1]:
            # Launched by a macro of the file used on that line.
            used = re.findall(r"\b([A-Z][A-Z0-9_]+)\s*\(", lines[edge.line - 1])
            assert any(
                re.search(rf"#\s*define\s+{name}\b(?:[^\n]*\\\n)*[^\n]*\b{kernel.name}\b", text)
                for name in used
            ), (kernel.qualname, edge.evidence)
        head = "\n".join(lines[max(0, kernel.line - 3) : kernel.line])
        assert "__global__" in head or "C10_LAUNCH_BOUNDS" in head, kernel.evidence
        # Within the host's body, or one of its other bodies (#if branches, macro uses).
        bodies = [(host.line, host.end_line), *host.attrs.get("alt_lines", [])]
        assert any(start <= edge.line <= end for start, end in bodies), edge.evidence


@pytest.fixture(scope="module")
def vllm(vllm_index: tuple[Path, Path]) -> Index:
    return Index(corpus_db(vllm_index))


def test_vllm_kernel_launched_from_a_macro_used_in_the_host(vllm: Index, vllm_source: Path) -> None:
    path = "csrc/layernorm_kernels.cu"
    hosts = [n for n in vllm.find("fused_add_rms_norm", ["cpp_function"]) if n.path == path]
    assert len(hosts) == 1, hosts
    launches = [(vllm.node(edge.dst), edge) for edge in vllm.out_edges(hosts[0].id, ["launches"])]
    lines = {edge.line for target, edge in launches if target.name == "fused_add_rms_norm_kernel"}
    use = line_of(vllm_source / path, "LAUNCH_FUSED_ADD_RMS_NORM(8, true);")
    assert use in lines
    assert all(hosts[0].line <= line <= hosts[0].end_line for line in lines)


def test_vllm_cuda_ops_reach_their_kernels(vllm: Index) -> None:
    ops, reaching = cuda_ops_reaching_kernels(vllm.conn, "csrc/torch_bindings.cpp")
    assert len(ops) > 100
    for op in ("_C::rms_norm", "_C::fused_add_rms_norm", "_C::silu_and_mul"):
        assert op in reaching, op
    # 50 of 119 before macro uses in bodies were expanded; the rest launch through CUTLASS
    # or other code outside the tree, function pointers, or launch nothing.
    assert len(reaching) >= 90, sorted(set(ops) - set(reaching))
