"""Preprocessor shapes that used to hide whole regions of definitions from tree-sitter, on
small files in a fresh repository: a conditional holding two spellings of one function
head inside a struct that sits in an ``#else`` branch (cudnn/RNN.cpp), a file's own
namespace-opening macros (generated_serialization_types.h), ``VISIBILITY_HIDDEN`` classes
(jit/python), and a ``..._API`` name in a directive."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.cpp.preprocess import prepare
from indexer.extract.source import SourceFile
from indexer.query.index import Index
from tests.helpers import build_private_index, commit_all, git, line_of

RNN = """\
#include <ATen/Config.h>

#if !AT_CUDNN_ENABLED()

namespace at {
namespace native {
Tensor rnn_stub(const Tensor& x) { return x; }
} // namespace native
} // namespace at

#else

namespace at {
namespace native {
namespace {

struct RNNDescriptorParams {
#ifdef USE_CUDNN_RNN_V8_API
  int64_t input_size;
#endif
  int64_t hidden_size;

#ifndef USE_CUDNN_RNN_V8_API
  void set(int64_t mode, int64_t hidden_size) {
#else
  void set(int64_t mode, int64_t input_size, int64_t hidden_size) {
    this->input_size = input_size;
#endif
    this->hidden_size = hidden_size;
  }

  int64_t num_directions() const {
    return 1;
  }
};

} // namespace

Tensor rnn_cudnn(const Tensor& x) {
  RNNDescriptorParams params;
  params.set(0, 1);
  return x;
}

} // namespace native
} // namespace at

#endif // AT_CUDNN_ENABLED()
"""

SERIALIZATION = """\
#pragma once

#ifndef NLOHMANN_JSON_NAMESPACE_BEGIN
#define NLOHMANN_JSON_NAMESPACE_BEGIN namespace nlohmann {
#endif

#ifndef NLOHMANN_JSON_NAMESPACE_END
#define NLOHMANN_JSON_NAMESPACE_END }
#endif

NLOHMANN_JSON_NAMESPACE_BEGIN
template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& opt) {
    j = nullptr;
  }
};
NLOHMANN_JSON_NAMESPACE_END

namespace torch {
namespace _export {

class Argument {
 public:
  int64_t get_as_int() const {
    return as_int_;
  }

 private:
  int64_t as_int_;
};

} // namespace _export
} // namespace torch
"""

SUGARED = """\
#pragma once
#define VISIBILITY_HIDDEN __attribute__((visibility("hidden")))

namespace torch::jit {

struct VISIBILITY_HIDDEN CUDAPythonModuleValue : public PythonValue {
  explicit CUDAPythonModuleValue(py::object mod) : PythonValue(std::move(mod)) {}

  std::shared_ptr<SugaredValue> attr(const SourceRange& loc, const std::string& field) {
    return nullptr;
  }
};

} // namespace torch::jit
"""


INDEXING = """\
namespace at::native {

template <typename T, typename IndexType, unsigned int Dims, int IdxDim>
__global__ void indexFuncSmallIndex(T* self, IndexType n) {}

void index_add_cuda_impl(const Tensor& self, int64_t n) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
#define SMALL_INDEX(TENSOR_TYPE, INDICES_TYPE, TYPE, SELF_DIM)              \\
  indexFuncSmallIndex<TENSOR_TYPE, INDICES_TYPE, TYPE, SELF_DIM>           \\
    <<<grid, block, 0, stream>>>(self.data_ptr<TENSOR_TYPE>(), n);
  if (self.dim() == 1) {
    SMALL_INDEX(float, int64_t, unsigned int, 1);
  } else if (self.dim() == 2) {
    SMALL_INDEX(float, int64_t, unsigned int, -2);
  } else {
    SMALL_INDEX(double, int64_t, unsigned int, -1);
  }
#undef SMALL_INDEX
}

Tensor& index_add_cuda_out(const Tensor& self, int64_t n, Tensor& result) {
  index_add_cuda_impl(self, n);
  return result;
}

} // namespace at::native
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("cpp-preprocess")
    repo = base / "ext"
    (repo / "csrc").mkdir(parents=True)
    (repo / "csrc/RNN.cpp").write_text(RNN, encoding="utf-8")
    (repo / "csrc/generated_serialization_types.h").write_text(SERIALIZATION, encoding="utf-8")
    (repo / "csrc/python_sugared_value.h").write_text(SUGARED, encoding="utf-8")
    (repo / "csrc/Indexing.cu").write_text(INDEXING, encoding="utf-8")
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "preprocessor shapes")
    return repo, build_private_index(repo, base)


def lines(index: Index, qualname: str) -> list[int]:
    return sorted(node.line for node in index.find(qualname) if node.qualname == qualname)


def test_alternative_function_heads_inside_an_else_branch(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/RNN.cpp"
    params = "at::native::(anonymous)::RNNDescriptorParams"
    # One node for the two spellings of set(); the methods after it are still in the struct.
    assert lines(index, f"{params}::set") == [line_of(path, "void set(int64_t mode, int64_t h")]
    assert lines(index, f"{params}::num_directions") == [line_of(path, "num_directions() const")]
    assert lines(index, "at::native::rnn_cudnn") == [line_of(path, "Tensor rnn_cudnn(")]
    assert lines(index, "at::native::rnn_stub") == [line_of(path, "Tensor rnn_stub(")]
    cudnn = next(n for n in index.find("at::native::rnn_cudnn") if n.kind == "cpp_function")
    called = {index.node(e.dst).qualname for e in index.out_edges(cudnn.id, ["calls"])}
    assert f"{params}::set" in called
    errors = {row[0]: row[4] for row in index.file_rows()}
    assert errors["csrc/RNN.cpp"] == 0


def test_namespace_macros_of_the_file_open_and_close_namespaces(
    built: tuple[Path, Index],
) -> None:
    repo, index = built
    path = repo / "csrc/generated_serialization_types.h"
    assert lines(index, "nlohmann::adl_serializer::to_json") == [line_of(path, "void to_json(")]
    assert lines(index, "torch::_export::Argument::get_as_int") == [
        line_of(path, "get_as_int() const")
    ]


def test_visibility_hidden_class_keeps_its_methods(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/python_sugared_value.h"
    owner = "torch::jit::CUDAPythonModuleValue"
    assert lines(index, f"{owner}::attr") == [line_of(path, "std::shared_ptr<SugaredValue> attr(")]
    assert lines(index, f"{owner}::CUDAPythonModuleValue") == [
        line_of(path, "explicit CUDAPythonModuleValue(")
    ]


def test_api_suffixed_names_in_directives_stay() -> None:
    data = b"#ifdef USE_CUDNN_RNN_V8_API\nclass TORCH_API Foo {};\n#endif\n"
    prepared = prepare(data).data
    assert b"USE_CUDNN_RNN_V8_API" in prepared
    assert b"TORCH_API" not in prepared and len(prepared) == len(data)


GUARDED = b"""\
template <typename T>
__global__ void guarded_kernel(T* x, int n) {
#if (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800) && !defined(USE_ROCM)
  if constexpr (sizeof(T) == 2) {
    return;
  } else {
#endif
    x[0] = T(n);
#if (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800) && !defined(USE_ROCM)
  }
#endif
}
"""


def test_block_opened_and_closed_in_one_branch_conditionals() -> None:
    """vLLM's fused_qknorm_rope_kernel.cu: each half of a block sits in a one-branch #if;
    both are blanked with their directives, the code between them stays."""
    source = SourceFile("guarded.cu", GUARDED, "cuda")
    prepared = source.cpp_prepared.data
    assert len(prepared) == len(GUARDED) and prepared.count(b"\n") == GUARDED.count(b"\n")
    assert b"if constexpr" not in prepared and b"#if" not in prepared
    assert b"x[0] = T(n);" in prepared

    def broken(node) -> bool:
        return node.type == "ERROR" or node.is_missing or any(map(broken, node.children))

    assert not broken(source.cpp_tree.root_node)


def test_macro_uses_with_builtin_types_do_not_read_as_declarations(
    built: tuple[Path, Index],
) -> None:
    """Indexing.cu: `SMALL_INDEX(scalar_t, index_t, unsigned int, 2, 2, -2);` made
    tree-sitter lose the host functions; the use is blanked and its expansion read."""
    repo, index = built
    path = repo / "csrc/Indexing.cu"
    assert lines(index, "at::native::index_add_cuda_impl") == [
        line_of(path, "void index_add_cuda_impl(")
    ]
    assert lines(index, "at::native::index_add_cuda_out") == [line_of(path, "index_add_cuda_out(")]
    host = next(
        n for n in index.find("at::native::index_add_cuda_impl") if n.kind == "cpp_function"
    )
    launches = {e.line for e in index.out_edges(host.id, ["launches"])}
    assert launches == {
        line_of(path, "SMALL_INDEX(float, int64_t, unsigned int, 1);"),
        line_of(path, "SMALL_INDEX(float, int64_t, unsigned int, -2);"),
        line_of(path, "SMALL_INDEX(double, int64_t, unsigned int, -1);"),
    }
    errors = {row[0]: row[4] for row in index.file_rows()}
    assert errors["csrc/Indexing.cu"] == 0
