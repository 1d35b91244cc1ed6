"""Objective-C++ (.mm, PyTorch's MPS kernels) is indexed as C++: message sends, blocks,
``@autoreleasepool`` and boxed literals are read as the C++ they amount to, so the
functions keep their namespaces, structured kernels their names, and calls made inside a
message's arguments belong to the function."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index, Node
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

MPS_BLAS = """\
#include <ATen/native/mps/OperationUtils.h>

namespace at::native {
namespace mps {
namespace {

MPSGraphTensor* scaled(MPSGraph* graph, MPSGraphTensor* x, double factor) {
  return [graph multiplicationWithPrimaryTensor:x
                                secondaryTensor:[graph constantWithScalar:factor dataType:MPSDataTypeFloat32]
                                           name:@"scaled"];
}

double scale_of(const Tensor& t) { return 2.0; }

}  // namespace

static void mm_out_mps_impl(const Tensor& self, const Tensor& other, Tensor& output) {
  MPSStream* stream = getCurrentMPSStream();
  dispatch_sync_with_rethrow(stream->queue(), ^() {
    @autoreleasepool {
      MPSGraph* graph = [[MPSGraph alloc] init];
      NSArray* shape = @[ @(self.size(0)), @(other.size(1)) ];
      MPSGraphTensor* unit = [graph constantWithScalar:1.0 shape:@[ @1 ] dataType:MPSDataTypeFloat32];
      MPSGraphTensor* out = scaled(graph, [graph placeholderWithShape:shape name:nil], scale_of(self));
      [stream->commandEncoder() setLabel:@"mm"];
    }
  });
}

}  // namespace mps

TORCH_IMPL_FUNC(mm_out_mps)(const Tensor& self, const Tensor& mat2, const Tensor& result) {
  mps::mm_out_mps_impl(self, mat2, const_cast<Tensor&>(result));
}

}  // namespace at::native
"""

# Pooling.mm's shape: a block typedef, then blocks whose signature is a macro.
MPS_POOLING = """\
namespace at::native {
namespace mps {

typedef MPSGraphTensor* (^PoolingOpBlock)(PoolingCachedGraph&, MPSGraphPooling2DOpDescriptor*);
#define PoolingOpFn(graph, desc) MPSGraphTensor*(mps::PoolingCachedGraph & graph, MPSGraphPooling2DOpDescriptor * desc)

static void pool2d_template(const Tensor& input, PoolingOpBlock poolingBlock) {}

void run_sync(dispatch_queue_t queue, void (^block)()) {}

} // namespace mps

Tensor mps_max_pool2d(const Tensor& input,
                      IntArrayRef kernel_size) {
  mps::PoolingOpBlock pooling_op_block = ^PoolingOpFn(cachedGraph, desc) {
    MPSGraph* mpsGraph = cachedGraph.graph();
    return [mpsGraph maxPooling2DWithSourceTensor:cachedGraph.inputTensor descriptor:desc name:nil];
  };
  mps::pool2d_template(input, pooling_op_block);
  return input;
}

} // namespace at::native
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("objc")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    folder = repo / "aten/src/ATen/native/mps/operations"
    folder.mkdir(parents=True)
    (folder / "Blas.mm").write_text(MPS_BLAS, encoding="utf-8")
    (folder / "Pooling.mm").write_text(MPS_POOLING, encoding="utf-8")
    commit_all(repo, "an MPS kernel")
    return repo, build_private_index(repo, base)


def one(index: Index, qualname: str) -> Node:
    found = [n for n in index.find(qualname, ["cpp_function"]) if n.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def calls_of(index: Index, node: Node) -> set[str]:
    return {index.node(edge.dst).qualname for edge in index.out_edges(node.id, ["calls"])}


def test_mm_functions_keep_their_namespaces_and_lines(built) -> None:
    repo, index = built
    path = repo / "aten/src/ATen/native/mps/operations/Blas.mm"
    scaled = one(index, "at::native::mps::(anonymous)::scaled")
    assert scaled.line == line_of(path, "MPSGraphTensor* scaled(")
    impl = one(index, "at::native::mps::mm_out_mps_impl")
    assert impl.line == line_of(path, "static void mm_out_mps_impl(")
    kernel = one(index, "at::native::structured_mm_out_mps::impl")
    assert kernel.line == line_of(path, "TORCH_IMPL_FUNC(mm_out_mps)")
    (errors,) = index.conn.execute(
        "SELECT parse_errors FROM files WHERE path = ?",
        ("aten/src/ATen/native/mps/operations/Blas.mm",),
    ).fetchone()
    assert errors == 0


def test_calls_inside_blocks_and_message_arguments_belong_to_the_function(built) -> None:
    _, index = built
    impl = one(index, "at::native::mps::mm_out_mps_impl")
    calls = calls_of(index, impl)
    assert "at::native::mps::(anonymous)::scaled" in calls  # in a block, in a pool
    assert "at::native::mps::(anonymous)::scale_of" in calls  # a message's argument
    kernel = one(index, "at::native::structured_mm_out_mps::impl")
    assert "at::native::mps::mm_out_mps_impl" in calls_of(index, kernel)


def test_exclusive_or_is_not_read_as_a_block() -> None:
    from indexer.cpp.objc import as_cpp

    code = b"int x = a ^ (b);\nf(q, ^() { g(); });\n"
    assert as_cpp(code) == b"int x = a ^ (b);\nf(q,[]() { g(); });\n"


def test_block_types_and_macro_signed_blocks_keep_the_namespace(built) -> None:
    """A block typedef ``(^Name)(...)`` and a block ``= ^SomeFn(a, b) {`` (ATen's
    Pooling.mm, BinaryOps.mm) once ended the file's namespaces: the kernels after them
    were indexed at global scope, and their dispatch entries found no definition."""
    repo, index = built
    path = repo / "aten/src/ATen/native/mps/operations/Pooling.mm"
    kernel = one(index, "at::native::mps_max_pool2d")
    assert kernel.line == line_of(path, "Tensor mps_max_pool2d(")
    one(index, "at::native::mps::run_sync")
    assert "at::native::mps::pool2d_template" in calls_of(index, kernel)


def test_a_ternary_in_a_message_argument_keeps_its_operands() -> None:
    """`padW * dW : padW` is a ternary's colon, not a selector part `dW:` (Pooling.mm):
    blanking it broke the rest of the file."""
    from indexer.cpp.objc import as_cpp

    code = b"x = [d descriptorWithWidth:w paddingRight:ceil ? p * s : p name:nil];\n"
    assert (
        as_cpp(code) == b"x = (d                    ,w             ,ceil ? p * s : p     ,nil);\n"
    )
