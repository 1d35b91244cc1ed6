"""Rules the fixture trees do not exercise, on small C++ files in a fresh repository:
macro-written definitions, local classes, attribute macros, #if variants, inheritance."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.cpp.preprocess import prepare
from indexer.query.index import Index, Node
from tests.helpers import build_private_index, commit_all, git, line_of

UNARY = """\
#include <ATen/core/Tensor.h>

namespace at::native {

#define CREATE_UNARY_TORCH_IMPL_FUNC(func_out, func_stub)                  \\
TORCH_IMPL_FUNC(func_out) (const Tensor& self, const Tensor& result) {     \\
  func_stub(device_type(), *this);                                          \\
}

#define DEFINE_NAMED(name, ...)                                            \\
  Tensor name##_named(const Tensor& x) { return tag(#name, __VA_ARGS__); }

Tensor tag(const char* label, int a, int b) { return Tensor(); }
Tensor tag(const char* label, int a) { return Tensor(); }

CREATE_UNARY_TORCH_IMPL_FUNC(abs_out, abs_stub)
CREATE_UNARY_TORCH_IMPL_FUNC(acos_out, acos_stub)
DEFINE_NAMED(sin, 1, 2)

Tensor use_structured(const Tensor& x) {
  return at::native::abs_out(x);
}

void outer(int x) {
  struct Local {
    int operator()(int y) const { return inner_helper(y); }
  };
  Local l;
  l(x);
  DEFINE_NAMED(not_at_namespace_scope, 3);
}

int inner_helper(int y) { return y; }

} // namespace at::native
"""

ATTRIBUTES = """\
#include <c10/macros/Macros.h>

namespace c10 {

class C10_API Widget : public Base {
 public:
  int size() const { return count(); }
  C10_HOST_DEVICE inline int twice(int x) const { return 2 * x; }
};

struct Base {
  int count() const { return 1; }
};

template <typename T>
C10_LAUNCH_BOUNDS_1(128) __global__ void fill_kernel(T* out, T value) { out[0] = value; }

#if defined(USE_ROCM)
int variant(int x) { return x + 1; }
#else
int variant(int x) { return x + 2; }
#endif

namespace detail = ::c10::impl;

int via_alias() { return detail::helper(); }

int via_pointer(std::shared_ptr<Base> owner) { return owner->count(); }

template <typename T>
struct Traits {
  static int id() { return 0; }
};
template <>
struct Traits<float> {
  static int id() { return 1; }
};
int float_id() { return Traits<float>::id(); }
int double_id() { return Traits<double>::id(); }

} // namespace c10

namespace c10::impl {
int helper() { return 0; }
} // namespace c10::impl
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("cpp-rules")
    repo = base / "ext"
    (repo / "csrc").mkdir(parents=True)
    (repo / "csrc/UnaryOps.cpp").write_text(UNARY, encoding="utf-8")
    (repo / "csrc/Attributes.h").write_text(ATTRIBUTES, encoding="utf-8")
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "cpp rules")
    return repo, build_private_index(repo, base)


def one(index: Index, qualname: str, kind: str = "cpp_function") -> Node:
    found = [node for node in index.find(qualname, [kind]) if node.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def called(index: Index, node: Node, kind: str = "calls") -> dict[str, int]:
    return {index.node(e.dst).qualname: e.line for e in index.out_edges(node.id, [kind])}


def test_file_macro_uses_are_expanded_at_their_line(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/UnaryOps.cpp"
    for name in ("abs", "acos"):
        impl = one(index, f"at::native::structured_{name}_out::impl")
        assert impl.name == f"{name}_out" and impl.attrs["macro"] == "TORCH_IMPL_FUNC"
        use = line_of(path, f"CREATE_UNARY_TORCH_IMPL_FUNC({name}_out, {name}_stub)")
        assert impl.line == impl.end_line == use
    named = one(index, "at::native::sin_named")  # name##_named pasted
    # #name and __VA_ARGS__: tag("sin", 1, 2) picks the three-argument overload.
    tags = [e for e in index.out_edges(named.id, ["calls"])]
    assert len(tags) == 1 and not tags[0].ambiguous
    assert index.node(tags[0].dst).attrs["signature"] == "(const char*, int, int)"
    assert tags[0].line == line_of(path, "DEFINE_NAMED(sin, 1, 2)")
    # A use inside a function body defines nothing at namespace scope.
    assert not index.find("at::native::not_at_namespace_scope_named")


def test_native_functions_name_finds_the_structured_kernel(built: tuple[Path, Index]) -> None:
    _, index = built
    caller = one(index, "at::native::use_structured")
    assert "at::native::structured_abs_out::impl" in called(index, caller)


def test_method_of_a_local_class(built: tuple[Path, Index]) -> None:
    repo, index = built
    method = one(index, "at::native::outer::Local::operator()")
    assert method.line == line_of(repo / "csrc/UnaryOps.cpp", "int operator()(int y) const")
    assert called(index, method) == {
        "at::native::inner_helper": line_of(repo / "csrc/UnaryOps.cpp", "return inner_helper(y)")
    }
    # The enclosing function keeps its own calls only.
    assert "at::native::inner_helper" not in called(index, one(index, "at::native::outer"))


def test_attribute_macros_do_not_break_classes(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/Attributes.h"
    widget = one(index, "c10::Widget", "cpp_class")
    assert widget.line == line_of(path, "class C10_API Widget")
    assert widget.attrs["bases"] == ["Base"]
    twice = one(index, "c10::Widget::twice")
    assert twice.attrs.get("device") is True and twice.attrs.get("host") is True
    kernel = one(index, "c10::fill_kernel", "cuda_kernel")
    assert kernel.line == line_of(path, "__global__ void fill_kernel(")


def test_inherited_member_is_found_from_a_method(built: tuple[Path, Index]) -> None:
    repo, index = built
    size = one(index, "c10::Widget::size")
    assert called(index, size) == {
        "c10::Base::count": line_of(repo / "csrc/Attributes.h", "return count();")
    }


def test_if_variants_of_one_function_are_one_node(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/Attributes.h"
    variant = one(index, "c10::variant")
    assert variant.line == line_of(path, "int variant(int x) { return x + 1; }")
    assert variant.attrs["alt_lines"] == [[line_of(path, "return x + 2;")] * 2]


def test_namespace_alias_is_expanded(built: tuple[Path, Index]) -> None:
    _, index = built
    assert "c10::impl::helper" in called(index, one(index, "c10::via_alias"))


def test_template_arguments_pick_the_specialization(built: tuple[Path, Index]) -> None:
    repo, index = built
    path = repo / "csrc/Attributes.h"
    ids = [
        n
        for n in index.find("c10::Traits::id", ["cpp_function"])
        if n.qualname == "c10::Traits::id"
    ]
    by_line = {n.line: n for n in ids}
    primary = by_line[line_of(path, "static int id() { return 0; }")]
    floats = by_line[line_of(path, "static int id() { return 1; }")]
    assert (
        floats.attrs["specialization"] == "Traits<float>" and "specialization" not in primary.attrs
    )
    for caller, target in (("c10::float_id", floats), ("c10::double_id", primary)):
        edges = index.out_edges(one(index, caller).id, ["calls"])
        assert [(e.dst, e.ambiguous) for e in edges] == [(target.id, False)], caller


def test_member_call_through_a_smart_pointer(built: tuple[Path, Index]) -> None:
    repo, index = built
    assert called(index, one(index, "c10::via_pointer")) == {
        "c10::Base::count": line_of(repo / "csrc/Attributes.h", "return owner->count();")
    }


def test_blanking_keeps_every_offset() -> None:
    source = (
        b"class TORCH_API A { C10_HOST_DEVICE int f(); };\n"
        b"template <typename T> __global__ void __launch_bounds__(256, (2)) k(T x) {}\n"
        b"void h() { k<float><<<grid,\n  block, 0, stream>>>(1); }\n"
        b'#define TORCH_API __attribute__((visibility("default")))\n'
    )
    prepared = prepare(source)
    assert len(prepared.data) == len(source)
    assert [i for i, c in enumerate(prepared.data) if c == 10] == [
        i for i, c in enumerate(source) if c == 10
    ]
    assert b"TORCH_API" not in prepared.data.split(b"\n")[0]
    assert b"<<<" not in prepared.data and b"__global__" not in prepared.data
    assert b"#define TORCH_API" in prepared.data  # a macro's own definition is left alone
    assert prepared.global_at == [source.index(b"__global__")]
    assert prepared.host_device_at == [source.index(b"C10_HOST_DEVICE")]
    assert prepared.launch_at == [source.index(b"<<<")]
