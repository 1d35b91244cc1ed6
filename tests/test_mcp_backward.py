"""An op's forward and backward linked both ways (issue 37), on the minitorch fixture with a
backward op added: ``trace(focus='backward')`` on a forward op reaches its derivatives.yaml
entry, the backward op its formula calls and that op's kernels; a trace of the backward op
names the forward op whose formula calls it."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.trace import trace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

NATIVE = "aten/src/ATen/native"

YAML = """
- func: threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor
  dispatch:
    CPU: threshold_backward_cpu
    CUDA: threshold_backward_cuda
"""

KERNELS = """\
#include <ATen/ATen.h>

namespace at::native {

Tensor threshold_backward_cpu(const Tensor& grad, const Tensor& self, const Scalar& threshold) {
  return grad;
}

} // namespace at::native
"""

CUDA = """\
#include <ATen/ATen.h>

namespace at::native {

Tensor threshold_backward_cuda(const Tensor& grad, const Tensor& self, const Scalar& threshold) {
  return grad;
}

} // namespace at::native
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("backward")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    with open(repo / NATIVE / "native_functions.yaml", "a", encoding="utf-8") as yaml:
        yaml.write(YAML)
    (repo / NATIVE / "ThresholdBackward.cpp").write_text(KERNELS, encoding="utf-8")
    (repo / NATIVE / "cuda/ThresholdBackward.cu").write_text(CUDA, encoding="utf-8")
    commit_all(repo, "relu's backward op, with kernels")
    return repo, build_private_index(repo, base)


def at(repo: Path, path: str, text: str) -> str:
    return f"{path}:{line_of(repo / path, text)}"


def test_focus_backward_reaches_the_backward_ops_kernels(built) -> None:
    repo, index = built
    text = trace(index, "minitorch.relu", focus="backward").to_text()
    assert at(repo, "tools/autograd/derivatives.yaml", "- name: relu(") in text, text
    assert "aten::threshold_backward" in text, text
    assert at(repo, f"{NATIVE}/ThresholdBackward.cpp", "Tensor threshold_backward_cpu(") in text
    assert at(repo, f"{NATIVE}/cuda/ThresholdBackward.cu", "threshold_backward_cuda(") in text


def test_the_backward_op_names_the_forward_op_whose_formula_calls_it(built) -> None:
    repo, index = built
    text = trace(index, "aten::threshold_backward", focus="backward").to_text()
    assert "aten::relu" in text, text
    assert at(repo, "tools/autograd/derivatives.yaml", "self: threshold_backward(") in text, text
