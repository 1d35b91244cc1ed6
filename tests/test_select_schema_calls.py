"""An op called from C++ by its schema name, through the dispatcher
(``Dispatcher::singleton().findSchemaOrThrow("ns::op", "")``), as torchvision's C++ API
calls every op and its autograd kernels call the backward ops: the call is an edge to
the op, so a backward kernel reaches the tests whose forward op records it for autograd.
Without it nothing reached the backward op, and a change to its kernel ran everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.select_support import chain_nodes, indexed_tree, selected

HEADER = """\
#pragma once

#include <ATen/ATen.h>

namespace vision {
namespace ops {

at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, int64_t size);

namespace detail {
at::Tensor _roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, int64_t size);
} // namespace detail

} // namespace ops
} // namespace vision
"""

API = """\
#include "roi_align.h"

#include <torch/library.h>

namespace vision {
namespace ops {

at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, int64_t size) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchvision::roi_align", "")
                       .typed<decltype(roi_align)>();
  return op.call(input, rois, size);
}

namespace detail {

at::Tensor _roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, int64_t size) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchvision::_roi_align_backward", "")
                       .typed<decltype(_roi_align_backward)>();
  return op.call(grad, rois, size);
}

} // namespace detail

TORCH_LIBRARY_FRAGMENT(torchvision, m) {
  m.def(TORCH_SELECTIVE_SCHEMA(
      "torchvision::roi_align(Tensor input, Tensor rois, int size) -> Tensor"));
  m.def(TORCH_SELECTIVE_SCHEMA(
      "torchvision::_roi_align_backward(Tensor grad, Tensor rois, int size) -> Tensor"));
}

} // namespace ops
} // namespace vision
"""

FORWARD_KERNEL = """\
#include <ATen/ATen.h>
#include <torch/library.h>

namespace vision {
namespace ops {
namespace {

at::Tensor roi_align_forward_kernel(const at::Tensor& input, const at::Tensor& rois, int64_t size) {
  return input.sum();
}

} // namespace

TORCH_LIBRARY_IMPL(torchvision, CPU, m) {
  m.impl(TORCH_SELECTIVE_NAME("torchvision::roi_align"), TORCH_FN(roi_align_forward_kernel));
}

} // namespace ops
} // namespace vision
"""

BACKWARD_KERNEL = """\
#include <ATen/ATen.h>
#include <torch/library.h>

namespace vision {
namespace ops {
namespace {

at::Tensor roi_align_backward_kernel(const at::Tensor& grad, const at::Tensor& rois, int64_t size) {
  return grad.mul(2);
}

} // namespace

TORCH_LIBRARY_IMPL(torchvision, CPU, m) {
  m.impl(
      TORCH_SELECTIVE_NAME("torchvision::_roi_align_backward"),
      TORCH_FN(roi_align_backward_kernel));
}

} // namespace ops
} // namespace vision
"""

AUTOGRAD = """\
#include "../roi_align.h"

#include <torch/autograd.h>
#include <torch/types.h>

namespace vision {
namespace ops {
namespace {

class ROIAlignFunction : public torch::autograd::Function<ROIAlignFunction> {
 public:
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx,
      const torch::autograd::Variable& input,
      const torch::autograd::Variable& rois,
      int64_t size) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {roi_align(input, rois, size)};
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      const torch::autograd::variable_list& grad_output) {
    auto grad_in = detail::_roi_align_backward(grad_output[0], grad_output[0], 1);
    return {grad_in, torch::autograd::Variable(), torch::autograd::Variable()};
  }
};

at::Tensor roi_align_autograd(const at::Tensor& input, const at::Tensor& rois, int64_t size) {
  return ROIAlignFunction::apply(input, rois, size)[0];
}

} // namespace

TORCH_LIBRARY_IMPL(torchvision, Autograd, m) {
  m.impl(TORCH_SELECTIVE_NAME("torchvision::roi_align"), TORCH_FN(roi_align_autograd));
}

} // namespace ops
} // namespace vision
"""

OPS = "torchvision/csrc/ops"


def _add_roi_align(root: Path) -> None:
    for rel, text in (
        (f"{OPS}/roi_align.h", HEADER),
        (f"{OPS}/roi_align.cpp", API),
        (f"{OPS}/cpu/roi_align_kernel.cpp", FORWARD_KERNEL),
        (f"{OPS}/cpu/roi_align_backward_kernel.cpp", BACKWARD_KERNEL),
        (f"{OPS}/autograd/roi_align_kernel.cpp", AUTOGRAD),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory):
    return indexed_tree(tmp_path_factory, "visionext", _add_roi_align)


@pytest.fixture
def tree(shared, monkeypatch: pytest.MonkeyPatch):
    yield shared.use(monkeypatch)
    shared.reset()


def test_a_backward_kernel_reaches_the_tests_of_its_forward_op(tree) -> None:
    tree.replace(f"{OPS}/cpu/roi_align_backward_kernel.cpp", "grad.mul(2)", "grad.mul(3)")
    selection = tree.select()
    assert not selection.everything, selection.everything
    assert selected(selection) == {"test/test_ops.py"}
    chain = chain_nodes(selection, "test/test_ops.py")
    # kernel <- its op <- the C++ API calling the op by name <- the autograd backward
    # <- apply in the Autograd kernel of the forward op <- the forward op <- Python
    assert "torchvision::_roi_align_backward" in chain, chain
    assert "vision::ops::detail::_roi_align_backward" in chain, chain
    assert "torchvision::roi_align" in chain, chain


def test_the_call_by_schema_name_is_an_edge_with_its_line(tree) -> None:
    index = tree.index()
    api = f"{OPS}/roi_align.cpp"
    rows = index.conn.execute(
        "SELECT s.qualname, e.line, e.attrs FROM edges e JOIN nodes s ON s.id = e.src_id"
        " JOIN nodes d ON d.id = e.dst_id JOIN files f ON f.id = e.file_id"
        " WHERE d.kind = 'op' AND d.qualname = 'torchvision::_roi_align_backward'"
        " AND e.kind = 'calls' AND f.path = ?",
        (api,),
    ).fetchall()
    line = tree.line(api, '.findSchemaOrThrow("torchvision::_roi_align_backward"')
    assert rows == [("vision::ops::detail::_roi_align_backward", line, '{"via":"schema_name"}')]
