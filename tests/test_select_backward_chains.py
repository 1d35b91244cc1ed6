"""A kernel reached only through a backward op that a derivatives.yaml formula names
(``relu: self: threshold_backward(grad, result, 0)``) is run by the tests of the forward
op. Held before issue 18: a regression test."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, chain_nodes, selected, tree_fixtures

shared, tree = tree_fixtures("minitorch")

BACKWARD_OP = """
- func: threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor
  dispatch:
    CPU: threshold_backward_cpu
    CUDA: threshold_backward_cuda
"""

KERNEL = """\
namespace at::native {

Tensor threshold_backward_DEVICE(const Tensor& grad, const Tensor& self, const Scalar& threshold) {
  return grad;
}

} // namespace at::native
"""

CPU = "aten/src/ATen/native/ThresholdBackward.cpp"
CUDA = "aten/src/ATen/native/cuda/ThresholdBackward.cu"


@pytest.mark.parametrize("path", [CPU, CUDA], ids=["cpu", "cuda"])
def test_a_backward_kernel_is_run_by_the_tests_of_the_forward_op(
    tree: IndexedTree, path: str
) -> None:
    yaml = "aten/src/ATen/native/native_functions.yaml"
    tree.write(yaml, tree.path(yaml).read_text(encoding="utf-8") + BACKWARD_OP)
    tree.write(CPU, KERNEL.replace("DEVICE", "cpu"))
    tree.write(CUDA, KERNEL.replace("DEVICE", "cuda"))
    tree.commit("threshold_backward, named by relu's formula")
    tree.replace(path, "  return grad;", "  return grad * 2;")
    selection = tree.select()
    assert not selection.everything, selection.everything
    assert "test/test_nn.py" in selected(selection)
    nodes = chain_nodes(selection, "test/test_nn.py")
    assert "aten::threshold_backward" in nodes and "aten::relu" in nodes
    gradients = selection.files["test/test_ops_gradients.py"].tests
    assert gradients is None or any("relu" in (t.opinfos or ["relu"]) for t in gradients)
