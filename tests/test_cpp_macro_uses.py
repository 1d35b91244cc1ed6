"""Calls and launches written in a file's own function-like macro belong to the function
whose body uses the macro, with evidence at the line of the use: PyTorch style (a helper
macro inside an ATen function, inside an AT_DISPATCH lambda) and vLLM style (kernel
launches from ``#define LAUNCH_...`` used in the host function, a macro passed by name
to a dispatch macro from a header, an op registered for that host function)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index, Node
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

ATEN = """\
#include <ATen/Dispatch.h>

namespace at::native {

void check_finite(const Tensor& t) {}
void scale_(float* data, int64_t n, float factor) {}

#define CHECK_FINITE(t) check_finite(t)

#define SCALE_ALL(T, factor)                                               \\
  scale_(self.data_ptr<T>(), self.numel(), factor);

// Blanked for the parser (a builtin type in its arguments), so read from its expansion
// even though it calls only a member function.
#define FILL_AS(T, self, value) self.fill_((T)value);

void fill_int(Tensor& self) {
  FILL_AS(unsigned int, self, 1);
}

Tensor& scale_cpu_(Tensor& self, double factor) {
  CHECK_FINITE(self);
  AT_DISPATCH_FLOATING_TYPES(self.scalar_type(), "scale_cpu_", [&] {
    SCALE_ALL(scalar_t, factor);
  });
  return self;
}

} // namespace at::native
"""

CACHE_KERNELS = """\
#include "dispatch_utils.h"

namespace vllm {

template <typename scalar_t, int width>
__global__ void fused_add_norm_kernel(scalar_t* input, scalar_t* residual, int d) {}

template <typename KV_T, typename CACHE_T>
__global__ void copy_cache_kernel(const KV_T* key, CACHE_T* cache, int n) {}

template <typename scalar_t>
__global__ void tiled_kernel(scalar_t* x, int n) {}

}  // namespace vllm

#define LAUNCH_FUSED_ADD_NORM(width)                                         \\
  VLLM_DISPATCH_FLOATING_TYPES(input.scalar_type(), "fused_add_norm", [&] {  \\
    vllm::fused_add_norm_kernel<scalar_t, width>                             \\
        <<<grid, block, 0, stream>>>(input.data_ptr<scalar_t>(),             \\
                                     residual.data_ptr<scalar_t>(), d);      \\
  });

void fused_add_norm(torch::Tensor& input, torch::Tensor& residual) {
  int d = input.size(-1);
  dim3 grid(input.numel() / d);
  dim3 block(std::min(d, 1024));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (d % 8 == 0) {
    LAUNCH_FUSED_ADD_NORM(8);
  } else {
    LAUNCH_FUSED_ADD_NORM(0);
  }
}

#define CALL_COPY_CACHE(KV_T, CACHE_T)                                       \\
  vllm::copy_cache_kernel<KV_T, CACHE_T><<<grid, block, 0, stream>>>(        \\
      reinterpret_cast<KV_T*>(key.data_ptr()),                               \\
      reinterpret_cast<CACHE_T*>(cache.data_ptr()), n);

void copy_cache(torch::Tensor& key, torch::Tensor& cache, const std::string& dtype) {
  int n = key.numel();
  dim3 grid(n);
  dim3 block(256);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  DISPATCH_BY_KV_CACHE_DTYPE(key.scalar_type(), dtype, CALL_COPY_CACHE);
}

#define LAUNCH_TILED(T) \\
  cudaLaunchKernel((void*)vllm::tiled_kernel<T>, grid, block, args, 0, stream)

void tiled(torch::Tensor& x) {
  dim3 grid(1);
  dim3 block(32);
  void* args[] = {nullptr};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  LAUNCH_TILED(float);
}

namespace ar = vllm;

void beam(torch::Tensor& x) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchKernelEx(&cfg, ar::tiled_kernel<float>, x.data_ptr());
}

void in_body_define(torch::Tensor& x, int64_t n) {
  dim3 grid(n);
  #define KERNEL(T, BLOCK)                                                     \
    vllm::tiled_kernel<T><<<grid, BLOCK, 0, stream>>>(x.data_ptr<T>(), n);
  #define LAUNCH_ON(T)                                                       \
    if (n > 1024) {                                                          \
      KERNEL(T, 1024);                                                       \
    } else {                                                                 \
      KERNEL(T, 256);                                                        \
    }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  LAUNCH_ON(float);
  #undef LAUNCH_ON
  #undef KERNEL
}

void resolve(torch::Tensor& x) {
  auto kernel = vllm::tiled_kernel<float>;
  kernel<<<1, 32>>>(x.data_ptr<float>(), 1);
}

void cluster(torch::Tensor& x) {
  cudaLaunchConfig_t cfg = {};
  auto kernel = &vllm::tiled_kernel<float>;
  cudaLaunchKernelEx(&cfg, kernel, x.data_ptr());
}

void prologue(torch::Tensor& x, bool conv) {
  hipStream_t stream = nullptr;
  if (conv)
    hipLaunchKernelGGL((vllm::tiled_kernel<float>), dim3(1), dim3(32), 0, stream, nullptr, 1);
}

template <typename T>
__global__ void guarded_kernel(T* x, int n) {
  int i = threadIdx.x;
#if (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800) && !defined(USE_ROCM)
  if constexpr (sizeof(T) == 2) {
    return;
  } else {
#endif
    using Converter = vllm::TypeConverter<T>;
    for (int j = i; j < n; j += blockDim.x) {
      x[j] = T(0);
    }
#if (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800) && !defined(USE_ROCM)
  }
#endif
}

namespace {
template <typename T>
void launch_guarded(T* x, int n, cudaStream_t stream) {
  guarded_kernel<T><<<1, 32, 0, stream>>>(x, n);
}
}  // namespace

void after_guard(torch::Tensor& x) {
  launch_guarded<float>(x.data_ptr<float>(), x.numel(), nullptr);
}
"""

BINDINGS = """
TORCH_LIBRARY_FRAGMENT(_C, cache_ops) {
  cache_ops.def("fused_add_norm(Tensor! input, Tensor! residual) -> ()");
  cache_ops.impl("fused_add_norm", torch::kCUDA, &fused_add_norm);
  cache_ops.def("copy_cache(Tensor key, Tensor! cache, str dtype) -> ()");
  cache_ops.impl("copy_cache", torch::kCUDA, &copy_cache);
}
"""


# CUDA_KERNEL_LOOP comes from a header (ATen/cuda/detail/KernelUtils.h): its use reads as
# a function definition nested in the kernel.
LOOP_KERNELS = """\
#include <ATen/cuda/detail/KernelUtils.h>

namespace vllm {

__device__ float clamp_value(float x) { return x; }

__global__ void clamp_kernel(float* x, int n) {
  CUDA_KERNEL_LOOP(index, n) {
    x[index] = clamp_value(x[index]);
  }
}

}  // namespace vllm
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    """miniext with a cache-kernels file in vLLM's style and its ops registered, plus an
    ATen-style file."""
    base = tmp_path_factory.mktemp("cpp-macro-uses")
    repo = make_fixture_repo("miniext", base / "miniext")
    (repo / "csrc/cache_kernels.cu").write_text(CACHE_KERNELS, encoding="utf-8")
    (repo / "csrc/ScaleOps.cpp").write_text(ATEN, encoding="utf-8")
    (repo / "csrc/loop_kernels.cu").write_text(LOOP_KERNELS, encoding="utf-8")
    with open(repo / "csrc/torch_bindings.cpp", "a", encoding="utf-8") as bindings:
        bindings.write(BINDINGS)
    commit_all(repo, "macro uses")
    return repo, build_private_index(repo, base)


def one(index: Index, qualname: str, kind: str = "cpp_function") -> Node:
    found = [node for node in index.find(qualname, [kind]) if node.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def targets(index: Index, node: Node, kind: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for edge in index.out_edges(node.id, [kind]):
        found.setdefault(index.node(edge.dst).qualname, set()).add(edge.line)
    return found


def test_a_blanked_macro_use_is_read_from_its_expansion(built: tuple[Path, Index]) -> None:
    repo, index = built
    host = one(index, "at::native::fill_int")
    lines = {
        line
        for (line,) in index.conn.execute(
            "SELECT line FROM refs WHERE src_id = ? AND target = 'fill_'", (host.id,)
        )
    }
    assert lines == {line_of(repo / "csrc/ScaleOps.cpp", "FILL_AS(unsigned int, self, 1);")}


def test_pytorch_style_macro_calls_belong_to_the_using_function(
    built: tuple[Path, Index],
) -> None:
    repo, index = built
    path = repo / "csrc/ScaleOps.cpp"
    host = one(index, "at::native::scale_cpu_")
    calls = targets(index, host, "calls")
    assert calls["at::native::check_finite"] == {line_of(path, "CHECK_FINITE(self);")}
    # Used inside an AT_DISPATCH lambda: still the enclosing function's call.
    assert calls["at::native::scale_"] == {line_of(path, "SCALE_ALL(scalar_t, factor);")}
    # A use is not a node of its own.
    assert not [node for node in index.nodes_in_file("csrc/ScaleOps.cpp") if "macro" in node.name]


def test_launches_from_a_launch_macro_are_the_host_functions(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    host = one(index, "fused_add_norm")
    launches = targets(index, host, "launches")
    assert launches == {
        "vllm::fused_add_norm_kernel": {
            line_of(path, "LAUNCH_FUSED_ADD_NORM(8);"),
            line_of(path, "LAUNCH_FUSED_ADD_NORM(0);"),
        }
    }


def test_macro_passed_by_name_to_a_header_macro(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    host = one(index, "copy_cache")
    assert targets(index, host, "launches") == {
        "vllm::copy_cache_kernel": {line_of(path, "DISPATCH_BY_KV_CACHE_DTYPE(")}
    }


def test_kernel_passed_to_a_launch_helper_in_a_macro(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    host = one(index, "tiled")
    assert targets(index, host, "launches") == {
        "vllm::tiled_kernel": {line_of(path, "LAUNCH_TILED(float);")}
    }


def test_registered_op_reaches_the_kernel_launched_by_a_macro(built: tuple[Path, Index]) -> None:
    _, index = built
    for op, host, kernel in (
        ("_C::fused_add_norm", "fused_add_norm", "vllm::fused_add_norm_kernel"),
        ("_C::copy_cache", "copy_cache", "vllm::copy_cache_kernel"),
    ):
        node = one(index, op, "op")
        hosts = {index.node(e.dst).qualname for e in index.out_edges(node.id, ["dispatches"])}
        assert host in hosts
        assert kernel in targets(index, one(index, host), "launches")


def test_kernel_arguments_through_an_alias_or_in_parentheses(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    assert targets(index, one(index, "beam"), "launches") == {
        "vllm::tiled_kernel": {line_of(path, "cudaLaunchKernelEx(&cfg, ar::tiled_kernel<float>")}
    }
    assert targets(index, one(index, "prologue"), "launches") == {
        "vllm::tiled_kernel": {line_of(path, "hipLaunchKernelGGL((vllm::tiled_kernel<float>)")}
    }


def test_helper_launch_after_a_guarded_kernel(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    kernel = one(index, "guarded_kernel", "cuda_kernel")
    assert kernel.end_line == line_of(path, "void launch_guarded(") - 4
    helper = one(index, "(anonymous)::launch_guarded")
    assert targets(index, helper, "launches") == {
        "guarded_kernel": {line_of(path, "guarded_kernel<T><<<1, 32, 0, stream>>>")}
    }
    assert "(anonymous)::launch_guarded" in targets(index, one(index, "after_guard"), "calls")


def test_kernel_held_in_a_local_variable(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    assert targets(index, one(index, "resolve"), "launches") == {
        "vllm::tiled_kernel": {line_of(path, "kernel<<<1, 32>>>")}
    }
    assert targets(index, one(index, "cluster"), "launches") == {
        "vllm::tiled_kernel": {line_of(path, "cudaLaunchKernelEx(&cfg, kernel,")}
    }


def test_macros_defined_inside_the_body(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/cache_kernels.cu"
    host = one(index, "in_body_define")
    assert targets(index, host, "launches") == {
        "vllm::tiled_kernel": {line_of(path, "LAUNCH_ON(float);")}
    }
    assert not [node for node in index.nodes_in_file("csrc/cache_kernels.cu") if "(" in node.name]


def test_a_loop_macro_is_no_function_of_its_own(built: tuple[Path, Index]) -> None:
    """``CUDA_KERNEL_LOOP(index, n) { ... }`` parses as a nested function definition; C++
    has none, so its body is the kernel's, calls included."""
    repo, index = built
    assert not [n for n in index.find("CUDA_KERNEL_LOOP") if "CUDA_KERNEL_LOOP" in n.qualname]
    kernel = one(index, "vllm::clamp_kernel", "cuda_kernel")
    line = line_of(repo / "csrc/loop_kernels.cu", "x[index] = clamp_value(")
    assert targets(index, kernel, "calls") == {"vllm::clamp_value": {line}}
