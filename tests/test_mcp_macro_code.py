"""What macros hid from the index (issue 37), on the minitorch fixture with files written
here, indexed as a tree is.

- Registrations through registration macros: PyTorch's Autocast lists, ``KERNEL_CPU(op,
  [overload,] policy)`` lines inside ``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``, are
  registrations of the op for the block's key at the line of the use, so ``trace(op,
  focus=KEY)`` answers where; an ``m.impl`` after a macro use with no semicolon is read
  too; commented-out and ``#define`` lines are not registrations.
- A kernel launch inside a ``#define`` body (``kernel<<<`` then a backslash, as
  Shape.cu's ``HANDLE_CASE``): the definitions after it keep their namespace, so a
  structured CUDA kernel below it is found by the name its yaml entry gives.
- A function named in capitals (``UNARY_OUTER_LOOP`` in Reduce.h) is not a macro: its
  callers in other files are listed; a macro the file defines is no call."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.graph import graph
from indexer.query.index import Index
from indexer.query.trace import trace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

NATIVE = "aten/src/ATen/native"
AUTOCAST = "aten/src/ATen/autocast_mode.cpp"
SHAPE_CU = f"{NATIVE}/cuda/Shape.cu"
REDUCE_H = f"{NATIVE}/cpu/Reduce.h"
REDUCE = """\
namespace at::native {
template <typename F>
inline void UNARY_OUTER_LOOP(char* data[2], int n, F f) {
  for (int j = 0; j < n; j++) {
    f();
  }
}
} // namespace at::native
"""
SUM_CPP = f"{NATIVE}/cpu/SumKernel.cpp"
SUM = """\
#include <ATen/native/cpu/Reduce.h>
#define LOCAL_CHECK(x) (void)(x)

namespace at::native {
void cascade_sum(char* data[2], int n) {
  LOCAL_CHECK(n);
  UNARY_OUTER_LOOP(data, n, [&] {
    data[0] += 1;
  });
}
} // namespace at::native
"""
CAT_YAML = """
- func: cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CUDA: cat_out_cuda
"""
SHAPE = """\
namespace at::native {
namespace {

template <typename T>
__global__ void CatArrayBatchedCopy(T* out, int n) {
  out[n] = 0;
}

template <typename T>
void parallel_cat(T* out, int nDims) {
#define HANDLE_CASE(DIMS) \\
    if (DIMS > 0) {\\
      CatArrayBatchedCopy<T><<<\\
          1, 128, 0>>>(\\
              out, DIMS);\\
    }
  switch (nDims) {
    case 1:
      HANDLE_CASE(1);
      break;
  }
#undef HANDLE_CASE
}

} // namespace

TORCH_IMPL_FUNC(cat_out_cuda)
(const ITensorListRef& tensors, int64_t dim, const Tensor& result) {
  parallel_cat<float>(nullptr, 1);
}

} // namespace at::native
"""
AUTOCAST_CPP = """\
#include <ATen/autocast_mode.h>

namespace at::autocast {

TORCH_LIBRARY_IMPL(_, AutocastCPU, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Autocast, m) {
#define _KERNEL_CUDA_FP32(...) KERNEL_CUDA(__VA_ARGS__, fp32)

  AT_FORALL_FP32(_KERNEL_CUDA_FP32)

  m.impl(TORCH_SELECTIVE_NAME("aten::addmm"),
         TORCH_FN((&at::autocast::addmm_banned)));
}

TORCH_LIBRARY_IMPL(aten, AutocastMPS, m) {
  KERNEL_MPS(matmul, lower_precision_fp)
  KERNEL_MPS(sum, dim_IntList, fp32)
}

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
  // lower_precision_fp cast policy
  KERNEL_CPU(linear, lower_precision_fp)
  KERNEL_CPU(matmul, lower_precision_fp)
  // KERNEL_CPU(mm, lower_precision_fp)
  KERNEL_CPU(sum, dim_IntList, fp32)
}

} // namespace at::autocast
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("macro_registrations")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / AUTOCAST).write_text(AUTOCAST_CPP, encoding="utf-8")
    (repo / SHAPE_CU).write_text(SHAPE, encoding="utf-8")
    (repo / REDUCE_H).write_text(REDUCE, encoding="utf-8")
    (repo / SUM_CPP).write_text(SUM, encoding="utf-8")
    yaml = repo / NATIVE / "native_functions.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8") + CAT_YAML, encoding="utf-8")
    commit_all(repo, "Autocast registrations through KERNEL_* macros; a launch in a #define")
    return repo, build_private_index(repo, base)


def at(repo: Path, text: str, path: str = AUTOCAST) -> str:
    return f"{path}:{line_of(repo / path, text)}"


def test_a_macro_registration_is_the_ops_for_the_blocks_key(built) -> None:
    repo, index = built
    text = trace(index, "aten::linear", focus="AutocastCPU").to_text()
    assert at(repo, "KERNEL_CPU(linear, lower_precision_fp)") in text, text
    # a commented-out use and a wrapper's #define (__VA_ARGS__) register nothing
    registered = {
        qualname
        for (qualname,) in index.conn.execute(
            "SELECT n.qualname FROM nodes n JOIN files f ON f.id = n.file_id"
            " WHERE f.path = ? AND n.kind = 'registration'",
            (AUTOCAST,),
        )
    }
    assert "aten::linear" in registered and "aten::mm" not in registered, registered
    assert not any("VA_ARGS" in name for name in registered), registered


def test_each_key_has_its_own_line_in_one_file(built) -> None:
    """matmul is registered for AutocastMPS and AutocastCPU in the same file: each key's
    answer is its own line, not the file's first registration of the op."""
    repo, index = built
    cpu = trace(index, "aten::matmul", focus="AutocastCPU").to_text()
    assert at(repo, "KERNEL_CPU(matmul, lower_precision_fp)") in cpu, cpu
    assert at(repo, "KERNEL_MPS(matmul, lower_precision_fp)") not in cpu, cpu
    mps = trace(index, "aten::matmul", focus="AutocastMPS").to_text()
    assert at(repo, "KERNEL_MPS(matmul, lower_precision_fp)") in mps, mps


def test_three_arguments_name_an_overload(built) -> None:
    repo, index = built
    text = trace(index, "aten::sum.dim_IntList", focus="AutocastCPU").to_text()
    assert at(repo, "KERNEL_CPU(sum, dim_IntList, fp32)") in text, text


def test_an_impl_after_a_macro_use_without_a_semicolon(built) -> None:
    repo, index = built
    text = trace(index, "aten::addmm", focus="Autocast").to_text()
    assert "Autocast: at::autocast::addmm_banned" in text, text
    assert at(repo, "TORCH_FN((&at::autocast::addmm_banned))") in text, text


def test_definitions_after_a_launch_in_a_define_keep_their_namespace(built) -> None:
    repo, index = built
    text = trace(index, "aten::cat.out", focus="CUDA").to_text()
    assert "CUDA: at::native::structured_cat_out_cuda::impl" in text, text
    assert at(repo, "TORCH_IMPL_FUNC(cat_out_cuda)", SHAPE_CU) in text, text
    # the launch in the macro body is the use's: the kernel is reached from the op
    assert "CatArrayBatchedCopy" in text, text


def test_a_function_named_in_capitals_has_its_callers(built) -> None:
    repo, index = built
    text = graph(index, "UNARY_OUTER_LOOP", mode="callers").to_text()
    assert "at::native::cascade_sum" in text, text
    assert at(repo, "UNARY_OUTER_LOOP(data, n", SUM_CPP) in text, text
    # the file's own macro is no call (no ref left to resolve or to count)
    refs = index.conn.execute("SELECT count(*) FROM refs WHERE target = 'LOCAL_CHECK'")
    assert refs.fetchone()[0] == 0
