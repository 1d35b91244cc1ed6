"""The C++ index of the real PyTorch tree, checked against lines read from the files."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.workspace import Workspace
from tests.helpers import line_of

pytestmark = pytest.mark.corpus

LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"


@pytest.fixture(scope="module")
def index(pytorch_index: tuple[Path, Path]) -> Index:
    source, cache = pytorch_index
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(cache))
        db_path = Workspace.resolve(source).db_path
    return Index(db_path)


def test_matmul_definition_line(index: Index, pytorch_source: Path) -> None:
    found = [n for n in index.find("at::native::matmul", ["cpp_function"]) if n.path == LINALG]
    assert len(found) == 1, found
    expected = line_of(pytorch_source / LINALG, "Tensor matmul(const Tensor & tensor1")
    assert found[0].line == expected
    assert found[0].qualname == "at::native::matmul"


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
        lines = (pytorch_source / edge.path).read_text(errors="replace").splitlines()
        assert kernel.name in lines[edge.line - 1], (kernel.qualname, edge.evidence)
        head = "\n".join(lines[max(0, kernel.line - 3) : kernel.line])
        assert "__global__" in head or "C10_LAUNCH_BOUNDS" in head, kernel.evidence
        assert host.line <= edge.line <= host.end_line
