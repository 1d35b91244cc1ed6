"""trace and search over the fixture trees: chains with file:line at every hop."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.search import search
from indexer.query.trace import trace
from tests.bindings_support import build_fixture
from tests.helpers import line_of

NATIVE = "aten/src/ATen/native"


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


@pytest.fixture(scope="module")
def miniext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "miniext")


def labels(answer) -> dict[str, str | None]:
    return {item.label: item.evidence for item in answer.items}


def test_torch_add_reaches_structured_kernel_stub_and_both_backends(
    minitorch: tuple[Path, Index],
) -> None:
    repo, index = minitorch
    native = repo / NATIVE
    answer = trace(index, "torch.add")
    assert answer.found
    found = labels(answer)
    yaml_line = line_of(native / "native_functions.yaml", "- func: add.Tensor(")
    assert answer.data["ops"][0]["entry"] == f"{NATIVE}/native_functions.yaml:{yaml_line}"
    impl_line = line_of(native / "BinaryOps.cpp", "TORCH_IMPL_FUNC(add_out)")
    assert found["CPU, CUDA: at::native::structured_add_out::impl"] == (
        f"{NATIVE}/BinaryOps.cpp:{impl_line}"
    )
    assert found["at::native::add_stub"] == (
        f"{NATIVE}/BinaryOps.h:{line_of(native / 'BinaryOps.h', 'DECLARE_DISPATCH(binary_fn, add_stub)')}"
    )
    cpu = line_of(native / "cpu/BinaryOpsKernel.cpp", "void add_kernel(")
    assert found["at::native::(anonymous)::add_kernel"] == f"{NATIVE}/cpu/BinaryOpsKernel.cpp:{cpu}"
    cuda = line_of(native / "cuda/BinaryAddKernel.cu", "void add_kernel_cuda(")
    assert found["at::native::add_kernel_cuda"] == f"{NATIVE}/cuda/BinaryAddKernel.cu:{cuda}"
    launched = [i for i in answer.items if i.label == "at::native::add_kernel_cuda_impl"]
    assert launched and "launched at" in launched[0].detail
    launch_line = line_of(native / "cuda/BinaryAddKernel.cu", "add_kernel_cuda_impl<scalar_t><<<")
    assert f"cuda/BinaryAddKernel.cu:{launch_line}" in launched[0].detail
    # The backward formula of the functional overload.
    backward = [i for i in answer.items if "backward formulas" in i.detail]
    assert backward[0].evidence.startswith("tools/autograd/derivatives.yaml:")
    assert "python" in answer.data["ops"][0] and "torch.add" in answer.data["ops"][0]["python"]


@pytest.mark.parametrize(
    "name", ["torch.matmul", "matmul", "aten::matmul", "minitorch.matmul", "Tensor.matmul"]
)
def test_spellings_of_matmul_reach_its_definition(minitorch: tuple[Path, Index], name: str) -> None:
    repo, index = minitorch
    answer = trace(index, name)
    line = line_of(repo / NATIVE / "LinearAlgebra.cpp", "Tensor matmul(")
    assert labels(answer)["CompositeImplicitAutograd: at::native::matmul"] == (
        f"{NATIVE}/LinearAlgebra.cpp:{line}"
    )


def test_overloads_cpp_names_method_names_and_library_ops(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    add_tensor = trace(index, "aten::add.Tensor")
    assert [op["op"] for op in add_tensor.data["ops"]] == ["aten::add.Tensor", "aten::add.out"]
    every = trace(index, "aten::add")  # every overload
    assert {op["op"] for op in every.data["ops"]} >= {"aten::add.Tensor", "aten::add.out"}
    method = trace(index, "Tensor.add_")
    assert method.data["ops"][0]["op"] == "aten::add_.Tensor"
    from_cpp = trace(index, "at::native::mm_cpu")
    assert from_cpp.data["matched_by"] == "C++ function"
    assert [op["op"] for op in from_cpp.data["ops"]] == ["aten::mm"]
    gelu = trace(index, "torch.ops.minitorch.fused_gelu")
    dispatch = {tuple(d["keys"]): d for d in gelu.data["ops"][0]["dispatch"]}
    cuda_line = line_of(repo / "minitorch/csrc/custom_ops_cuda.cu", "fused_gelu_cuda(")
    assert dispatch[("CUDA",)]["definition"] == f"minitorch/csrc/custom_ops_cuda.cu:{cuda_line}"
    assert dispatch[("CPU",)]["target"] == "(anonymous)::fused_gelu_cpu"
    kernels = gelu.data["ops"][0]["cuda_kernels"]
    assert kernels[0]["kernel"] == "minitorch::fused_gelu_kernel"


def test_one_name_in_two_namespaces(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    ours = trace(index, "torch.ops.minitorch.scale")
    assert [op["op"] for op in ours.data["ops"]] == ["minitorch::scale"]
    legacy = trace(index, "torch.ops.minitorch_legacy.scale")
    assert [op["op"] for op in legacy.data["ops"]] == ["minitorch_legacy::scale"]
    both = trace(index, "scale")
    assert {op["op"] for op in both.data["ops"]} == {"minitorch::scale", "minitorch_legacy::scale"}


def test_focus_narrows(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    backward = trace(index, "torch.mm", focus="backward")
    assert all("kernel" not in item.detail for item in backward.items)
    assert any("backward formulas" in item.detail for item in backward.items)
    cuda = trace(index, "torch.mm", focus="CUDA")
    found = labels(cuda)
    assert "CUDA: at::native::mm_cuda" in found and "CPU: at::native::mm_cpu" not in found
    assert any("launched at" in item.detail for item in cuda.items)
    python = trace(index, "torch.mm", focus="python")
    assert python.items[1].label.startswith("Python: torch.mm")
    with pytest.raises(ValueError, match="unknown focus"):
        trace(index, "torch.mm", focus="not a focus!")


def test_bindings_and_unknown_names(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    binding = trace(index, "minitorch._C._nn.linear")
    found = labels(binding)
    assert found["minitorch._C._nn.linear"].startswith("minitorch/csrc/python_bindings.cpp:")
    assert found["at::native::linear"].startswith(f"{NATIVE}/LinearAlgebra.cpp:")
    missing = trace(index, "torch.matmull")
    assert not missing.found
    assert "not found" in missing.to_text()
    assert any("matmul" in name for name in missing.suggestions)


def test_search_bindings_by_backend_and_kernels(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    quantized = search(index, "relu", backend="QuantizedCPU")
    assert [item.label for item in quantized.items if item.depth == 0] == ["aten::relu"]
    assert quantized.items[1].label == "QuantizedCPU: at::native::relu_quantized_cpu"
    gelu = search(index, "fused_gelu", backend="CUDA")
    assert any(item.label == "CUDA: minitorch::fused_gelu_cuda" for item in gelu.items)
    # The op lists the kernel registered from custom_ops_cuda.cu, not the registration node.
    op_lines = [i for i in gelu.items if i.depth == 0 and i.label == "minitorch::fused_gelu"]
    first = gelu.items.index(op_lines[0])
    assert gelu.items[first + 1].label == "CUDA: minitorch::fused_gelu_cuda"
    kernels = search(index, "gemm_kernel", mode="kernels")
    top = [item.label for item in kernels.items if item.depth == 0]
    assert "at::native::(anonymous)::gemm_kernel" in top
    sites = [item for item in kernels.items if item.depth == 1]
    assert sites and all(item.evidence.startswith(f"{NATIVE}/cuda/Blas.cu:") for item in sites)
    nothing = search(index, "no_such_registration")
    assert not nothing.found and "not found" in nothing.title
    with pytest.raises(ValueError, match="unknown mode"):
        search(index, "relu", mode="everything")


def test_extension_op_reaches_host_function_and_kernel(miniext: tuple[Path, Index]) -> None:
    repo, index = miniext
    answer = trace(index, "torch.ops._C.rms_norm")
    op = answer.data["ops"][0]
    host_line = line_of(repo / "csrc/layernorm_kernels.cu", "void rms_norm(")
    assert op["dispatch"][0]["definition"] == f"csrc/layernorm_kernels.cu:{host_line}"
    assert op["dispatch"][0]["keys"] == ["CUDA"]
    kernel_line = line_of(repo / "csrc/layernorm_kernels.cu", "__global__ void rms_norm_kernel(")
    assert op["cuda_kernels"][0] == {
        "kernel": "vllm::rms_norm_kernel",
        "definition": f"csrc/layernorm_kernels.cu:{kernel_line}",
        "launch": f"csrc/layernorm_kernels.cu:{line_of(repo / 'csrc/layernorm_kernels.cu', 'rms_norm_kernel<scalar_t><<<')}",
    }


def test_python_definition_leads_to_the_ops_it_calls(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    answer = trace(index, "minitorch.nn.functional.gelu")
    assert answer.data["matched_by"] == "Python definition"
    assert [op["op"] for op in answer.data["ops"]] == ["minitorch::fused_gelu"]
    source = repo / "minitorch/nn/functional.py"
    reference = next(item for item in answer.items if item.label == "-> minitorch::fused_gelu")
    line = line_of(source, "minitorch.ops.minitorch.fused_gelu(")
    assert reference.evidence == f"minitorch/nn/functional.py:{line}"
