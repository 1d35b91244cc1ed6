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


# A dispatch key served by fallthroughs only (as aten's Named registrations are): the
# registration is the answer to "where is mm registered for Named".
NAMED = """\
#include <torch/library.h>

TORCH_LIBRARY_IMPL(aten, Named, m) {
  m.impl("mm", CppFunction::makeFallthrough());
  m.impl("sum", CppFunction::makeFallthrough());
}
"""


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("keys")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / "aten/src/ATen/core").mkdir(parents=True, exist_ok=True)
    (repo / "aten/src/ATen/core/NamedRegistrations.cpp").write_text(NAMED, encoding="utf-8")
    commit_all(repo, "fallthrough registrations for Named")
    return repo, build_private_index(repo, base)


def test_a_fallthrough_registration_answers_focus_on_its_key(keyed) -> None:
    repo, index = keyed
    text = trace(index, "aten::mm", focus="Named").to_text()
    where = at(repo, "aten/src/ATen/core/NamedRegistrations.cpp", 'm.impl("mm"')
    assert where in text, text
    assert "fallthrough" in text, text


def test_a_dispatch_key_the_index_does_not_know_is_a_clear_error(keyed) -> None:
    _, index = keyed
    with pytest.raises(ValueError, match="no kernel or registration for dispatch key 'Nmaed'"):
        trace(index, "aten::mm", focus="Nmaed")
    # a key the index knows, for another op: an answer, not an error
    assert trace(index, "aten::add", focus="Named").found


# threshold_backward's own derivatives.yaml entry calls it (its double backward), as
# PyTorch's elu_backward, leaky_relu_backward and sigmoid_backward do.
DOUBLE_BACKWARD = """
- name: threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor
  grad_output: threshold_backward(grad, self, threshold)
  self: zeros_like(grad)
"""


@pytest.fixture(scope="module")
def double(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("double-backward")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    with open(repo / NATIVE / "native_functions.yaml", "a", encoding="utf-8") as yaml:
        yaml.write(YAML)
    with open(repo / "tools/autograd/derivatives.yaml", "a", encoding="utf-8") as derivatives:
        derivatives.write(DOUBLE_BACKWARD)
    (repo / NATIVE / "ThresholdBackward.cpp").write_text(KERNELS, encoding="utf-8")
    commit_all(repo, "a backward op whose own formula calls it")
    return repo, build_private_index(repo, base)


def test_a_backward_op_whose_formula_calls_itself_reaches_its_kernels(double) -> None:
    repo, index = double
    answer = trace(index, "aten::threshold_backward", focus="backward")
    text = answer.to_text()
    entry = line_of(repo / "tools/autograd/derivatives.yaml", "- name: threshold_backward(")
    assert f"tools/autograd/derivatives.yaml:{entry}" in text, text
    kernel = line_of(repo / NATIVE / "ThresholdBackward.cpp", "Tensor threshold_backward_cpu(")
    assert f"{NATIVE}/ThresholdBackward.cpp:{kernel}" in text, text
